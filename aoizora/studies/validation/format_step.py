"""The step columns of the measurement file: what a ``step`` row measured and how it was derived.

A step row names one denoising step of a model (:class:`StepCase`): the clip, the
logical mesh, the sharding rules, the attention kind and kernel, and the device
order it ran with. Public figures are often not one step: ``phase`` says what the
published ``figure_s`` covers and the parser checks the derivation of
``measured_s`` (seconds per step) from it:

``step``
    one denoising step, one call timed to its outputs; ``measured_s`` is the figure
    (``steps``, ``figure_s``, ``other_s`` empty). Its prediction holds the host's
    launch of the call (the generation's ``program_launch_s``).
``device``
    one step's device time, read from a profile's trace (its ops, first to last):
    no host launch; ``steps``, ``figure_s``, ``other_s`` empty.
``denoise``
    the denoising loop of ``steps`` steps: ``measured_s = figure_s / steps``.
``generation``
    a whole request (conditioning, ``steps`` denoising steps, VAE decode):
    ``measured_s = (figure_s - other_s) / steps``, ``other_s`` the conditioning
    and decode time taken out (its uncertainty belongs in ``spread_s``).

Every Wan step runs both classifier-free-guidance passes as one batch
(:mod:`aoizora.workloads.wan`). ``device_order`` lists libtpu *device* ids in
mesh-flat order: on chips of several devices (tpu7x) the mesh is over devices.

>>> cell = {"model": "wan2.1-14b", "clip": "81x720x1280", "mesh_shape": "2x4",
...         "mesh_axes": "data context", "rules_id": "maxdiffusion", "attention": "",
...         "device_order": "0 1 2 3 4 5 6 7", "attention_kernel": "tokamax",
...         "phase": "generation", "steps": "50", "figure_s": "249.3", "other_s": "6.55",
...         "measured_s": "4.855", "slice": "tpu7x:2x2x1"}
>>> s = step_case(cell, num_devices=8, name="m.csv", line=2)
>>> s.phase, s.steps, s.attention_kernel, s.mesh_shape
('generation', 50, 'tokamax', (2, 4))
>>> step_cells(s)["figure_s"]
'249.3'
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from aoizora.studies.validation.cells import cell_error, parse_float, parse_ints
from sim.splash_tiles import tile_problem

__all__ = ["PHASES", "STEP_COLUMNS", "STEP_REQUIRED", "StepCase", "step_case", "step_cells"]

# What a published figure covers (module docstring).
PHASES: tuple[str, ...] = ("step", "device", "denoise", "generation")
# Columns of step rows; the first six are required, the rest optional (files
# written before a column existed still parse).
STEP_REQUIRED: tuple[str, ...] = (
    "model",
    "clip",
    "mesh_shape",
    "mesh_axes",
    "rules_id",
    "device_order",
)
STEP_COLUMNS: tuple[str, ...] = (
    *STEP_REQUIRED,
    "attention",
    "attention_kernel",
    "phase",
    "steps",
    "figure_s",
    "other_s",
    "vae_decode_chunk",
    "workload",
    "splash_blocks",
    "scoped_vmem_kib",
)
_CLIP_RE = re.compile(r"^[1-9][0-9]*x[1-9][0-9]*x[1-9][0-9]*$")
_SHAPE_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")
# measured_s must equal its derivation from figure_s to this relative tolerance
# (the figure's own rounding).
_DERIVATION_RTOL = 1e-3


@dataclass(frozen=True)
class StepCase:
    """What a ``step`` row measured: one denoising step of ``model`` on ``clip``.

    ``clip`` is ``FRAMESxHEIGHTxWIDTH`` (e.g. ``81x480x832``); ``device_order``
    lists libtpu device ids in mesh-flat (row-major) order, as
    :meth:`aoizora.placement.device_order.DeviceOrder.from_physical_ids` takes them.
    ``attention`` is the attention kind (``gather_kv``, ``ulysses``, ``ring``,
    ``usp_uU`` for Wan); ``None`` when the row leaves it empty -- the step
    predictor then takes maxdiffusion's default (:mod:`aoizora.studies.validation.step`).
    ``attention_kernel`` names the kernel version that ran (a key of the
    generation's ``[compute.attention_efficiency]``); ``None``: the generation's
    default. ``phase``, ``steps``, ``figure_s`` and ``other_s``: the module docstring.
    """

    model: str
    clip: str
    mesh_shape: tuple[int, ...]
    mesh_axes: tuple[str, ...]
    rules_id: str
    device_order: tuple[int, ...]
    attention: str | None = None
    attention_kernel: str | None = None
    phase: str = "step"
    steps: int | None = None
    figure_s: float | None = None
    other_s: float | None = None
    vae_decode_chunk: int | None = None  # a ``vae`` row: latent frames a scan step decodes
    workload: str | None = None  # a model of one's own: its FILE.py:FACTORY (clip empty)
    splash_blocks: tuple[int, int, int] | None = None  # the splash tiles (None: the 512)
    scoped_vmem_kib: int | None = None  # the VMEM limit they compiled with (None: default)

    @property
    def configuration(self) -> tuple[object, ...]:
        """What was run: rows with equal configurations measure the same thing."""
        return (
            self.model,
            self.clip,
            self.mesh_shape,
            self.mesh_axes,
            self.rules_id,
            self.device_order,
            self.attention,
            self.attention_kernel,
            self.vae_decode_chunk,
            self.workload,
            self.splash_blocks,
            self.scoped_vmem_kib,
        )


def _mesh(
    cell: Mapping[str, str], *, name: str, line: int
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if not _SHAPE_RE.match(cell["mesh_shape"]):
        raise cell_error(name, line, f"mesh_shape={cell['mesh_shape']!r} must look like '2x4'")
    mesh_shape = tuple(int(n) for n in cell["mesh_shape"].split("x"))
    axes = tuple(cell["mesh_axes"].split())
    if len(axes) != len(mesh_shape) or len(set(axes)) != len(axes):
        raise cell_error(
            name,
            line,
            f"mesh_axes={cell['mesh_axes']!r} must name each of the {len(mesh_shape)} "
            "mesh dimensions once, separated by spaces, e.g. 'data context'",
        )
    return mesh_shape, axes


def _name(cell: Mapping[str, str], key: str, example: str, *, name: str, line: int) -> str | None:
    value = cell.get(key, "") or None
    if value is not None and not _NAME_RE.match(value):
        raise cell_error(name, line, f"{key}={value!r} must be one name, e.g. {example}")
    return value


def _derivation(
    cell: Mapping[str, str], phase: str, *, name: str, line: int
) -> tuple[int | None, float | None, float | None]:
    """(steps, figure_s, other_s), checked against ``measured_s``."""
    given = [k for k in ("steps", "figure_s", "other_s") if cell.get(k, "")]
    needs = {
        "step": (),
        "device": (),
        "denoise": ("steps", "figure_s"),
        "generation": ("steps", "figure_s", "other_s"),
    }
    if sorted(given) != sorted(needs[phase]):
        raise cell_error(
            name,
            line,
            f"phase={phase!r} needs exactly {list(needs[phase])} of steps, figure_s, other_s "
            f"(given: {given}); e.g. phase=denoise, steps=40, figure_s=105.3",
        )
    if phase in ("step", "device"):
        return None, None, None
    if not cell["steps"].isdigit() or int(cell["steps"]) < 1:
        raise cell_error(name, line, f"steps={cell['steps']!r} must be a positive integer, e.g. 40")
    steps = int(cell["steps"])
    figure = parse_float(cell["figure_s"], column="figure_s", name=name, line=line, positive=True)
    other = 0.0
    if phase == "generation":
        other = parse_float(cell["other_s"], column="other_s", name=name, line=line, positive=False)
    measured = float(cell["measured_s"])
    derived = (figure - other) / steps
    if derived <= 0 or not math.isclose(measured, derived, rel_tol=_DERIVATION_RTOL):
        raise cell_error(
            name,
            line,
            f"measured_s={cell['measured_s']!r} must be (figure_s - other_s) / steps = "
            f"({figure} - {other}) / {steps} = {derived:.6g} s for phase={phase!r}",
        )
    return steps, figure, (other if phase == "generation" else None)


def step_case(
    cell: Mapping[str, str], *, num_devices: int, name: str, line: int, kind: str = "step"
) -> StepCase:
    """The :class:`StepCase` of one row's cells (``measured_s`` already checked): a
    ``step`` row's, or a ``vae`` row's (one VAE decode of the clip; ``model`` names the
    VAE, e.g. ``wan2.1-vae``, and ``vae_decode_chunk`` its chunk, empty: 1)."""
    spec = cell.get("workload", "") or None  # a model of one's own: no clip
    for key in STEP_REQUIRED:
        if not cell.get(key, "") and not (key == "clip" and spec):
            raise cell_error(name, line, f"a {kind!r} row needs {key!r}")
    chunk = _chunk(cell.get("vae_decode_chunk", ""), kind=kind, name=name, line=line)
    if (cell["clip"] or not spec) and not _CLIP_RE.match(cell["clip"]):
        raise cell_error(
            name, line, f"clip={cell['clip']!r} must be FRAMESxHEIGHTxWIDTH, e.g. 81x480x832"
        )
    mesh_shape, axes = _mesh(cell, name=name, line=line)
    attention = _name(
        cell, "attention", "'gather_kv' (empty: maxdiffusion's)", name=name, line=line
    )
    kernel = _name(cell, "attention_kernel", "'custom' (empty: the default)", name=name, line=line)
    phase = cell.get("phase", "") or "step"
    if phase not in PHASES:
        raise cell_error(name, line, f"phase={phase!r} must be one of {list(PHASES)}")
    steps, figure, other = _derivation(cell, phase, name=name, line=line)
    order = parse_ints(cell["device_order"], column="device_order", name=name, line=line)
    if sorted(order) != list(range(num_devices)) or math.prod(mesh_shape) != num_devices:
        raise cell_error(
            name,
            line,
            f"device_order={cell['device_order']!r} must be a permutation of the "
            f"{num_devices} device ids of {cell['slice']} and mesh_shape must multiply to "
            f"{num_devices}, e.g. {' '.join(str(i) for i in range(num_devices))!r}",
        )
    tiles = _tiles(cell.get("splash_blocks", ""), name=name, line=line)
    return StepCase(
        cell["model"], cell["clip"], mesh_shape, axes, cell["rules_id"], order,
        attention, kernel, phase, steps, figure, other, chunk, spec, tiles,
        _limit(cell.get("scoped_vmem_kib", ""), tiles, name=name, line=line),
    )  # fmt: skip


def _tiles(text: str, *, name: str, line: int) -> tuple[int, int, int] | None:
    """``QxKVxKVC``, e.g. ``512x2048x512``; empty: the 512 tiles."""
    if not text:
        return None
    parts = text.split("x")
    blocks = tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()
    problem = tile_problem(blocks)
    if problem:
        raise cell_error(name, line, f"splash_blocks={text!r}: write QxKVxKVC, e.g. "
                                     f"512x2048x512 (empty: 512 each); {problem}")  # fmt: skip
    return blocks  # type: ignore[return-value]


def _limit(text: str, tiles: tuple[int, int, int] | None, *, name: str, line: int) -> int | None:
    """``scoped_vmem_kib``: the scoped VMEM limit (KiB) the tiles compiled with; empty: the
    compiler's default."""
    if not text:
        return None
    if not text.isdigit() or int(text) < 1 or tiles is None:
        raise cell_error(
            name, line, f"scoped_vmem_kib={text!r} must be a positive whole number of KiB "
            "beside splash_blocks (the limit those tiles compiled with, "
            "--xla_tpu_scoped_vmem_limit_kib), e.g. splash_blocks=512x8192x512, "
            "scoped_vmem_kib=65536; empty: the compiler's default",
        )  # fmt: skip
    return int(text)


def _chunk(text: str, *, kind: str, name: str, line: int) -> int | None:
    if not text:
        return None
    if kind != "vae" or not text.isdigit() or int(text) < 1:
        raise cell_error(
            name, line, f"vae_decode_chunk={text!r} must be a positive number of latent "
            "frames on a 'vae' row (empty: 1), e.g. 2",
        )  # fmt: skip
    return int(text)


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def step_cells(step: StepCase | None) -> dict[str, str]:
    """The step columns of one row as text (empty cells for a collective row)."""
    if step is None:
        return dict.fromkeys(STEP_COLUMNS, "")
    return {
        "model": step.model,
        "clip": step.clip,
        "mesh_shape": "x".join(str(n) for n in step.mesh_shape),
        "mesh_axes": " ".join(step.mesh_axes),
        "rules_id": step.rules_id,
        "device_order": " ".join(str(i) for i in step.device_order),
        "attention": step.attention or "",
        "attention_kernel": step.attention_kernel or "",
        "phase": "" if step.phase == "step" else step.phase,
        "steps": "" if step.steps is None else str(step.steps),
        "figure_s": _num(step.figure_s),
        "other_s": _num(step.other_s),
        "vae_decode_chunk": "" if step.vae_decode_chunk is None else str(step.vae_decode_chunk),
        "workload": step.workload or "",
        "splash_blocks": "x".join(str(b) for b in step.splash_blocks or ()),
        "scoped_vmem_kib": "" if step.scoped_vmem_kib is None else str(step.scoped_vmem_kib),
    }
