"""Lower bounds of search nodes: every placement under a node is at least this slow.

:class:`NodeBounds` turns a :class:`~aoizora.placement.space.Node` of one
compiled sharding's placement tree into a lower bound on the Q2 of every
placement below it, by plugging a bound of each collective into the replay's
timelines (:class:`~aoizora.rank.bound.TimelineBound`). Which bound a
collective gets depends on what the node fixes about its groups (see
:mod:`aoizora.rank.bound` for why each holds):

- a leaf: every chip is known -- the collective's own bound, all groups
  together (links two groups share count once for both);
- a *set-decided* collective (whole-fiber groups under ``auto``): the least,
  over the sub-axis sets its span axes may still take, of its own bound with
  all groups on that set (:mod:`aoizora.rank.set_bounds`: its flows depend on
  the set only), exact once each span axis has a set;
- a *span-decided* one (one pattern repeated off its span: permutes, sub-groups)
  whose span axes are all placed: its own bound with every unit on the slice
  (exact: the other axes only permute which unit lands where);
- the groups span placed axes only: the largest bound of one group alone,
  placed at a translate of its final chips;
- the groups span one axis whose set of sub-axes is fixed but not its order:
  the named algorithms' contention-free time with every flow at least the
  smallest step of those sub-axes long;
- otherwise: the same with one hop (an all-to-all: with the blocks one first
  link must carry, :func:`~aoizora.rank.bound.ideal_lower_bound`).

At a node that fixes its next axis's sub-axis set but not its order, the
collectives that axis and placed ones decide are bounded child by child
(:mod:`aoizora.rank.pending`), and the node's bound is the least over its
children of the timeline with each child's bounds together: no one order need
give every collective its best (a compact Ulysses group and a 1-hop ring).

On a slice whose chips host several devices (tpu7x) the last two cases bound
by 0: a group not yet placed may still land on the two cores of one chip,
where its flows use no link.

>>> from sim.topology import load_slice
>>> from aoizora.hlo.graph import graph_from_text
>>> from aoizora.placement.space import PlacementSpace
>>> g = graph_from_text('''HloModule m, num_partitions=4
... ENTRY %e (p: f32[262144]) -> f32[1048576] {
...   %p = f32[262144]{0} parameter(0)
...   ROOT %ag = f32[1048576] all-gather(%p), replica_groups={{0,1,2,3}}, dimensions={0}
... }''')
>>> s = load_slice("v5e:2x2")
>>> space = PlacementSpace((4,), s)
>>> nb = NodeBounds(g, space)
>>> round(nb.bound(space.roots()[0]) * 1e6, 2)  # any 4 chips: 3 steps of 1 hop + 0.5 MiB
37.95
>>> sorted({round(nb.bound(leaf) * 1e6, 2) for leaf in space.leaves()})  # the simulator
... # walks any 2x2 group round its physical ring, so every order is bounded alike
[37.95]
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.hlo.nodes import Collective, CollectiveGraph
from aoizora.placement.device_order import Coord
from aoizora.placement.family import SubAxis
from aoizora.placement.space import Node, PlacementSpace
from aoizora.rank.bound import (
    LinkCapacities,
    TimelineBound,
    collective_lower_bound,
    ideal_lower_bound,
    translated_coords,
)
from aoizora.rank.pending import (
    PendingCollective,
    PendingOrders,
    PendingPermute,
    PendingValues,
    pareto_front,
)
from aoizora.rank.set_bounds import (
    SetBounds,
    all_sub_axes,
    candidate_sets,
    is_order_free,
    is_set_decided,
    is_span_decided,
)
from aoizora.replay import sim_kind

__all__ = ["CollectiveShape", "NodeBounds", "collective_shapes", "traffic_order"]


@dataclass(frozen=True)
class CollectiveShape:
    """Where one collective's traffic goes in mesh terms (independent of placement).

    ``span``: the mesh axes along which a group's members (or a pair's ends)
    differ. ``units``: the replica groups, or the permute's pairs split by
    where they sit on the axes they do not span -- the pieces whose chips a
    node fixes up to a translation once ``span`` is placed.
    """

    collective: Collective
    kind: str
    span: frozenset[int]
    units: tuple[Collective, ...]
    group_size: int


def _positions(device: int, shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(device % size)
        device //= size
    return tuple(reversed(out))


def collective_shapes(
    graph: CollectiveGraph, mesh_shape: Sequence[int]
) -> tuple[CollectiveShape, ...]:
    """The :class:`CollectiveShape` of every collective of ``graph`` on ``mesh_shape``."""
    out = []
    for c in graph.collectives:
        ends = c.pairs if c.pairs else [(g[0], m) for g in c.groups for m in g]
        span: set[int] = set()
        for a, b in ends:
            pa, pb = _positions(a, mesh_shape), _positions(b, mesh_shape)
            span |= {k for k, (x, y) in enumerate(zip(pa, pb, strict=True)) if x != y}
        if c.pairs:
            by_rest: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for a, b in c.pairs:
                pos = _positions(a, mesh_shape)
                rest = tuple(p for k, p in enumerate(pos) if k not in span)
                by_rest.setdefault(rest, []).append((a, b))
            units = tuple(dataclasses.replace(c, pairs=tuple(p)) for p in by_rest.values())
            size = 2
        else:
            units = tuple(dataclasses.replace(c, groups=(g,)) for g in c.groups)
            size = max((len(g) for g in c.groups), default=1)
        out.append(CollectiveShape(c, sim_kind(c), frozenset(span), units, size))
    return tuple(out)


def _unit_ends(sh: CollectiveShape) -> np.ndarray | None:
    """Every unit's logical ends (units x ends), or None when units differ in size."""
    ends = [
        [d for p in u.pairs for d in p] if u.pairs else [d for g in u.groups for d in g]
        for u in sh.units
    ]
    if len({len(e) for e in ends}) != 1:
        return None
    return np.asarray(ends, dtype=np.int64)


def traffic_order(shapes: Sequence[CollectiveShape], mesh_shape: Sequence[int]) -> tuple[int, ...]:
    """Mesh axes by the bytes their collectives move (most first): the search's axis order."""
    weight = [0.0] * len(mesh_shape)
    for sh in shapes:
        for axis in sh.span:
            weight[axis] += sh.collective.buffer_bytes * sh.collective.count
    return tuple(sorted(range(len(mesh_shape)), key=lambda a: (-weight[a], a)))


class NodeBounds:
    """Lower bounds on Q2 for the nodes of one sharding's placement tree."""

    def __init__(
        self,
        graph: CollectiveGraph,
        space: PlacementSpace,
        *,
        algorithm: str | Mapping[str, str] | None = None,
    ) -> None:
        self.graph = graph
        self.space = space
        self.slice = space.slice
        self.algorithm = algorithm
        self.net = LinkCapacities(space.slice)
        self.timeline = TimelineBound(graph, space.slice)
        self.shapes = collective_shapes(graph, space.shape)
        self._shape_of = {sh.collective.id: sh for sh in self.shapes}
        self._plans: dict[tuple[object, ...], float] = {}
        self._ideal: dict[tuple[object, ...], float] = {}
        self._by_footprint: dict[tuple[int, bytes, int], float] = {}
        self._unit_ends = {sh.collective.id: _unit_ends(sh) for sh in self.shapes}
        self._wrap = np.asarray(self.slice.wraparound, dtype=bool)
        self._sides = np.asarray(self.slice.shape, dtype=np.int64)
        self.sets = SetBounds(space, self.net, algorithm=algorithm)
        # Collectives whose flows the sub-axis set of their span decides
        # (aoizora.rank.set_bounds), keyed by what else decides their bound.
        self._set_key: dict[int, tuple[object, ...]] = {
            sh.collective.id: (sh.kind, sh.collective.buffer_bytes, sh.span)
            for sh in self.shapes
            if sh.group_size > 1
            and is_set_decided(
                sh.kind, sh.collective.groups, sh.collective.pairs, sh.span, space.shape,
                algorithm,
            )
        }  # fmt: skip
        # Collectives repeating one pattern off their span: exact once the span is placed.
        signatures: dict[tuple[object, ...], int] = {}
        self._span_key: dict[int, tuple[object, ...]] = {}
        for sh in self.shapes:
            c = sh.collective
            if (
                sh.group_size > 1
                and c.id not in self._set_key
                and is_span_decided(c.groups, c.pairs, sh.span, space.shape)
            ):
                sig = signatures.setdefault((sh.kind, c.groups, c.pairs), len(signatures))
                self._span_key[c.id] = (sh.kind, c.buffer_bytes, sig)
        # Of those, the order-free ones with units of one size, and the permutes: bounded
        # at every order of a pending axis they span (aoizora.rank.pending).
        self.pending = PendingOrders(space, self.sets, self.net)
        self._pending = {
            cid: PendingCollective(sh.collective, self._span_key[cid], sh.span, ends)
            for sh in self.shapes
            if (cid := sh.collective.id) in self._span_key
            and (ends := self._unit_ends[cid]) is not None
            and is_order_free(sh.kind, sh.collective.pairs, algorithm)
        }
        self._permutes: dict[tuple[object, ...], PendingPermute] = {}
        for sh in self.shapes:
            key = self._span_key.get(sh.collective.id)
            if key is None or sh.kind != "collective-permute" or key in self._permutes:
                continue
            copies = {1} | {len(m) for f, m in self.timeline.twins.items()
                            if self._span_key.get(f) == key}  # fmt: skip
            self._permutes[key] = PendingPermute(sh.collective, key, sh.span, tuple(sorted(copies)))
        self.timelines_over_children = 0  # what bound() ran beyond one timeline (work)

    def bound(self, node: Node) -> float:
        """No placement under ``node`` replays faster than this."""
        grid = self.space.coords(node)
        rows = [tuple(r) for r in grid.tolist()]
        if self.space.is_leaf(node):
            return self.leaf_bound(rows)
        placed = self.space.placed_axes(node)
        pending = self.space.pending_axis(node)
        shared_chips = self.slice.chip.devices_per_chip > 1
        step = 1 if shared_chips else self._smallest_step(node)
        durations: dict[int, float] = {}
        by_set: dict[tuple[object, ...], float] = {}
        every = all_sub_axes(node)
        chosen = frozenset(c.axis for c in node.chosen)
        values = self._pending_values(node, pending, chosen)
        least = {} if values is None else values.least()
        for sh in self.shapes:
            key = self._set_key.get(sh.collective.id)
            span_key = self._span_key.get(sh.collective.id)
            if sh.group_size < 2:
                durations[sh.collective.id] = 0.0
            elif key is not None:
                got = by_set.get(key)
                if got is None:
                    got = by_set[key] = self._set_bound(sh, key, node, every)
                durations[sh.collective.id] = got
            elif span_key is not None and sh.span <= chosen:
                durations[sh.collective.id] = self.sets.placed_bound(
                    sh.collective, span_key, node, sh.span
                )
            elif span_key in least:
                durations[sh.collective.id] = max(
                    least[span_key], self._unplaced_bound(sh, pending, step)
                )
            elif sh.span <= placed:
                durations[sh.collective.id] = self._units_bound(sh, grid, rows)
            else:
                durations[sh.collective.id] = self._unplaced_bound(sh, pending, step)
        joint = {}
        for first, members in self.timeline.twins.items():
            sh = self._shape_of[first]
            if sh.span <= placed and self._unit_ends[first] is not None:
                twin = self._units_bound(sh, grid, rows, copies=len(members))
            else:
                twin = self._unplaced_bound(sh, pending, step, copies=len(members))
            joint[first] = max(durations[first], twin)
        if values is None:
            return self.timeline.step_time(durations, joint)
        return self._over_children(durations, joint, values)

    def _pending_values(
        self, node: Node, pending: int | None, chosen: frozenset[int]
    ) -> PendingValues | None:
        """Every child's bound of each span-decided collective whose span is ``node``'s
        pending axis plus placed axes (:mod:`aoizora.rank.pending`); None without one."""
        if pending is None:
            return None
        free = {
            w.key: w
            for w in self._pending.values()
            if pending in w.span and w.span <= chosen | {pending}
        }
        perms = [
            p for p in self._permutes.values() if pending in p.span and p.span <= chosen | {pending}
        ]
        return self.pending.values(node, list(free.values()), perms)

    def _over_children(
        self, durations: dict[int, float], joint: dict[int, float], values: PendingValues
    ) -> float:
        """The least over ``node``'s children of the timeline with each child's bounds of
        the pending-decided collectives (at least the node's own, ``durations`` and
        ``joint``): every leaf lies below one child, and no one child need give every
        collective its least. Timelines only grow with durations, so only children
        whose bounds no other child's are all below (the Pareto front) are run."""
        columns: list[tuple[bool, int, np.ndarray]] = []  # (a twin group's?, id, values)
        for sh in self.shapes:
            key = self._span_key.get(sh.collective.id)
            if key is not None and (got := values.of(key)) is not None:
                columns.append((False, sh.collective.id, got))
        for first, members in self.timeline.twins.items():
            key = self._span_key.get(first)
            if key is not None and (got := values.of(key, copies=len(members))) is not None:
                columns.append((True, first, got))
        if not columns or values.children == 0:
            return self.timeline.step_time(durations, joint)
        floor = np.asarray([(joint if twin else durations)[i] for twin, i, _ in columns])
        table = np.maximum(np.stack([v for _, _, v in columns], axis=1), floor)
        best = math.inf
        for row in pareto_front(table):
            d, j = dict(durations), dict(joint)
            for (twin, i, _), value in zip(columns, row.tolist(), strict=True):
                (j if twin else d)[i] = value
            best = min(best, self.timeline.step_time(d, j))
            self.timelines_over_children += 1
        return best

    def _unplaced_bound(
        self, sh: CollectiveShape, pending: int | None, step: int, *, copies: int = 1
    ) -> float:
        """A collective over an axis not placed yet (``copies`` twins of it): one hop, or
        the pending axis's smallest step when it spans that axis alone; 0 where it may
        stay on one chip."""
        if self.slice.chip.devices_per_chip > 1:
            return 0.0  # may yet be on-chip, 0-hop
        return self._ideal_bound(sh, step if sh.span == {pending} else 1, copies=copies)

    def _set_bound(
        self, sh: CollectiveShape, key: tuple[object, ...], node: Node, every: frozenset[SubAxis]
    ) -> float:
        """The least bound of a set-decided collective over the sub-axis sets its span
        may still take under ``node`` (:mod:`aoizora.rank.set_bounds`)."""
        sets = candidate_sets(self.space, node, sh.span)
        return min(
            (self.sets.bound(sh.collective, key, sh.span, u, every) for u in sets),
            default=0.0,  # no completion: nothing to bound (such nodes are not generated)
        )

    def leaf_bound(self, rows: Sequence[Coord]) -> float:
        """The bound of one complete placement (logical id ``i`` on chip ``rows[i]``)."""
        durations = {
            sh.collective.id: self._plan(sh.collective, rows, sh) if sh.group_size > 1 else 0.0
            for sh in self.shapes
        }
        joint = {
            first: self._plan(self._shape_of[first].collective, rows, self._shape_of[first],
                              copies=len(members))
            if self._shape_of[first].group_size > 1 else 0.0
            for first, members in self.timeline.twins.items()
        }  # fmt: skip
        return self.timeline.step_time(durations, joint)

    def _units_bound(
        self, sh: CollectiveShape, grid: np.ndarray, rows: Sequence[Coord], *, copies: int = 1
    ) -> float:
        """The largest bound of one unit of ``sh`` alone (``copies`` twins of it), over its
        units.

        Units at a translate of one another get one bound: their footprints are
        shifted to a common origin (as :func:`translated_coords` does, for all
        units at once) and each distinct one is bounded once.
        """
        ends = self._unit_ends[sh.collective.id]
        if ends is None:
            return max(self._plan(u, rows, sh) for u in sh.units)
        pts = grid[ends]  # units x ends x dims
        shift = np.where(self._wrap, pts[:, :1, :], pts.min(axis=1, keepdims=True))
        moved = pts - shift
        moved = np.where(self._wrap, moved % self._sides, moved).reshape(len(ends), -1)
        best = 0.0
        seen: set[bytes] = set()
        cid = sh.collective.id
        for u, row in enumerate(moved):
            key = row.tobytes()
            if key in seen:
                continue
            seen.add(key)
            got = self._by_footprint.get((cid, key, copies))
            if got is None:
                got = self._by_footprint[(cid, key, copies)] = self._plan(
                    sh.units[u], rows, sh, copies=copies
                )
            best = max(best, got)
        return best

    def _plan(
        self, unit: Collective, rows: Sequence[Coord], sh: CollectiveShape, *, copies: int = 1
    ) -> float:
        ends = (
            [d for p in unit.pairs for d in p]
            if unit.pairs
            else [d for g in unit.groups for d in g]
        )
        placed = translated_coords([rows[d] for d in ends], self.slice)
        sizes = tuple(len(g) for g in unit.groups)
        key = (sh.kind, unit.buffer_bytes, sizes, len(unit.pairs), placed, copies)
        got = self._plans.get(key)
        if got is None:
            local = dict(zip(ends, placed, strict=True))
            coords = [local.get(i, rows[i]) for i in range(len(rows))]
            got = self._plans[key] = collective_lower_bound(
                unit, coords, self.net, algorithm=self.algorithm, copies=copies
            )
        return got

    def _ideal_bound(self, sh: CollectiveShape, hops: int, *, copies: int = 1) -> float:
        key = (sh.kind, sh.group_size, sh.collective.buffer_bytes, hops, copies)
        got = self._ideal.get(key)
        if got is None:
            got = self._ideal[key] = ideal_lower_bound(
                sh.kind, sh.group_size, float(sh.collective.buffer_bytes), hops=hops,
                net=self.net, copies=copies,
            )  # fmt: skip
        return got

    def _smallest_step(self, node: Node) -> int:
        """Fewest hops between two chips of the pending axis's sub-axis lattice."""
        if node.pending is None:
            return 1
        steps = []
        for sub in node.pending:
            n = self.slice.shape[sub.dim]
            wrap = self.slice.wraparound[sub.dim]
            steps.append(min(sub.stride, n - sub.stride) if wrap else sub.stride)
        return max(1, min(steps, default=1))
