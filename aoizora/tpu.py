"""A slice's TPU devices from libtpu's AOT topologies, on a CPU-only machine.

libtpu describes real TPU slices without a TPU
(``jax.experimental.topologies.get_topology_desc``): devices with libtpu's physical
ids (``x + X*y`` on v5e) and chip coordinates (docs/facts.md, libtpu AOT topologies).
A tpu7x chip is two devices (``slice_.chip.devices_per_chip``): ``tpu7x:2x2x1`` has 8,
numbered ``2 * chip id + core``.
Everything here takes a :class:`sim.topology.Slice` value; slice names are parsed
only by :mod:`sim.topology`.

* :func:`topology_devices` -- the slice's devices (cached per process); without
  libtpu it falls back to host CPU devices and says so loudly (a warning, and
  ``backend="cpu"`` plus a note that :mod:`aoizora.compile` puts in every result).
* :func:`slice_backend` -- ``"tpu"`` or ``"cpu"`` (the fallback).
* :func:`default_device_order` -- maxdiffusion's device order for a mesh shape
  (``mesh_utils.create_device_mesh``), the "existing deployment" placement.

    >>> from sim.topology import load_slice
    >>> libtpu_topology_name(load_slice("v5e:2x4", wraparound=True))
    'v5e:2x4'
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

from aoizora.errors import CompileError, PlacementError
from aoizora.workloads.base import Backend
from sim.topology import Slice

__all__ = [
    "default_device_order",
    "fallback_note",
    "libtpu_topology_name",
    "slice_backend",
    "topology_devices",
]


def libtpu_topology_name(slice_: Slice) -> str:
    """The name libtpu knows ``slice_`` by: generation and shape (wrap overrides do not
    change the compiled program, only the simulated network)."""
    return f"{slice_.chip.generation}:{'x'.join(str(n) for n in slice_.shape)}"


def _cpu_fallback_message(name: str, exc: BaseException) -> str:
    return (
        f"CPU FALLBACK: libtpu could not describe {name} ({type(exc).__name__}: {exc}); "
        f"compiling for the host CPU backend instead -- HLO, FLOPs and memory are NOT TPU's. "
        f"Install libtpu==0.0.52 to compile for TPU."
    )


@functools.cache
def _devices(name: str, num_devices: int) -> tuple[tuple[Any, ...], Backend, str]:
    import jax

    if importlib.util.find_spec("libtpu") is None:
        message = _cpu_fallback_message(name, ModuleNotFoundError("no module 'libtpu'"))
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        cpus = jax.devices("cpu")
        if len(cpus) < num_devices:
            raise CompileError(
                f"{message} But only {len(cpus)} CPU devices exist; set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before "
                f"importing jax"
            )
        return tuple(cpus[:num_devices]), "cpu", message
    # We only compile ahead of time and never run on a TPU, so several planner processes
    # (or test workers) may load libtpu at once; without this libtpu's process lockfile
    # makes every process but the first fail.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(topology_name=name, platform="tpu")
    except Exception as exc:
        raise CompileError(
            f"libtpu could not describe slice {name!r}: {type(exc).__name__}: {exc}; "
            f"use a slice libtpu knows, e.g. 'v5e:2x4' or 'v6e:4x4'"
        ) from exc
    devs = tuple(topo.devices)
    if len(devs) != num_devices:
        raise CompileError(
            f"libtpu gave {len(devs)} devices for {name}, expected {num_devices} (the chips "
            f"times devices_per_chip of topologies/{name.split(':')[0]}.toml); set "
            f"devices_per_chip in that file to libtpu's devices per chip"
        )
    return devs, "tpu", ""


def topology_devices(slice_: Slice) -> list[Any]:
    """The devices of ``slice_`` (libtpu AOT; host CPUs if libtpu is missing).

    Cached per process. For TPU slices each device has ``id`` (libtpu's physical id,
    ``x + X*y`` on v5e) and ``coords``.
    """
    return list(_devices(libtpu_topology_name(slice_), slice_.num_devices)[0])


def slice_backend(slice_: Slice) -> Backend:
    """``"tpu"`` when libtpu describes the slice, else ``"cpu"`` (the fallback)."""
    return _devices(libtpu_topology_name(slice_), slice_.num_devices)[1]


def fallback_note(slice_: Slice) -> str:
    """The CPU-fallback warning for ``slice_`` (``""`` when libtpu describes it)."""
    return _devices(libtpu_topology_name(slice_), slice_.num_devices)[2]


def default_device_order(mesh_shape: Sequence[int], slice_: Slice) -> tuple[tuple[int, ...], str]:
    """maxdiffusion's device order for ``mesh_shape`` on ``slice_`` and a note.

    maxdiffusion builds its mesh with ``mesh_utils.create_device_mesh(shape, devices,
    allow_split_physical_axes=False)``; where that raises (e.g. data=2 x context=8 on a
    4x4) we retry with ``allow_split_physical_axes=True`` and say so in the note
    (docs/facts.md, mesh_utils device order). Returns physical ids in mesh-flat
    (row-major) order.
    """
    from jax.experimental import mesh_utils

    devices = topology_devices(slice_)
    shape = [int(s) for s in mesh_shape]
    if math.prod(shape) != len(devices):
        raise PlacementError(
            f"mesh shape {shape} has {math.prod(shape)} devices but {slice_.name} has "
            f"{len(devices)}; sizes must multiply to {len(devices)}"
        )
    note = "mesh_utils.create_device_mesh(allow_split_physical_axes=False)"
    try:
        arr = mesh_utils.create_device_mesh(shape, devices)
    except (NotImplementedError, ValueError, AssertionError) as exc:
        arr = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
        note = (
            f"mesh_utils.create_device_mesh raised {type(exc).__name__} without splitting "
            f"physical axes (maxdiffusion's setting would fail here); used "
            f"allow_split_physical_axes=True"
        )
    if slice_backend(slice_) == "cpu":
        note += "; CPU FALLBACK: ids are host CPU device ids, not chips"
    return tuple(int(d.id) for d in arr.flat), note
