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
from collections.abc import Sequence

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.family import TRAVERSALS, AxisLayout, Placement, SubAxis, check_inputs
from aoizora.placement.space import PlacementSpace
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


def class_of(
    order: DeviceOrder, placements: Sequence[Placement], slice_: Slice
) -> Placement | None:
    """The placement in ``placements`` whose class holds ``order`` (None if none does)."""
    key = canonical(order, slice_).physical_ids
    for placement in placements:
        if placement.class_key == key and placement.order.mesh_shape == order.mesh_shape:
            return placement
    return None


def raw_placements(
    mesh_shape: Sequence[int],
    slice_: Slice,
    *,
    mesh_axis_names: Sequence[str] | None = None,
    directions: bool = False,
) -> tuple[Placement, ...]:
    """Every structured placement, before deduplication and symmetry reduction.

    The leaves of :class:`~aoizora.placement.space.PlacementSpace`. Each carries
    its own ``class_key``; ``num_raw == num_orders == 1``. Sorted by
    (complexity, physical ids, id).

    >>> from sim.topology import load_slice
    >>> len(raw_placements((2, 2, 2), load_slice("v5e:2x4")))
    10
    """
    space = PlacementSpace(
        mesh_shape, slice_, mesh_axis_names=mesh_axis_names, directions=directions
    )
    found: dict[str, Placement] = {}
    for leaf in space.leaves():
        p = space.placement(leaf)
        found.setdefault(p.id, p)
    if not found:
        raise PlacementError(
            f"mesh shape {list(space.shape)} cannot be laid onto {slice_.name} (shape "
            f"{list(slice_.shape)}): every mesh axis must be a product of factors of the "
            f"physical dimensions, e.g. {list(slice_.shape)}; change mesh_shape"
        )
    placements = list(found.values())
    perms = np.asarray(slice_automorphisms(slice_), dtype=np.int64)
    keys = canonical_rows(np.asarray([p.physical_ids for p in placements]), perms)
    placements = [
        dataclasses.replace(p, class_key=tuple(key.tolist()))
        for p, key in zip(placements, keys, strict=True)
    ]
    placements.sort(key=lambda p: (p.complexity, p.physical_ids, p.id))
    return tuple(placements)


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
    shape, names = check_inputs(mesh_shape, slice_, mesh_axis_names)
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
