"""The placement search's work budget: counted, so the same answer on any machine.

- a budget stops the search at the same node however long each step takes (an
  ``evaluate`` that sleeps gives the same report), also when the replays come from
  a cache (a resumed search counts what a cold one does);
- what it reports still holds: the bound is below the exhaustive optimum, the gap
  is the winner's distance to it, and a larger budget never ends further away;
- the search cache keys on the budget and reuses a budget-stopped report;
- the command line's defaults are the search module's, ``--search-gap 0`` proves
  the best without a budget, and a bad ``--search-budget`` is one line, exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from aoizora.cache import JsonCache
from aoizora.cli import main
from aoizora.commands import args as cli_args
from aoizora.errors import PlacementError, WorkloadError
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.space import PlacementSpace
from aoizora.rank.bounds_of_nodes import collective_shapes, traffic_order
from aoizora.rank.exact import ExactQ2
from aoizora.rank.search import (
    DEFAULT_SEARCH_BUDGET,
    DEFAULT_SEARCH_GAP,
    NODE_OVERHEAD,
    REPLAY_COST,
    Job,
    Leaf,
    SearchBudget,
    SearchReport,
    _Search,
    program_size,
    search_placements,
)
from aoizora.rank.search_cache import cached_search
from sim.topology import load_slice
from tests.aoizora.synthetic import mesh_program

SHAPE = (4, 4)


def _jobs() -> list[Job]:
    s = load_slice("v5e:4x4")
    out = []
    for scale in (2, 16):
        graph = mesh_program(SHAPE, scale=scale)
        space = PlacementSpace(
            SHAPE, s, axis_order=traffic_order(collective_shapes(graph, SHAPE), SHAPE)
        )
        default = DeviceOrder.from_physical_ids(tuple(range(16)), mesh_shape=SHAPE, slice_=s)
        out.append(
            Job(f"scale{scale}", graph, space, (("default order", default),), ("default order",))
        )
    return out


class _Exact:
    """Each leaf's exact Q2; ``delay_s`` makes every batch slow (a busy machine)."""

    def __init__(self, jobs: Sequence[Job], delay_s: float = 0.0) -> None:
        self.jobs = jobs
        self.exact = [ExactQ2(j.graph, j.space.slice) for j in jobs]
        self.delay_s = delay_s
        self.leaves = 0

    def __call__(self, batch: Sequence[Leaf]) -> list[float]:
        time.sleep(self.delay_s)
        self.leaves += len(batch)
        return [
            self.exact[leaf.job].step_time(
                DeviceOrder.from_physical_ids(
                    leaf.physical_ids, mesh_shape=SHAPE, slice_=self.jobs[leaf.job].space.slice
                )
            )
            for leaf in batch
        ]


def _answer(r: SearchReport) -> tuple[object, ...]:
    """Everything but the seconds it took."""
    return (r.jobs, r.winner_job, r.winner, r.bound_s, r.nodes_bounded, r.work, r.stopped_by)


def _optimum(jobs: Sequence[Job]) -> float:
    return search_placements(jobs, _Exact(jobs), gap_tolerance=0.0).winner.q2_s


def test_a_budget_stops_the_same_search_at_the_same_node_however_slow_the_machine() -> None:
    jobs = _jobs()
    full = search_placements(jobs, _Exact(jobs))
    assert full.complete and full.stopped_by is None
    budget = SearchBudget(work=full.work // 3)
    fast = search_placements(jobs, _Exact(jobs), budget=budget, batch_size=2)
    slow = search_placements(jobs, _Exact(jobs, delay_s=0.02), budget=budget, batch_size=2)
    assert _answer(fast) == _answer(slow)
    assert fast.stopped_by == "budget" and not fast.complete
    # It stops once the budget is spent, within one batch of replays and one node's children.
    sizes = [program_size(j.graph) + NODE_OVERHEAD for j in jobs]
    assert budget.work <= fast.work <= budget.work + 2 * REPLAY_COST * max(sizes) + 64 * max(sizes)


def test_a_budget_stopped_search_reports_a_true_bound_and_gap() -> None:
    jobs = _jobs()
    optimum = _optimum(jobs)
    full_work = search_placements(jobs, _Exact(jobs)).work
    previous_gap = 1.0
    for fraction in (0.05, 0.2, 0.5, 1.5):
        report = search_placements(
            jobs, _Exact(jobs), budget=SearchBudget(work=int(full_work * fraction))
        )
        assert report.bound_s <= optimum <= report.winner.q2_s  # the bound holds
        assert report.gap == pytest.approx(
            (report.winner.q2_s - report.bound_s) / report.winner.q2_s
        )
        assert report.gap <= previous_gap  # more work never ends further from the optimum
        previous_gap = report.gap
        if fraction > 1:
            assert report.complete and report.gap == 0.0 and report.stopped_by is None


def test_a_resumed_search_stops_where_a_cold_one_does() -> None:
    # A resumed search reads the replays it already did from the Q2 cache. They count
    # as the cold search counted them, so it stops at the same node.
    jobs = _jobs()
    full_work = search_placements(jobs, _Exact(jobs)).work
    small, large = SearchBudget(work=full_work // 4), SearchBudget(work=full_work // 2)
    exact = _Exact(jobs)
    memo: dict[tuple[int, tuple[int, ...]], float] = {}

    def remembered(batch: Sequence[Leaf]) -> list[float]:
        todo = [leaf for leaf in batch if (leaf.job, leaf.physical_ids) not in memo]
        for leaf, q2 in zip(todo, exact(todo), strict=True):
            memo[(leaf.job, leaf.physical_ids)] = q2
        return [memo[(leaf.job, leaf.physical_ids)] for leaf in batch]

    first = search_placements(jobs, remembered, budget=small)  # interrupted here, say
    replayed = exact.leaves
    resumed = search_placements(jobs, remembered, budget=large)
    cold = search_placements(jobs, _Exact(jobs), budget=large)
    assert _answer(resumed) == _answer(cold) and first.work < resumed.work
    # The resumed search replayed only what the first had not.
    assert exact.leaves - replayed == sum(j.simulated for j in cold.jobs) - sum(
        j.simulated for j in first.jobs
    )


def test_the_budget_and_the_gap_stop_reasons_are_reported() -> None:
    jobs = _jobs()
    by_gap = search_placements(jobs, _Exact(jobs), gap_tolerance=0.3, batch_size=1)
    assert by_gap.stopped_by == "gap" and 0.0 < by_gap.gap <= 0.3
    by_deadline = search_placements(jobs, _Exact(jobs), deadline_s=0.0, batch_size=1)
    assert by_deadline.stopped_by == "deadline"
    tiny = search_placements(jobs, _Exact(jobs), budget=SearchBudget(work=1))
    assert tiny.stopped_by == "budget" and tiny.work >= 1
    # The given orders and the probes are replayed whatever the budget (not the deadline).
    assert all(j.simulated >= 1 for j in tiny.jobs)


def test_past_the_deadline_the_given_order_took_no_root_or_probe_is_bounded() -> None:
    # On a pod the given orders alone can take the search's time (tpu7x:16x16x16: two
    # replays of 8,192 devices, 544 s), and bounding its 1,086 roots takes more than ten
    # minutes: past the deadline the roots stay open under their sharding's floor (every
    # collective free), no probe is walked or replayed, and the bound still gives a true gap.
    jobs = _jobs()
    lines: list[str] = []
    free = search_placements(jobs, _Exact(jobs), progress=lines.append)  # proves the best
    assert free.complete and sum(j.simulated for j in free.jobs) > 2  # probes replayed
    assert "probes cut short" not in lines[0] and "floor" not in lines[0]
    late = search_placements(jobs, _Exact(jobs), deadline_s=0.0, progress=lines.append)
    # the first sharding's forced default order; the second's waits under its leaf bound
    assert [j.simulated for j in late.jobs] == [1, 0]
    sizes = [program_size(j.graph) + NODE_OVERHEAD for j in jobs]
    assert late.work == REPLAY_COST * sizes[0] + sizes[1] and late.nodes_bounded == 1
    assert late.bound_s <= free.winner.q2_s <= late.winner.q2_s
    assert late.stopped_by == "deadline" and late.gap > 0
    roots = sum(len(j.space.roots()) for j in jobs)
    assert "probes cut short: the deadline passed" in lines[-2]
    assert f"; {roots} roots under their sharding's floor (not bounded)" in lines[-2]
    # The floor is below every placement the full search replayed, of its own sharding.
    for j, report in enumerate(free.jobs):
        assert late.jobs[j].bound_s <= min(s.q2_s for s in report.scored)
    # The work budget cuts neither (a budget of 1: the roots bounded, the probes replayed).
    tiny = search_placements(jobs, _Exact(jobs), budget=SearchBudget(work=1))
    assert tiny.nodes_bounded >= roots and sum(j.simulated for j in tiny.jobs) > 2


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_a_budget_must_be_a_positive_whole_amount_of_work(bad: object) -> None:
    with pytest.raises(PlacementError, match="positive number of work units"):
        SearchBudget(work=bad)  # type: ignore[arg-type]


def test_the_cache_keys_on_the_budget_and_reuses_a_budget_stopped_search(tmp_path: Path) -> None:
    jobs = _jobs()
    cache = JsonCache(tmp_path)
    programs = [f"program {j.name}" for j in jobs]
    budget = SearchBudget(work=search_placements(jobs, _Exact(jobs)).work // 3)

    def run(
        evaluate: object, b: SearchBudget | None, deadline_s: float | None = None
    ) -> SearchReport:
        return cached_search(
            jobs, evaluate, cache=cache, programs=programs, budget=b, deadline_s=deadline_s
        )  # type: ignore[arg-type]

    cold = run(_Exact(jobs), budget)
    assert cold.stopped_by == "budget" and not cold.cached

    def refuse(batch: Sequence[Leaf]) -> list[float]:
        raise AssertionError("a cached search replayed")

    for deadline in (None, 0.0, 1e9):  # the budget decides where it stops, not the time
        assert run(refuse, budget, deadline) == dataclasses.replace(cold, cached=True)
    bigger = _Exact(jobs)
    more = run(bigger, SearchBudget(work=budget.work * 10))  # another key: searched on
    assert bigger.leaves > 0 and not more.cached and more.gap <= cold.gap
    none = run(_Exact(jobs), None)
    assert none.complete and not none.cached


def _namespace(**kw: object) -> argparse.Namespace:
    base = {
        "search_budget": None,
        "search_gap": None,
        "search_seconds": None,
        "workers": None,
        "ray": None,
    }
    base.update(kw)
    return argparse.Namespace(**base)


def test_the_command_line_defaults_are_the_search_defaults() -> None:
    assert cli_args.DEFAULT_BUDGET_WORK == DEFAULT_SEARCH_BUDGET.work
    assert cli_args.DEFAULT_GAP == DEFAULT_SEARCH_GAP
    options = cli_args.fan_out_options(_namespace())
    assert options["search_budget"] == DEFAULT_SEARCH_BUDGET
    assert options["search_gap"] == DEFAULT_SEARCH_GAP and options["search_seconds"] is None
    # --search-gap 0: prove the best, no budget (unless one is given).
    proven = cli_args.fan_out_options(_namespace(search_gap=0.0))
    assert proven["search_budget"] is None and proven["search_gap"] == 0.0
    both = cli_args.fan_out_options(_namespace(search_gap=0.0, search_budget="2_000"))
    assert both["search_budget"] == SearchBudget(work=2000)
    assert cli_args.fan_out_options(_namespace(search_budget="unlimited"))["search_budget"] is None
    with pytest.raises(WorkloadError, match="--search-budget 'lots'"):
        cli_args.search_budget_work(_namespace(search_budget="lots"))


@pytest.mark.parametrize(
    ("text", "work"), [("5e8", 500_000_000), ("2E9", 2_000_000_000), ("1.5e3", 1500)]
)
def test_a_budget_in_scientific_notation_is_a_whole_count(text: str, work: int) -> None:
    assert cli_args.search_budget_work(_namespace(search_budget=text)) == work


@pytest.mark.parametrize("text", ["1.5", "2.5e0", "inf", "nan", "-5e8", "1e-3"])
def test_a_budget_that_is_not_a_whole_positive_count_is_refused(text: str) -> None:
    with pytest.raises(WorkloadError, match=f"--search-budget '{text}': must be a positive"):
        cli_args.search_budget_work(_namespace(search_budget=text))


@pytest.mark.parametrize("command", ["plan", "whatif"])
def test_the_cli_refuses_a_bad_search_budget_in_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--slice", "v5e:2x2"] if command == "plan" else ["--slices", "v5e:2x2"]
    code = main([command, "--model", "wan2.1-1.3b", *where, "--search-budget", "0"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "--search-budget '0': must be a positive number of work units" in err


def test_other_shardings_given_orders_wait_in_the_heap_when_the_deadline_cannot_hold_them() -> None:
    # A pod baseline's default order replays for 100-200 s (tpu7x:8x8x16: 103 s of a 299 s
    # share): after the first sharding's (Stage 1's best), the others' are replayed
    # cheapest first as far as the deadline holds at the rate the first one's ran; the
    # rest wait in the heap under their leaf bound, so the search's bound stays true.
    jobs = [*_jobs(), _jobs()[1]]
    evaluate = _Exact(jobs)
    run = _Search(jobs, evaluate, batch_size=8, per_job=False, algorithm=None)
    forced = run.seed()
    assert [leaf.job for leaf in forced] == [0, 1, 2] and not run.heap
    run.record(forced[:1])
    run.s_per_replay_work = 100.0 / (REPLAY_COST * run.states[1].node_cost)  # 100 s each
    run.stop_at = time.perf_counter() + 150.0  # holds one more
    run.record_forced(forced[1:])
    assert [st.simulated for st in run.states] == [1, 1, 0] and run.deferred == [forced[2]]
    [(bound, _, job, leaf)] = run.heap
    assert (job, leaf) == (2, forced[2]) and bound <= evaluate([leaf])[0]
    assert run.stopped_by is None  # a deferral alone does not stop the search
    # A search that then ends by itself (proven, the gap, the budget) replays what it left;
    # one the deadline stopped does not.
    run.stopped_by = "deadline"
    run.finish_forced()
    assert [st.simulated for st in run.states] == [1, 1, 0]
    run.stopped_by = "gap"
    run.finish_forced()
    assert [st.simulated for st in run.states] == [1, 1, 1]
    # With no deadline every given order is replayed.
    free = _Search(jobs, evaluate, batch_size=8, per_job=False, algorithm=None)
    given = free.seed()
    free.record(given[:1])
    free.record_forced(given[1:])
    assert [st.simulated for st in free.states] == [1, 1, 1] and not free.heap
