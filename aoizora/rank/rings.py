"""A ring (or all-to-all) collective's contention-free schedule in arrays, without its flows.

Every group of a compiled collective runs the simulator's ``bidir_ring`` (or
``ring``) in the order :func:`sim.collectives.group_plans` gives
(:mod:`sim.algorithms`): ``S`` steps (``n - 1``, or ``2(n - 1)`` for an
all-reduce), in each of which member ``i`` sends one chunk to member
``i + d`` of its ring, ``d`` = +1 (and -1 for a bidirectional ring), after
the step-``s - 1`` flow that arrived at ``i`` and ``i``'s own step-``s - 1``
send. The flows of every step go between the same chips; only their times
differ. So one *column* per (group, direction, member) -- its route, hops and
slowest link -- and one row per step hold the whole schedule: building the
:class:`~sim.collectives.CollectivePlan` of a 256-member ring (65,280 flows)
takes a second in Python, these arrays a few milliseconds. A ``pairwise``
all-to-all is one step whose columns are the ordered pairs of members.

:class:`RingSchedule` computes, with exactly the float operations of the
flow-by-flow loops it replaces (:func:`aoizora.rank.bound.plan_lower_bound`
and :meth:`aoizora.rank.exact.ExactQ2._closed_form`, which remain the
reference for everything else), each flow's contention-free ready and finish
time: ``finish = (ready + hops * latency) + bytes / slowest capacity``
(``finish = ready`` for a 0-hop flow), ``ready`` the largest finish of what
it waits for (the overhead, else 0, at step 0). Tests compare both with the
flow-by-flow versions on random placements, bit for bit.

>>> from sim.topology import load_slice
>>> from sim.routing import route_link_ids
>>> s = load_slice("v5e:1x4")
>>> cap = [s.link_bandwidth_bytes_per_s] * len(s.links)
>>> route = lambda a, b: tuple(route_link_ids(s, a, b).tolist())
>>> r = ring_schedule("all-gather", [[(0, i) for i in range(4)]], buffer_bytes=8e6,
...                   slice_=s, route=route, capacity=cap)
>>> r.steps, r.columns, round(r.done_s * 1e6, 3)  # 3 steps, each hop <= 2 links of 1 us
(3, 8, 72.667)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.collectives import group_plans
from sim.coords import Coord
from sim.topology import Slice

__all__ = ["RingSchedule", "repeated_sum", "ring_schedule"]

Route = Callable[[Coord, Coord], tuple[int, ...]]


@dataclass(frozen=True)
class RingSchedule:
    """One ring collective's contention-free schedule: ``ready_s[step, column]`` etc.

    Columns are (group, direction, member) in the order the flows would be
    built; ``links`` and ``link_columns`` list every (link, column) incidence.
    """

    steps: int
    chunk_bytes: float
    overhead_s: float
    latency_s: float
    hops: np.ndarray  # per column
    ready_s: np.ndarray  # steps x columns
    finish_s: np.ndarray  # steps x columns
    links: np.ndarray  # one entry per (link, column) incidence
    link_columns: np.ndarray

    @property
    def columns(self) -> int:
        return int(self.hops.shape[0])

    @property
    def done_s(self) -> float:
        """The completion join's time: the last step's latest finish (the overhead if none)."""
        if self.steps == 0 or self.columns == 0:
            return self.overhead_s
        return float(self.finish_s[-1].max())

    def drain_s(self) -> np.ndarray:
        """When each flow starts draining (its ready time for a 0-hop flow)."""
        return self.ready_s + self.hops * self.latency_s

    def link_bound_s(self, capacity: Sequence[float], *, copies: int = 1) -> float:
        """The largest ``first drain + bytes / capacity`` over the links any flow crosses
        (``copies`` times the bytes: identical copies of the ring released no earlier).

        Every flow of a column drains after its step-0 flow (times only grow
        along a column), and every link carries ``steps`` chunks per column
        crossing it, added one at a time as the flow-by-flow loop does.
        """
        if self.links.size == 0 or self.steps == 0:
            return 0.0
        first = self.drain_s()[0][self.link_columns]
        earliest = np.full(int(self.links.max()) + 1, np.inf)
        np.minimum.at(earliest, self.links, first)
        counts = np.bincount(self.links) * self.steps
        best = 0.0
        for lk in np.flatnonzero(counts).tolist():
            load = repeated_sum(self.chunk_bytes, int(counts[lk])) * copies
            best = max(best, float(earliest[lk]) + load / capacity[lk])
        return best

    def overlaps(self, *, touch_rel: float) -> bool:
        """Whether two flows drain over one link at once (``b`` starts by ``a``'s end)."""
        if self.links.size == 0 or self.steps == 0 or self.chunk_bytes <= 0:
            return False
        start = self.drain_s()[:, self.link_columns].ravel()
        end = self.finish_s[:, self.link_columns].ravel()
        link = np.broadcast_to(self.links, (self.steps, self.links.size)).ravel()
        order = np.lexsort((end, start, link))
        start, end, link = start[order], end[order], link[order]
        same = link[1:] == link[:-1]
        return bool(np.any(same & (start[1:] <= end[:-1] * (1 + touch_rel))))

    def resources(self) -> set[int]:
        """The links (or resources) the flows cross."""
        return set(self.links.tolist()) if self.chunk_bytes > 0 else set()


_SUMS: dict[float, list[float]] = {}


def repeated_sum(value: float, count: int) -> float:
    """``value`` added ``count`` times, one at a time from 0.0 (as a loop would, bit for bit).

    >>> repeated_sum(0.1, 3) == 0.1 + 0.1 + 0.1
    True
    """
    sums = _SUMS.setdefault(value, [0.0])
    while len(sums) <= count:
        sums.append(sums[-1] + value)
    return sums[count]


def ring_schedule(
    kind: str,
    groups: Sequence[Sequence[Coord]],
    *,
    buffer_bytes: float,
    slice_: Slice,
    route: Route,
    capacity: Sequence[float],
    algorithm: str | Mapping[str, str] | None = None,
) -> RingSchedule | None:
    """The schedule of ``kind`` over ``groups``, or None if a group runs no ring.

    None too when groups of two or more members differ in size (their step
    counts would differ): the caller falls back to the flows.
    """
    if kind not in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all"):
        return None
    algo = algorithm.get(kind) if isinstance(algorithm, Mapping) else algorithm
    plans = [p for p in group_plans(kind, groups, algorithm=algo, slice_=slice_)
             if p.algorithm != "none"]  # fmt: skip
    if any(p.algorithm not in ("ring", "bidir_ring", "pairwise") for p in plans):
        return None
    sizes = {len(p.members) for p in plans}
    if len(sizes) > 1 or len({p.algorithm for p in plans}) > 1:
        return None
    overhead = float(slice_.chip.collective_overhead_s)
    latency = float(slice_.hop_latency_s)
    if not plans:
        return _empty(overhead, latency)
    n = sizes.pop()
    if plans[0].algorithm == "pairwise":  # one step: every member to every other at once
        steps, chunk = 1, float(buffer_bytes) / n
        ends = [(i, j, i) for i in range(n) for j in range(n) if i != j]
    else:
        dirs = (1, -1) if plans[0].algorithm == "bidir_ring" else (1,)
        steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
        chunk = float(buffer_bytes) / n / len(dirs)
        # (sender, receiver, the column of the flow that feeds the sender)
        ends = [(i, (i + d) % n, k * n + (i - d) % n) for k, d in enumerate(dirs)
                for i in range(n)]  # fmt: skip
    counts: list[int] = []
    links: list[int] = []
    prev: list[int] = []
    for p in plans:
        base = len(counts)
        for i, j, feed in ends:
            lks = route(p.members[i], p.members[j])
            links.extend(lks)
            counts.append(len(lks))
            prev.append(base + feed)
    h = np.asarray(counts, dtype=np.int64)
    link_arr = np.asarray(links, dtype=np.int64)
    link_cols = np.repeat(np.arange(h.size), h)
    slow = np.ones(h.size)
    moving = h > 0
    if link_arr.size:  # each column's slowest link (min is exact, in any order)
        starts = (np.cumsum(h) - h)[moving]  # strictly increasing: one per column with links
        caps = np.asarray(capacity, dtype=np.float64)[link_arr]
        slow[moving] = np.minimum.reduceat(caps, starts)
    hl = h * latency  # int * float as the loops compute len(links) * latency
    w = chunk / slow
    back = np.asarray(prev, dtype=np.int64)
    ready = np.empty((steps, h.size))
    finish = np.empty((steps, h.size))
    ready[0] = overhead
    for s in range(steps):
        if s:
            ready[s] = np.maximum(finish[s - 1][back], finish[s - 1])
        finish[s] = np.where(moving, (ready[s] + hl) + w, ready[s])
    return RingSchedule(
        steps, chunk, overhead, latency, h, ready, finish,
        link_arr, link_cols,
    )  # fmt: skip


def _empty(overhead: float, latency: float) -> RingSchedule:
    none = np.zeros(0, dtype=np.int64)
    empty = np.zeros((0, 0))
    return RingSchedule(0, 0.0, overhead, latency, none, empty, empty, none, none)
