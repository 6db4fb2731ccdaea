"""DeviceOrder: logical id -> mesh position -> chip, checked against libtpu's own devices."""

from __future__ import annotations

import numpy as np
import pytest

from aoizora.errors import PlacementError
from aoizora.placement.device_order import DeviceOrder
from sim.topology import load_slice


@pytest.mark.parametrize("slice_name", ["v5e:2x2", "v5e:2x4", "v5e:4x4"])
def test_identity_matches_libtpu_coords(slice_name: str) -> None:
    from aoizora.tpu import topology_devices

    devices = topology_devices(load_slice(slice_name))  # the same devices on a TPU VM
    s = load_slice(slice_name)
    order = DeviceOrder.identity(mesh_shape=(s.num_chips,), slice_=s)
    by_id = {d.id: tuple(d.coords[: len(s.shape)]) for d in devices}
    for i in range(s.num_chips):
        assert order.coord_of(i) == by_id[i]


def test_mesh_devices_order_maps_logical_ids_to_chips() -> None:
    """A jax Mesh built from libtpu devices: logical id i is mesh.devices.flat[i]."""
    from jax.experimental import topologies
    from jax.sharding import Mesh

    devices = topologies.get_topology_desc(topology_name="v5e:2x4", platform="tpu").devices
    s = load_slice("v5e:2x4")
    rng = np.random.default_rng(0)
    shuffled = [devices[i] for i in rng.permutation(len(devices))]
    mesh = Mesh(np.array(shuffled).reshape(2, 4), ("data", "context"))
    ids = [d.id for d in mesh.devices.flat]
    order = DeviceOrder.from_physical_ids(ids, mesh_shape=(2, 4), slice_=s)
    for logical, device in enumerate(mesh.devices.flat):
        assert order.coord_of(logical) == tuple(device.coords[:2])
        position = order.mesh_position(logical)
        assert mesh.devices[position] is device


def test_from_coords_round_trip_and_json() -> None:
    s = load_slice("v5e:2x2")
    order = DeviceOrder.from_physical_ids((0, 1, 3, 2), mesh_shape=(2, 2), slice_=s)
    again = DeviceOrder.from_coords(order.coords, mesh_shape=(2, 2), slice_=s)
    assert again == order
    assert order.to_json_dict() == {
        "slice": "v5e:2x2",
        "mesh_shape": [2, 2],
        "physical_ids": [0, 1, 3, 2],
        "coords": [[0, 0], [1, 0], [1, 1], [0, 1]],
    }
    assert [order.mesh_position(i) for i in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize(
    ("ids", "shape", "message"),
    [
        ((0, 1, 2, 2), (4,), "not a permutation"),
        ((0, 1, 2), (4,), "not a permutation"),
        ((0, 1, 2), (3,), "does not cover"),
        ((0, 1, 2, 3), (3,), "does not cover"),
        ((0, 1, 2, 3), (2, 0, 2), "does not cover"),
    ],
)
def test_bad_orders(ids: tuple[int, ...], shape: tuple[int, ...], message: str) -> None:
    s = load_slice("v5e:2x2")
    with pytest.raises(PlacementError, match=message):
        DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=s)
    order = DeviceOrder.identity(mesh_shape=(4,), slice_=s)
    with pytest.raises(PlacementError, match="outside the mesh"):
        order.coord_of(4)
    with pytest.raises(PlacementError, match="not on v5e:2x2"):
        DeviceOrder.from_coords([(0, 0), (1, 0), (0, 1), (2, 2)], mesh_shape=(4,), slice_=s)
