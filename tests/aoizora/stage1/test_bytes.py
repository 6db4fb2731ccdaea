"""Stage 1's collective bytes per step against the TPU-compiled program, for every legal
candidate of wan-tiny on v5e:2x4.

The compiled programs are the pinned libtpu's, kept as a fixture
(tests/aoizora/stage1/compiled_fixtures.py: compiling all of them took four minutes of
the suite); a test compiles some afresh and checks they are still the fixture's. The
compiled side is read by the repository's HLO reader (aoizora.hlo), each collective
counted by its loop trip count and named by the kind the replay runs it as; Stage 1's
side is the prediction DAG, built here. Where XLA's partitioner and Shardy's choose
different collectives for the same reshard (docs/stage1.md lists the known cases), a
kind can be off while the step's bytes still agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aoizora.cache import plan_caches
from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import lower_to_read, lowering_target
from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import ComputeSegment
from aoizora.replay import sim_kind
from aoizora.software import PINNED
from aoizora.stage1.sweep import score_candidates
from aoizora.workloads.attention import attention_family
from tests.aoizora.stage1.compiled_fixtures import (
    FIXTURE,
    SLICE,
    WORKLOAD,
    compile_one,
    load_fixture,
    strip_metadata,
)

pytestmark = pytest.mark.slow


def _compiled(hlo_text: str) -> tuple[dict[str, float], float]:
    """(bytes per collective kind, matmul + element-wise FLOPs) per step."""
    graph = graph_from_text(hlo_text)
    kinds: dict[str, float] = {}
    for c in graph.collectives:
        kinds[sim_kind(c)] = kinds.get(sim_kind(c), 0.0) + c.buffer_bytes * c.count
    flops = sum(
        region.count * step.flops
        for region in graph.regions
        for step in region.steps
        if isinstance(step, ComputeSegment)
    )
    return kinds, flops


@pytest.fixture(scope="module")
def rows(plan_cache_dir: Path) -> list[dict[str, Any]]:
    legal = enumerate_candidates(WORKLOAD, SLICE.num_devices).legal
    _, programs = load_fixture()
    assert sorted(programs) == sorted(c.id for c in legal), f"regenerate {FIXTURE.name}"
    # Stage 1 as the planner runs it, every candidate scored here: its programs after
    # Shardy's passes are the session cache's where a plan of wan-tiny on v5e:2x4 (the
    # CLI test in test_planner.py) lowered them first, else lowered here and stored for
    # it. test_sweep.py holds this path to lower() + estimate() field for field.
    sweep = score_candidates(
        WORKLOAD, legal, SLICE, lower=lower_to_read, skip_over_hbm=False,
        modules=plan_caches(plan_cache_dir).shardy, target=lowering_target,
    )  # fmt: skip
    assert sweep.failed == () and len(sweep.estimates) == len(legal)
    out = []
    for cand, est in zip(legal, sweep.estimates, strict=True):
        assert est.candidate_id == cand.id
        stage1: dict[str, float] = {}
        for n in est.nodes:
            if n.kind != "compute":
                stage1[n.collective] = stage1.get(n.collective, 0.0) + n.bytes_per_device * n.count
        compiled, compiled_flops = _compiled(programs[cand.id])
        matmul = sum(n.flops_per_chip * n.count for n in est.nodes if n.reason.startswith("fused"))
        out.append(
            {"id": cand.id, "stage1": stage1, "compiled": compiled,
             "stage1_flops": matmul, "compiled_flops": compiled_flops}
        )  # fmt: skip
    return out


def test_every_legal_candidate_is_checked(rows: list[dict[str, Any]]) -> None:
    assert len(rows) == len(enumerate_candidates(WORKLOAD, SLICE.num_devices).legal) > 50
    attention = {attention_family(r["id"].split("/")[-1]) for r in rows}
    assert attention == {"gather_kv", "ulysses", "ring", "usp"}  # usp: Ulysses x ring splits


def test_step_bytes_match_the_compiled_program(rows: list[dict[str, Any]]) -> None:
    errors = []
    for r in rows:
        s, c = sum(r["stage1"].values()), sum(r["compiled"].values())
        errors.append(abs(s - c) / c)
        assert abs(s - c) <= 0.15 * c, (r["id"], r["stage1"], r["compiled"])
    within = sum(e <= 0.10 for e in errors)
    assert within >= 0.9 * len(rows), sorted(errors)[-8:]


def test_bytes_per_collective_kind_match(rows: list[dict[str, Any]]) -> None:
    """Every kind that carries at least 1 % of a candidate's bytes: within 10 % for at
    least 80 % of the (candidate, kind) pairs (measured: 131 of 155, 85 %; the misses
    are XLA's windowed einsum and all-reduce/reduce-scatter choices, docs/stage1.md)."""
    pairs = within = 0
    for r in rows:
        total = sum(r["compiled"].values())
        for kind in set(r["stage1"]) | set(r["compiled"]):
            s, c = r["stage1"].get(kind, 0.0), r["compiled"].get(kind, 0.0)
            if max(s, c) < 0.01 * total:
                continue
            pairs += 1
            within += c > 0 and abs(s - c) <= 0.10 * c
    assert pairs > 100
    assert within >= 0.80 * pairs, (within, pairs)


def test_flops_match_the_compiled_program(rows: list[dict[str, Any]]) -> None:
    """Stage 1's matmul FLOPs (per-op local shapes) against the compiled kernels' FLOPs
    (aoizora.hlo.compute, which equals XLA's cost analysis), attention kernels left
    out on both sides. Measured 0.988-1.026: the compiled side adds element-wise
    work; Stage 1 is up to 2.6 % above on the tensor-sharded steps (data1.fsdp1.
    context2.tensor4/*, data1.fsdp2.context2.tensor2/*, ...; cause not established)."""
    ratios = {r["id"]: r["stage1_flops"] / r["compiled_flops"] for r in rows}
    assert all(0.85 <= x <= 1.03 for x in ratios.values()), ratios
    assert sorted(ratios.values())[len(ratios) // 2] == pytest.approx(1.0, abs=0.02)


@pytest.mark.pinned_libtpu
def test_the_fixture_is_what_the_pinned_libtpu_compiles(tmp_path: Path) -> None:
    """Two candidates (a ring and a Ulysses split) compiled now print, less source
    locations, exactly their fixture programs, which the pinned versions printed."""
    versions, programs = load_fixture()
    regenerate = "regenerate with python -m tests.aoizora.stage1.compiled_fixtures"
    assert versions == dict(PINNED), regenerate
    legal = enumerate_candidates(WORKLOAD, SLICE.num_devices).legal
    picks = [
        next(c for c in legal if attention_family(c.id.split("/")[-1]) == family)
        for family in ("ring", "ulysses")
    ]
    for cand in picks:
        result = compile_one((cand, tmp_path))
        assert result.ok and not result.cache_hit, (cand.id, result.error)
        assert strip_metadata(result.hlo_text) == programs[cand.id], regenerate
