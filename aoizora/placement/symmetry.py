"""Slice symmetry: the automorphisms of a slice that the simulator cannot tell apart.

Two device orders are *equivalent* when one is the other followed by an
automorphism of the slice that maps links to links and every dimension-ordered
route onto the route between the image chips (``sim.routing.route``): link
loads, contention and so simulated latency are then identical for any program.
For a slice these are

- a reflection ``c -> n-1-c`` of a dimension without wrap-around, or of a
  wrapped dimension of odd length;
- a translation ``c -> c+t mod n`` of a wrapped dimension.

Transposing two equal-length dimensions is *not* one (routing is x-first), nor
is a reflection of an even wrapped dimension (the simulator breaks the half-way
tie towards the positive direction); see :mod:`aoizora.placement.enumerate`.

:func:`canonical` maps any device order to its class key, the smallest
physical-id image under the symmetries.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder
from sim.topology import Slice

__all__ = ["canonical", "canonical_rows", "check_order_on", "slice_automorphisms"]


def _dim_maps(n: int, wrapped: bool) -> list[tuple[int, ...]]:
    """Coordinate maps of one dimension that commute with its routing."""
    identity = tuple(range(n))
    if n == 1:
        return [identity]
    if not wrapped:
        return [identity, tuple(n - 1 - c for c in range(n))]
    maps = [tuple((c + t) % n for c in range(n)) for t in range(n)]
    if n % 2 == 1:
        # Odd rings have no half-way tie, so mirroring keeps shortest routes.
        maps += [tuple((t - c) % n for c in range(n)) for t in range(n)]
    return sorted(set(maps))


def slice_automorphisms(slice_: Slice) -> tuple[tuple[int, ...], ...]:
    """The slice's route-preserving symmetries as permutations of physical (device) ids.

    ``perm[i]`` is the image of device ``i`` (a chip, or one of a tpu7x chip's two).
    The identity comes first; the rest are sorted. Reflections per dimension
    (non-wrapped, or wrapped of odd length) and translations of wrapped
    dimensions; no transpositions (routing is dimension-ordered).

    >>> from sim.topology import load_slice
    >>> slice_automorphisms(load_slice("v5e:2x2"))
    ((0, 1, 2, 3), (1, 0, 3, 2), (2, 3, 0, 1), (3, 2, 1, 0))
    """
    return _automorphisms(slice_)


@functools.cache  # a Slice is a hashable value (name, chip, shape, wraparound)
def _automorphisms(slice_: Slice) -> tuple[tuple[int, ...], ...]:
    per_dim = [_dim_maps(n, bool(w)) for n, w in zip(slice_.shape, slice_.wraparound, strict=True)]
    perms: set[tuple[int, ...]] = set()
    for maps in itertools.product(*per_dim):
        perm = tuple(
            slice_.physical_id(tuple(m[c] for m, c in zip(maps, coord, strict=True)))
            for coord in slice_.coords
        )
        perms.add(perm)
    per_chip = slice_.chip.devices_per_chip
    if per_chip > 1:
        # Device ids are per_chip * chip + core: move the chips, and keep or reverse every
        # chip's cores (a chip's devices are alike and talk without links).
        lifted: set[tuple[int, ...]] = set()
        for perm in perms:
            for flip in (False, True):
                lifted.add(
                    tuple(
                        per_chip * perm[d // per_chip]
                        + (per_chip - 1 - d % per_chip if flip else d % per_chip)
                        for d in range(slice_.num_devices)
                    )
                )
        perms = lifted
    identity = tuple(range(slice_.num_devices))
    return (identity, *sorted(perms - {identity}))


def canonical_rows(ids: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """Lexicographically smallest image of every row of ``ids`` (P, N) under ``perms``.

    Only the symmetries that send a row's first chip to the smallest chip they
    can reach compete for its minimum (a coset of that chip's stabiliser, one
    symmetry on a slice whose only symmetries are translations), so each row is
    compared under those alone, in chunks of rows to bound memory.
    """
    out = np.empty_like(ids)
    for start in range(0, ids.shape[0], _CHUNK_ROWS):
        out[start : start + _CHUNK_ROWS] = _canonical_chunk(ids[start : start + _CHUNK_ROWS], perms)
    return out


_CHUNK_ROWS = 4096


def _canonical_chunk(ids: np.ndarray, perms: np.ndarray) -> np.ndarray:
    if ids.shape[0] == 0:
        return ids.copy()
    first = perms[:, ids[:, 0]]  # (symmetries, rows): where each row's first chip goes
    lowest = first.min(axis=0)
    best = np.empty_like(ids)
    have = np.zeros(ids.shape[0], dtype=bool)
    for g, perm in enumerate(perms):
        rows = np.flatnonzero(first[g] == lowest)
        if rows.size == 0:
            continue
        image = perm[ids[rows]]
        old = best[rows]
        differ = image != old
        pos = np.argmax(differ, axis=1)
        picked = np.arange(rows.size)
        smaller = ~have[rows] | (differ.any(axis=1) & (image[picked, pos] < old[picked, pos]))
        best[rows[smaller]] = image[smaller]
        have[rows] = True
    return best


def canonical(order: DeviceOrder, slice_: Slice) -> DeviceOrder:
    """The class key of ``order``: its smallest physical-id image under the symmetries.

    Two orders are equivalent (identical simulated latency for any program)
    exactly when their canonical orders are equal.

    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x2")
    >>> flipped = DeviceOrder.from_physical_ids((3, 2, 1, 0), mesh_shape=(4,), slice_=s)
    >>> canonical(flipped, s).physical_ids
    (0, 1, 2, 3)
    """
    check_order_on(order, slice_)
    perms = np.asarray(slice_automorphisms(slice_), dtype=np.int64)
    ids = np.asarray([order.physical_ids], dtype=np.int64)
    best = canonical_rows(ids, perms)[0]
    return DeviceOrder.from_physical_ids(
        tuple(int(i) for i in best), mesh_shape=order.mesh_shape, slice_=slice_
    )


def check_order_on(order: DeviceOrder, slice_: Slice) -> None:
    if order.slice_name != slice_.name or order.num_devices != slice_.num_devices:
        raise PlacementError(
            f"device order for {order.slice_name} ({order.num_devices} devices) does not belong "
            f"to slice {slice_.name} ({slice_.num_devices} devices); build it with "
            f"DeviceOrder.from_physical_ids(..., slice_=load_slice({slice_.name!r}))"
        )
