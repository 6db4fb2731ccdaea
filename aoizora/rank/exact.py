"""Q2 without the full replay, and still exactly the full replay's number.

:func:`aoizora.replay.replay` simulates every flow of every collective of a
region in one run. Most of that work repeats: a collective's flows, alone on
the network, take a time that depends only on where they go, and many
placements (and regions) send a collective to the same chips up to a
translation. Max-min fair sharing decomposes over flows that share no link:
the rates of one set are the max-min rates of that set alone. So when no two
collectives *in flight at the same time* share a link, every collective runs
exactly as it would alone, and a region's time is its timeline composed with
each collective's *isolated* duration (:class:`~aoizora.rank.bound.TimelineBound`).

:class:`ExactQ2` computes, per region:

1. every collective's isolated duration, cached by its translated footprint:
   the contention-free schedule (each flow at its route's full capacity after
   its hop latency, in dependency order) when no two of its flows drain over
   one link at once in that schedule -- then it *is* the simulation (by
   induction over time: every flow is alone on its links) -- else one engine
   run of the collective alone; rings and all-to-alls compute that schedule in
   arrays (:mod:`aoizora.rank.rings`, bit-identical), other kinds flow by flow;
2. the timeline with those durations, and the set of collectives whose
   in-flight intervals overlap and whose links intersect (one released at the
   instant another ends does not overlap it: its flows arrive after the
   other's last one left);
3. if that set is empty, the timeline's time is the replay's. Otherwise the
   region runs in the engine with those collectives as flows and every other
   collective as a delay of its isolated duration; its new intervals are
   checked again, and the set grows until nothing outside it conflicts.
   The result is exact for the same reason: every collective outside the set
   shares no link with anything in flight beside it.

Every engine run here (a collective alone, a region's joint run) goes through
:mod:`aoizora.rank.lumped`: symmetric traffic runs as one representative per
class of alike flows, with the engine's own rules, else the engine runs. Ring
and all-to-all collectives get there as columns (:mod:`sim.columns`), their
classes found without building their flows (:mod:`aoizora.rank.compact`): a
1,024-device region of ring all-reduces in flight together is tens of millions
of flows, a few thousand columns.

Only the arithmetic differs from the full replay (sums in another order), so
the two agree to float rounding; ``tests/aoizora/test_rank.py`` checks
1e-9 relative on random placements of compiled and synthetic programs.

The engine's capacities are read off the engine (:func:`engine_capacities`):
a flow alone over a doubled link (a wrapped dimension of length 2) is timed
once per slice, so the closed form follows whether the engine pools parallel
cables or not.
"""

from __future__ import annotations

import functools
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
from aoizora.placement.device_order import Coord, DeviceOrder
from aoizora.rank.bound import TimelineBound, translated_coords
from aoizora.rank.compact import APPROXIMATED, mixed_times
from aoizora.rank.cutoff import check
from aoizora.rank.lumped import simulate_nodes
from aoizora.rank.rings import RingSchedule, ring_schedule
from aoizora.replay import algorithm_for, collective_plan, sim_kind, simulate_region
from sim.collectives import CollectivePlan
from sim.columns import collective_columns
from sim.engine import Flow, simulate
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = ["ExactQ2", "engine_capacities"]

# Within one collective's contention-free schedule, two flows over one link
# closer than this (relative) count as overlapping: the engine would run them
# on the same link at once, so the closed form does not apply.
_TOUCH_REL = 1e-9


@dataclass(frozen=True)
class _Capacities:
    resource: tuple[int, ...]  # link -> its resource (one per ordered chip pair)
    capacity: tuple[float, ...]  # resource -> bytes/s the engine gives a flow alone


@functools.cache
def engine_capacities(slice_: Slice) -> _Capacities:
    """One resource per ordered chip pair, with the rate the engine gives a lone flow.

    Parallel links (a wrapped dimension of length 2) join the same two chips;
    whether the engine pools them is measured, not assumed: one flow is
    simulated over such a pair.
    """
    pairs: dict[tuple[Coord, Coord], int] = {}
    resource = []
    count: list[int] = []
    for link in slice_.links:
        r = pairs.setdefault((link.src, link.dst), len(pairs))
        if r == len(count):
            count.append(0)
        count[r] += 1
        resource.append(r)
    bandwidth = slice_.link_bandwidth_bytes_per_s
    doubled_rate = bandwidth
    doubled = next((pair for pair, r in pairs.items() if count[r] > 1), None)
    if doubled is not None:
        size = 1e6
        run = simulate(slice_, [Flow("probe", doubled[0], doubled[1], size)]).flow("probe")
        doubled_rate = size / (run.finish_s - run.drain_s)
    capacity = tuple(doubled_rate if n > 1 else bandwidth for n in count)
    return _Capacities(tuple(resource), capacity)


def _region_classes(graph: CollectiveGraph) -> dict[int, int]:
    """Regions with the same steps over the same chips get one class number."""
    classes: dict[tuple[object, ...], int] = {}
    out: dict[int, int] = {}
    for region in graph.regions:
        parts: list[object] = []
        local: dict[int, int] = {}
        for step in region.steps:
            if isinstance(step, CollectiveStart):
                c = graph.collectives[step.collective]
                local[c.id] = len(local)
                parts.append(("c", sim_kind(c), c.groups, c.pairs, c.buffer_bytes))
            elif isinstance(step, CollectiveDone):
                parts.append(("d", local[step.collective]))
            elif isinstance(step, ComputeSegment):
                parts.append(("s", step.kernels))
            elif isinstance(step, OpaqueCall):
                o = graph.opaques[step.opaque]
                parts.append(("o", o.target, o.op_name, o.operand_shapes, o.result_shape))
            elif isinstance(step, SubRegion):
                parts.append(("r", step.trip_count, len(step.regions)))
        out[region.id] = classes.setdefault(tuple(parts), len(classes))
    return out


def _ends(c: Collective) -> list[int]:
    return [d for p in c.pairs for d in p] if c.pairs else [d for g in c.groups for d in g]


class ExactQ2:
    """Q2 of one compiled program on one slice, placement after placement.

    Equal to ``replay(graph, slice_, order).step_time_s`` (to float rounding).
    Caches live as long as the object: keep one per (program, slice).
    ``stats`` counts how each region and collective was answered.
    """

    def __init__(
        self,
        graph: CollectiveGraph,
        slice_: Slice,
        *,
        algorithm: str | Mapping[str, str] | None = None,
    ) -> None:
        self.graph = graph
        self.slice = slice_
        self.algorithm = algorithm
        self.timeline = TimelineBound(graph, slice_)
        self.caps = engine_capacities(slice_)
        self.latency_s = slice_.hop_latency_s
        self._isolated: dict[tuple[object, ...], float] = {}
        self._masks: dict[tuple[object, ...], int] = {}
        self._routes: dict[tuple[Coord, Coord], tuple[int, ...]] = {}
        self._ordering = check_order(slice_, None)  # the engine's dimension order
        self.stats = {"closed_form": 0, "engine_alone": 0, "regions_composed": 0,
                      "regions_simulated": 0, "regions_approximated": 0}  # fmt: skip
        self._twin = _region_classes(graph)

    def step_time(self, order: DeviceOrder) -> float:
        """The simulated step time of ``order`` (seconds)."""
        coords = order.coords
        durations: dict[int, float] = {}
        for c in self.graph.collectives:
            check()  # a search's deadline (aoizora.rank.cutoff)
            durations[c.id] = self._alone(c, coords)
        times: dict[int, float] = {}
        # Identical regions (one windowed-einsum loop per matmul, many alike) run
        # identically: the same steps and collectives, callees of equal times.
        seen: dict[tuple[object, ...], float] = {}
        for rid in self.timeline.order:
            calls = tuple(times[r] for st in self.timeline.regions[rid] for r in st.regions)
            key = (self._twin[rid], calls)
            if key not in seen:
                check()
                seen[key] = self._region(rid, order, durations, times)
            times[rid] = seen[key]
        return times[0]

    # -- one region -----------------------------------------------------------------

    def _region(
        self,
        rid: int,
        order: DeviceOrder,
        durations: Mapping[int, float],
        times: Mapping[int, float],
    ) -> float:
        started = [st.collective for st in self.timeline.regions[rid] if st.kind == "start"]
        joint: set[int] = set()
        masks: dict[int, int] = {}
        for _ in range(len(started) + 1):
            if joint:
                stand_ins = {c: durations[c] for c in started if c not in joint}
                approximated = len(APPROXIMATED)
                t, spans = simulate_region(
                    self.graph, self.slice, order, rid, times, algorithm=self.algorithm,
                    stand_ins=stand_ins, node_times=mixed_times, columns=True,
                )  # fmt: skip
                self.stats["regions_approximated"] += len(APPROXIMATED) > approximated
                release = {c: a for c, (a, _) in spans.items()}
                end = {c: b for c, (_, b) in spans.items()}
            else:
                t, release, end = self.timeline.region(rid, durations, times)
            grow = self._conflicts(release, end, order.coords, masks) - joint
            if not grow:
                self.stats["regions_simulated" if joint else "regions_composed"] += 1
                return t
            joint |= grow
        raise AssertionError("the joint set only grows and is bounded by the region")

    def _conflicts(
        self,
        release: Mapping[int, float],
        end: Mapping[int, float],
        coords: Sequence[Coord],
        masks: dict[int, int],
    ) -> set[int]:
        """Collectives in flight together whose links intersect."""
        ids = sorted(release, key=lambda c: (release[c], c))
        out: set[int] = set()
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                # b released once a ended: a's last flow has left before b's first
                # arrives (b waits for a's completion, or starts later).
                if release[b] >= end[a]:
                    break
                if a in masks:
                    ma = masks[a]
                else:
                    ma = masks[a] = self._mask(self.graph.collectives[a], coords)
                if b in masks:
                    mb = masks[b]
                else:
                    mb = masks[b] = self._mask(self.graph.collectives[b], coords)
                if ma & mb:
                    out.update((a, b))
        return out

    # -- one collective ---------------------------------------------------------------

    def _route(self, src: Coord, dst: Coord) -> tuple[int, ...]:
        key = (src, dst)
        got = self._routes.get(key)
        if got is None:
            links = link_ids(self.slice, src, dst, self._ordering)
            got = self._routes[key] = tuple(self.caps.resource[lk] for lk in links)
        return got

    def _plan(self, c: Collective, coords: Sequence[Coord]) -> CollectivePlan:
        return collective_plan(
            c, coords, slice_=self.slice, algorithm=self.algorithm, id_prefix=f"c{c.id}"
        )

    def _alone(self, c: Collective, coords: Sequence[Coord]) -> float:
        """``c``'s duration from its release with nothing else on the network."""
        ends = _ends(c)
        placed = translated_coords([coords[d] for d in ends], self.slice)
        key = (sim_kind(c), c.buffer_bytes, tuple(len(g) for g in c.groups), len(c.pairs), placed)
        got = self._isolated.get(key)
        if got is None:
            local = dict(zip(ends, placed, strict=True))
            moved = [local.get(i, coords[i]) for i in range(len(coords))]
            ring = self._ring(c, moved)
            plan = None
            if ring is not None:  # the same schedule in arrays
                got = None if ring.overlaps(touch_rel=_TOUCH_REL) else ring.done_s
            else:
                plan = self._plan(c, moved)
                got = self._closed_form(plan)
            if got is None:
                self.stats["engine_alone"] += 1
                got = self._engine_alone(c, moved, plan)
            else:
                self.stats["closed_form"] += 1
            self._isolated[key] = got
        return got

    def _engine_alone(
        self, c: Collective, coords: Sequence[Coord], plan: CollectivePlan | None
    ) -> float:
        """The engine's duration of ``c`` alone: a ring or all-to-all from its columns
        (:mod:`aoizora.rank.compact`, never its flows one by one), else its flows."""
        kind = sim_kind(c)
        cols = None if c.pairs or plan is not None else collective_columns(
            kind, [[coords[d] for d in g] for g in c.groups],
            buffer_bytes=float(c.buffer_bytes), algorithm=algorithm_for(self.algorithm, kind),
            id_prefix=f"c{c.id}", slice_=self.slice,
        )  # fmt: skip
        if cols is not None:
            _, finish = mixed_times(self.slice, cols.nodes)
            return max(finish)
        plan = plan or self._plan(c, coords)
        return simulate_nodes(self.slice, plan.nodes).makespan_s

    def _ring(self, c: Collective, coords: Sequence[Coord]) -> RingSchedule | None:
        """``c``'s schedule in arrays when every group runs a ring (None otherwise)."""
        if c.pairs:
            return None
        return ring_schedule(
            sim_kind(c),
            [[coords[d] for d in g] for g in c.groups],
            buffer_bytes=float(c.buffer_bytes),
            slice_=self.slice,
            route=self._route,
            capacity=self.caps.capacity,
            algorithm=self.algorithm,
        )

    def _closed_form(self, plan: CollectivePlan) -> float | None:
        """The contention-free schedule's end, if no two flows drain over one link at once."""
        finish: dict[str, float] = {}
        busy: dict[int, list[tuple[float, float]]] = {}
        capacity = self.caps.capacity
        for node in plan.nodes:
            ready = node.start_s
            for dep in node.after:
                ready = max(ready, finish[dep])
            if not isinstance(node, Flow):
                finish[node.id] = ready + node.duration_s
                continue
            route = self._route(node.src, node.dst)
            if not route:
                finish[node.id] = ready
                continue
            drain = ready + len(route) * self.latency_s
            if node.size_bytes <= 0:
                finish[node.id] = drain
                continue
            done = drain + node.size_bytes / min(capacity[r] for r in route)
            finish[node.id] = done
            for r in route:
                busy.setdefault(r, []).append((drain, done))
        for spans in busy.values():
            spans.sort()
            for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False):
                if b_start <= a_end * (1 + _TOUCH_REL):
                    return None
        return finish[plan.done_id]

    def _mask(self, c: Collective, coords: Sequence[Coord]) -> int:
        """The links ``c``'s flows cross, as a bit set of resources."""
        ends = _ends(c)
        key = (sim_kind(c), tuple(len(g) for g in c.groups), tuple(coords[d] for d in ends))
        got = self._masks.get(key)
        if got is None:
            ring = self._ring(c, coords)
            if ring is not None:
                got = sum(1 << r for r in ring.resources())
                self._masks[key] = got
                return got
            got = 0
            for flow in self._plan(c, coords).flows:
                if flow.size_bytes > 0:
                    for r in self._route(flow.src, flow.dst):
                        got |= 1 << r
            self._masks[key] = got
        return got
