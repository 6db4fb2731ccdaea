"""Dimension-ordered routing: the one function every route comes from.

A route from ``src`` to ``dst`` corrects the coordinates one dimension at a
time in ``order`` (default x, then y, then z), hop by hop over neighbour links.

- Without wrap-around on a dimension, it moves straight towards the target.
- With wrap-around, it takes the shorter way round the ring. **Tie rule**:
  when both ways are equally long (an even ring, target exactly half-way
  round), it goes in the positive direction (increasing coordinate, crossing
  the wrap link from ``n-1`` to ``0`` if needed). On a wrapped dimension of
  length 2 this means ``0 -> 1`` uses the plain link and ``1 -> 0`` the wrap
  link. The engine pools those two parallel cables of each direction into one
  channel of twice the bandwidth (:mod:`sim.cables`), so traffic uses both.

Examples
--------
>>> from sim.topology import load_slice, make_slice
>>> s = load_slice("v5e:4x4")
>>> [(l.src, l.dst) for l in route(s, (0, 0), (2, 1))]
[((0, 0), (1, 0)), ((1, 0), (2, 0)), ((2, 0), (2, 1))]
>>> [(l.src, l.dst) for l in route(s, (0, 0), (2, 1), order=(1, 0))]
[((0, 0), (0, 1)), ((0, 1), (1, 1)), ((1, 1), (2, 1))]
>>> t = make_slice([8], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
>>> [(l.src[0], l.dst[0], l.wrap) for l in route(t, (1,), (6,))]
[(1, 0, False), (0, 7, True), (7, 6, False)]
>>> len(route(t, (0,), (4,)))  # tie: positive direction
4
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.coords import Coord, as_coord
from sim.errors import RoutingError
from sim.topology import Link, Slice

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "check_order",
    "default_order",
    "hop_count",
    "link_ids",
    "link_table",
    "route",
    "route_link_ids",
]


def default_order(slice_: Slice) -> tuple[int, ...]:
    """x, then y, then z: ``(0, 1, ..., num_dims - 1)``."""
    return tuple(range(slice_.num_dims))


def check_order(slice_: Slice, order: Sequence[int] | None) -> tuple[int, ...]:
    if order is None:
        return default_order(slice_)
    out = tuple(order)
    if sorted(out) != list(range(slice_.num_dims)) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in out
    ):
        raise RoutingError(
            f"routing order {tuple(order)!r} must be a permutation of the dimensions "
            f"{default_order(slice_)!r} of slice {slice_.name}, e.g. "
            f"{tuple(reversed(default_order(slice_)))!r} for y before x"
        )
    return out


def _check_coord(slice_: Slice, coord: Sequence[int], role: str) -> Coord:
    # One rule for every entry (sim.coords): ints only, checked before any
    # cache lookup, since (0.0, 0) == (0, 0) as a dict key.
    return as_coord(coord, shape=slice_.shape, slice_name=slice_.name, role=role)


def _steps(n: int, a: int, b: int, wrap: bool) -> tuple[int, int]:
    """(direction, hop count) along one dimension of length ``n`` from a to b."""
    if a == b:
        return 0, 0
    if not wrap:
        return (1 if b > a else -1), abs(b - a)
    forward = (b - a) % n
    backward = n - forward
    # Tie rule: equal distances go the positive way.
    if forward <= backward:
        return 1, forward
    return -1, backward


def route(
    slice_: Slice,
    src: Sequence[int],
    dst: Sequence[int],
    *,
    order: Sequence[int] | None = None,
) -> tuple[Link, ...]:
    """The directed links a flow from ``src`` to ``dst`` crosses, in order.

    Raises :class:`~sim.errors.RoutingError` for coordinates off the slice or
    an ``order`` that is not a permutation of the dimensions. ``src == dst``
    gives the empty route.
    """
    ordering = check_order(slice_, order)
    a = _check_coord(slice_, src, "source")
    b = _check_coord(slice_, dst, "destination")
    key = ("route", a, b, ordering)
    cached = slice_._cache.get(key)
    if cached is not None:
        return cached
    hops: list[Link] = []
    cur = list(a)
    for dim in ordering:
        n = slice_.shape[dim]
        direction, count = _steps(n, cur[dim], b[dim], slice_.wraparound[dim])
        for _ in range(count):
            here = tuple(cur)
            pos = cur[dim] + direction
            crosses = pos < 0 or pos >= n
            cur[dim] = pos % n
            hops.append(Link(src=here, dst=tuple(cur), dim=dim, wrap=crosses))
    result = tuple(hops)
    slice_._cache[key] = result
    return result


def link_table(slice_: Slice) -> tuple[list[int], tuple[int, ...]]:
    """Link id by ``(chip number * dims + dim) * 2 + (0 if +1 else 1)``, and the chip strides.

    The link a route takes from a chip along ``dim`` in one direction (``-1``
    where there is none): what :func:`route` builds as a :class:`Link` and
    :meth:`Slice.link_id` looks up, as integers.
    """
    cached = slice_._cache.get("link_table")
    if cached is not None:
        return cached
    dims = slice_.num_dims
    strides = tuple(math.prod(slice_.shape[:d]) for d in range(dims))
    table = [-1] * (slice_.num_chips * dims * 2)
    for k, link in enumerate(slice_.links):
        d = link.dim
        ahead = (link.dst[d] - link.src[d]) % slice_.shape[d]
        # +1 steps to the next chip without crossing the wrap, or across it
        # from the last chip to the first; on a length-2 ring the plain cable
        # 0->1 and the wrap cable 1->0 are the +1 ones.
        forward = ahead == 1 and (link.wrap == (link.src[d] == slice_.shape[d] - 1))
        table[(slice_.physical_id(link.src) * dims + d) * 2 + (0 if forward else 1)] = k
    result = (table, strides)
    slice_._cache["link_table"] = result
    return result


def link_ids(slice_: Slice, src: Coord, dst: Coord, ordering: tuple[int, ...]) -> tuple[int, ...]:
    """:func:`route_link_ids` as a tuple, for callers that checked their inputs.

    ``src`` and ``dst`` must be canonical coordinates of the slice (tuples of
    ints, :func:`sim.coords.as_coord`) and ``ordering`` a permutation of the
    dimensions; the engine checks them once per run, not once per flow.
    """
    key = ("link_ids", src, dst, ordering)
    cached = slice_._cache.get(key)
    if cached is not None:
        return cached
    table, strides = link_table(slice_)
    segments = slice_._cache.setdefault("segments", {})
    # A route is one straight segment per dimension, each from the chip the
    # previous ones reached: segments repeat across routes (an 8x8 mesh's
    # 3,700 routes of 10,000 random flows share 1,000 segments).
    chip = sum(c * s for c, s in zip(src, strides, strict=True))
    result: tuple[int, ...] = ()
    for dim in ordering:
        a, b = src[dim], dst[dim]
        if a == b:
            continue
        seg_key = (chip, dim, b)
        seg = segments.get(seg_key)
        if seg is None:
            seg = segments[seg_key] = _segment(slice_, table, strides[dim], chip, dim, a, b)
        result += seg
        chip += (b - a) * strides[dim]
    slice_._cache[key] = result
    return result


def _segment(
    slice_: Slice, table: list[int], stride: int, chip: int, dim: int, a: int, b: int
) -> tuple[int, ...]:
    """The link ids from chip number ``chip`` (coordinate ``a`` along ``dim``) to ``b``."""
    n = slice_.shape[dim]
    direction, count = _steps(n, a, b, slice_.wraparound[dim])
    side = 0 if direction == 1 else 1
    dims = slice_.num_dims
    ids: list[int] = []
    for _ in range(count):
        ids.append(table[(chip * dims + dim) * 2 + side])
        pos = (a + direction) % n
        chip += (pos - a) * stride
        a = pos
    return tuple(ids)


def route_link_ids(
    slice_: Slice,
    src: Sequence[int],
    dst: Sequence[int],
    *,
    order: Sequence[int] | None = None,
) -> np.ndarray:
    """Indices into ``slice_.links`` of :func:`route` (cached; for the engine)."""
    ordering = check_order(slice_, order)
    a = _check_coord(slice_, src, "source")
    b = _check_coord(slice_, dst, "destination")
    key = ("ids", a, b, ordering)
    cached = slice_._cache.get(key)
    if cached is not None:
        return cached
    import numpy as np  # here, not at import: `python -m sim flows` never needs it

    ids = np.array(link_ids(slice_, a, b, ordering), dtype=np.int64)
    ids.setflags(write=False)
    slice_._cache[key] = ids
    return ids


def hop_count(
    slice_: Slice,
    src: Sequence[int],
    dst: Sequence[int],
    *,
    order: Sequence[int] | None = None,
) -> int:
    """Number of links on the route (the order does not change it)."""
    return len(route(slice_, src, dst, order=order))
