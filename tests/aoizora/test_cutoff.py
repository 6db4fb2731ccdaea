"""A replay past the placement search's deadline stops there (:mod:`aoizora.rank.cutoff`).

On tpu7x:8x8x8 a baseline's given order, priced at ~30 s by the rate the first replay ran,
took 146 s in the quotient runs of :mod:`aoizora.rank.lumped`: the loops that take a
replay's time check the deadline, so the search ends at it with that order unreplayed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from aoizora.cache import JsonCache
from aoizora.hlo.graph import graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.space import PlacementSpace
from aoizora.rank.cutoff import CHECK_EVERY, ReplayCut, check, replays_until
from aoizora.rank.evaluate import BatchEvaluator, Program
from aoizora.rank.exact import ExactQ2
from aoizora.rank.lumped import simulate_nodes
from aoizora.rank.search import Job, Leaf, _Search
from sim.collectives import collective_flows
from sim.engine import Compute
from sim.topology import load_slice
from tests.aoizora.synthetic import mesh_program
from tests.aoizora.test_fanout import _HLO, _CountingPool
from tests.aoizora.test_search_budget import SHAPE, _Exact, _jobs


def _past() -> float:
    return time.perf_counter() - 1.0


def test_the_innermost_deadline_counts_and_none_outside() -> None:
    with replays_until(time.perf_counter() + 60.0):
        check()
        with replays_until(_past()), pytest.raises(ReplayCut, match="past the placement"):
            check()
        check()  # the outer deadline again
    with replays_until(_past()):
        pass
    check()  # none set: a replay outside a search's deadline is never cut


def test_an_exact_replay_checks_the_deadline_before_its_first_collective() -> None:
    s = load_slice("v5e:4x4")
    exact = ExactQ2(mesh_program(SHAPE, scale=2), s)
    order = DeviceOrder.from_physical_ids(tuple(range(16)), mesh_shape=SHAPE, slice_=s)
    with replays_until(_past()), pytest.raises(ReplayCut):
        exact.step_time(order)
    # Cut, the same object still replays exactly what a fresh one does.
    assert exact.step_time(order) == ExactQ2(mesh_program(SHAPE, scale=2), s).step_time(order)


def test_a_quotient_run_checks_the_deadline_every_few_hundred_instants() -> None:
    s = load_slice("v5e:4x4", wraparound=True)
    rows = [[c for c in s.coords if c[1] == y] for y in range(4)]
    ring = collective_flows("all-gather", rows, buffer_bytes=3e6, id_prefix="a", slice_=s)
    nodes = [*ring.nodes, Compute("t", None, 1e-5, after=(ring.done_id,))]
    assert simulate_nodes(s, nodes, min_reduction=2.0).cells > 0  # the quotient runs here
    with replays_until(_past()), pytest.raises(ReplayCut):
        simulate_nodes(s, nodes, min_reduction=2.0)
    assert CHECK_EVERY >= 64  # a clock read is ~50 ns; an instant of a pod's run ~5 ms


class _Slow(_Exact):
    """Job 1's replay takes ``slow_s`` (a pod baseline's, minutes), checking the deadline
    as the real loops do; every replay checks it first (ExactQ2, before its first
    collective)."""

    def __init__(self, jobs: Sequence[Job], slow_s: float) -> None:
        super().__init__(jobs)
        self.slow_s = slow_s

    def __call__(self, batch: Sequence[Leaf]) -> list[float]:
        for leaf in batch:
            until = time.perf_counter() + (self.slow_s if leaf.job == 1 else 0.0)
            check()
            while time.perf_counter() < until:
                check()
        return super().__call__(batch)


def test_a_given_order_whose_replay_runs_past_the_deadline_is_cut_and_waits_in_the_heap() -> None:
    jobs = [*_jobs(), _jobs()[1]]
    run = _Search(jobs, _Slow(jobs, slow_s=30.0), batch_size=8, per_job=False, algorithm=None)
    forced = run.seed()
    run.record(forced[:1])
    run.s_per_replay_work = 0.0  # the first one's rate prices every other as free
    run.stop_at = time.perf_counter() + 0.3
    t0 = time.perf_counter()
    run.record_forced(forced[1:])
    assert time.perf_counter() - t0 < 5.0  # at the deadline, not 30 s later
    # Job 1's replay was cut; job 2's started past the deadline and was cut at once.
    assert [st.simulated for st in run.states] == [1, 0, 0]
    assert run.deferred == [forced[1], forced[2]]
    assert sorted((job, leaf.label) for _, _, job, leaf in run.heap) == [
        (1, forced[1].label),
        (2, forced[2].label),
    ]
    run.stopped_by = "deadline"  # what the search loop then says
    run.finish_forced()
    assert [st.simulated for st in run.states] == [1, 0, 0]


def test_a_fanned_out_replay_gets_the_deadline_and_answers_nan_when_cut(tmp_path: Path) -> None:
    # On tpu7x:8x8x16 a batch of 8 placements of a 2,048-device program, handed to two
    # workers, ran six minutes past the deadline: a task carries it (on the wall clock).
    s = load_slice("v5e:2x4")
    program = Program(_HLO, graph_from_text(_HLO), (4, 2))
    space = PlacementSpace((4, 2), s)
    leaves = [Leaf(0, space.label(n), space.physical_ids(n), space.complexity(n))
              for n in space.leaves()][:6]  # fmt: skip
    pool = _CountingPool()
    evaluate = BatchEvaluator([program], s, pool=pool, fanout_min_s=0.0, cache=JsonCache(tmp_path))  # type: ignore[arg-type]
    evaluate(leaves[:1])  # the program's first replay, here, times it
    with replays_until(_past()):
        cut = evaluate(leaves[1:])
    assert pool.items == 5 and all(math.isnan(q) for q in cut)
    # A cut replay is not cached: with time, the same leaves replay to their Q2.
    assert evaluate(leaves[1:]) == BatchEvaluator([program], s)(leaves[1:])
    assert pool.items == 10


def test_a_batch_cut_at_the_deadline_stays_open_under_its_leaf_bound() -> None:
    jobs = _jobs()
    run = _Search(jobs, _Slow(jobs, slow_s=30.0), batch_size=8, per_job=False, algorithm=None)
    forced = run.seed()
    run.record(forced[:1])  # the first sharding's: never cut (nothing scored yet)
    run.stop_at = _past()
    assert run.record(forced[1:]) == forced[1:]  # cut: none scored, each back in the heap
    assert [st.simulated for st in run.states] == [1, 0]
    [(bound, _, job, leaf)] = run.heap
    assert (job, leaf) == (1, forced[1]) and bound <= _Exact(jobs)([leaf])[0]
    assert run.open_bound(1) == bound  # the report's bound for that sharding is still true
