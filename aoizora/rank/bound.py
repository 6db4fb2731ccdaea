"""Proven lower bounds on Q2: what the planner prunes placements with.

A replay (:mod:`aoizora.replay`) runs each region as one compute timeline
whose collectives release flows and wait for them. Every quantity in it only
grows when a collective takes longer -- the timeline is a chain of ``+`` and
``max`` -- so composing the timeline with a *lower bound* of each collective's
duration gives a lower bound of the region, and loops and calls multiply and
add such bounds (:class:`TimelineBound`).

A collective's duration from its release is bounded below, whatever else
shares the network (:func:`plan_lower_bound`):

- **flow by flow**: a flow pays its hop latency before draining, then moves
  its bytes at most at the capacity of its slowest link, and waits for what it
  depends on: the longest such path through the collective's flow DAG;
- **link by link**: every byte crossing a link moves after the earliest
  moment any of those flows can start draining, at most at the link's
  capacity.

A link's capacity is its bandwidth times the number of parallel links
joining the same two chips (a wrapped dimension of length 2 has two), an upper
bound on what the simulator can give it whether or not it pools them.

When the chips are not all known yet -- a search node has placed only some
mesh axes -- three cases give bounds that hold for every completion
(:mod:`aoizora.rank.search` picks the case):

- the collective's groups span placed axes only: each group sits at a
  translate of its final position, and routes depend only on differences, so
  each group's own bound holds (but not the load two groups put on one link);
- the groups span an axis whose *set* of chips is fixed but not its order:
  every flow crosses at least the smallest distance between two chips of the
  group, and the collective runs one of the simulator's named algorithms
  (:data:`sim.collectives.ALGORITHMS`), so the least of their contention-free
  times at that distance bounds it;
- anything else: the same with one hop. For a pairwise all-to-all, the
  member first in routing order sends its ``n - 1`` blocks over at most ``W``
  first links, so one carries ``ceil((n - 1) / W)`` of them (see ``_chain``).

Which sub-axis *sets* (not orders) decide a collective's flows, and the exact
bounds that follows from it: :mod:`aoizora.rank.set_bounds`.

Tests check every bound against full replays (``tests/aoizora/test_rank.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aoizora.hlo.nodes import (
    Collective,
    CollectiveDone,
    CollectiveGraph,
    CollectiveStart,
    ComputeSegment,
    OpaqueCall,
    SubRegion,
)
from aoizora.placement.device_order import Coord
from aoizora.rank.rings import ring_schedule
from aoizora.replay import collective_plan, sim_kind, step_delays_s
from sim.collectives import ALGORITHMS, CollectivePlan
from sim.engine import Flow
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = [
    "LinkCapacities",
    "TimelineBound",
    "collective_lower_bound",
    "ideal_lower_bound",
    "plan_lower_bound",
    "translated_coords",
]


class LinkCapacities:
    """Per-link capacity bound and routes of one slice (routes cached)."""

    def __init__(self, slice_: Slice) -> None:
        self.slice = slice_
        self.hop_latency_s = slice_.hop_latency_s
        bandwidth = slice_.link_bandwidth_bytes_per_s
        parallel: dict[tuple[Coord, Coord], int] = {}
        for link in slice_.links:
            parallel[(link.src, link.dst)] = parallel.get((link.src, link.dst), 0) + 1
        self.capacity = [bandwidth * parallel[(lk.src, lk.dst)] for lk in slice_.links]
        self.max_capacity = max(self.capacity, default=bandwidth)
        self._routes: dict[tuple[Coord, Coord], tuple[int, ...]] = {}
        self._ordering = check_order(slice_, None)  # the engine's dimension order
        # The directions a route can leave a chip by: +d along a dimension without
        # wrap-around for the chip smallest in routing order, +-d with it (see _chain).
        self.first_hop_directions = sum(
            2 if wrap else 1
            for n, wrap in zip(slice_.shape, slice_.wraparound, strict=True)
            if n > 1
        )

    def route(self, src: Coord, dst: Coord) -> tuple[int, ...]:
        key = (src, dst)
        got = self._routes.get(key)
        if got is None:
            got = link_ids(self.slice, src, dst, self._ordering)
            self._routes[key] = got
        return got


def plan_lower_bound(plan: CollectivePlan, net: LinkCapacities, *, copies: int = 1) -> float:
    """A lower bound on the time from ``plan``'s release to its ``done_id``, in any company.

    With ``copies=k`` it bounds ``k`` identical copies of ``plan`` released no earlier
    than this one (the time until the last is done): every copy sends the same flows over
    the same routes, so a link carries ``k`` times its bytes after the same first drain
    (:class:`TimelineBound`'s twins).

    >>> from sim.collectives import collective_flows
    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:1x2")
    >>> p = collective_flows("all-gather", [[(0, 0), (0, 1)]], buffer_bytes=9e6, id_prefix="g")
    >>> round(plan_lower_bound(p, LinkCapacities(s)) * 1e6, 3)  # 1 us + 2 x 2.25 MB on one link
    101.0
    """
    finish: dict[str, float] = {}
    first_drain: dict[int, float] = {}
    load: dict[int, float] = {}
    latency = net.hop_latency_s
    capacity = net.capacity
    for node in plan.nodes:
        ready = node.start_s
        for dep in node.after:
            done = finish.get(dep, 0.0)  # ids outside the plan: its release, time 0
            if done > ready:
                ready = done
        if not isinstance(node, Flow):
            finish[node.id] = ready + node.duration_s
            continue
        links = net.route(node.src, node.dst)
        if not links:
            finish[node.id] = ready
            continue
        drain = ready + len(links) * latency
        finish[node.id] = drain + node.size_bytes / min(capacity[lk] for lk in links)
        for lk in links:
            load[lk] = load.get(lk, 0.0) + node.size_bytes
            if drain < first_drain.get(lk, math.inf):
                first_drain[lk] = drain
    best = finish[plan.done_id]
    for lk, size in load.items():
        best = max(best, first_drain[lk] + copies * size / capacity[lk])
    return best


def collective_lower_bound(
    collective: Collective,
    coords: Sequence[Coord],
    net: LinkCapacities,
    *,
    algorithm: str | Mapping[str, str] | None = None,
    copies: int = 1,
) -> float:
    """:func:`plan_lower_bound` of ``collective`` with logical id ``i`` on chip ``coords[i]``
    (of ``copies`` identical copies of it, as there).

    Rings (every all-gather, reduce-scatter and all-reduce the simulator's
    ``auto`` runs) go through :func:`~aoizora.rank.rings.ring_schedule`, which
    gives the same number bit for bit without building the flows; anything
    else builds them (:func:`aoizora.replay.collective_plan`).
    """
    kind = sim_kind(collective)
    if not collective.pairs:
        ring = ring_schedule(
            kind,
            [[coords[d] for d in g] for g in collective.groups],
            buffer_bytes=float(collective.buffer_bytes),
            slice_=net.slice,
            route=net.route,
            capacity=net.capacity,
            algorithm=algorithm,
        )
        if ring is not None:
            return max(ring.done_s, ring.link_bound_s(net.capacity, copies=copies))
    plan = collective_plan(collective, coords, slice_=net.slice, algorithm=algorithm, id_prefix="b")
    return plan_lower_bound(plan, net, copies=copies)


def ideal_lower_bound(
    kind: str,
    group_size: int,
    buffer_bytes: float,
    *,
    hops: int,
    net: LinkCapacities,
    copies: int = 1,
) -> float:
    """A bound for one group of ``group_size`` distinct chips any two ``hops`` or more apart.

    The least, over the simulator's named algorithms for ``kind``, of the
    contention-free longest path with every flow crossing ``hops`` links of
    the best capacity. For a permute, ``group_size`` is 2 (one pair).

    ``copies=k`` bounds ``k`` identical collectives released no earlier than this
    one: a permute's pair, and the all-to-all's busiest first link (see ``_chain``),
    carry ``k`` times their bytes over the same link. A ring's steps can interleave
    another copy's transfers with their hop latencies, so rings keep one copy's bound.

    >>> from sim.topology import load_slice
    >>> net = LinkCapacities(load_slice("v5e:2x2"))
    >>> round(ideal_lower_bound("collective-permute", 2, 4.5e6, hops=1, net=net) * 1e6, 3)
    101.0
    >>> round(ideal_lower_bound("collective-permute", 2, 4.5e6, hops=1, net=net, copies=2)
    ...       * 1e6, 3)
    201.0
    """
    if group_size < 2:
        return 0.0
    latency = hops * net.hop_latency_s
    best = math.inf
    if kind in ("collective-permute", "all-to-all"):  # the bytes one link must carry
        buffer_bytes *= copies
    for algorithm in ALGORITHMS[kind]:
        if algorithm != "auto":  # auto picks one of the named ones per group
            best = min(best, _chain(kind, algorithm, group_size, buffer_bytes, latency, net))
    return 0.0 if math.isinf(best) else best


def _chain(
    kind: str, algorithm: str, n: int, buffer_bytes: float, latency_s: float, net: LinkCapacities
) -> float:
    """The longest path of ``algorithm`` when every flow takes ``latency_s + bytes / best``.

    Every flow of step ``s`` waits for a flow of step ``s - 1`` (and for
    nothing later), and all flows of one algorithm carry the same bytes
    (:mod:`sim.algorithms`), so every path through the steps takes the same
    time: ``steps`` such flows one after another, added step by step as the
    flow-by-flow loop does (``tests/aoizora/test_rings.py`` compares the two).
    """
    if kind == "collective-permute":
        steps, chunk = 1, buffer_bytes  # one flow per pair
    elif kind == "all-to-all":
        # Pairwise: every block at once, and some link carries ceil((n - 1) / W) of them
        # from their common release. Proof: take the member ``a`` smallest in the
        # routing order's lexicographic order (first routed dimension first). Every
        # other member differs from ``a`` first in some dimension ``d`` where it is
        # larger, and dimension-ordered routing corrects ``d`` first: the flow leaves
        # ``a`` by +d (or, on a wrapped ``d``, by +d or -d, the shorter way). So ``a``'s
        # n - 1 flows leave it by at most W = first_hop_directions links, one of which
        # carries ceil((n - 1) / W) blocks (pigeonhole), each after >= ``hops`` hops.
        ways = max(1, net.first_hop_directions)
        per_link = -(-(n - 1) // ways)
        return latency_s + per_link * (buffer_bytes / n) / net.max_capacity
    else:
        steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
        chunk = buffer_bytes / n / (2 if algorithm == "bidir_ring" else 1)
    finish = 0.0
    for _ in range(steps):
        finish = finish + latency_s + chunk / net.max_capacity
    return finish


@dataclass(frozen=True)
class _Step:
    kind: str  # "delay", "start", "done", "sub"
    value: float = 0.0
    collective: int = -1
    regions: tuple[int, ...] = ()
    trip_count: int = 1


def _twin_groups(
    steps: Sequence[_Step], graph: CollectiveGraph
) -> list[tuple[int, tuple[int, ...], int]]:
    """``(first, members, step of the last done)`` of every group of *twins* in a region:
    identical collectives (kind, groups, pairs, bytes) in flight at once, e.g. the K and V
    permutes of one ring-attention step. Twins send the same flows over the same routes,
    so their bytes add up on every link they cross: together they take at least a bound
    of ``len(members)`` copies (``copies=`` of the bounds above) from the first release.
    A collective joins the group of a twin still in flight when it starts."""
    key_of: dict[int, tuple[object, ...]] = {}
    group_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    last: dict[int, int] = {}
    in_flight: list[int] = []
    for i, step in enumerate(steps):
        c = step.collective
        if step.kind == "start":
            col = graph.collectives[c]
            key_of[c] = (sim_kind(col), col.groups, col.pairs, col.buffer_bytes)
            twin = next((o for o in in_flight if key_of[o] == key_of[c]), None)
            group_of[c] = group_of[twin] if twin is not None else c
            members.setdefault(group_of[c], []).append(c)
            in_flight.append(c)
        elif step.kind == "done" and c in in_flight:
            in_flight.remove(c)
            last[group_of[c]] = i
    return [
        (g, tuple(m), last[g])
        for g, m in members.items()
        if len(m) > 1 and all(c not in in_flight for c in m)
    ]


class TimelineBound:
    """The replay's timelines with collective durations plugged in: a bound or a time.

    Composes each region (deepest first) from per-collective durations: exact
    durations give the replay's step time when no two collectives in flight
    share a link (:mod:`aoizora.rank.exact`), lower bounds give a lower bound.
    Twins (:func:`_twin_groups`) may also be given a joint bound: at the last of
    their dones the region has run at least that long past their first release.
    """

    def __init__(self, graph: CollectiveGraph, slice_: Slice) -> None:
        self.graph = graph
        delays = step_delays_s(graph, slice_.chip.per_device())  # as the replay: per device
        self.regions: dict[int, tuple[_Step, ...]] = {}
        for region in graph.regions:
            steps: list[_Step] = []
            for i, step in enumerate(region.steps):
                if isinstance(step, ComputeSegment | OpaqueCall):
                    steps.append(_Step("delay", delays[(region.id, i)]))
                elif isinstance(step, CollectiveStart):
                    steps.append(_Step("start", collective=step.collective))
                elif isinstance(step, CollectiveDone):
                    steps.append(_Step("done", collective=step.collective))
                elif isinstance(step, SubRegion):
                    steps.append(_Step("sub", regions=step.regions, trip_count=step.trip_count))
            self.regions[region.id] = tuple(steps)
        self.order = sorted(self.regions, reverse=True)  # children are numbered after parents
        self.twins: dict[int, tuple[int, ...]] = {}  # first collective -> its twin group
        self._closes: dict[tuple[int, int], list[int]] = {}  # (region, step) -> groups
        for rid, region_steps in self.regions.items():
            for first, members, last in _twin_groups(region_steps, graph):
                self.twins[first] = members
                self._closes.setdefault((rid, last), []).append(first)

    def step_time(
        self, durations: Mapping[int, float], joint: Mapping[int, float] | None = None
    ) -> float:
        """The entry region's time with collective ``c`` taking ``durations[c]`` and, with
        ``joint``, the twins of group ``g`` (:attr:`twins`) all done ``joint[g]`` after the
        first of them is released, or later."""
        times: dict[int, float] = {}
        for rid in self.order:
            times[rid] = self.region(rid, durations, times, joint)[0]
        return times[0]

    def region(
        self,
        rid: int,
        durations: Mapping[int, float],
        times: Mapping[int, float],
        joint: Mapping[int, float] | None = None,
    ) -> tuple[float, dict[int, float], dict[int, float]]:
        """Region ``rid``'s time and every collective's release and end in it."""
        t = 0.0
        release: dict[int, float] = {}
        end: dict[int, float] = {}
        for i, step in enumerate(self.regions[rid]):
            if step.kind == "delay":
                t += step.value
            elif step.kind == "start":
                release[step.collective] = t
                end[step.collective] = t + durations[step.collective]
            elif step.kind == "done":
                t = max(t, end[step.collective])
                if joint is not None:
                    for g in self._closes.get((rid, i), ()):
                        t = max(t, min(release[c] for c in self.twins[g]) + joint[g])
            else:
                t += max((times[r] for r in step.regions), default=0.0) * step.trip_count
        return t, release, end


def translated_coords(coords: Sequence[Coord], slice_: Slice) -> tuple[Coord, ...]:
    """``coords`` shifted so that every translate of a set of flows gets one cache key.

    Routes depend only on the difference of their ends (a straight line without
    wrap-around, the shortest way round with it), so translated flows meet the
    same bounds and the same simulated times: the shift puts the smallest
    coordinate at 0 on a dimension without wrap-around and the first chip's at
    0 on a wrapped one.

    >>> from sim.topology import load_slice
    >>> translated_coords([(2, 3), (3, 1)], load_slice("v5e:4x4"))
    ((0, 2), (1, 0))
    """
    if not coords:
        return ()
    dims = list(zip(slice_.shape, slice_.wraparound, strict=True))
    shift = [
        coords[0][d] if wrap else min(c[d] for c in coords) for d, (_, wrap) in enumerate(dims)
    ]
    return tuple(
        tuple(
            (c[d] - shift[d]) % n if wrap else c[d] - shift[d] for d, (n, wrap) in enumerate(dims)
        )
        for c in coords
    )
