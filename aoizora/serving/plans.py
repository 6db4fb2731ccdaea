"""What a replica of each slice takes per request kind, from the planner's answers.

For every slice and every request kind (model, clip) the denoising step is planned and
the VAE decoder ranked (:func:`aoizora.request.clip_plan.plan_clip`, cached like any plan),
and with batching also the step for two clips at once (``wan_workload(..., clips=2)``;
a batch plan that fits nowhere in HBM just means that kind is not batched there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aoizora.errors import AoizoraError
from aoizora.planner import PlanOutcome, run_plan
from aoizora.request.clip_plan import ClipPlan, plan_clip
from aoizora.request.text_encoder import TextEncoder
from aoizora.request.vae_rank import VaePlan, rank_vae
from aoizora.serving.requests import RequestKind
from aoizora.serving.service import KindService, SliceService
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan import wan_workload
from sim.topology import Slice

__all__ = ["plan_kinds", "slice_service"]


def _batch_step_s(model: str, clip: Clip, slice_: Slice, plan: Callable[..., PlanOutcome],
                  say: Callable[[str], None], options: dict[str, Any]) -> float | None:  # fmt: skip
    try:
        return plan(wan_workload(model, clip, clips=2), slice_, **options).winner_q2_s
    except AoizoraError as exc:  # e.g. two clips do not fit in HBM: no batching there
        say(f"[serve] {slice_.spec}: no batch of 2 for {model}@{clip.label}: {exc}")
        return None


def plan_kinds(
    kinds: Sequence[RequestKind],
    slice_: Slice,
    *,
    text_encoder: TextEncoder,
    vae_chunk: int = 1,
    vae_compile: bool = False,
    batch: bool = False,
    top_k: int = 2,
    plan: Callable[..., PlanOutcome] = run_plan,
    rank: Callable[..., VaePlan] = rank_vae,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> dict[tuple[str, Clip], tuple[ClipPlan, float | None]]:
    """The whole-clip plan (and, with ``batch``, the batch-of-two step time) of every
    distinct (model, clip) among ``kinds`` on ``slice_``: ``plan`` plans the steps,
    ``rank`` the VAE decoder (``vae_compile``: its choice compiled)."""
    say = progress or (lambda _: None)
    out: dict[tuple[str, Clip], tuple[ClipPlan, float | None]] = {}
    for key in sorted({(k.model, k.clip) for k in kinds}, key=lambda mc: (mc[0], mc[1].label)):
        model, clip = key
        say(f"== serve: planning {model}@{clip.label} on {slice_.spec}")
        opts = dict(options, progress=progress)
        step = plan(wan_workload(model, clip), slice_, top_k=top_k, **opts)
        cp = plan_clip(step, text_encoder=text_encoder, vae_chunk=vae_chunk,
                       vae_compile=vae_compile, rank=rank, **opts)  # fmt: skip
        pair = (
            _batch_step_s(model, clip, slice_, plan, say, dict(opts, top_k=top_k))
            if batch
            else None
        )
        out[key] = (cp, pair)
    return out


def slice_service(
    slice_: Slice, plans: dict[tuple[str, Clip], tuple[ClipPlan, float | None]]
) -> tuple[SliceService, dict[str, Any]]:
    """The slice's :class:`SliceService` and its plans' summary for ``serve --json``."""
    kinds = {
        key: KindService(
            text_encoder_s=cp.latency.text_encoder_s,
            step_s=cp.step.winner_q2_s,
            vae_decode_s=cp.latency.vae_decode_s,
            batch_step_s=pair,
        )
        for key, (cp, pair) in plans.items()
    }
    summary = {
        "generation": slice_.chip.generation,
        "chips": slice_.num_chips,
        "kinds": [
            {
                "model": model,
                "clip": clip.label,
                "step_s": cp.step.winner_q2_s,
                "step_plan": cp.step.winner.candidate.id,
                "vae_plan": cp.vae.winner.candidate.id,
                "batch2_step_s": pair,
                **cp.latency.to_json(),
                "steps": cp.total_steps,
            }
            for (model, clip), (cp, pair) in plans.items()
        ],
    }
    service = SliceService(slice_.spec, slice_.num_chips, slice_.chip.generation, kinds)
    return service, summary
