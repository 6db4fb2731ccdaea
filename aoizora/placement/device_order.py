"""Device order: which physical chip hosts each logical device.

This is the project's one mapping from a logical device id to a chip. The
compiled HLO names devices by *logical* id (``use_global_device_ids=true``): id
``i`` is ``mesh.devices.flat[i]``, the i-th device of the mesh in row-major
order. A :class:`DeviceOrder` records, for every logical id, the coordinates of
the chip that hosts it, so

    logical id -> mesh position (row-major unravel of mesh_shape) -> chip coords

is answered here and nowhere else.

Physical ids are libtpu's device ids. On v5e/v6e/v5p a device is a chip, numbered
x fastest: ``id = x + X*y (+ X*Y*z)`` (checked against
``jax.experimental.topologies.get_topology_desc("v5e:2x4", "tpu").devices``;
docs/facts.md, libtpu AOT topologies). A
tpu7x chip is two devices, ``id = 2 * chip id + core``, so two logical ids can share
a chip's coordinates. The simulator's :class:`sim.topology.Slice` owns these rules
(``Slice.physical_id`` / ``Slice.device_coord``) and this module defers to it.

Example:
    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x2")
    >>> order = DeviceOrder.from_physical_ids((0, 1, 3, 2), mesh_shape=(2, 2), slice_=s)
    >>> order.coord_of(2), order.mesh_position(2)
    ((1, 1), (1, 0))
    >>> t = load_slice("tpu7x:2x2x1")  # 4 chips, 8 devices
    >>> DeviceOrder.identity(mesh_shape=(8,), slice_=t).coords[:3]
    ((0, 0, 0), (0, 0, 0), (1, 0, 0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aoizora.errors import PlacementError
from sim.topology import Slice

__all__ = ["Coord", "DeviceOrder", "check_mesh_shape"]

Coord = tuple[int, ...]


@dataclass(frozen=True)
class DeviceOrder:
    """The chip coordinates of every logical device of a mesh.

    ``coords[i]`` hosts logical id ``i`` (``mesh.devices.flat[i]``).
    ``physical_ids[i]`` is the same chip's libtpu device id.
    """

    slice_name: str
    mesh_shape: tuple[int, ...]
    coords: tuple[Coord, ...]
    physical_ids: tuple[int, ...]

    @property
    def num_devices(self) -> int:
        return len(self.coords)

    def coord_of(self, logical_id: int) -> Coord:
        """Chip coordinates hosting ``logical_id``."""
        if not 0 <= logical_id < len(self.coords):
            raise PlacementError(
                f"logical device id {logical_id} is outside the mesh of "
                f"{len(self.coords)} devices (valid ids: 0..{len(self.coords) - 1})"
            )
        return self.coords[logical_id]

    def mesh_position(self, logical_id: int) -> tuple[int, ...]:
        """Row-major mesh index of ``logical_id`` (its place in ``mesh.devices``)."""
        self.coord_of(logical_id)  # validates the id
        position: list[int] = []
        rest = logical_id
        for size in reversed(self.mesh_shape):
            position.append(rest % size)
            rest //= size
        return tuple(reversed(position))

    def to_json_dict(self) -> dict[str, object]:
        return {
            "slice": self.slice_name,
            "mesh_shape": list(self.mesh_shape),
            "physical_ids": list(self.physical_ids),
            "coords": [list(c) for c in self.coords],
        }

    @classmethod
    def from_physical_ids(
        cls, physical_ids: Sequence[int], *, mesh_shape: Sequence[int], slice_: Slice
    ) -> DeviceOrder:
        """Order from libtpu device ids listed in mesh-flat (row-major) order.

        Raises :class:`PlacementError` unless the ids are a permutation of the
        slice's devices and their count equals the mesh size.
        """
        ids = tuple(map(int, physical_ids))
        shape = check_mesh_shape(mesh_shape, slice_)
        n = slice_.num_devices
        if len(ids) != n or len(set(ids)) != n or min(ids) != 0 or max(ids) != n - 1:
            raise PlacementError(
                f"device order {list(ids)} is not a permutation of the {n} device ids of "
                f"{slice_.name} (expected each of 0..{n - 1} exactly once, "
                f"e.g. {list(range(n))})"
            )
        # ids are a permutation of the devices: index directly (a chip hosts the
        # devices_per_chip consecutive ids, docs/facts.md, libtpu AOT topologies)
        every, per_chip = slice_.coords, slice_.chip.devices_per_chip
        coords = tuple(every[i // per_chip] for i in ids)
        return cls(slice_name=slice_.name, mesh_shape=shape, coords=coords, physical_ids=ids)

    @classmethod
    def from_coords(
        cls, coords: Sequence[Sequence[int]], *, mesh_shape: Sequence[int], slice_: Slice
    ) -> DeviceOrder:
        """Order from chip coordinates listed in mesh-flat (row-major) order.

        With several devices per chip (tpu7x) a chip's coordinates appear once per
        device; its occurrences take the chip's devices (cores) in order.
        """
        chips = set(slice_.coords)
        per_chip = slice_.chip.devices_per_chip
        seen: dict[Coord, int] = {}
        ids: list[int] = []
        for c in coords:
            coord = tuple(int(v) for v in c)
            if coord not in chips:
                raise PlacementError(
                    f"chip coordinates {list(coord)} are not on {slice_.name} "
                    f"(shape {list(slice_.shape)}; valid e.g. {list(slice_.coords[-1])})"
                )
            core = seen.get(coord, 0)
            seen[coord] = core + 1
            ids.append(per_chip * slice_.physical_id(coord) + min(core, per_chip - 1))
        return cls.from_physical_ids(ids, mesh_shape=mesh_shape, slice_=slice_)

    @classmethod
    def identity(cls, *, mesh_shape: Sequence[int], slice_: Slice) -> DeviceOrder:
        """Logical id ``i`` on physical id ``i`` (libtpu's id order, x fastest)."""
        ids = range(slice_.num_devices)
        return cls.from_physical_ids(ids, mesh_shape=mesh_shape, slice_=slice_)


def check_mesh_shape(mesh_shape: Sequence[int], slice_: Slice) -> tuple[int, ...]:
    """``mesh_shape`` as ints if its sizes are positive and multiply to the slice's devices.

    >>> from sim.topology import load_slice
    >>> check_mesh_shape([2, 4], load_slice("v5e:2x4"))
    (2, 4)
    >>> check_mesh_shape([2, 4], load_slice("tpu7x:2x2x1"))  # 4 chips, 2 devices each
    (2, 4)
    """
    shape = tuple(int(s) for s in mesh_shape)
    n = slice_.num_devices
    if not shape or any(s < 1 for s in shape) or math.prod(shape) != n:
        per_chip = slice_.chip.devices_per_chip
        what = f"{n} devices ({per_chip} per chip)" if per_chip > 1 else f"{n} chips"
        raise PlacementError(
            f"mesh shape {list(shape)} does not cover {slice_.name}: its sizes must be positive "
            f"and multiply to {what} (e.g. [{n}] or {list(slice_.shape)}); change mesh_shape "
            f"or the slice"
        )
    return shape
