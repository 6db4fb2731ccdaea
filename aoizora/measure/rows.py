"""Measured timings as rows of the measurement file (docs/validation.md), with provenance.

A row's case (what ran: :class:`~aoizora.studies.validation.format.StepCase` or
:class:`~aoizora.studies.validation.format.CollectiveCase`) is known before it is timed:
a resumed run compares cases with the rows already in the file
(:mod:`aoizora.measure.store`). The timing adds ``measured_s`` (the mean over the
repeats), ``spread_s`` (their sample standard deviation, ``spread_kind=std``;
``unreported`` with one repeat) and the notes; :class:`~aoizora.measure.environment.Environment`
adds the provenance.

Row ids: ``m-<first 10 hex digits of the plan's SHA-256>-<target>``, e.g.
``m-1a2b3c4d5e-winner``, ``m-1a2b3c4d5e-ag-context-1048576``.
"""

from __future__ import annotations

from aoizora.errors import MeasureError
from aoizora.measure.collectives import CollectiveTarget, groups_spec
from aoizora.measure.environment import Environment
from aoizora.measure.steps import StepTarget
from aoizora.measure.timing import Timing
from aoizora.plan import Plan
from aoizora.studies.validation.format import CollectiveCase, Measurement, StepCase
from aoizora.workloads.vae import vae_decode_chunk

__all__ = [
    "CPU_ATTENTION_KERNEL",
    "TPU_ATTENTION_KERNEL",
    "collective_case",
    "collective_notes",
    "measured_row",
    "row_id",
    "step_case",
    "step_notes",
]

# The attention kernel a measured Wan step ran (the row's attention_kernel, the key of
# the generation's [compute.attention_efficiency] that prices it): AoiZora's step runs
# jax's Pallas splash kernel on TPUs (aoizora/workloads/splash.py) and XLA attention on
# the host CPU (not a TPU kernel: such rows are refused by validate anyway).
TPU_ATTENTION_KERNEL = "splash"
CPU_ATTENTION_KERNEL = "xla"


def row_id(env: Environment, key: str) -> str:
    return f"m-{env.plan_sha256[:10]}-{key}"


def _clip_cell(plan: Plan) -> str:
    """``FRAMESxHEIGHTxWIDTH``; empty for a model of one's own (its row names its spec)."""
    clip = plan.clip
    return "" if clip is None else f"{clip.frames}x{clip.height}x{clip.width}"


def step_case(target: StepTarget, *, cpu: bool) -> StepCase:
    """What ``target``'s row will say ran: model, clip, mesh, rules, attention, the plan's
    device order and the attention kernel of the backend."""
    p = target.plan
    vae = target.kind == "vae"
    own = p.source is not None  # its attention is whatever its step calls (XLA's, here)
    return StepCase(
        model=p.model,
        clip=_clip_cell(p),
        mesh_shape=p.mesh_shape,
        mesh_axes=p.mesh_axis_names,
        rules_id=p.rules_name,
        device_order=p.physical_ids,
        attention=p.attention,
        # a VAE decode has no attention kernel to select (its mid-block attention is XLA's)
        attention_kernel=None
        if vae or own
        else CPU_ATTENTION_KERNEL
        if cpu
        else TPU_ATTENTION_KERNEL,
        vae_decode_chunk=vae_decode_chunk(p.workload) if vae else None,
        workload=p.source.spec if p.source is not None else None,
        # the tiles of the TPU's splash kernel and the VMEM limit it compiled with (a TPU
        # option: aoizora.measure.steps.step_options); XLA's attention on a CPU has neither
        splash_blocks=None if cpu else p.splash_blocks,
        scoped_vmem_kib=None if cpu else p.scoped_vmem_kib,
    )


def collective_case(target: CollectiveTarget, plan: Plan) -> CollectiveCase:
    """What ``target``'s row will say ran (groups as the plan's device ids; sim's default
    algorithm)."""
    return CollectiveCase(
        collective=target.collective,
        groups=groups_spec(plan, target.axes),
        size_bytes=target.size_bytes,
    )


def step_notes(target: StepTarget, env: Environment) -> str:
    """What a step row's notes say about the step (before the timing's summary)."""
    p = target.plan
    if target.kind == "vae":
        how = p.predicted.source or "simulated"
        return (
            f"the VAE decode of the plan's clip ({p.workload}): candidate {p.candidate_id}, "
            f"placement {p.placement_id}; the plan predicts {target.predicted_s:.6g} s "
            f"({how}); latent to uint8 frames, random weights (no checkpoint)"
        )
    what = (
        f"one call of {p.workload} from {p.source.spec}"
        if p.source is not None
        else "one denoising step (both CFG passes)"
    )
    notes = (
        f"{' and '.join(target.roles)} of the plan: candidate {p.candidate_id}, placement "
        f"{p.placement_id}; the plan predicts {target.predicted_s:.6g} s per step (simulated); "
        f"{what}, random weights (no checkpoint)"
    )
    if env.is_cpu:
        notes += "; XLA attention in place of the TPU's Pallas kernels"
        if p.scoped_vmem_kib is not None:  # a TPU compile option, as the tiles are
            notes += (
                f" (the plan's splash tiles and scoped VMEM limit, {p.scoped_vmem_kib} KiB, "
                "are the TPU's: not applied)"
            )
    return notes


def collective_notes(target: CollectiveTarget, plan: Plan) -> str:
    """What a collective row's notes say about the program (before the timing's summary)."""
    return (
        f"{target.collective} over mesh axes {'+'.join(target.axes)} ({target.group} devices "
        f"per group), float32, one shard_map program on the plan's mesh ({plan.candidate_id} "
        f"at placement {plan.placement_id}); sim's default algorithm"
    )


def measured_row(
    *,
    env: Environment,
    plan: Plan,
    key: str,
    timing: Timing,
    about: str,
    step: StepCase | None = None,
    collective: CollectiveCase | None = None,
    step_kind: str = "step",
) -> Measurement:
    """The row of one timing: the case, mean and spread, provenance, and notes that start
    with ``about`` (:func:`step_notes`, :func:`collective_notes`)."""
    if not timing.mean_s > 0:
        raise MeasureError(
            f"{key}: the clock measured {timing.mean_s!r} s; a latency must be positive "
            "(a clock coarser than the work?)"
        )
    std = timing.std_s
    notes = f"{about}; {timing.summary()}"
    return Measurement(
        row_id=row_id(env, key),
        kind=step_kind if step is not None else "collective",
        slice_name=plan.slice_name,
        measured_s=timing.mean_s,
        spread_kind="unreported" if std is None else "std",
        spread_s=std,
        source=env.source(),
        hardware=env.hardware(plan.slice_name),
        software=env.software(),
        notes=notes,
        collective=collective,
        step=step,
        software_date=env.date,
        peak_hbm_bytes=timing.peak_hbm_bytes if step is not None else None,
    )
