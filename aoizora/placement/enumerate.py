"""Placements: the distinct ways to lay a logical mesh onto a slice's chips.

A *placement* binds every position of a logical device mesh (``mesh_shape``,
row-major, the order of ``mesh.devices.flat``) to one chip of the slice. The
compiled program is the same for every placement (only the device order
changes), but which chips talk to which -- and so which ICI links are shared --
is decided here.

Enumeration (the structured family)
-----------------------------------
1. **Split** every physical dimension into an ordered product of sub-axes
   (``y`` of length 4 as ``y/2`` (major, size 2) times ``y%2`` (minor, size
   2)), including no split at all.
2. **Assign** the sub-axes to the mesh axes: each non-trivial mesh axis gets an
   ordered list (major first) of sub-axes whose sizes multiply to its size;
   every sub-axis is used once. Every permutation is tried. A list holding two
   adjacent pieces of one dimension in their natural nesting (``y/2`` then
   ``y%2``) is skipped: the unsplit ``y`` already describes it.
3. **Traverse** a mesh axis that spans several sub-axes in one of three orders:

   - ``plain``: mixed radix, the first sub-axis most significant;
   - ``snake``: boustrophedon (reflected mixed radix), so consecutive mesh
     positions differ by one step of one sub-axis -- on whole dimensions they
     stay neighbours;
   - ``ring``: a Hamiltonian cycle of the (first sub-axis) x (snake over the
     rest) grid, so that the last position is also next to the first and a
     ring collective closes with a one-hop link. On a 2xN block this is
     mesh_utils' ring, e.g. ``(0, 1, 3, 2)`` on v5e:2x2; on v5e:4x4 with a
     16-way axis it is exactly ``mesh_utils.create_device_mesh``'s order.

Symmetry reduction
------------------
Two placements are *equivalent* when one is the other followed by an
automorphism of the slice that the simulator cannot tell apart: it maps links
to links and every dimension-ordered route onto the route between the image
chips (``sim.routing.route``), so link loads, contention and hence simulated
latency are identical for any program. For a slice these are

- a reflection ``c -> n-1-c`` of a dimension without wrap-around, or of a
  wrapped dimension of odd length;
- a translation ``c -> c+t mod n`` of a wrapped dimension.

**Transposing** two equal-length dimensions is *not* included: routing is
x-first, so a transposed placement routes y-first relative to its original and
can contend differently (``tests/aoizora/test_placements.py`` simulates such a
pair). Neither is a reflection of an even wrapped dimension: the simulator
breaks the half-way tie towards the positive direction.

Each class keeps one representative -- the member with the simplest
description, then the smallest physical-id tuple -- and records how many raw
placements and distinct device orders it stands for. :func:`canonical` maps
*any* device order (e.g. jax's default) to its class key so callers can find
its class.

Example:
    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x2")
    >>> [p.id for p in enumerate_placements((2, 2), s, mesh_axis_names=("data", "context"))]
    ['data<-y, context<-x', 'data<-x, context<-y', 'flat<-y*x(ring)', 'flat<-x*y(ring)']
    >>> [p.id for p in enumerate_placements((4,), s, mesh_axis_names=("context",))]
    ['context<-y*x', 'context<-x*y', 'context<-y*x(ring)', 'context<-x*y(ring)']
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder, check_mesh_shape
from aoizora.placement.symmetry import canonical, canonical_rows, slice_automorphisms
from sim.topology import Slice

__all__ = [
    "TRAVERSALS",
    "AxisLayout",
    "Placement",
    "SubAxis",
    "canonical",
    "class_of",
    "enumerate_placements",
    "raw_placements",
    "slice_automorphisms",
]

TRAVERSALS = ("plain", "snake", "ring")


@dataclass(frozen=True)
class SubAxis:
    """One factor of a physical dimension: ``digit = (coord[dim] // stride) % size``.

    An unsplit dimension is the single sub-axis with ``stride == 1`` and
    ``size == dim_size``. On chips with several devices (tpu7x) the devices of a
    chip are one more dimension, the ``core`` (label ``c``), after x, y, z.
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
        name = "c" if self.core else _dim_name(self.dim)
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
        sub_axes = [s for layout in self.layouts for s in layout.sub_axes]
        splits = len(sub_axes) - len({s.dim for s in sub_axes})
        bends = sum(1 for layout in self.layouts if layout.traversal != "plain")
        return (splits, bends, sum(1 for s in sub_axes if s.reversed), int(self.flattened))


def _dim_name(dim: int) -> str:
    return "xyz"[dim] if dim < 3 else f"d{dim}"


# --- symmetry classes ---------------------------------------------------------


def class_of(
    order: DeviceOrder, placements: Sequence[Placement], slice_: Slice
) -> Placement | None:
    """The placement in ``placements`` whose class holds ``order`` (None if none does)."""
    key = canonical(order, slice_).physical_ids
    for placement in placements:
        if placement.class_key == key and placement.order.mesh_shape == order.mesh_shape:
            return placement
    return None


# --- enumeration ----------------------------------------------------------------


def _ordered_factorizations(n: int) -> list[tuple[int, ...]]:
    """Every ordered product of factors > 1 equal to ``n`` (``()`` for 1)."""
    if n == 1:
        return [()]
    out: list[tuple[int, ...]] = []
    for first in range(2, n + 1):
        if n % first == 0:
            out.extend((first, *rest) for rest in _ordered_factorizations(n // first))
    return out


def _sub_axes_of(
    dim: int, factors: tuple[int, ...], dim_size: int, *, core: bool = False
) -> list[SubAxis]:
    out = []
    stride = dim_size
    for f in factors:
        stride //= f
        out.append(SubAxis(dim=dim, size=f, stride=stride, dim_size=dim_size, core=core))
    return out


def _device_grid(slice_: Slice) -> tuple[tuple[int, ...], np.ndarray]:
    """The slice's devices as a grid: its shape and the physical-id stride of each dimension.

    One device per chip: the chip grid, ids x fastest. Several (tpu7x): one more
    dimension, the core, last in the grid but fastest in libtpu's numbering
    (``id = devices_per_chip * chip id + core``).

    >>> from sim.topology import load_slice
    >>> shape, strides = _device_grid(load_slice("tpu7x:2x2x1"))
    >>> shape, strides.tolist()
    ((2, 2, 1, 2), [2, 4, 8, 1])
    """
    chips = slice_.shape
    per_chip = slice_.chip.devices_per_chip
    strides = [per_chip * math.prod(chips[:d]) for d in range(len(chips))]
    if per_chip == 1:
        return chips, np.asarray(strides, dtype=np.int64)
    return (*chips, per_chip), np.asarray([*strides, 1], dtype=np.int64)


def _mergeable(major: SubAxis, minor: SubAxis) -> bool:
    """``major`` directly above ``minor`` in one dimension: the pair is one coarser sub-axis."""
    return major.dim == minor.dim and major.stride == minor.stride * minor.size


def _axis_choices(size: int, free: tuple[SubAxis, ...]) -> list[tuple[SubAxis, ...]]:
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


def _traversal_digits(sizes: Sequence[int], traversal: str) -> list[list[int]] | None:
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


def _check_inputs(
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


def _add_flattened(
    found: dict[str, Placement],
    shape: tuple[int, ...],
    slice_: Slice,
    free: tuple[SubAxis, ...],
    *,
    directions: bool,
) -> None:
    """Flattened paths: one snake/ring over every chip along whole dimensions (so
    consecutive logical ids are neighbours), reshaped to the mesh. A plain walk
    reshaped is already a structured placement; a path over split pieces would not
    keep neighbours adjacent."""
    grid, id_strides = _device_grid(slice_)
    num_dims, n = len(grid), slice_.num_devices
    for (subs,) in _assignments([n], free):
        for path_subs, traversal, offsets in _axis_options(subs, directions=directions):
            if traversal == "plain":
                continue
            layout = AxisLayout(name="flat", size=n, sub_axes=path_subs, traversal=traversal)
            pid = layout.label()
            if pid in found:
                continue
            coords = _mesh_coords((n,), [0], [offsets], num_dims)
            ids = tuple(int(i) for i in coords @ id_strides)
            order = DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=slice_)
            found[pid] = Placement(
                id=pid,
                order=order,
                layouts=(layout,),
                class_key=(),
                members=(pid,),
                flattened=True,
            )


def raw_placements(
    mesh_shape: Sequence[int],
    slice_: Slice,
    *,
    mesh_axis_names: Sequence[str] | None = None,
    directions: bool = False,
) -> tuple[Placement, ...]:
    """Every structured placement, before deduplication and symmetry reduction.

    Each carries its own ``class_key``; ``num_raw == num_orders == 1``. Sorted
    by (complexity, physical ids, id).

    >>> from sim.topology import load_slice
    >>> len(raw_placements((2, 2, 2), load_slice("v5e:2x4")))
    10
    """
    shape, names = _check_inputs(mesh_shape, slice_, mesh_axis_names)
    grid, id_strides = _device_grid(slice_)
    dims = [d for d, n in enumerate(grid) if n > 1]
    axes = [a for a, m in enumerate(shape) if m > 1]
    num_dims = len(grid)
    core_dim = len(slice_.shape)  # == num_dims when a chip is one device
    found: dict[str, Placement] = {}
    for factorization in itertools.product(*(_ordered_factorizations(grid[d]) for d in dims)):
        free = tuple(
            sub
            for d, factors in zip(dims, factorization, strict=True)
            for sub in _sub_axes_of(d, factors, grid[d], core=d == core_dim)
        )
        for assignment in _assignments([shape[a] for a in axes], free):
            options = [_axis_options(subs, directions=directions) for subs in assignment]
            for chosen in itertools.product(*options):
                layouts = _layouts(shape, names, axes, chosen)
                pid = ", ".join(layout.label() for layout in layouts if layout.sub_axes)
                pid = pid or "trivial"
                if pid in found:
                    continue
                coords = _mesh_coords(shape, axes, [c for _, _, c in chosen], num_dims)
                ids = tuple(int(i) for i in coords @ id_strides)
                order = DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=slice_)
                found[pid] = Placement(
                    id=pid, order=order, layouts=layouts, class_key=(), members=(pid,)
                )
        if len(axes) >= 2 and len(free) == len(dims):
            _add_flattened(found, shape, slice_, free, directions=directions)
    if not found:
        raise PlacementError(
            f"mesh shape {list(shape)} cannot be laid onto {slice_.name} (shape "
            f"{list(slice_.shape)}): every mesh axis must be a product of factors of the "
            f"physical dimensions, e.g. {list(slice_.shape)}; change mesh_shape"
        )
    placements = list(found.values())
    perms = np.asarray(slice_automorphisms(slice_), dtype=np.int64)
    keys = canonical_rows(np.asarray([p.physical_ids for p in placements]), perms)
    placements = [
        dataclasses.replace(p, class_key=tuple(int(i) for i in key))
        for p, key in zip(placements, keys, strict=True)
    ]
    placements.sort(key=lambda p: (p.complexity, p.physical_ids, p.id))
    return tuple(placements)


def _assignments(
    sizes: Sequence[int], free: tuple[SubAxis, ...]
) -> list[tuple[tuple[SubAxis, ...], ...]]:
    """Every way to give each mesh axis (by size) an ordered list of the free sub-axes."""
    out: list[tuple[tuple[SubAxis, ...], ...]] = []

    def walk(k: int, remaining: tuple[SubAxis, ...], acc: tuple[tuple[SubAxis, ...], ...]) -> None:
        if k == len(sizes):
            if not remaining:
                out.append(acc)
            return
        for choice in _axis_choices(sizes[k], remaining):
            rest = tuple(s for s in remaining if s not in choice)
            walk(k + 1, rest, (*acc, choice))

    walk(0, free, ())
    return out


_AxisOption = tuple[tuple[SubAxis, ...], str, np.ndarray]


def _axis_options(subs: tuple[SubAxis, ...], *, directions: bool) -> list[_AxisOption]:
    """(sub-axes with directions, traversal, coordinate offsets) for one mesh axis."""
    out: list[_AxisOption] = []
    traversals = TRAVERSALS if len(subs) > 1 else ("plain",)
    flips = list(itertools.product((False, True) if directions else (False,), repeat=len(subs)))
    for traversal in traversals:
        digits = _traversal_digits([s.size for s in subs], traversal)
        if digits is None:
            continue
        for flip in flips:
            directed = tuple(
                dataclasses.replace(s, reversed=f) for s, f in zip(subs, flip, strict=True)
            )
            if traversal == "plain" and any(
                _mergeable(a, b) and a.reversed == b.reversed
                for a, b in itertools.pairwise(directed)
            ):
                continue  # the coarser split already describes this order
            out.append((directed, traversal, _contribution(directed, digits)))
    return out


def _contribution(subs: Sequence[SubAxis], digits: list[list[int]]) -> np.ndarray:
    """Coordinate offset (positions x dims) each position of one mesh axis adds."""
    num_dims = max(s.dim for s in subs) + 1
    out = np.zeros((len(digits), num_dims), dtype=np.int64)
    for pos, row in enumerate(digits):
        for sub, digit in zip(subs, row, strict=True):
            value = sub.size - 1 - digit if sub.reversed else digit
            out[pos, sub.dim] += value * sub.stride
    return out


def _mesh_coords(
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


def _layouts(
    shape: tuple[int, ...],
    names: tuple[str, ...],
    axes: list[int],
    chosen: Sequence[_AxisOption],
) -> tuple[AxisLayout, ...]:
    by_axis = {a: (subs, t) for a, (subs, t, _) in zip(axes, chosen, strict=True)}
    return tuple(
        AxisLayout(
            name=names[a],
            size=shape[a],
            sub_axes=by_axis[a][0] if a in by_axis else (),
            traversal=by_axis[a][1] if a in by_axis else "plain",
        )
        for a in range(len(shape))
    )


def enumerate_placements(
    mesh_shape: Sequence[int],
    slice_: Slice,
    *,
    mesh_axis_names: Sequence[str] | None = None,
    max_placements: int | None = None,
    directions: bool = False,
    extra_orders: Sequence[tuple[str, DeviceOrder]] = (),
) -> tuple[Placement, ...]:
    """The distinct placements of ``mesh_shape`` on ``slice_``, one per symmetry class.

    Sorted simplest first (fewest splits, then fewest snake/ring axes, then
    physical ids). ``max_placements`` keeps only the first that many classes.
    ``extra_orders`` -- ``(label, order)`` pairs such as jax's default order --
    are always represented: a label whose class is already present is added to
    that placement's ``aliases``; otherwise a placement with ``id=label`` and no
    layouts is appended (in the given order) after the enumerated ones.

    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x4")
    >>> ps = enumerate_placements((2, 4), s, mesh_axis_names=("data", "context"))
    >>> len(ps), ps[0].id, sum(p.num_raw for p in ps)
    (14, 'data<-x, context<-y', 22)
    """
    shape, names = _check_inputs(mesh_shape, slice_, mesh_axis_names)
    if max_placements is not None and (
        isinstance(max_placements, bool)
        or not isinstance(max_placements, int)
        or max_placements < 1
    ):
        raise PlacementError(
            f"max_placements={max_placements!r} must be a positive integer or None (no limit), "
            "e.g. 32"
        )
    classes: dict[tuple[int, ...], list[Placement]] = {}
    for raw in raw_placements(shape, slice_, mesh_axis_names=names, directions=directions):
        classes.setdefault(raw.class_key, []).append(raw)
    reps: list[Placement] = []
    for key, members in classes.items():
        rep = members[0]  # raw placements arrive sorted: simplest, then smallest ids
        reps.append(
            dataclasses.replace(
                rep,
                class_key=key,
                num_raw=len(members),
                num_orders=len({m.physical_ids for m in members}),
                members=tuple(sorted(m.id for m in members)),
            )
        )
    reps.sort(key=lambda p: (p.complexity, p.physical_ids, p.id))
    if max_placements is not None:
        reps = reps[:max_placements]
    for label, order in extra_orders:
        if order.mesh_shape != shape:
            raise PlacementError(
                f"extra order {label!r} has mesh shape {list(order.mesh_shape)}, expected "
                f"{list(shape)}; build it with DeviceOrder.from_physical_ids(..., "
                f"mesh_shape={list(shape)}, ...)"
            )
        key = canonical(order, slice_).physical_ids
        for i, rep in enumerate(reps):
            if rep.class_key == key:
                if label not in rep.aliases:
                    reps[i] = dataclasses.replace(rep, aliases=(*rep.aliases, label))
                break
        else:
            reps.append(
                Placement(
                    id=label,
                    order=order,
                    layouts=(),
                    class_key=key,
                    num_raw=0,
                    num_orders=1,
                    members=(),
                    aliases=(label,),
                )
            )
    return tuple(reps)
