"""The CPU dry run's clip: the plan's step, scaled down so it stays small on the host.

A dry run (``aoizora measure --backend cpu``) checks the harness -- the plan's meshes,
device orders, compiles, inputs and rows -- on host CPU devices, where XLA attention
materialises every score matrix: ``wan-tiny`` at the plan's 832x480x81 (32,760 tokens)
held 24 GB when the kernel killed it (issue 34). By default the dry run therefore runs
the step at :data:`DEFAULT_CPU_CLIP` (512 tokens, a clip every Wan model takes: multiples
of 32 pixels, 4k+1 frames); ``--cpu-clip WxHxF`` picks another and ``--cpu-clip plan``
keeps the plan's (:func:`aoizora.commands.measure.parse_cpu_clip`). A clip no smaller
than the plan's is never used: the plan's is. The rows say the clip that ran (their
``clip`` cell and notes); CPU rows are never validated, so the scaled step only has to
exercise the same code.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from aoizora.errors import AoizoraError, MeasureError
from aoizora.workloads.clip import Clip
from aoizora.workloads.vae import vae_decode_chunk
from aoizora.workloads.wan_config import WAN_CONFIGS, check_wan_clip, num_tokens

if TYPE_CHECKING:
    from aoizora.plan import Plan

__all__ = ["DEFAULT_CPU_CLIP", "dry_run_plan"]

DEFAULT_CPU_CLIP = Clip(width=256, height=256, frames=5)


def dry_run_plan(plan: Plan, clip: Clip | None) -> tuple[Plan, str]:
    """``plan`` as the dry run runs it, and a note for its rows (``""`` when unchanged).

    ``clip`` None keeps the plan's clip; so does a clip with no fewer tokens than the
    plan's, or a plan without a Wan clip (its collectives only). Otherwise the plan's
    clip and workload name become ``clip``'s (its alternatives follow, as they are built
    from it). Raises :class:`MeasureError` for a clip the model cannot take.
    """
    config = WAN_CONFIGS.get(plan.model)
    if clip is None or plan.clip is None or config is None:
        return plan, ""
    try:
        check_wan_clip(clip, config)
        smaller = num_tokens(clip, config) < num_tokens(plan.clip, config)
    except AoizoraError as exc:
        raise MeasureError(f"--cpu-clip {clip.label}: {exc}") from None
    if not smaller:
        return plan, ""
    # inputs=(): the plan's input shapes are its clip's (the workload rebuilds them)
    vae = plan.vae
    if vae is not None:  # its decode too, of the scaled clip with the plan's chunk
        chunk = vae_decode_chunk(vae.workload)
        suffix = "" if chunk == 1 else f"[chunk{chunk}]"
        vae = dataclasses.replace(vae, clip=clip, workload=f"{vae.model}@{clip.label}{suffix}",
                                  inputs=())  # fmt: skip
    scaled = dataclasses.replace(
        plan, clip=clip, workload=f"{plan.model}@{clip.label}", inputs=(), vae=vae
    )
    note = (
        f"clip scaled down to {clip.label} from the plan's {plan.clip.label} for the host "
        f"CPU (--cpu-clip; the plan's prediction is for its own clip)"
    )
    return scaled, note
