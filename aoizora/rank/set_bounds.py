"""Collectives whose flows only the *set* of sub-axes of their mesh axes decides.

A node of the placement tree (:mod:`aoizora.placement.space`) fixes, axis by
axis, first which sub-axes a mesh axis takes, then their order and traversal.
For most collectives of a compiled program the order does not matter at all:

1. **Every group is a whole fiber** of the axes it spans (``span``): its members
   are every device that agrees with it off ``span`` -- ``n = prod(shape[a] for a
   in span)`` distinct devices -- and the groups cover every device. Under any
   leaf whose span axes take the sub-axes ``U`` (their union), a fiber's devices
   sit on ``lattice(U) + o``, where ``lattice(U)`` is every combination of the
   digits of ``U`` (each sub-axis adds ``digit x stride`` along its dimension) and
   ``o`` depends only on the device's position off ``span``; those positions run
   over every digit combination of the other sub-axes ``C`` exactly once
   (:meth:`~aoizora.placement.space.PlacementSpace.coords`: a device's coordinate
   is the sum of its axes' offsets, and an axis's offsets are a bijection onto the
   lattice of its sub-axes whatever its order and traversal). So the collective's
   groups, as *sets of chips*, are ``{lattice(U) + o : o in lattice(C)}``: the
   same under every leaf with that ``U``.
2. **Its flows depend only on those sets**: the simulator's ``auto`` algorithm
   (the default for every kind) walks a ring group in the order
   :func:`sim.layout.group_layout` derives from the member *coordinates* (sorted
   along one axis, a Hamiltonian cycle or folded snake of a box -- every such
   set is a box), never in the replica group's order, and a ``pairwise``
   all-to-all sends between every ordered pair of members. Permutes (pairs) and
   explicitly named ring algorithms follow the logical order and are excluded.

Then the collective's lower bound (:func:`~aoizora.rank.bound.collective_lower_bound`,
all groups together: their shared links count) is a function of ``U`` alone,
equal at every leaf with that ``U``. At a node, ``U`` is the sub-axes its span
axes already took (a pending axis's set included), plus -- for span axes not yet
given a set -- some subset of the free sub-axes whose sizes multiply to theirs.
The least bound over those candidate subsets holds for every leaf below
(:func:`candidate_sets`); with no axis missing it is the leaf's own bound.

**Span-decided** collectives (:func:`is_span_decided`: permutes, sub-groups of an
axis such as a Ulysses all-to-all over 4 of a 64-way axis) repeat one pattern of
span positions at every position off ``span``. Once every span axis is placed
(order and traversal too), a device's chip is its span axes' offset plus a point
of ``lattice(C)`` (``C``: every other sub-axis) that its off-span position picks
one-to-one, so the flows -- all units together, their shared links included --
are the same under every completion: :meth:`SetBounds.placed_bound` is the
leaf's own bound, exact where the old one took the largest unit alone.

Both give, child by child, the bounds over a pending axis's orders
(:mod:`aoizora.rank.pending`).

The tests compare both with every leaf under every node of small trees, and
with replays under random nodes of 8x8 and 16x16 trees
(``tests/aoizora/test_set_bounds.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from aoizora.hlo.nodes import Collective
from aoizora.placement.family import SubAxis
from aoizora.placement.space import AxisChoice, Node, PlacementSpace, subsets_with_product
from aoizora.rank.bound import LinkCapacities, collective_lower_bound
from aoizora.replay import algorithm_for

__all__ = [
    "SetBounds",
    "all_sub_axes",
    "candidate_sets",
    "fixed_chips",
    "is_order_free",
    "is_set_decided",
    "is_span_decided",
    "plain",
]

_RING_KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")

SubSet = frozenset[SubAxis]


def plain(sub: SubAxis) -> SubAxis:
    """The sub-axis without its direction: a reversed one covers the same coordinates."""
    return dataclasses.replace(sub, reversed=False) if sub.reversed else sub


def is_set_decided(
    kind: str,
    groups: Sequence[Sequence[int]],
    pairs: Sequence[tuple[int, int]],
    span: frozenset[int],
    mesh_shape: Sequence[int],
    algorithm: str | Mapping[str, str] | None,
) -> bool:
    """Whether the collective's flows depend only on its span axes' sub-axis set (see above)."""
    if not span or not is_order_free(kind, pairs, algorithm):
        return False
    n = math.prod(mesh_shape[a] for a in span)
    devices = math.prod(mesh_shape)
    if len(groups) * n != devices or any(len(g) != n for g in groups):
        return False
    members = [d for g in groups for d in g]
    return len(set(members)) == devices  # distinct: every fiber exactly once


def is_order_free(
    kind: str, pairs: Sequence[tuple[int, int]], algorithm: str | Mapping[str, str] | None
) -> bool:
    """Whether a collective's flows depend on its groups' member *sets* only (see 2.
    above): a ring kind under ``auto``; a named ring walks the replica group's order,
    and a permute's pairs are ordered."""
    return not pairs and kind in _RING_KINDS and algorithm_for(algorithm, kind) in (None, "auto")


def candidate_sets(space: PlacementSpace, node: Node, span: frozenset[int]) -> list[SubSet]:
    """Every sub-axis set ``U`` the axes ``span`` may hold together at a leaf under ``node``.

    Exactly one when every span axis is placed or pending; otherwise the known part
    with each subset of the still-unclaimed free sub-axes of the right size (a
    superset of what completes, which keeps the least bound over it a bound).
    """
    chosen = {c.axis: c.sub_axes for c in node.chosen}
    pending_axis = space.pending_axis(node)
    known: list[SubAxis] = []
    missing = 1
    for axis in sorted(span):
        if axis in chosen:
            known.extend(chosen[axis])
        elif axis == pending_axis and node.pending is not None:
            known.extend(node.pending)
        else:
            missing *= space.shape[axis]
    base = frozenset(plain(s) for s in known)
    if missing == 1:
        return [base]
    claimed = set(node.pending or ())
    free = [s for s in node.free if s not in claimed]
    return [base | frozenset(plain(s) for s in subset)
            for subset in subsets_with_product(free, missing)]  # fmt: skip


def _points_key(points: np.ndarray) -> bytes:
    """The point set (rows, in any order) as bytes: equal sets give equal keys."""
    return np.unique(points, axis=0).tobytes() + bytes([points.shape[1]])


def _fixed_order(sub: SubAxis) -> tuple[int, int, int]:
    """Any fixed enumeration of a lattice will do (the flows do not depend on it)."""
    return (sub.dim, sub.stride, sub.size)


def _lattice(subs: Sequence[SubAxis], num_dims: int) -> np.ndarray:
    """Every digit combination of ``subs`` as device-grid coordinates (points x dims)."""
    points = np.zeros((1, num_dims), dtype=np.int64)
    for sub in subs:
        step = np.zeros((sub.size, num_dims), dtype=np.int64)
        step[:, sub.dim] = np.arange(sub.size) * sub.stride
        points = (points[:, None, :] + step[None, :, :]).reshape(-1, num_dims)
    return points


class SetBounds:
    """The bound of a set-decided collective for each sub-axis set, cached per set."""

    def __init__(
        self,
        space: PlacementSpace,
        net: LinkCapacities,
        *,
        algorithm: str | Mapping[str, str] | None = None,
    ) -> None:
        self.space = space
        self.net = net
        self.algorithm = algorithm
        self._cache: dict[tuple[object, ...], float] = {}
        positions = np.indices(space.shape).reshape(len(space.shape), -1).T
        self._positions = positions  # devices x mesh axes, row-major (logical id order)

    def bound(
        self,
        collective: Collective,
        key: tuple[object, ...],
        span: frozenset[int],
        subs: SubSet,
        every: SubSet,
    ) -> float:
        """The collective's bound when its span axes hold ``subs`` of the sub-axes ``every``.

        ``key`` names what besides the set decides the bound (kind, bytes, span): two
        collectives with one key and one set get one bound.
        """
        dims = self.space.num_dims
        within = _lattice(sorted(subs, key=_fixed_order), dims)
        across = _lattice(sorted(every - subs, key=_fixed_order), dims)
        # Keyed by the two point sets, not the sub-axes: every split of the slice whose
        # set covers the same chips (e.g. all of them) shares one bound.
        full = (*key, _points_key(within), _points_key(across))
        got = self._cache.get(full)
        if got is None:
            rows = self._rows(span, within, across)
            got = collective_lower_bound(collective, rows, self.net, algorithm=self.algorithm)
            self._cache[full] = got
        return got

    def placed_bound(
        self, collective: Collective, key: tuple[object, ...], node: Node, span: frozenset[int]
    ) -> float:
        """A span-decided collective's bound once every ``span`` axis is placed at ``node``."""
        chosen = tuple((c.axis, c.sub_axes, c.traversal) for c in node.chosen if c.axis in span)
        taken = frozenset(plain(s) for _, subs, _ in chosen for s in subs)
        outside = all_sub_axes(node) - taken
        full = ("placed", *key, chosen, outside)
        got = self._cache.get(full)
        if got is None:
            space = self.space
            mine = [c for c in node.chosen if c.axis in span]
            chips = fixed_chips(space, mine, span, outside)[:, : len(space.slice.shape)]
            rows = [tuple(r) for r in chips.tolist()]
            got = collective_lower_bound(collective, rows, self.net, algorithm=self.algorithm)
            self._cache[full] = got
        return got

    def _rows(
        self, span: frozenset[int], within: np.ndarray, across: np.ndarray
    ) -> list[tuple[int, ...]]:
        """Chip coordinates of a device order with ``span``'s fibers on ``within + o``.

        Which point of its fiber's lattice a device gets is arbitrary (the flows do
        not depend on it); fibers take the points ``o`` of the other sub-axes' lattice.
        """
        space = self.space
        axes = sorted(span)
        rest = [a for a in range(len(space.shape)) if a not in span]
        fiber = _mixed_radix(self._positions, axes, space.shape)
        where = _mixed_radix(self._positions, rest, space.shape)
        coords = within[fiber] + across[where]
        chips = coords[:, : len(space.slice.shape)]
        return [tuple(r) for r in chips.tolist()]


def fixed_chips(
    space: PlacementSpace, chosen: Sequence[AxisChoice], span: frozenset[int], outside: SubSet
) -> np.ndarray:
    """Device-grid coordinates (devices x grid dims) with the ``span`` axes placed as
    ``chosen`` and every other axis on the lattice of the sub-axes ``outside``.

    A device's off-span position picks its point of that lattice one-to-one
    (mixed radix, any fixed enumeration): once ``span`` is placed, a span-decided
    collective's flows are the same whichever point (the module docstring).
    """
    positions = np.indices(space.shape).reshape(len(space.shape), -1).T
    rest = [a for a in range(len(space.shape)) if a not in span]
    where = _mixed_radix(positions, rest, space.shape)
    across = _lattice(sorted(outside, key=_fixed_order), space.num_dims)
    return space.device_coords_of(chosen) + across[where]


def _mixed_radix(positions: np.ndarray, axes: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    out = np.zeros(positions.shape[0], dtype=np.int64)
    for a in axes:
        out = out * shape[a] + positions[:, a]
    return out


def all_sub_axes(node: Node) -> SubSet:
    """Every sub-axis of ``node``'s split (free or taken), without directions."""
    taken = itertools.chain.from_iterable(c.sub_axes for c in node.chosen)
    return frozenset(plain(s) for s in itertools.chain(node.free, taken))


def is_span_decided(
    groups: Sequence[Sequence[int]],
    pairs: Sequence[tuple[int, int]],
    span: frozenset[int],
    mesh_shape: Sequence[int],
) -> bool:
    """Whether the collective repeats one pattern over every position off ``span``.

    Its groups (or pairs), written as (position off ``span``, positions on ``span``),
    must hold the same span patterns at every off-span position, and every such
    position must occur. Then, once the ``span`` axes are placed (orders included),
    its flows are ``{pattern's chips + o : o in lattice(C)}`` with ``C`` the sub-axes
    the other axes take -- whatever their order (see the module docstring, 1.).
    """
    if not span:
        return False
    shape = tuple(mesh_shape)
    rest_axes = [a for a in range(len(shape)) if a not in span]
    positions = np.indices(shape).reshape(len(shape), -1).T
    span_axes = sorted(span)

    def split(d: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        p = positions[d]
        return tuple(int(p[a]) for a in rest_axes), tuple(int(p[a]) for a in span_axes)

    patterns: dict[tuple[int, ...], set[tuple[tuple[int, ...], ...]]] = {}
    items = [tuple(p) for p in pairs] if pairs else [tuple(g) for g in groups]
    for item in items:
        parts = [split(d) for d in item]
        rest = {r for r, _ in parts}
        if len(rest) != 1:
            return False
        # In order: a named ring algorithm walks a group as listed, so the same set
        # listed otherwise at another position would be another pattern.
        key = tuple(s for _, s in parts)
        patterns.setdefault(rest.pop(), set()).add(key)
    expected = math.prod(shape[a] for a in rest_axes)
    if len(patterns) != expected:
        return False
    first = next(iter(patterns.values()))
    return all(p == first for p in patterns.values())
