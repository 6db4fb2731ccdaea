"""Exact Q2 of a batch of placements: from the cache, in this process, or fanned out.

:class:`BatchEvaluator` is the ``evaluate`` the placement search calls
(:func:`aoizora.rank.search.search_placements`). Each placement's Q2 is first
looked up in the planner's ``q2/`` cache under its network footprint
(:func:`aoizora.cache.q2_key`); the rest are replayed by
:class:`~aoizora.rank.exact.ExactQ2` -- here, keeping its caches for the whole
search, or on the workers of a :class:`~aoizora.fanout.FanOut`, each of which
keeps one :class:`ExactQ2` per program for as long as it lives -- and written
to the cache as soon as their batch is back, so an interrupted search resumes
where it stopped.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aoizora.cache import JsonCache, q2_key
from aoizora.fanout import FanOut
from aoizora.hlo.graph import CollectiveGraph, graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.rank.cutoff import ReplayCut, deadline, replays_until
from aoizora.rank.exact import ExactQ2
from aoizora.rank.search import Leaf
from aoizora.replay import network_footprint
from sim.topology import Slice

__all__ = ["BatchEvaluator", "Program"]


@dataclass(frozen=True)
class Program:
    """One compiled sharding as the evaluator needs it."""

    hlo_text: str
    graph: CollectiveGraph
    mesh_shape: tuple[int, ...]


@dataclass(frozen=True)
class _Task:
    hlo_text: str
    digest: str
    slice_: Slice
    mesh_shape: tuple[int, ...]
    physical_ids: tuple[int, ...]
    algorithm: str | Mapping[str, str] | None
    until_wall: float | None = None  # the search's deadline, time.time()'s clock


_WORKER_Q2: dict[tuple[str, Slice], ExactQ2] = {}  # one per (program, slice) in each worker


def _replay_task(task: _Task) -> float:
    key = (task.digest, task.slice_)
    exact = _WORKER_Q2.get(key)
    if exact is None:
        exact = ExactQ2(graph_from_text(task.hlo_text), task.slice_, algorithm=task.algorithm)
        _WORKER_Q2[key] = exact
    order = DeviceOrder.from_physical_ids(
        task.physical_ids, mesh_shape=task.mesh_shape, slice_=task.slice_
    )
    if task.until_wall is None:
        return exact.step_time(order)
    try:  # this process's clock: perf_counter() is not shared between machines
        with replays_until(time.perf_counter() + task.until_wall - time.time()):
            return exact.step_time(order)
    except ReplayCut:
        return math.nan  # cut at the deadline: the search leaves the leaf open


class BatchEvaluator:
    """``evaluate(batch of leaves) -> Q2s`` for the search, cached and fanned out.

    Batches go to ``pool`` only when worth it (see :meth:`_replay`:
    ``fanout_min_s`` CPU seconds of replays at least).

    ``replayed`` counts the placements actually replayed, ``cache_hits`` those
    read from the cache.
    """

    def __init__(
        self,
        programs: Sequence[Program],
        slice_: Slice,
        *,
        cache: JsonCache | None = None,
        pool: FanOut | None = None,
        algorithm: str | Mapping[str, str] | None = None,
        fanout_min_s: float = 1.0,
    ) -> None:
        self.programs = list(programs)
        self.slice = slice_
        self.cache = cache
        self.pool = pool
        self.algorithm = algorithm
        self.digests = [hashlib.sha256(p.hlo_text.encode()).hexdigest() for p in programs]
        self._exacts: dict[int, ExactQ2] = {}
        self._cost_s: dict[int, float] = {}  # CPU seconds of a program's first local replay
        self.fanout_min_s = fanout_min_s
        self.replayed = 0
        self.cache_hits = 0

    def __call__(self, batch: Sequence[Leaf]) -> list[float]:
        out: list[float | None] = []
        keys: list[str | None] = []
        for leaf in batch:
            key = None
            if self.cache is not None:
                program = self.programs[leaf.job]
                order = self._order(leaf)
                key = q2_key(
                    hlo_text=program.hlo_text,
                    slice_=self.slice,
                    footprint=network_footprint(program.graph, order),
                )
                got = self.cache.get(key)
                if got is not None:
                    self.cache_hits += 1
                    out.append(float(got["step_time_s"]))
                    keys.append(None)
                    continue
            out.append(None)
            keys.append(key)
        missing = [i for i, v in enumerate(out) if v is None]
        for i, q2 in zip(missing, self._replay([batch[i] for i in missing]), strict=True):
            out[i] = q2
            key = keys[i]
            if self.cache is not None and key is not None and not math.isnan(q2):
                self.cache.put(key, {"step_time_s": q2})
        return [float(v) for v in out if v is not None]

    def _order(self, leaf: Leaf) -> DeviceOrder:
        return DeviceOrder.from_physical_ids(
            leaf.physical_ids, mesh_shape=self.programs[leaf.job].mesh_shape, slice_=self.slice
        )

    def _replay(self, leaves: Sequence[Leaf]) -> list[float]:
        """Q2 of each leaf: here, or on the pool when the work left outweighs starting there.

        A worker parses a program before its first replay of it (a second or
        so for a compiled 14B step) and a replay of a 16-chip slice takes tens
        of milliseconds: the pool gets a batch only when its replays, timed by
        this process's first replay of each program, add up to at least
        ``fanout_min_s``. Where a replay runs does not change its Q2.
        """
        self.replayed += len(leaves)
        if self.pool is None or self.pool.label == "serial" or len(leaves) < 2:
            return [self._local(leaf) for leaf in leaves]
        out: list[float | None] = [None] * len(leaves)
        for i, leaf in enumerate(leaves):
            if leaf.job not in self._cost_s:  # the first replay of a program times it
                out[i] = self._local(leaf)
        rest = [i for i, v in enumerate(out) if v is None]
        work_s = sum(self._cost_s[leaves[i].job] for i in rest)
        if len(rest) < 2 or work_s < self.fanout_min_s:
            got = [self._local(leaves[i]) for i in rest]
        else:
            got = self._fan_out([leaves[i] for i in rest])
        for i, q2 in zip(rest, got, strict=True):
            out[i] = q2
        return [float(v) for v in out if v is not None]

    def _local(self, leaf: Leaf) -> float:
        """Q2 of ``leaf`` replayed here; NaN when cut at the search's deadline."""
        t0 = time.process_time()
        try:
            q2 = self._exact(leaf.job).step_time(self._order(leaf))
        except ReplayCut:
            return math.nan
        self._cost_s.setdefault(leaf.job, time.process_time() - t0)
        return q2

    def _fan_out(self, leaves: Sequence[Leaf]) -> list[float]:
        """The leaves' Q2s from the pool's workers; NaN for a replay cut at the deadline
        (:mod:`aoizora.rank.cutoff`'s, handed over on the wall clock)."""
        assert self.pool is not None
        until = deadline()
        until_wall = None
        if until is not None and not math.isinf(until):
            until_wall = time.time() + until - time.perf_counter()
        tasks = [
            _Task(
                hlo_text=self.programs[leaf.job].hlo_text,
                digest=self.digests[leaf.job],
                slice_=self.slice,
                mesh_shape=self.programs[leaf.job].mesh_shape,
                physical_ids=leaf.physical_ids,
                algorithm=self.algorithm,
                until_wall=until_wall,
            )
            for leaf in leaves
        ]
        return self.pool.map(_replay_task, tasks)

    def _exact(self, job: int) -> ExactQ2:
        got = self._exacts.get(job)
        if got is None:
            got = self._exacts[job] = ExactQ2(
                self.programs[job].graph, self.slice, algorithm=self.algorithm
            )
        return got
