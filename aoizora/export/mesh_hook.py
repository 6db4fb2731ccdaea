"""``mesh.py``: the planned device order as a few lines of plain jax for maxdiffusion.

maxdiffusion has no config key for a device order: every Wan pipeline builds its mesh
with ``max_utils.create_device_mesh(config)``, which calls ``mesh_utils`` (see
docs/facts.md, maxdiffusion config overrides). The hook replaces that function, at run time and for
this process only, with one that returns the planned devices in the planned mesh shape,
then runs ``generate_wan``'s ``main`` -- no file of maxdiffusion is patched and nothing of
AoiZora is imported, so maxdiffusion's environment needs nothing of ours.

Devices are matched by chip coordinates and core, as :meth:`aoizora.plan.Plan.mesh` does.
A plan with a scoped VMEM limit (``scoped_vmem_kib``) gets its libtpu flag added to
``LIBTPU_INIT_ARGS`` before jax is imported (libtpu reads it when jax starts the TPU).
"""

from __future__ import annotations

from aoizora.plan.file import Plan
from aoizora.plan.splash import libtpu_flags

__all__ = ["mesh_hook_source"]

_TEMPLATE = '''\
"""Planned device order for maxdiffusion (written by `aoizora export`; plain jax, no aoizora).

Plan {candidate} on {slice_name}, placement {placement}.
Run from a maxdiffusion checkout, with the overrides in maxdiffusion.args:

    mapfile -t ARGS < maxdiffusion.args
    python mesh.py {config_path} "${{ARGS[@]}}"

It replaces maxdiffusion.max_utils.create_device_mesh (every Wan pipeline builds its mesh
with it) by one returning the planned devices, then runs maxdiffusion.generate_wan.
"""
{libtpu}
import jax
import numpy as np

MESH_AXES = {axes!r}
MESH_SHAPE = {shape!r}
CORES_PER_CHIP = {per_chip}
# (chip coordinates, core on the chip) of mesh.devices.flat[i], i = 0, 1, ...
DEVICES = [
{devices}
]


def planned_devices(devices=None):
    """The devices as a MESH_SHAPE array in the planned order."""
    devices = jax.devices() if devices is None else list(devices)
    dims = len(DEVICES[0][0])
    found = {{}}
    for d in devices:
        coords = tuple(int(c) for c in d.coords)
        core = int(getattr(d, "core_on_chip", 0)) if CORES_PER_CHIP > 1 else 0
        found[(coords[:dims], core)] = d
    missing = [place for place in DEVICES if place not in found]
    if missing or len(devices) != len(DEVICES):
        raise SystemExit(
            f"mesh.py: the plan is for {slice_name} ({{len(DEVICES)}} devices); these "
            f"{{len(devices)}} devices lack {{missing[:3]}} -- run it on a {slice_name} slice"
        )
    return np.array([found[place] for place in DEVICES], dtype=object).reshape(MESH_SHAPE)


def install():
    """Make maxdiffusion build every mesh from the planned devices."""
    from maxdiffusion import max_utils

    def create_device_mesh(config, devices=None, logging=True):
        return planned_devices(devices)

    max_utils.create_device_mesh = create_device_mesh


if __name__ == "__main__":
    install()
    from absl import app
    from maxdiffusion import generate_wan

    with generate_wan.transformer_engine_context():
        app.run(generate_wan.main)
'''


_LIBTPU = """
import os

# The libtpu flags of the plan (its splash tiles' scoped VMEM limit; no config key holds
# it), added to LIBTPU_INIT_ARGS before jax starts the TPU.
LIBTPU_FLAGS = {flags!r}
_ARGS = os.environ.get("LIBTPU_INIT_ARGS", "").split()
os.environ["LIBTPU_INIT_ARGS"] = " ".join(_ARGS + [f for f in LIBTPU_FLAGS if f not in _ARGS])
"""


def mesh_hook_source(plan: Plan, *, config_path: str) -> str:
    """The text of ``mesh.py`` for ``plan`` run with maxdiffusion's ``config_path``
    (deterministic: same plan, same bytes)."""
    per_chip = plan.slice.chip.devices_per_chip
    flags = libtpu_flags(plan.scoped_vmem_kib)
    devices = "\n".join(
        f"    ({tuple(coord)!r}, {pid % per_chip}),"
        for coord, pid in zip(plan.coords, plan.physical_ids, strict=True)
    )
    return _TEMPLATE.format(
        candidate=plan.candidate_id,
        slice_name=plan.slice_name,
        placement=plan.placement_id,
        config_path=config_path,
        axes=tuple(plan.mesh_axis_names),
        shape=tuple(plan.mesh_shape),
        devices=devices,
        per_chip=per_chip,
        libtpu=_LIBTPU.format(flags=list(flags)) if flags else "",
    )
