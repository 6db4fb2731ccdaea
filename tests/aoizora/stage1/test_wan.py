"""Stage 1 on the tiny Wan 2.1 step (the real workload code) for v5e:2x4."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aoizora.candidates.baselines import baseline_candidates
from aoizora.candidates.space import (
    Candidate,
    argument_bytes_per_chip,
    enumerate_candidates,
)
from aoizora.compile import lower
from aoizora.stage1 import Stage1Estimate, estimate, rank_stage1
from aoizora.workloads.base import Workload
from aoizora.workloads.wan import WAN_CONFIGS, parse_resolution, wan_flops, wan_workload
from sim.topology import load_chip, load_slice
from tests.aoizora.stage1.hlo_oracle import hlo_collectives, while_bodies

SLICE = load_slice("v5e:2x4")
CLIP = parse_resolution("256x256", frames=5)  # 512 tokens


@pytest.fixture(scope="module")
def tiny() -> Workload:
    return wan_workload("wan-tiny", CLIP)


@pytest.fixture(scope="module")
def sample(tiny: Workload, v5e_2x4_devices: list[Any]) -> list[Candidate]:
    """Baselines, every 10th legal candidate and the first of each rule set (so all rule
    sets and attention kinds occur)."""
    legal = enumerate_candidates(tiny, 8).legal
    picked = [b.candidate for b in baseline_candidates(tiny, SLICE)] + list(legal[::10])
    picked += list({c.rules.name: c for c in reversed(legal)}.values())
    return list({c.id: c for c in picked}.values())


@pytest.fixture(scope="module")
def estimates(
    tiny: Workload, sample: list[Candidate]
) -> list[tuple[Candidate, Stage1Estimate, float]]:
    chip = load_chip("v5e")
    out = []
    for cand in sample:
        low = lower(tiny, cand, SLICE)
        start = time.perf_counter()
        est = estimate(low, mesh_axis_sizes=cand.mesh_sizes, chip=chip, candidate_id=cand.id)
        out.append((cand, est, time.perf_counter() - start))
    return out


def test_sample_covers_the_space(sample: list[Candidate]) -> None:
    kinds = {c.attention for c in sample}
    assert {"gather_kv", "ulysses", "ring"} <= kinds
    assert any(k.startswith("usp_u") for k in kinds)  # Ulysses x ring goes through Stage 1 too
    # dp_sp_tp only ever uses fsdp beside context for the sequence, so every one of its
    # candidates folds into an fsdp-rules twin with the two axes merged into one.
    assert {c.rules.name for c in sample} == {"maxdiffusion", "fsdp"}


@pytest.mark.slow
def test_tiny_wan_estimates(
    tiny: Workload, estimates: list[tuple[Candidate, Stage1Estimate, float]]
) -> None:
    analytic = wan_flops(WAN_CONFIGS["wan-tiny"], CLIP).total
    for cand, est, _elapsed_s in estimates:
        assert not est.warnings, (cand.id, est.warnings)
        # The overlap schedule lies between full overlap and none (schedule.py).
        assert max(est.compute_s, est.comm_s) * (1 - 1e-9) <= est.q1_s
        assert est.q1_s <= (est.compute_s + est.comm_s) * (1 + 1e-9)
        assert est.compute_s > 0 and est.comm_s > 0
        # No FLOP is lost: the chips together do at least the model's analytic work;
        # more where ops are replicated and where the tiny clip's 64-token shards are
        # padded to the attention kernel's 128-row blocks. The compiled programs
        # replicate as much (up to 2.2x the analytic matmul work, with tensor=8):
        # test_bytes.py holds Stage 1's FLOPs to the compiled kernels' per candidate.
        assert 0.999 * analytic <= 8 * est.flops_per_chip <= 2.5 * analytic, cand.id
        # Parameters and inputs per chip: the workload's own analytic count.
        assert est.argument_bytes_per_chip == argument_bytes_per_chip(tiny, cand), cand.id
        assert est.memory_bytes_per_chip > est.argument_bytes_per_chip
        used = {a for a, size in cand.mesh_sizes.items() if size > 1}
        assert {a for a, _ in est.comm_bytes_per_axis} <= used


@pytest.mark.slow
def test_tiny_wan_ranking(estimates: list[tuple[Candidate, Stage1Estimate, float]]) -> None:
    ests = [e for _, e, _ in estimates]
    r = rank_stage1(ests, k=3, hbm_bytes=load_chip("v5e").hbm_bytes)
    assert len(r.kept) == 3 and not r.dropped_infeasible
    assert [e.q1_s for e in r.kept] == sorted(e.q1_s for e in r.kept)
    assert max(e.q1_s for e in r.kept) <= min(e.q1_s for e in r.dropped_weak)
    assert rank_stage1(list(reversed(ests)), k=3, hbm_bytes=16e9).kept_ids == r.kept_ids
    # A budget of exactly the smallest footprint keeps only the leanest candidates.
    least = min(e.memory_bytes_per_chip for e in ests)
    tight = rank_stage1(ests, k=3, hbm_bytes=least, margin=1.0)  # no margin: the bare rule
    assert tight.kept and {e.memory_bytes_per_chip for e in tight.kept} == {least}
    assert len(tight.dropped_infeasible) == sum(e.memory_bytes_per_chip > least for e in ests)
    assert all(
        f"over 1 x the {least} B HBM budget" in why or "arguments alone" in why
        for _, why in tight.dropped_infeasible
    )


@pytest.mark.slow
@pytest.mark.pinned_libtpu
@pytest.mark.parametrize(
    "candidate_id",
    [
        "data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv",
        "data2.fsdp1.context2.tensor2/fsdp/ring",  # dp_sp_tp fsdp2.context1 folds into it
    ],
)
def test_tiny_wan_bytes_match_compiled_hlo(
    tiny: Workload, candidate_id: str, v5e_2x4_devices: list[Any]
) -> None:
    """Predicted bytes per mesh-axis group within 5 % of the TPU-compiled collectives."""
    cand = enumerate_candidates(tiny, 8).by_id(candidate_id)
    low = lower(tiny, cand, SLICE)
    est = estimate(
        low, mesh_axis_sizes=cand.mesh_sizes, chip=load_chip("v5e"), candidate_id=cand.id
    )
    layers = WAN_CONFIGS["wan-tiny"].num_layers
    text = low.compile().as_text()
    bodies = while_bodies(text)
    compiled: dict[tuple[str, ...], float] = {}
    for c in hlo_collectives(text, list(cand.mesh_sizes.items())):
        if c.axes:
            compiled[c.axes] = compiled.get(c.axes, 0.0) + c.nbytes * (
                layers if c.computation in bodies else 1
            )
    predicted: dict[tuple[str, ...], float] = {}
    for n in est.nodes:
        if n.kind != "compute":
            predicted[n.axes] = predicted.get(n.axes, 0.0) + n.bytes_per_device * n.count
    assert set(predicted) == set(compiled)
    for axes, nbytes in compiled.items():
        assert predicted[axes] == pytest.approx(nbytes, rel=0.05), axes


def _merged_folds(tiny: Workload) -> list[tuple[Candidate, Candidate]]:
    """(folded, kept twin) pairs whose meshes differ in more than size-1 axes: the
    twin shards by one axis what the folded candidate shards by a pair of axes."""
    space = enumerate_candidates(tiny, 8)
    out = []
    for r in space.rejected:
        if not r.reason.startswith("same shardings as candidate"):
            continue
        twin = space.by_id(r.reason.split("'")[1])
        live = sorted(s for s in r.candidate.mesh_shape if s > 1)
        if live != sorted(s for s in twin.mesh_shape if s > 1):
            out.append((r.candidate, twin))
    return out


@pytest.mark.slow
def test_merged_axis_folds_lower_to_the_same_stage1_program(
    tiny: Workload, estimates: list[tuple[Candidate, Stage1Estimate, float]]
) -> None:
    """Every candidate folded because a pair of its axes acts as one merged axis (e.g.
    dp_sp_tp's ``(context, fsdp)`` sequence split on fsdp2 x context2 against fsdp's
    ``context`` on context4) is, by Shardy's own propagation and reshard passes,
    the program of its twin: Stage 1 prices both the same."""
    pairs = _merged_folds(tiny)
    kinds = {c.attention for c, _ in pairs}
    assert {"gather_kv", "ulysses", "ring", "usp_u2"} <= kinds, kinds
    chip = load_chip("v5e")
    # A twin serves several folded candidates, and the sample's were estimated the same
    # way (lower, then estimate on the v5e chip): each candidate is lowered once.
    known = {c.id: e for c, e, _ in estimates}

    def stage1(c: Candidate) -> Stage1Estimate:
        if c.id not in known:
            low = lower(tiny, c, SLICE)
            known[c.id] = estimate(low, mesh_axis_sizes=c.mesh_sizes, chip=chip, candidate_id=c.id)
        return known[c.id]

    for folded, twin in pairs:
        a, b = stage1(folded), stage1(twin)
        got = (a.q1_s, a.compute_s, a.comm_s, a.flops_per_chip, a.memory_bytes_per_chip)
        want = (b.q1_s, b.compute_s, b.comm_s, b.flops_per_chip, b.memory_bytes_per_chip)
        # Equal but for the scalar arithmetic of the chunk index: axis_index over two
        # axes adds theirs (one 12-byte add where the twin has an 8-byte convert).
        assert got == pytest.approx(want, rel=1e-6), (folded.id, twin.id)
        assert sorted(n.bytes_per_device * n.count for n in a.nodes if n.kind != "compute") == (
            sorted(n.bytes_per_device * n.count for n in b.nodes if n.kind != "compute")
        ), (folded.id, twin.id)


@pytest.mark.slow
def test_merged_axis_fold_compiles_to_the_same_collectives(tiny: Workload) -> None:
    """The TPU compiler agrees: Ulysses x ring (all-to-alls in groups, ring permutes)
    on fsdp2 x context2 under dp_sp_tp and on context4 under fsdp compile to the
    same collectives -- kind, bytes and group size, collective by collective."""
    space = enumerate_candidates(tiny, 8)
    folded = "data2.fsdp2.context2.tensor1/dp_sp_tp/usp_u2"
    twin = "data2.fsdp1.context4.tensor1/fsdp/usp_u2"
    reason = {r.candidate.id: r.reason for r in space.rejected}[folded]
    assert reason == f"same shardings as candidate '{twin}'"
    rejected = {r.candidate.id: r.candidate for r in space.rejected}

    def collectives(cand: Candidate) -> list[tuple[str, int, int]]:
        text = lower(tiny, cand, SLICE).compile().as_text()
        sizes = list(cand.mesh_sizes.items())
        return sorted((c.kind, c.nbytes, c.group_size) for c in hlo_collectives(text, sizes))

    got, want = collectives(rejected[folded]), collectives(space.by_id(twin))
    assert {k for k, _, _ in want} >= {"all-to-all", "collective-permute"}
    assert got == want
