"""The structured placement family: the pieces every placement is built from.

A mesh axis lies on the slice as an ordered list of *sub-axes* (factors of the
physical dimensions, :class:`SubAxis`) walked in one of :data:`TRAVERSALS`
(:class:`AxisLayout`); a :class:`Placement` is one such description per mesh
axis plus the device order it gives. :mod:`aoizora.placement.space` builds the
family lazily as a tree from these pieces; :mod:`aoizora.placement.enumerate`
lists it whole, one placement per symmetry class. The rules (split, assign,
traverse, flattened paths, directions) are in docs/placements.md.

>>> [s.label() for s in sub_axes_of(1, (2, 2), 4)]
['y/2', 'y%2']
>>> [label for subs, t, _ in axis_options(tuple(sub_axes_of(1, (2, 2), 4)), directions=False)
...  for label in [AxisLayout("a", 4, subs, t).label()]]
['a<-y/2*y%2(snake)', 'a<-y/2*y%2(ring)']
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder, check_mesh_shape
from sim.topology import Slice

__all__ = [
    "TRAVERSALS",
    "AxisLayout",
    "AxisOption",
    "Placement",
    "SubAxis",
    "axis_choices",
    "axis_options",
    "check_inputs",
    "device_grid",
    "layout_complexity",
    "mergeable",
    "mesh_coords",
    "ordered_factorizations",
    "sub_axes_of",
    "traversal_digits",
]

TRAVERSALS = ("plain", "snake", "ring")


@dataclass(frozen=True)
class SubAxis:
    """One factor of a physical dimension: ``digit = (coord[dim] // stride) % size``.

    An unsplit dimension is the single sub-axis with ``stride == 1`` and
    ``size == dim_size``. On chips with several devices (tpu7x) the devices of a
    chip are one more dimension, the ``core`` (label ``c``), after x, y, z
    (:func:`device_grid`).
    """

    dim: int
    size: int
    stride: int
    dim_size: int
    reversed: bool = False
    core: bool = False

    def label(self) -> str:
        """``x`` (whole), ``y/2`` (major part), ``y%2`` (minor), ``y/2%2`` (middle).

        A reversed sub-axis (digit ``size-1-d``) is prefixed with ``~``.

        >>> SubAxis(dim=1, size=2, stride=2, dim_size=4).label()
        'y/2'
        >>> SubAxis(dim=0, size=4, stride=1, dim_size=4, reversed=True).label()
        '~x'
        """
        name = "c" if self.core else dim_name(self.dim)
        sign = "~" if self.reversed else ""
        if self.size == self.dim_size:
            return f"{sign}{name}"
        if self.size * self.stride == self.dim_size:
            return f"{sign}{name}/{self.stride}"
        if self.stride == 1:
            return f"{sign}{name}%{self.size}"
        return f"{sign}{name}/{self.stride}%{self.size}"


@dataclass(frozen=True)
class AxisLayout:
    """How one mesh axis lies on the slice: its sub-axes (major first) and traversal."""

    name: str
    size: int
    sub_axes: tuple[SubAxis, ...]
    traversal: str

    def label(self) -> str:
        """``context<-y*x(snake)``; a size-1 axis is ``tensor<-1``."""
        if not self.sub_axes:
            return f"{self.name}<-1"
        body = "*".join(s.label() for s in self.sub_axes)
        suffix = "" if self.traversal == "plain" else f"({self.traversal})"
        return f"{self.name}<-{body}{suffix}"


@dataclass(frozen=True)
class Placement:
    """A placement of a logical mesh on a slice (a representative of its class).

    ``order`` is the device order to build the mesh with. ``layouts`` describes
    it per mesh axis (empty for an order given explicitly through
    ``extra_orders``); a ``flattened`` placement instead has one layout named
    ``flat`` that walks the whole mesh in mesh-flat order (mesh_utils style:
    one path over every chip, reshaped row-major to the mesh). ``class_key``
    is the canonical physical-id tuple of the symmetry class (see
    :func:`canonical`). ``num_raw`` counts the enumerated descriptions in the
    class, ``num_orders`` the distinct device orders among them; ``members``
    lists the ids of those descriptions and ``aliases`` the labels of
    explicitly given orders that fell into this class.
    """

    id: str
    order: DeviceOrder
    layouts: tuple[AxisLayout, ...]
    class_key: tuple[int, ...]
    num_raw: int = 1
    num_orders: int = 1
    members: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    flattened: bool = False

    @property
    def physical_ids(self) -> tuple[int, ...]:
        return self.order.physical_ids

    @property
    def complexity(self) -> tuple[int, int, int, int]:
        """(extra splits, snake/ring axes, reversed sub-axes, flattened): smaller is simpler."""
        if not self.layouts:
            return (10**6, 10**6, 10**6, 1)  # explicit orders sort after every described one
        return layout_complexity(self.layouts, flattened=self.flattened)


def layout_complexity(
    layouts: Sequence[AxisLayout], *, flattened: bool
) -> tuple[int, int, int, int]:
    """(extra splits, snake/ring axes, reversed sub-axes, flattened) of a description."""
    sub_axes = [s for layout in layouts for s in layout.sub_axes]
    splits = len(sub_axes) - len({s.dim for s in sub_axes})
    bends = sum(1 for layout in layouts if layout.traversal != "plain")
    return (splits, bends, sum(1 for s in sub_axes if s.reversed), int(flattened))


def dim_name(dim: int) -> str:
    return "xyz"[dim] if dim < 3 else f"d{dim}"


def ordered_factorizations(n: int) -> list[tuple[int, ...]]:
    """Every ordered product of factors > 1 equal to ``n`` (``()`` for 1)."""
    if n == 1:
        return [()]
    out: list[tuple[int, ...]] = []
    for first in range(2, n + 1):
        if n % first == 0:
            out.extend((first, *rest) for rest in ordered_factorizations(n // first))
    return out


def sub_axes_of(
    dim: int, factors: tuple[int, ...], dim_size: int, *, core: bool = False
) -> list[SubAxis]:
    out = []
    stride = dim_size
    for f in factors:
        stride //= f
        out.append(SubAxis(dim=dim, size=f, stride=stride, dim_size=dim_size, core=core))
    return out


def device_grid(slice_: Slice) -> tuple[tuple[int, ...], np.ndarray]:
    """The slice's devices as a grid: its shape and the physical-id stride of each dimension.

    One device per chip: the chip grid, ids x fastest. Several (tpu7x): one more
    dimension, the core, last in the grid but fastest in libtpu's numbering
    (``id = devices_per_chip * chip id + core``; docs/facts.md, libtpu AOT topologies).

    >>> from sim.topology import load_slice
    >>> shape, strides = device_grid(load_slice("tpu7x:2x2x1"))
    >>> shape, strides.tolist()
    ((2, 2, 1, 2), [2, 4, 8, 1])
    >>> device_grid(load_slice("v5e:2x4"))[1].tolist()
    [1, 2]
    """
    chips = slice_.shape
    per_chip = slice_.chip.devices_per_chip
    strides = [per_chip * math.prod(chips[:d]) for d in range(len(chips))]
    if per_chip == 1:
        return chips, np.asarray(strides, dtype=np.int64)
    return (*chips, per_chip), np.asarray([*strides, 1], dtype=np.int64)


def mergeable(major: SubAxis, minor: SubAxis) -> bool:
    """``major`` directly above ``minor`` in one dimension: the pair is one coarser sub-axis."""
    return major.dim == minor.dim and major.stride == minor.stride * minor.size


def axis_choices(size: int, free: tuple[SubAxis, ...]) -> list[tuple[SubAxis, ...]]:
    """Ordered tuples of distinct sub-axes from ``free`` whose sizes multiply to ``size``."""
    out: list[tuple[SubAxis, ...]] = []

    def grow(prefix: tuple[SubAxis, ...], remaining: int, used: frozenset[int]) -> None:
        if remaining == 1:
            out.append(prefix)
            return
        for i, sub in enumerate(free):
            if i in used or remaining % sub.size != 0:
                continue
            grow((*prefix, sub), remaining // sub.size, used | {i})

    grow((), size, frozenset())
    return out


def _snake_digits(index: int, sizes: Sequence[int]) -> list[int]:
    """Boustrophedon digits (major first): each digit reverses when the prefix index is odd."""
    digits: list[int] = []
    rest_size = math.prod(sizes)
    prefix = 0
    for size in sizes:
        rest_size //= size
        plain = (index // rest_size) % size
        digits.append(plain if prefix % 2 == 0 else size - 1 - plain)
        prefix = prefix * size + plain
    return digits


def _plain_digits(index: int, sizes: Sequence[int]) -> list[int]:
    digits: list[int] = []
    for size in reversed(sizes):
        digits.append(index % size)
        index //= size
    return digits[::-1]


def _grid_cycle(rows: int, cols: int) -> list[tuple[int, int]] | None:
    """A Hamiltonian cycle of a rows x cols grid starting at (0, 0), or None.

    Along row 0, then snake through columns 1.. of the other rows, then back
    up column 0. Needs an even number of rows; an odd-by-even grid is walked
    transposed; odd-by-odd grids have no cycle (bipartite, odd size).
    """
    if rows < 2 or cols < 2:
        return None
    if rows % 2 == 1:
        if cols % 2 == 1:
            return None
        transposed = _grid_cycle(cols, rows)
        return None if transposed is None else [(r, c) for c, r in transposed]
    cells = [(0, c) for c in range(cols)]
    for r in range(1, rows):
        span = range(cols - 1, 0, -1) if r % 2 == 1 else range(1, cols)
        cells.extend((r, c) for c in span)
    cells.extend((r, 0) for r in range(rows - 1, 0, -1))
    return cells


def traversal_digits(sizes: Sequence[int], traversal: str) -> list[list[int]] | None:
    """Digits (major first) of every position of an axis, or None if impossible."""
    total = math.prod(sizes)
    if traversal == "plain":
        return [_plain_digits(i, sizes) for i in range(total)]
    if traversal == "snake":
        return [_snake_digits(i, sizes) for i in range(total)]
    rest = list(sizes[1:])
    cycle = _grid_cycle(sizes[0], math.prod(rest))
    if cycle is None:
        return None
    return [[r, *_snake_digits(c, rest)] for r, c in cycle]


def check_inputs(
    mesh_shape: Sequence[int], slice_: Slice, mesh_axis_names: Sequence[str] | None
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    shape = check_mesh_shape(mesh_shape, slice_)
    names = (
        tuple(f"axis_{i}" for i in range(len(shape)))
        if mesh_axis_names is None
        else tuple(mesh_axis_names)
    )
    if len(names) != len(shape) or len(set(names)) != len(names) or not all(names):
        raise PlacementError(
            f"mesh_axis_names {list(names)} must be {len(shape)} distinct non-empty names, one "
            f"per entry of mesh shape {list(shape)}, e.g. "
            f"{[f'axis_{i}' for i in range(len(shape))]}"
        )
    return shape, names


AxisOption = tuple[tuple[SubAxis, ...], str, np.ndarray]


def axis_options(subs: tuple[SubAxis, ...], *, directions: bool) -> tuple[AxisOption, ...]:
    """(sub-axes with directions, traversal, coordinate offsets) for one mesh axis.

    Cached: the same sub-axis lists recur all over the family, and the offsets
    (read-only arrays) are the costly part.
    """
    return _axis_options(tuple(subs), bool(directions))


@functools.cache
def _axis_options(subs: tuple[SubAxis, ...], directions: bool) -> tuple[AxisOption, ...]:
    out: list[AxisOption] = []
    traversals = TRAVERSALS if len(subs) > 1 else ("plain",)
    flips = list(itertools.product((False, True) if directions else (False,), repeat=len(subs)))
    for traversal in traversals:
        digits = _digit_table(tuple(s.size for s in subs), traversal)
        if digits is None:
            continue
        for flip in flips:
            directed = tuple(
                s if s.reversed == f else dataclasses.replace(s, reversed=f)
                for s, f in zip(subs, flip, strict=True)
            )
            if traversal == "plain" and any(
                mergeable(a, b) and a.reversed == b.reversed
                for a, b in itertools.pairwise(directed)
            ):
                continue  # the coarser split already describes this order
            offsets = contribution(directed, digits)
            offsets.setflags(write=False)
            out.append((directed, traversal, offsets))
    return tuple(out)


@functools.cache
def _digit_table(sizes: tuple[int, ...], traversal: str) -> np.ndarray | None:
    """:func:`traversal_digits` as a read-only array, cached: the permutations of one
    sub-axis set often share their sizes (six sub-axes of 2: one table per walk)."""
    digits = traversal_digits(sizes, traversal)
    if digits is None:
        return None
    table = np.asarray(digits, dtype=np.int64).reshape(len(digits), len(sizes))
    table.setflags(write=False)
    return table


def contribution(subs: Sequence[SubAxis], table: np.ndarray) -> np.ndarray:
    """Coordinate offset (positions x dims) each position of one mesh axis adds, from its
    digit table (positions x sub-axes)."""
    num_dims = max(s.dim for s in subs) + 1
    out = np.zeros((len(table), num_dims), dtype=np.int64)
    for k, sub in enumerate(subs):
        value = sub.size - 1 - table[:, k] if sub.reversed else table[:, k]
        out[:, sub.dim] += value * sub.stride
    return out


def mesh_coords(
    shape: tuple[int, ...], axes: list[int], contributions: list[np.ndarray], num_dims: int
) -> np.ndarray:
    """Chip coordinates of every mesh position, row-major: (num_devices, num_dims)."""
    coords = np.zeros((*shape, num_dims), dtype=np.int64)
    for axis, contrib in zip(axes, contributions, strict=True):
        padded = np.zeros((shape[axis], num_dims), dtype=np.int64)
        padded[:, : contrib.shape[1]] = contrib
        view = [1] * len(shape) + [num_dims]
        view[axis] = shape[axis]
        coords = coords + padded.reshape(view)
    return coords.reshape(-1, num_dims)
