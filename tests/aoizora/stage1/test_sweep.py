"""Stage 1's fast path (HBM check before lowering, fan-out, cache) against the plain path.

The plain path lowers and scores every candidate one by one in this process
(:func:`score_candidate`); the fast path must give the very same estimates
(bit-identical Q1, DAG and memory) for every candidate it scores, and skip only
candidates the plain path also finds over HBM.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from aoizora.cache import JsonCache
from aoizora.candidates.space import Candidate, argument_bytes_per_chip, enumerate_candidates
from aoizora.compile import lower, lower_to_read, lowering_target
from aoizora.fanout import fan_out
from aoizora.stage1.q1 import Stage1Estimate, rank_stage1
from aoizora.stage1.sweep import _chunks, score_candidate, score_candidates
from aoizora.tpu import lowering_family
from aoizora.workloads.base import Workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import Slice, load_slice

CLIP = parse_resolution("256x256", frames=5)


@pytest.fixture(scope="module")
def setup() -> tuple[Workload, Slice, list[Candidate], list[Stage1Estimate]]:
    wl = wan_workload("wan-tiny", CLIP)
    sl = load_slice("v5e:2x2")
    legal = list(enumerate_candidates(wl, sl.num_devices).legal)
    plain = [score_candidate(wl, c, sl, lower=lower) for c in legal]
    return wl, sl, legal, plain


def test_argument_bytes_are_the_estimates_own(setup: tuple) -> None:
    # The HBM check is a proof only if the analytic argument bytes are those the
    # estimate counts from the lowered program (memory = arguments + temporaries).
    wl, _, legal, plain = setup
    for cand, est in zip(legal, plain, strict=True):
        assert argument_bytes_per_chip(wl, cand) == est.argument_bytes_per_chip, cand.id
        assert est.memory_bytes_per_chip >= est.argument_bytes_per_chip


def test_fanned_out_estimates_equal_the_plain_path(setup: tuple) -> None:
    # The planner's path: fanned out, and Pallas kernels lowered without their bodies
    # (lower_to_read); the plain path lowers them with bodies, as a compile does.
    wl, sl, legal, plain = setup
    lines: list[str] = []
    with fan_out(workers=2) as pool:
        sweep = score_candidates(
            wl, legal, sl, lower=lower_to_read, pool=pool, progress=lines.append
        )
    assert sweep.over_hbm == () and sweep.failed == ()
    assert sweep.estimates == tuple(plain)  # nodes, Q1, memory: every field
    assert [e.q1_s for e in sweep.estimates] == [e.q1_s for e in plain]
    # Progress arrives in candidate order, one line each.
    scored = [ln.split("] ")[1].split(":")[0] for ln in lines if ln.startswith("[stage 1")]
    assert scored == [c.id for c in legal]


def test_over_hbm_skip_is_sound_and_keeps_the_ranking(setup: tuple) -> None:
    wl, sl, legal, plain = setup
    args = sorted({e.argument_bytes_per_chip for e in plain})
    assert len(args) > 2, "wan-tiny must give candidates with different argument bytes"
    hbm = float(args[len(args) // 2])  # about half the candidates' arguments exceed it
    small = replace(sl, chip=replace(sl.chip, hbm_bytes=hbm, usable_hbm_bytes=hbm))
    sweep = score_candidates(wl, legal, small, lower=lower)
    skipped = {c for c, _ in sweep.over_hbm}
    assert skipped == {e.candidate_id for e in plain if e.argument_bytes_per_chip > hbm}
    assert skipped and len(skipped) < len(legal)
    # Every skipped candidate is one the plain path finds over HBM too.
    assert all(e.memory_bytes_per_chip > hbm for e in plain if e.candidate_id in skipped)
    assert sweep.estimates == tuple(e for e in plain if e.candidate_id not in skipped)
    fast = rank_stage1(sweep.estimates, k=2, hbm_bytes=hbm, over_hbm=sweep.over_hbm)
    slow = rank_stage1(plain, k=2, hbm_bytes=hbm)
    assert fast.kept == slow.kept and fast.dropped_weak == slow.dropped_weak
    assert [c for c, _ in fast.dropped_infeasible] == [c for c, _ in slow.dropped_infeasible]
    assert all("not lowered" in r for c, r in fast.dropped_infeasible if c in skipped)


def test_cached_estimates_match_the_cold_ones(setup: tuple, tmp_path: Path) -> None:
    wl, sl, legal, plain = setup
    cache = JsonCache(tmp_path)
    cold = score_candidates(wl, legal, sl, lower=lower, cache=cache)
    warm = score_candidates(wl, legal, sl, lower=lower, cache=cache)
    assert (cold.cache_hits, warm.cache_hits) == (0, len(legal))
    assert [replace(e, nodes=()) for e in cold.estimates] == list(warm.estimates)


def test_chunks_cover_every_item_in_order() -> None:
    items = list(range(10))
    for n in (1, 3, 4, 10, 25):
        chunks = _chunks(items, n)  # type: ignore[arg-type]
        assert [x for c in chunks for x in c] == items
        assert len(chunks) == min(n, len(items))
        assert max(map(len, chunks)) - min(map(len, chunks)) <= 1


def test_v5e_and_v6e_lower_every_candidate_alike(setup: tuple) -> None:
    # The fact the shardy/ cache shares entries on: jax lowers a program for a v5e
    # and a v6e device alike, Pallas kernels (splash attention's Mosaic bodies)
    # included. A jax release that read more of the device would fail here.
    wl, v5e, legal, _ = setup
    v6e = load_slice("v6e:2x2")
    for cand in _each_kind(legal):
        assert lowering_target(cand, v5e) == lowering_target(cand, v6e), cand.id
        assert lower(wl, cand, v5e).as_text() == lower(wl, cand, v6e).as_text(), cand.id
    # Another generation is its own family: its lowerings are never shared.
    assert lowering_family(v5e) == lowering_family(v6e) == "tpu:v5e/v6e"
    assert lowering_family(load_slice("tpu7x:2x2x1")) == "tpu:tpu7x"


def _each_kind(legal: list[Candidate]) -> list[Candidate]:
    """The first candidate of every attention kind (gather_kv, ring, ulysses, usp)."""
    firsts = {c.attention: c for c in reversed(legal)}
    assert {"gather_kv", "ring"} <= set(firsts) and any(k.startswith("usp") for k in firsts)
    return [c for c in legal if firsts[c.attention] is c]


def _refuse(workload: Workload, candidate: Candidate, slice_: Slice) -> object:
    raise AssertionError(f"{candidate.id} was lowered; its stored module should serve")


def test_a_stored_module_scores_another_generation_like_lowering_it(
    setup: tuple, tmp_path: Path
) -> None:
    wl, v5e, every, plain = setup
    legal = _each_kind(every)
    plain5 = [e for e in plain if e.candidate_id in {c.id for c in legal}]
    v6e = load_slice("v6e:2x2")
    modules = JsonCache(tmp_path, compress=True)
    cold = score_candidates(wl, legal, v5e, lower=lower, modules=modules, target=lowering_target)
    assert cold.module_hits == 0 and cold.estimates == tuple(plain5)
    # v6e reads every module v5e stored and lowers nothing; its estimates are those
    # of lowering for v6e from scratch (independent path), and v6e's own numbers.
    plain6 = [score_candidate(wl, c, v6e, lower=lower) for c in legal]
    assert [e.q1_s for e in plain6] != [e.q1_s for e in plain5]
    lines: list[str] = []
    warm = score_candidates(
        wl,
        legal,
        v6e,
        lower=_refuse,
        progress=lines.append,
        modules=modules,
        target=lowering_target,
    )
    assert warm.module_hits == len(legal) and warm.failed == ()
    assert warm.estimates == tuple(plain6)
    assert sum("stored module" in ln for ln in lines) == len(legal)
    # An unreadable entry is lowered again (and rewritten), not trusted.
    for path in tmp_path.rglob("*.json.gz"):
        path.write_bytes(b"not gzip")
    again = score_candidates(wl, legal, v6e, lower=lower, modules=modules, target=lowering_target)
    assert again.module_hits == 0 and again.estimates == tuple(plain6)
    for path in sorted(tmp_path.rglob("*.json.gz"))[:1]:
        key = path.name.split(".")[0]
        modules.put(key, {"mlir_bytecode_base64": "bm90IGJ5dGVjb2Rl"})  # "not bytecode"
    last = score_candidates(wl, legal, v6e, lower=lower, modules=modules, target=lowering_target)
    assert last.module_hits == len(legal) - 1 and last.estimates == tuple(plain6)
