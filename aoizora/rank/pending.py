"""Bounds over the orders of a pending axis: every child of a node at once.

A search node may fix the *set* of sub-axes its next mesh axis ``P`` takes but not
their order (:mod:`aoizora.placement.space`). Each child places ``P`` one way, and
every leaf below the node lies below one child; so for any collective whose span is
``P`` plus placed axes, its *placed* bound at a child
(:meth:`~aoizora.rank.set_bounds.SetBounds.placed_bound`, exact there) bounds it
at every leaf below that child. :meth:`PendingOrders.values` gives those bounds
child by child, without splitting the node:

- **order-free** collectives (a ring kind under ``auto``, e.g. a pairwise
  all-to-all: its flows depend on its member sets only) fall into a few
  *patterns* -- the member sets of its units with only its span placed -- each
  bounded once and cached (a Ulysses all-to-all over 4 of a 64-way axis: 15-35
  patterns for 1,802 children);
- **collective-permutes** follow the whole order (about one pattern a child), so
  every child's is bounded in one numpy pass
  (:func:`aoizora.rank.permutes.permute_lower_bounds`), once per number of twin
  copies asked for.

The least over the children of one collective's values bounds the node (what
:class:`~aoizora.rank.bounds_of_nodes.NodeBounds` used alone before); the least
over the children of a *timeline* with each child's values together bounds it
tighter, because no single order gives every collective its best (on v6e:16x16 a
compact Ulysses group leaves the ring permutes four hops apart). ``NodeBounds``
does the latter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from aoizora.hlo.nodes import Collective
from aoizora.placement.space import Node, PlacementSpace
from aoizora.rank.bound import LinkCapacities
from aoizora.rank.permutes import permute_lower_bounds
from aoizora.rank.set_bounds import SetBounds, all_sub_axes, fixed_chips, plain

__all__ = [
    "MAX_PENDING_ORDERS",
    "MAX_PENDING_PATTERNS",
    "PendingCollective",
    "PendingOrders",
    "PendingPermute",
    "PendingValues",
    "pareto_front",
]

# The most orders (children) of a pending sub-axis set that PendingOrders.values visits
# for one node: a set of 6 sub-axes has 1,802 (720 orders, snake and ring walks), 7 about
# 13,000 (~1 s here: the children are built, and a permute bounded each, in numpy).
MAX_PENDING_ORDERS = 16_384
# The most distinct patterns it bounds for one order-free collective and node: a pairwise
# all-to-all over part of a 6-sub-axis set has 15-35, of a 7-sub-axis set up to ~100.
MAX_PENDING_PATTERNS = 256
_CHUNK = 1_024  # children whose permute chips are built at once (memory)


@dataclass(frozen=True)
class PendingCollective:
    """A span-decided, order-free collective: ``key`` names what besides its chips
    decides its bound, ``ends`` its units' logical members (units x members)."""

    collective: Collective
    key: tuple[object, ...]
    span: frozenset[int]
    ends: np.ndarray = field(compare=False)


@dataclass(frozen=True)
class PendingPermute:
    """A span-decided collective-permute, bounded at each child for every count of
    identical copies in ``copies`` (1, and the size of each twin group it heads)."""

    collective: Collective
    key: tuple[object, ...]
    span: frozenset[int]
    copies: tuple[int, ...]


@dataclass(frozen=True)
class PendingValues:
    """Each child's bounds (one entry a child, in :meth:`PlacementSpace.children`
    order): ``free[key]`` of an order-free collective, ``permutes[(key, copies)]``."""

    children: int
    free: dict[tuple[object, ...], np.ndarray]
    permutes: dict[tuple[tuple[object, ...], int], np.ndarray]

    def of(self, key: tuple[object, ...], *, copies: int = 1) -> np.ndarray | None:
        """Each child's bound of the collective(s) ``key`` names (``copies`` of a
        permute), or None when it was not asked for."""
        if copies == 1 and key in self.free:
            return self.free[key]
        return self.permutes.get((key, copies))

    def least(self) -> dict[tuple[object, ...], float]:
        """Each collective's least bound over the children (a permute's, one copy)."""
        out = {k: float(v.min()) for k, v in self.free.items() if v.size}
        out.update({k: float(v.min()) for (k, c), v in self.permutes.items() if c == 1 and v.size})
        return out


class PendingOrders:
    """:class:`PendingValues` of the nodes of one placement tree (patterns cached)."""

    def __init__(self, space: PlacementSpace, sets: SetBounds, net: LinkCapacities) -> None:
        self.space = space
        self.sets = sets
        self.net = net
        self._cache: dict[tuple[object, ...], float] = {}
        # What values() has done (the search charges it to its work budget).
        self.orders_visited = 0
        self.patterns_bounded = 0
        self.permutes_bounded = 0  # child x pair, summed
        self._positions = np.indices(space.shape).reshape(len(space.shape), -1).T

    def values(
        self,
        node: Node,
        free: Sequence[PendingCollective],
        permutes: Sequence[PendingPermute] = (),
    ) -> PendingValues | None:
        """Every child's bound of each collective asked for; None when the set has more
        than :data:`MAX_PENDING_ORDERS` orders or an order-free collective more than
        :data:`MAX_PENDING_PATTERNS` patterns."""
        space = self.space
        if (not free and not permutes) or space.order_count(node) > MAX_PENDING_ORDERS:
            return None
        strides = np.asarray(space.id_strides[: space.num_dims], dtype=np.int64)
        pending = space.axis_order[len(node.chosen)]
        units = [self._units(node, w, strides, pending) for w in free]
        patterns: list[dict[frozenset[tuple[int, ...]], int]] = [{} for _ in free]
        firsts: list[list[Node]] = [[] for _ in free]  # a child of each pattern
        which: list[list[int]] = [[] for _ in free]  # each child's pattern
        offsets: list[np.ndarray] = []
        for child in space.children(node):
            self.orders_visited += 1
            placed = child.chosen[-1].offsets
            offsets.append(placed)
            along = placed @ strides[: placed.shape[1]]  # the pending axis's grid ids
            for (fixed, where), found, first, mine in zip(
                units, patterns, firsts, which, strict=True
            ):
                ids = np.sort(fixed + along[where], axis=1)  # units x members
                k = found.setdefault(frozenset(map(tuple, ids.tolist())), len(found))
                if k == len(first):
                    if k == MAX_PENDING_PATTERNS:
                        return None
                    first.append(child)
                mine.append(k)
        out_free = {
            w.key: self._pattern_values(node, w, list(found), first, mine)
            for w, found, first, mine in zip(free, patterns, firsts, which, strict=True)
        }
        stacked = np.stack(offsets) if offsets else np.zeros((0, 0, 0), dtype=np.int64)
        out_perm: dict[tuple[tuple[object, ...], int], np.ndarray] = {}
        for p in permutes:
            got = self._permute_values(node, p, stacked, pending)
            for k, c in enumerate(p.copies):
                out_perm[(p.key, c)] = got[:, k]
        return PendingValues(len(offsets), out_free, out_perm)

    def _units(
        self, node: Node, w: PendingCollective, strides: np.ndarray, pending: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each member's device-grid id: what the placed span axes add (fixed at this
        node) plus what the pending axis adds at its position; units repeating a (fixed
        part, position) pattern off the span are taken once."""
        placed = self.space.device_coords_of([c for c in node.chosen if c.axis in w.span])
        fixed, where = (placed @ strides)[w.ends], self._positions[w.ends, pending]
        both = np.unique(np.concatenate([fixed, where], axis=1), axis=0)
        return both[:, : w.ends.shape[1]], both[:, w.ends.shape[1] :]

    def _pattern_values(
        self,
        node: Node,
        w: PendingCollective,
        patterns: list[frozenset[tuple[int, ...]]],
        firsts: list[Node],
        mine: list[int],
    ) -> np.ndarray:
        """Each child's placed bound of ``w``: one bound a pattern, taken at its first
        child (cached across nodes with the same other sub-axes)."""
        every = all_sub_axes(node)
        taken = frozenset(plain(s) for c in firsts[0].chosen
                          if c.axis in w.span for s in c.sub_axes)  # fmt: skip
        per_pattern = np.empty(len(patterns), dtype=np.float64)
        for k, (pattern, child) in enumerate(zip(patterns, firsts, strict=True)):
            full = ("pattern", *w.key, pattern, every - taken)
            got = self._cache.get(full)
            if got is None:
                got = self._cache[full] = self.sets.placed_bound(w.collective, w.key, child, w.span)
                self.patterns_bounded += 1
            per_pattern[k] = got
        return per_pattern[np.asarray(mine, dtype=np.int64)]

    def _permute_values(
        self, node: Node, p: PendingPermute, offsets: np.ndarray, pending: int
    ) -> np.ndarray:
        """Each child's placed bound of permute ``p`` (children x copies), in numpy:
        a device's chip is the node's fixed part (other span axes, other sub-axes'
        lattice) plus the pending axis's offset at its position."""
        space = self.space
        chosen = [c for c in node.chosen if c.axis in p.span]
        taken = frozenset(plain(s) for c in chosen for s in c.sub_axes) | frozenset(
            plain(s) for s in node.pending or ()
        )
        fixed = fixed_chips(space, chosen, p.span, all_sub_axes(node) - taken)
        a = np.asarray([s for s, _ in p.collective.pairs], dtype=np.int64)
        b = np.asarray([t for _, t in p.collective.pairs], dtype=np.int64)
        dims = len(space.slice.shape)
        where = self._positions[:, pending]
        out = np.empty((offsets.shape[0], len(p.copies)), dtype=np.float64)
        for lo in range(0, offsets.shape[0], _CHUNK):
            part = offsets[lo : lo + _CHUNK]
            grid = np.zeros((part.shape[0], part.shape[1], space.num_dims), dtype=np.int64)
            grid[:, :, : part.shape[2]] = part
            chips = (fixed[None, :, :] + grid[:, where, :])[:, :, :dims]
            out[lo : lo + _CHUNK] = permute_lower_bounds(
                chips[:, a], chips[:, b], size_bytes=float(p.collective.buffer_bytes),
                net=self.net, copies=p.copies,
            )  # fmt: skip
            self.permutes_bounded += part.shape[0] * len(a)
        return out


def pareto_front(table: np.ndarray) -> np.ndarray:
    """The distinct rows of ``table`` (rows x columns) that no other row is at most in
    every column, in lexicographic order.

    A row at most another in every column sorts before it, so each row need only be
    checked against the rows kept before it.

    >>> pareto_front(np.array([[2.0, 3.0], [1.0, 3.0], [2.0, 2.0], [1.0, 3.0], [3.0, 1.0]]))
    array([[1., 3.],
           [2., 2.],
           [3., 1.]])
    """
    rows = np.unique(table, axis=0)
    kept: list[np.ndarray] = []
    for row in rows:
        if not kept or not np.any(np.all(np.asarray(kept) <= row, axis=1)):
            kept.append(row)
    return np.asarray(kept).reshape(-1, table.shape[1])
