"""The devices a measurement runs on, and a plan's mesh over them with the planned order.

* ``tpu`` (the default): every device JAX sees, which must be the TPUs of the plan's
  slice; :meth:`aoizora.plan.Plan.mesh` puts each on its planned chip by its
  coordinates (and core on tpu7x). Anything else is refused in one line.
* ``cpu``: a dry run on host CPU devices (``--xla_force_host_platform_device_count``).
  They have no chip coordinates, so the mesh takes the host device whose id is the
  plan's device id at each position: placement by device id.

Either way :func:`mesh_order` reads back the device order the mesh realises, in the
plan's ids (libtpu device ids, ``devices_per_chip x chip id + core``), and
:func:`plan_mesh` checks it is exactly the plan's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from aoizora.errors import MeasureError
from aoizora.plan import Plan

__all__ = ["BACKENDS", "backend_devices", "mesh_order", "plan_mesh"]

# Where the measured programs run: the plan's TPU slice, or host CPU devices (dry run).
BACKENDS: tuple[str, ...] = ("tpu", "cpu")


def backend_devices(backend: str, plan: Plan) -> list[Any]:
    """The devices a measurement of ``plan`` runs on; raises :class:`MeasureError` when
    there are no TPU devices (``tpu``) or too few host devices (``cpu``)."""
    if backend not in BACKENDS:
        raise MeasureError(f"backend {backend!r} is not one of {list(BACKENDS)}, e.g. 'tpu'")
    needed = plan.num_devices
    if backend == "cpu":
        devices = list(jax.devices("cpu"))
        if len(devices) < needed:
            raise MeasureError(
                f"--backend cpu: JAX has {len(devices)} host CPU device(s) but plan "
                f"{plan.candidate_id} on {plan.slice_name} needs {needed}; start Python with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={needed}"
            )
        return devices
    devices = list(jax.devices())
    platform = devices[0].platform if devices else "no"
    if platform != "tpu":
        raise MeasureError(
            f"no TPU devices: JAX sees {len(devices)} {platform} device(s); run aoizora measure "
            f"on the TPU VM(s) of the plan's slice {plan.slice_name} (docs/measure.md), or add "
            "--backend cpu for a dry run on host CPU devices (its rows say cpu; validate "
            "refuses them)"
        )
    return devices


def _cpu_mesh(plan: Plan, devices: Sequence[Any]) -> Mesh:
    by_id = {int(d.id): d for d in devices}
    missing = [i for i in plan.physical_ids if i not in by_id]
    if missing:
        raise MeasureError(
            f"--backend cpu: the plan places device ids {sorted(plan.physical_ids)} but the "
            f"host devices have ids {sorted(by_id)} (missing {missing}); start Python with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={plan.num_devices}"
        )
    grid = np.empty(len(plan.physical_ids), dtype=object)
    for i, device_id in enumerate(plan.physical_ids):
        grid[i] = by_id[device_id]
    return Mesh(grid.reshape(plan.mesh_shape), plan.mesh_axis_names)


def mesh_order(mesh: Mesh, plan: Plan, *, backend: str) -> tuple[int, ...]:
    """The device order ``mesh`` realises, in mesh-flat order, as the plan's device ids:
    a TPU device's chip id (from its coordinates) x devices per chip + its core; a host
    CPU device's own id."""
    flat = list(mesh.devices.flat)
    if backend == "cpu":
        return tuple(int(d.id) for d in flat)
    slice_ = plan.slice
    per_chip = slice_.chip.devices_per_chip
    out = []
    for d in flat:
        coord = tuple(int(c) for c in d.coords[: slice_.num_dims])
        core = int(getattr(d, "core_on_chip", 0)) if per_chip > 1 else 0
        out.append(slice_.physical_id(coord) * per_chip + core)
    return tuple(out)


def plan_mesh(plan: Plan, devices: Sequence[Any], *, backend: str) -> Mesh:
    """The mesh of ``plan`` over ``devices``, each device at its planned position (module
    docstring); raises :class:`~aoizora.errors.PlanError` / :class:`MeasureError` when the
    devices are not the plan's."""
    mesh = plan.mesh(devices) if backend == "tpu" else _cpu_mesh(plan, devices)
    order = mesh_order(mesh, plan, backend=backend)
    if order != plan.physical_ids:  # Plan.mesh's own contract; a broken one must not measure
        raise MeasureError(
            f"the mesh built for {plan.candidate_id} has device order {list(order)}, not the "
            f"plan's {list(plan.physical_ids)}; the devices do not report the plan's chips"
        )
    return mesh
