"""Step rows: predict one denoising step the way the planner scores a placement (Q2).

A ``step`` row names a model, a clip, a slice, a logical mesh (shape and axis
names), a sharding rule set, an attention kind and the device order the
measurement ran with. :func:`predict_step` answers with the planner's own
Stage-2 pipeline (:mod:`aoizora.planner`):

1. the Wan workload ``wan_workload(model, clip)``;
2. the candidate ``make_candidate(workload, mesh_shape, rules_id, attention)``
   on the planner's four mesh axes (:func:`canonical_mesh`);
3. ``compile_candidate`` for the row's slice with the default device order --
   the device order does not change the compiled program's collectives
   (docs/facts.md, Placement and compilation), so rows
   that differ only in their order share one compile, as the planner's
   placements do; with ``cache_dir`` the result is kept in the planner's
   compile cache (``<cache_dir>/compiled``) and each graph is also memoised
   for the process (:func:`step_graph`);
4. ``graph_from_text`` of the compiled HLO, then ``replay`` on the row's slice
   with ``DeviceOrder.from_physical_ids(device_order)`` and the row's attention
   kernel selected in the compute model (:func:`row_chip_slice`; empty: the
   generation's default): the prediction is the replay's ``step_time_s``, plus the
   host's launch for a timed call (:func:`launch_s`).

An empty ``attention`` cell means maxdiffusion's default, :data:`DEFAULT_ATTENTION`.

Example
-------
>>> from aoizora.studies.validation.format import StepCase
>>> canonical_mesh(StepCase("wan-tiny", "5x256x256", (2, 2), ("context", "data"),
...                         "maxdiffusion", (0, 1, 3, 2)))
((2, 1, 2, 1), (0, 3, 1, 2))
>>> step_clip("5x256x480")
Clip(width=480, height=256, frames=5)
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from aoizora.cache import plan_caches
from aoizora.candidates.space import (
    Candidate,
    check_candidate,
    make_candidate,
    with_splash_blocks,
)
from aoizora.compile import compile_candidate
from aoizora.errors import AoizoraError, ValidationError
from aoizora.hlo.graph import CollectiveGraph, graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import replay
from aoizora.studies.validation.format import Measurement, StepCase, row_slice
from aoizora.workloads.base import Workload
from aoizora.workloads.factory import load_workload
from aoizora.workloads.vae import vae_workload
from aoizora.workloads.vae_config import VAE_CONFIGS, VAE_MESH_AXIS_NAMES
from aoizora.workloads.wan import WAN_CONFIGS, Clip, parse_resolution, wan_workload
from aoizora.workloads.wan_config import MESH_AXIS_NAMES
from sim.compute import ComputeParams
from sim.errors import SimError
from sim.topology import Slice

__all__ = [
    "DEFAULT_ATTENTION",
    "canonical_mesh",
    "launch_s",
    "predict_step",
    "predict_step_memory",
    "row_chip_slice",
    "row_program",
    "row_workload",
    "step_clip",
    "step_graph",
]

# maxdiffusion's Wan default: flash (splash) attention with uniform sharding,
# Q split over `context` and K/V all-gathered (configs/base_wan_14b.yml;
# docs/facts.md, maxdiffusion deployment) -- what a measurement that does not say ran.
DEFAULT_ATTENTION = "gather_kv"

# Memoised compiles per process; each entry holds one parsed HLO module's graph.
_GRAPH_CACHE_SIZE = 32


def step_clip(clip: str, model: str | None = None) -> Clip:
    """The :class:`~aoizora.workloads.wan.Clip` of a row's ``FRAMESxHEIGHTxWIDTH``.

    ``model`` (a WAN_CONFIGS key) checks the clip against that model's VAE.
    """
    frames, height, width = (int(n) for n in clip.split("x"))
    config = WAN_CONFIGS.get(model) if model is not None else None
    return parse_resolution(f"{width}x{height}", frames=frames, config=config)


def _axis_names(step: StepCase) -> tuple[str, ...]:
    """The planner's mesh axes of the row's program: a model of one's own's (its factory's
    order), a VAE decode's or a Wan step's."""
    if step.workload:
        return row_workload(step.model, step.clip, workload=step.workload).mesh_axis_names
    return VAE_MESH_AXIS_NAMES if step.model in VAE_CONFIGS else MESH_AXIS_NAMES


def canonical_mesh(step: StepCase) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The row's mesh on the planner's axes ``(data, fsdp, context, tensor)`` (a ``vae``
    row's: ``(width, height)``).

    Returns the four axis sizes (axes the row does not name get size 1) and the
    device order re-listed in the canonical mesh's flat (row-major) order: a row
    whose axes come in another order (``context data``) has its ids transposed
    accordingly, so the same chips sit at the same mesh positions. Size-1 axes
    do not change a row-major order, and the canonical form makes the candidate
    the planner's own (same id, same compile-cache entry).
    """
    axes = step.mesh_axes
    names = _axis_names(step)
    unknown = [a for a in axes if a not in names]
    if unknown:
        raise ValidationError(
            f"mesh_axes={' '.join(axes)!r}: axes {unknown} are not mesh axes of "
            f"{step.model}; name some of {list(names)}, e.g. {' '.join(names[:2])!r}"
        )
    ids = np.asarray(step.device_order, dtype=np.int64).reshape(step.mesh_shape)
    perm = sorted(range(len(axes)), key=lambda i: names.index(axes[i]))
    flat = tuple(int(i) for i in ids.transpose(perm).reshape(-1))
    sizes = dict(zip(axes, step.mesh_shape, strict=True))
    shape = tuple(sizes.get(a, 1) for a in names)
    return shape, flat


def row_workload(
    model: str, clip: str, vae_decode_chunk: int | None = None, *, workload: str | None = None
) -> Workload:
    """The program a row ran: a model of one's own (``workload`` its ``FILE.py:FACTORY``,
    relative to the current directory; ``model`` the name it builds), a Wan denoising step
    (``model`` a Wan config) or a VAE decode of the clip (a VAE config, with its chunk)."""
    if workload:
        return _own(model, workload)
    if model in WAN_CONFIGS:
        return wan_workload(model, step_clip(clip, model))
    if model in VAE_CONFIGS:
        return vae_workload(model, step_clip(clip), chunk=vae_decode_chunk or 1)
    raise ValidationError(
        f"model={model!r} is neither a Wan config ({sorted(WAN_CONFIGS)}) nor a VAE "
        f"({sorted(VAE_CONFIGS)}), e.g. 'wan2.1-14b' or 'wan2.1-vae'"
    )


@functools.lru_cache(maxsize=_GRAPH_CACHE_SIZE)
def _own(model: str, spec: str) -> Workload:
    """The workload ``spec`` builds (once a process), checked to be the row's ``model``."""
    built = load_workload(spec)
    if built.name != model:
        raise ValidationError(
            f"workload={spec!r} builds {built.name!r}, not the row's model={model!r}"
        )
    return built


@functools.lru_cache(maxsize=_GRAPH_CACHE_SIZE)
def _compiled(
    model: str,
    clip: str,
    slice_: Slice,
    mesh_shape: tuple[int, ...],
    rules_id: str,
    attention: str,
    chunk: int | None,
    spec: str | None,
    cache_dir: str | None,
    splash_blocks: tuple[int, int, int] | None = None,
    scoped_vmem_kib: int | None = None,
) -> tuple[CollectiveGraph, int | None]:
    """One candidate compiled for ``slice_`` (at its splash tiles, under their scoped VMEM
    limit: :func:`aoizora.compile.compiler_options`): its graph and its per-device memory
    (``MemoryUsage.total_bytes`` of the compiled program; None if unreported)."""
    workload = row_workload(model, clip, chunk, workload=spec)
    candidate = make_candidate(workload, mesh_shape, rules_id, attention)
    reasons = check_candidate(workload, candidate)
    candidate = with_splash_blocks(candidate, splash_blocks, scoped_vmem_kib=scoped_vmem_kib)
    if reasons:
        raise ValidationError(
            f"the sharding {candidate.id} is illegal for {workload.name}: {'; '.join(reasons)}"
        )
    cache = plan_caches(cache_dir).compiled if cache_dir is not None else None
    result = compile_candidate(workload, candidate, slice_, cache=cache)
    if not result.ok:
        raise ValidationError(f"compiling {candidate.id} for {slice_.name} failed: {result.error}")
    if result.backend != "tpu":
        # A host-CPU program is not the TPU's: its collectives and kernels differ,
        # so a gate over it would judge the wrong program.
        raise ValidationError(
            f"{candidate.id} was compiled for the CPU, not {slice_.name}: "
            f"{'; '.join(result.warnings)}"
        )
    memory = None if result.memory is None else int(result.memory.total_bytes)
    return graph_from_text(result.hlo_text), memory


def row_program(row: Measurement) -> tuple[Workload, Candidate]:
    """The program ``row`` ran and its candidate (mesh on the planner's axes, the rules, the
    attention -- empty: maxdiffusion's -- and the splash tiles with their scoped VMEM limit),
    as :func:`predict_step` compiles it."""
    model, clip, _, shape, rules_id, attention, chunk, spec, _, tiles, limit = _row_key(row, None)
    workload = row_workload(model, clip, chunk, workload=spec)  # type: ignore[arg-type]
    candidate = make_candidate(workload, shape, rules_id, attention)  # type: ignore[arg-type]
    return workload, with_splash_blocks(candidate, tiles, scoped_vmem_kib=limit)  # type: ignore[arg-type]


def _row_key(row: Measurement, cache_dir: str | None) -> tuple[object, ...]:
    step = _step_of(row)
    shape, _ = canonical_mesh(step)
    attention = step.attention or (DEFAULT_ATTENTION if step.model in WAN_CONFIGS else "none")
    return (
        step.model, step.clip, row_slice(row), shape, step.rules_id, attention,
        step.vae_decode_chunk, step.workload, cache_dir, step.splash_blocks,
        step.scoped_vmem_kib,
    )  # fmt: skip


def predict_step_memory(row: Measurement, *, cache_dir: str | None = None) -> int | None:
    """The per-device HBM of ``row``'s compiled step (its memory analysis: arguments +
    outputs + temporaries + code - aliased), the figure a plan records; None when the
    compiler reports none. Shares :func:`predict_step`'s compile."""
    try:
        return _compiled(*_row_key(row, cache_dir))[1]
    except AoizoraError as exc:
        raise ValidationError(f"row {row.row_id!r} (line {row.line}): {exc}") from exc


def step_graph(row: Measurement, *, cache_dir: str | None = None) -> CollectiveGraph:
    """The collective graph of ``row``'s compiled step (memoised per candidate and slice).

    ``cache_dir`` is the planner's cache directory; compile results live in its
    ``compiled/`` folder, shared with ``aoizora plan``.
    """
    return _compiled(*_row_key(row, cache_dir))[0]


def row_chip_slice(row: Measurement, *, compute: ComputeParams | None = None) -> Slice:
    """The row's slice with the attention kernel it names selected (and, for a
    calibration, other ``compute`` parameters of the same generation)."""
    slice_ = row_slice(row)
    params = compute or slice_.chip.compute
    kernel = row.step.attention_kernel if row.step is not None else None
    try:
        params = params.with_kernel(kernel)
    except SimError as exc:
        raise ValidationError(f"row {row.row_id!r} (line {row.line}): {exc}") from None
    if params == slice_.chip.compute:
        return slice_
    return slice_.with_chip(dataclasses.replace(slice_.chip, compute=params))


def predict_step(
    row: Measurement, *, cache_dir: str | None = None, compute: ComputeParams | None = None
) -> float:
    """Simulated latency (seconds) of ``row``'s step with its device order: the planner's Q2
    and, for a timed call (phase ``step``), the host's launch (:func:`launch_s`), as a
    plan's figure.

    ``compute`` replaces the generation's compute parameters (calibration).
    Raises :class:`~aoizora.errors.ValidationError` naming the row when the
    model, clip, rules, attention or mesh cannot be built, or the compile fails.
    """
    try:
        step = _step_of(row)
        graph = step_graph(row, cache_dir=cache_dir)
        shape, ids = canonical_mesh(step)
        slice_ = row_chip_slice(row, compute=compute)
        order = DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=slice_)
        return replay(graph, slice_, order).step_time_s + launch_s(step, slice_)
    except AoizoraError as exc:
        raise ValidationError(f"row {row.row_id!r} (line {row.line}): {exc}") from exc


def launch_s(step: StepCase, slice_: Slice) -> float:
    """The host's launch a row's figure holds: one call timed (phase ``step``) holds it
    once; a profile's device time (``device``) does not, nor a loop's step (``denoise``,
    ``generation``), whose launches overlap the steps before them."""
    return slice_.chip.compute.program_launch_s if step.phase == "step" else 0.0


def _step_of(row: Measurement) -> StepCase:
    if row.step is None:
        raise ValidationError(f"row {row.row_id!r} is a {row.kind!r} row, not a step or vae row")
    return row.step
