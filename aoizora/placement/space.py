"""The placement family as a lazy tree: for listing it whole and for searching it.

A :class:`Node` is a *partial placement*. A root fixes how every physical
dimension is split into sub-axes (one root per combination of ordered
factorizations) and places no mesh axis yet. A child places the next mesh axis
(in :attr:`PlacementSpace.axis_order`) on an ordered tuple of the still-free
sub-axes, walked in one traversal (and, with ``directions``, each sub-axis
either way): the same choices :mod:`aoizora.placement.enumerate` has always
made, one axis at a time. A node whose every non-trivial mesh axis is placed
is a leaf; so is each flattened path (one snake or ring over every chip,
reshaped to the mesh), which hangs directly under the space.

Nothing is built before it is asked for: a node holds only its free sub-axes
and its choices (whose coordinate offsets are cached per sub-axis list), the
chip coordinates of a node are one numpy sum, and :meth:`PlacementSpace.count`
counts the leaves under a node combinatorially (memoised), so a search can say
how much of the family it proved worse without visiting it. Children that can
never complete (their free sub-axes do not factor into the remaining mesh axes)
are not generated.

>>> from sim.topology import load_slice
>>> space = PlacementSpace((2, 4), load_slice("v5e:2x4"), mesh_axis_names=("data", "context"))
>>> space.count(), len(space.roots())  # 22 descriptions; 2 splits of y, 4 flattened paths
(22, 6)
>>> root = space.roots()[0]  # y split in two: x, y/2, y%2
>>> [[s.label() for s in n.pending] for n in space.children(root)]  # data takes 2 chips
[['x'], ['y/2'], ['y%2']]
>>> leaf = next(space.leaves())
>>> space.label(leaf), space.physical_ids(leaf)
('data<-x, context<-y/2*y%2(snake)', (0, 2, 6, 4, 1, 3, 7, 5))
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.family import (
    AxisLayout,
    Placement,
    SubAxis,
    axis_options,
    check_inputs,
    device_grid,
    layout_complexity,
    mergeable,
    ordered_factorizations,
    sub_axes_of,
)
from sim.topology import Slice

__all__ = ["AxisChoice", "Node", "PlacementSpace", "subsets_with_product"]

FLAT = "flat"


@dataclass(frozen=True)
class AxisChoice:
    """Mesh axis ``axis`` on ``sub_axes`` (major first), walked in ``traversal``.

    ``offsets[i]`` is the coordinate offset (per physical dimension) position
    ``i`` of the axis adds; ``axis == -1`` is a flattened path over the whole mesh.
    """

    axis: int
    sub_axes: tuple[SubAxis, ...]
    traversal: str
    offsets: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True)
class Node:
    """A partial placement: the sub-axes still free and the axes placed so far.

    ``pending`` is the *set* of sub-axes (in free-list order) the next mesh axis
    will take, before its order and traversal are chosen: every group of that
    axis then covers a known set of chips whatever the order.
    """

    free: tuple[SubAxis, ...]
    chosen: tuple[AxisChoice, ...] = ()
    pending: tuple[SubAxis, ...] | None = None
    flat: AxisChoice | None = None


class PlacementSpace:
    """The structured placements of ``mesh_shape`` on ``slice_`` as a tree.

    ``axis_order`` lists the mesh axes in the order the tree places them
    (default: mesh order); trivial (size-1) axes are skipped. A search places
    the axes that carry the most traffic first, so that its bounds bite early.
    """

    def __init__(
        self,
        mesh_shape: Sequence[int],
        slice_: Slice,
        *,
        mesh_axis_names: Sequence[str] | None = None,
        directions: bool = False,
        axis_order: Sequence[int] | None = None,
    ) -> None:
        self.shape, self.names = check_inputs(mesh_shape, slice_, mesh_axis_names)
        self.slice = slice_
        self.directions = bool(directions)
        order = tuple(range(len(self.shape))) if axis_order is None else tuple(axis_order)
        if sorted(order) != list(range(len(self.shape))):
            raise PlacementError(
                f"axis_order {list(order)} must list every mesh axis of {list(self.shape)} "
                f"once, e.g. {list(range(len(self.shape)))}"
            )
        self.axis_order = tuple(a for a in order if self.shape[a] > 1)
        # The device grid: the chip grid, plus the core dimension on tpu7x (two devices a
        # chip); coordinates below run over it, chip coordinates are its first columns.
        self.grid, self.id_strides = device_grid(slice_)
        self.num_dims = len(self.grid)
        self.num_devices = math.prod(self.shape)
        self._chip_dims = len(slice_.shape)
        self._dims = tuple(d for d, n in enumerate(self.grid) if n > 1)
        self._count = functools.cache(self._count_uncached)
        self._roots = self._build_roots()

    # -- the tree ------------------------------------------------------------------

    def _build_roots(self) -> tuple[Node, ...]:
        roots: list[Node] = []
        flats: list[Node] = []
        for factorization in itertools.product(
            *(ordered_factorizations(self.grid[d]) for d in self._dims)
        ):
            free = tuple(
                sub
                for d, factors in zip(self._dims, factorization, strict=True)
                for sub in sub_axes_of(d, factors, self.grid[d], core=d == self._chip_dims)
            )
            if self._count(free, 0):
                roots.append(Node(free=free))
            if len(self.axis_order) >= 2 and len(free) == len(self._dims):
                flats.extend(self._flattened(free))
        return (*roots, *flats)

    def _flattened(self, free: tuple[SubAxis, ...]) -> list[Node]:
        # One snake/ring over every chip along whole dimensions, reshaped row-major
        # to the mesh (mesh_utils' style). A plain walk reshaped is already a product
        # placement; a path over split pieces would not keep neighbours adjacent.
        out = []
        for subs in itertools.permutations(free):
            for directed, traversal, offsets in axis_options(subs, directions=self.directions):
                if traversal != "plain":
                    out.append(Node(free=(), flat=AxisChoice(-1, directed, traversal, offsets)))
        return out

    def roots(self) -> tuple[Node, ...]:
        """One node per split of the dimensions, then the flattened-path leaves."""
        return self._roots

    def is_leaf(self, node: Node) -> bool:
        return node.flat is not None or len(node.chosen) == len(self.axis_order)

    def children(self, node: Node) -> Iterator[Node]:
        """The next decision: the set of sub-axes the next mesh axis takes, then its order.

        Only children that can still complete are generated.
        """
        if self.is_leaf(node):
            return
        k = len(node.chosen)
        axis = self.axis_order[k]
        if node.pending is None:
            for subset in subsets_with_product(node.free, self.shape[axis]):
                rest = tuple(s for s in node.free if s not in subset)
                if self._count(rest, k + 1):
                    yield Node(free=node.free, chosen=node.chosen, pending=subset)
            return
        rest = tuple(s for s in node.free if s not in node.pending)
        for choice in itertools.permutations(node.pending):
            for subs, traversal, offsets in axis_options(choice, directions=self.directions):
                placed = AxisChoice(axis, subs, traversal, offsets)
                yield Node(free=rest, chosen=(*node.chosen, placed))

    def random_leaf(self, rng: random.Random, start: Node | None = None) -> Node:
        """A leaf reached by random decisions from ``start`` (default: a random root;
        ``rng`` seeded: the same leaf every run). The order of the sub-axes is drawn
        before the traversal, so an axis over many sub-axes does not build every
        permutation's options."""
        node = rng.choice(self._roots) if start is None else start
        while not self.is_leaf(node):
            if node.pending is None:
                node = rng.choice(list(self.children(node)))
                continue
            rest = tuple(s for s in node.free if s not in node.pending)
            order = tuple(rng.sample(node.pending, len(node.pending)))
            options = axis_options(order, directions=self.directions)
            if not options:  # this order has no walk of its own (merged sub-axes)
                node = rng.choice(list(self.children(node)))
                continue
            subs, traversal, offsets = rng.choice(options)
            placed = AxisChoice(self.axis_order[len(node.chosen)], subs, traversal, offsets)
            node = Node(free=rest, chosen=(*node.chosen, placed))
        return node

    def leaves(self, node: Node | None = None) -> Iterator[Node]:
        """Every leaf under ``node`` (the whole family by default), depth first."""
        stack = list(reversed(self._roots)) if node is None else [node]
        while stack:
            n = stack.pop()
            if self.is_leaf(n):
                yield n
            else:
                stack.extend(reversed(list(self.children(n))))

    def count(self, node: Node | None = None) -> int:
        """How many leaves (placement descriptions) lie under ``node`` (default: all)."""
        if node is None:
            return sum(self.count(r) for r in self._roots)
        if node.flat is not None:
            return 1
        k = len(node.chosen)
        if node.pending is None:
            return self._count(node.free, k)
        rest = tuple(s for s in node.free if s not in node.pending)
        return _order_count(node.pending, self.directions) * self._count(rest, k + 1)

    def _count_uncached(self, free: tuple[SubAxis, ...], k: int) -> int:
        if k == len(self.axis_order):
            return 0 if free else 1
        total = 0
        for subset in subsets_with_product(free, self.shape[self.axis_order[k]]):
            below = self._count(tuple(s for s in free if s not in subset), k + 1)
            if below:
                total += below * _order_count(subset, self.directions)
        return total

    # -- what a node fixes ------------------------------------------------------------

    def order_count(self, node: Node) -> int:
        """How many children a node with a pending set has (its axis's orders and
        traversals on that set), counted without building them; 0 otherwise."""
        return 0 if node.pending is None else _order_count(node.pending, self.directions)

    def pending_axis(self, node: Node) -> int | None:
        """The mesh axis whose sub-axis set ``node`` fixes but not yet its order."""
        return None if node.pending is None else self.axis_order[len(node.chosen)]

    def placed_axes(self, node: Node) -> frozenset[int]:
        """The mesh axes whose layout ``node`` fixes (all of them for a flattened path)."""
        if node.flat is not None:
            return frozenset(range(len(self.shape)))
        return frozenset(c.axis for c in node.chosen) | frozenset(
            a for a, n in enumerate(self.shape) if n == 1
        )

    def coords(self, node: Node) -> np.ndarray:
        """Chip coordinates (devices x chip dims) of every logical device, row-major.

        Axes the node has not placed contribute nothing, so the devices of any
        group over placed axes only sit at a translate of where every completion
        puts them. Two devices of one tpu7x chip get the same row.
        """
        return self._device_coords(node)[:, : self._chip_dims]

    def _device_coords(self, node: Node) -> np.ndarray:
        """Device-grid coordinates (devices x grid dims, the core last on tpu7x)."""
        if node.flat is not None:
            out = np.zeros((self.num_devices, self.num_dims), dtype=np.int64)
            out[:, : node.flat.offsets.shape[1]] = node.flat.offsets
            return out
        return self.device_coords_of(node.chosen)

    def device_coords_of(self, chosen: Sequence[AxisChoice]) -> np.ndarray:
        """Device-grid coordinates with only the axes ``chosen`` placed (the rest add 0)."""
        coords = np.zeros((*self.shape, self.num_dims), dtype=np.int64)
        for c in chosen:
            padded = np.zeros((self.shape[c.axis], self.num_dims), dtype=np.int64)
            padded[:, : c.offsets.shape[1]] = c.offsets
            view = [1] * len(self.shape) + [self.num_dims]
            view[c.axis] = self.shape[c.axis]
            coords = coords + padded.reshape(view)
        return coords.reshape(-1, self.num_dims)

    def chip_coords(self, physical_ids: Sequence[int]) -> list[tuple[int, ...]]:
        """The chip coordinates of libtpu ids, as :meth:`coords` gives them for a leaf
        (the two cores of a tpu7x chip share a row; ids there name cores, not chips)."""
        ids = np.asarray(physical_ids, dtype=np.int64)[:, None]
        rows = (ids // self.id_strides) % np.asarray(self.grid, dtype=np.int64)
        return [tuple(r) for r in rows[:, : self._chip_dims].tolist()]

    def physical_ids(self, node: Node) -> tuple[int, ...]:
        """libtpu ids of a leaf's chips in mesh-flat order."""
        return tuple((self._device_coords(node) @ self.id_strides).tolist())

    def layouts(self, node: Node) -> tuple[AxisLayout, ...]:
        """A leaf's description, one layout per mesh axis (one ``flat`` for a path)."""
        if node.flat is not None:
            f = node.flat
            return (AxisLayout(FLAT, self.num_devices, f.sub_axes, f.traversal),)
        by_axis = {c.axis: c for c in node.chosen}
        return tuple(
            AxisLayout(
                name=self.names[a],
                size=self.shape[a],
                sub_axes=by_axis[a].sub_axes if a in by_axis else (),
                traversal=by_axis[a].traversal if a in by_axis else "plain",
            )
            for a in range(len(self.shape))
        )

    def label(self, node: Node) -> str:
        """The placement id, e.g. ``data<-x, context<-y*x%2(ring)``."""
        labels = [layout.label() for layout in self.layouts(node) if layout.sub_axes]
        return ", ".join(labels) or "trivial"

    def complexity(self, node: Node) -> tuple[int, int, int, int]:
        return layout_complexity(self.layouts(node), flattened=node.flat is not None)

    def placement(self, node: Node, *, class_key: tuple[int, ...] = ()) -> Placement:
        """The :class:`Placement` a leaf describes."""
        label = self.label(node)
        order = DeviceOrder.from_physical_ids(
            self.physical_ids(node), mesh_shape=self.shape, slice_=self.slice
        )
        return Placement(
            id=label,
            order=order,
            layouts=self.layouts(node),
            class_key=class_key,
            members=(label,),
            flattened=node.flat is not None,
        )


def subsets_with_product(free: Sequence[SubAxis], size: int) -> list[tuple[SubAxis, ...]]:
    """Every subset of ``free`` (kept in free-list order) whose sizes multiply to ``size``."""
    out: list[tuple[SubAxis, ...]] = []

    def grow(start: int, prefix: tuple[SubAxis, ...], remaining: int) -> None:
        if remaining == 1:
            out.append(prefix)
            return
        for i in range(start, len(free)):
            if remaining % free[i].size == 0:
                grow(i + 1, (*prefix, free[i]), remaining // free[i].size)

    grow(0, (), size)
    return out


@functools.cache
def _order_count(subset: tuple[SubAxis, ...], directions: bool) -> int:
    """How many (order, traversal, directions) options a mesh axis has on ``subset``.

    Equal to ``sum(len(axis_options(p)) for p in permutations(subset))``, counted
    without building them: snake has every order, ring every order whose first
    sub-axis leaves a grid with a Hamiltonian cycle, plain every order (and
    directions) with no two adjacent pieces that one coarser sub-axis describes.
    """
    k = len(subset)
    flips = 2**k if directions else 1
    if k == 1:
        return flips
    total = math.prod(s.size for s in subset)
    rings = sum(math.factorial(k - 1) for s in subset if _has_cycle(s.size, total // s.size))
    return math.factorial(k) * flips + rings * flips + _plain_count(subset, directions)


def _has_cycle(rows: int, cols: int) -> bool:
    # traversal_digits' ring: a rows x cols grid has a Hamiltonian cycle iff one side is even.
    return rows >= 2 and cols >= 2 and (rows % 2 == 0 or cols % 2 == 0)


def _plain_count(subset: tuple[SubAxis, ...], directions: bool) -> int:
    """Plain orders (with directions) where no adjacent pair is mergeable in one direction."""
    k = len(subset)
    signs = (False, True) if directions else (False,)
    # ways[(used mask, last index, last reversed)] = number of valid prefixes
    ways: dict[tuple[int, int, bool], int] = {(1 << i, i, r): 1 for i in range(k) for r in signs}
    for _ in range(k - 1):
        grown: dict[tuple[int, int, bool], int] = {}
        for (mask, last, rev), n in ways.items():
            for j in range(k):
                if mask & (1 << j):
                    continue
                for r in signs:
                    if r == rev and mergeable(subset[last], subset[j]):
                        continue
                    key = (mask | (1 << j), j, r)
                    grown[key] = grown.get(key, 0) + n
        ways = grown
    return sum(ways.values())
