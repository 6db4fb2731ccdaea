"""The search cache: reports round-trip exactly, a warm search replays nothing, deadlines.

The searches run over synthetic programs on v5e:2x4 and v5e:4x4 with the exact
shortcut as ``evaluate``; a warm search is given an ``evaluate`` that raises, so
a report that did not come from the cache fails the test.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from aoizora.cache import JsonCache, plan_caches, search_key
from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.space import PlacementSpace
from aoizora.rank.bounds_of_nodes import collective_shapes, traffic_order
from aoizora.rank.exact import ExactQ2
from aoizora.rank.jobs import SearchSummary
from aoizora.rank.search import Job, Leaf, SearchReport, search_placements
from aoizora.rank.search_cache import cached_search, job_identity, report_from_json, report_to_json
from sim.topology import Slice, load_slice
from tests.aoizora.synthetic import mesh_program


def _jobs(s: Slice, shape: tuple[int, ...], scales: Sequence[int] = (2, 16)) -> list[Job]:
    jobs = []
    for scale in scales:
        graph = mesh_program(shape, scale=scale)
        order = traffic_order(collective_shapes(graph, shape), shape)
        space = PlacementSpace(shape, s, axis_order=order)
        default = DeviceOrder.from_physical_ids(
            tuple(range(s.num_chips)), mesh_shape=shape, slice_=s
        )
        jobs.append(
            Job(f"scale{scale}", graph, space, (("default order", default),), ("default order",))
        )
    return jobs


def _digests(jobs: Sequence[Job]) -> list[str]:
    return [f"program of {job.name}" for job in jobs]


class _Exact:
    """The exact Q2 of each leaf; counts the leaves it was asked for."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = jobs
        self.exact = [ExactQ2(job.graph, job.space.slice) for job in jobs]
        self.leaves = 0

    def __call__(self, batch: Sequence[Leaf]) -> list[float]:
        self.leaves += len(batch)
        out = []
        for leaf in batch:
            space = self.jobs[leaf.job].space
            order = DeviceOrder.from_physical_ids(
                leaf.physical_ids, mesh_shape=space.shape, slice_=space.slice
            )
            out.append(self.exact[leaf.job].step_time(order))
        return out


def _refuse(batch: Sequence[Leaf]) -> list[float]:
    raise AssertionError(f"a cached search replayed {len(batch)} placements")


def _same(a: SearchReport, b: SearchReport) -> None:
    """Field by field (dataclasses compare their fields; ``cached`` aside)."""
    for f in dataclasses.fields(SearchReport):
        if f.name != "cached":
            assert getattr(a, f.name) == getattr(b, f.name), f.name
    assert a.complete == b.complete and a.gap == b.gap


def test_a_real_report_round_trips_field_by_field() -> None:
    s = load_slice("v5e:4x4")
    jobs = _jobs(s, (4, 4))
    stopped = search_placements(jobs, _Exact(jobs), batch_size=1, deadline_s=0.0)
    done = search_placements(jobs, _Exact(jobs))
    assert not stopped.complete and done.complete
    assert any(math.isinf(j.bound_s) for j in done.jobs)  # inf bounds are in the test
    for report in (stopped, done):
        text = json.dumps(report_to_json(report), allow_nan=False)  # no Infinity in the JSON
        back = report_from_json(json.loads(text))
        _same(back, report)
        assert back == report and not back.cached
        assert report_from_json(json.loads(text), cached=True).cached
        for jb, jr in zip(back.jobs, report.jobs, strict=True):
            assert jb.open == jr.open and jb.scored == jr.scored and jb.bound_s == jr.bound_s


def test_a_warm_search_replays_nothing_and_returns_the_same_report(tmp_path: Path) -> None:
    s = load_slice("v5e:2x4")
    jobs = _jobs(s, (2, 4))
    cache = JsonCache(tmp_path, compress=True)
    evaluate = _Exact(jobs)
    cold = cached_search(jobs, evaluate, cache=cache, programs=_digests(jobs), batch_size=3)
    assert evaluate.leaves > 0 and not cold.cached
    lines: list[str] = []
    warm = cached_search(
        jobs, _refuse, cache=cache, programs=_digests(jobs), batch_size=3, progress=lines.append
    )
    assert warm.cached and warm == dataclasses.replace(cold, cached=True)
    assert len(lines) == 1 and lines[0].startswith("[search] from the cache")
    assert "gap 0.00%" in lines[0]
    assert SearchSummary.of(warm, fan_out="serial").to_json_dict()["cached"] is True
    assert SearchSummary.of(cold, fan_out="serial").to_json_dict()["cached"] is False


def test_deadlines_reuse_a_stopped_search_only_for_no_more_time(tmp_path: Path) -> None:
    s = load_slice("v5e:4x4")
    jobs = _jobs(s, (4, 4))
    cache = JsonCache(tmp_path)
    programs = _digests(jobs)

    def run(evaluate: object, deadline_s: float | None) -> SearchReport:
        return cached_search(
            jobs, evaluate, cache=cache, programs=programs, batch_size=1,  # type: ignore[arg-type]
            deadline_s=deadline_s,
        )  # fmt: skip

    stopped = run(_Exact(jobs), 0.0)
    assert not stopped.complete and not stopped.cached
    assert run(_refuse, 0.0) == dataclasses.replace(stopped, cached=True)  # <= its deadline
    again = _Exact(jobs)
    assert not run(again, None).cached and again.leaves > 0  # no deadline: search on
    # Re-stopped again under a longer deadline: a short deadline after it is served.
    cache2 = JsonCache(tmp_path / "second")
    first = cached_search(
        jobs, _Exact(jobs), cache=cache2, programs=programs, batch_size=1, deadline_s=0.0
    )
    longer = _Exact(jobs)
    resumed = cached_search(
        jobs, longer, cache=cache2, programs=programs, batch_size=1, deadline_s=600.0
    )
    assert longer.leaves > 0 and not resumed.cached and resumed.complete
    assert resumed.winner.q2_s <= first.winner.q2_s
    # Complete: reused whatever the deadline.
    for deadline in (0.0, 1e9, None):
        got = cached_search(
            jobs, _refuse, cache=cache2, programs=programs, batch_size=1, deadline_s=deadline
        )
        assert got == dataclasses.replace(resumed, cached=True)


def test_a_search_stopped_within_a_gap_serves_that_gap_and_no_smaller(tmp_path: Path) -> None:
    s = load_slice("v5e:4x4")
    jobs = _jobs(s, (4, 4))
    cache = JsonCache(tmp_path)
    programs = _digests(jobs)

    def run(evaluate: object, gap: float) -> SearchReport:
        return cached_search(
            jobs, evaluate, cache=cache, programs=programs, batch_size=1,  # type: ignore[arg-type]
            gap_tolerance=gap,
        )  # fmt: skip

    loose = run(_Exact(jobs), 0.3)
    assert not loose.complete and 0.0 < loose.gap <= 0.3 and not loose.cached
    for gap in (loose.gap, 0.3, 0.5):  # a gap at least as loose: served from the cache
        assert run(_refuse, gap) == dataclasses.replace(loose, cached=True)
    tighter = _Exact(jobs)
    proven = run(tighter, 0.0)  # a tighter request searches on
    assert tighter.leaves > 0 and not proven.cached and proven.complete and proven.gap == 0.0
    assert proven.winner.q2_s >= loose.bound_s  # the loose search's bound held


def test_the_key_follows_the_program_the_slice_and_the_switches(tmp_path: Path) -> None:
    s = load_slice("v5e:2x4")
    jobs = _jobs(s, (2, 4))
    cache = JsonCache(tmp_path)
    cached_search(jobs, _Exact(jobs), cache=cache, programs=_digests(jobs))

    def key(
        jobs: Sequence[Job], programs: Sequence[str], *, per_job: bool = False, probes: int = 64
    ) -> str:
        identities = [
            job_identity(j, program_digest=d) for j, d in zip(jobs, programs, strict=True)
        ]
        return search_key(
            jobs=identities, slice_=jobs[0].space.slice, per_job=per_job, batch_size=8,
            algorithm=None, probes=probes,
        )  # fmt: skip

    base = key(jobs, _digests(jobs))
    wrapped = _jobs(load_slice("v5e:2x4", wraparound=True), (2, 4))
    other_program = [*_digests(jobs)[:1], "another program"]
    changed = {
        "program": key(jobs, other_program),
        "slice": key(wrapped, _digests(wrapped)),
        "per_job": key(jobs, _digests(jobs), per_job=True),
        "jobs": key(jobs[:1], _digests(jobs)[:1]),
        "probes": key(jobs, _digests(jobs), probes=0),
    }
    assert base == key(_jobs(s, (2, 4)), _digests(jobs))  # values, not objects
    assert len({base, *changed.values()}) == 1 + len(changed)
    # Each change misses the cache: the search runs (and _refuse fails it).
    with pytest.raises(AssertionError, match="a cached search replayed"):
        cached_search(jobs, _refuse, cache=cache, programs=other_program)
    with pytest.raises(AssertionError, match="a cached search replayed"):
        cached_search(wrapped, _refuse, cache=cache, programs=_digests(wrapped))
    with pytest.raises(AssertionError, match="a cached search replayed"):
        cached_search(jobs, _refuse, cache=cache, programs=_digests(jobs), per_job=True)
    with pytest.raises(AssertionError, match="a cached search replayed"):
        cached_search(jobs, _refuse, cache=cache, programs=_digests(jobs), probes=0)
    assert cached_search(jobs, _refuse, cache=cache, programs=_digests(jobs)).cached


def test_the_plan_caches_hold_a_search_directory(tmp_path: Path) -> None:
    caches = plan_caches(tmp_path)
    assert caches.search.directory == tmp_path / "search" and caches.search.compress


def test_one_program_digest_a_job(tmp_path: Path) -> None:
    jobs = _jobs(load_slice("v5e:2x4"), (2, 4))
    with pytest.raises(PlacementError, match="2 jobs"):
        cached_search(jobs, _refuse, cache=JsonCache(tmp_path), programs=["one"])
