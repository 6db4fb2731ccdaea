"""One clip end to end: the text encoder, every denoising step, the VAE decode of the latents.

:func:`plan_clip` takes the planner's answer for the denoising step of a Wan model and
ranks the model's VAE decoder (:func:`aoizora.workloads.vae.vae_workload`) on the same
slice with the planner's Stage 1 -- candidates, the lowered program, Shardy's
propagation, Q1 with the compute model -- compiling none of its shardings unless asked
(``vae_compile``: the chosen one alone, replayed like a step;
:mod:`aoizora.request.vae_rank` says why). The clip's latency is

    clip_s = text_encoder_s + denoise_s + vae_decode_s

with ``denoise_s`` = the steps of the clip times the simulated step (Wan 2.2 A14B: each
expert's steps, the same compiled step for both: docs/workload.md, Experts) and
``vae_decode_s`` the VAE plan's decode: Stage 1's Q1 of the chosen sharding, or its
simulated decode when compiled (the plan's ``vae.predicted_latency_s.source`` says
which). Per-step host work (the scheduler's update, Python dispatch) and moving the
clip to the host are not modelled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aoizora.errors import WorkloadError
from aoizora.plan import Plan
from aoizora.plan.clip_latency import ClipLatency
from aoizora.planner import PlanOutcome
from aoizora.request.text_encoder import TextEncoder, host_text_encoder
from aoizora.request.vae_rank import VaePlan, rank_vae
from aoizora.workloads.base import Workload
from aoizora.workloads.vae import vae_workload
from aoizora.workloads.wan_config import WAN_CONFIGS, ExpertSchedule, WanConfig
from sim.topology import Slice

__all__ = ["ClipPlan", "denoise_steps", "plan_clip", "plan_vae", "vae_for"]


def _config(workload: Workload) -> WanConfig:
    if workload.info.get("kind") != "wan" or workload.model not in WAN_CONFIGS:
        raise WorkloadError(
            f"a clip's latency needs a Wan model (--model, e.g. wan2.1-14b) for its VAE and "
            f"steps; {workload.name!r} is not one"
        )
    return WAN_CONFIGS[workload.model]


def denoise_steps(workload: Workload, steps: int | None = None) -> tuple[tuple[str, int], ...]:
    """(phase, steps) of one clip: ``(("denoise", n),)``, or each expert's steps (A14B).

    ``steps`` defaults to the model's ``sample_steps`` (maxdiffusion's
    ``num_inference_steps``); for a model with experts the boundary splits them.

        >>> from aoizora.workloads.wan import wan_workload, parse_resolution
        >>> denoise_steps(wan_workload("wan2.2-a14b", parse_resolution("480p")), 50)
        (('high_noise', 32), ('low_noise', 18))
    """
    cfg = _config(workload)
    n = cfg.sample_steps if steps is None else steps
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise WorkloadError(f"--steps {steps}: must be a positive number of steps, e.g. 50")
    if cfg.experts is None:
        return (("denoise", n),)
    schedule: ExpertSchedule = dataclasses.replace(cfg.experts, sample_steps=n)
    return schedule.steps_per_expert()


def vae_for(workload: Workload, *, chunk: int = 1) -> Workload:
    """The VAE decode of ``workload``'s clip with its model's VAE (``WanConfig.vae``)."""
    cfg = _config(workload)
    if workload.clip is None:
        raise WorkloadError(f"workload {workload.name!r} records no clip to decode")
    return vae_workload(cfg.vae, workload.clip, chunk=chunk)


def plan_vae(
    workload: Workload,
    slice_: Slice,
    *,
    chunk: int = 1,
    compile: bool = False,
    rank: Callable[..., VaePlan] = rank_vae,
    **options: Any,
) -> VaePlan:
    """The VAE decoder of ``workload``'s clip on ``slice_``, ranked by ``rank``
    (:func:`~aoizora.request.vae_rank.rank_vae`; ``options`` go to it: ``cache_dir``,
    ``progress``, ``workers``, ...); ``compile`` compiles the chosen sharding."""
    return rank(vae_for(workload, chunk=chunk), slice_, compile=compile, **options)


@dataclass(frozen=True)
class ClipPlan:
    """The step's plan, the VAE's plan, the text encoder and what they add up to."""

    step: PlanOutcome
    vae: VaePlan
    text_encoder: TextEncoder
    steps: tuple[tuple[str, int], ...]
    latency: ClipLatency

    @property
    def total_steps(self) -> int:
        return sum(n for _, n in self.steps)

    def plan(self) -> Plan:
        """The step's plan file with the clip's latency and the VAE's plan in it."""
        return dataclasses.replace(self.step.plan(), latency=self.latency, vae=self.vae.plan())

    def to_json(self) -> dict[str, Any]:
        """``clip_s``, ``text_encoder_s``, ``denoise_s``, ``vae_decode_s`` and how they
        were made: ``steps`` (and ``experts``), ``text_encoder``, ``vae`` (its plan, with
        the ``source`` of its figure)."""
        experts = [
            {"name": name, "steps": n, "step_s": self.step.winner_q2_s}
            for name, n in self.steps
            if name != "denoise"
        ]
        return {
            **self.latency.to_json(),
            "steps": self.total_steps,
            **({"experts": experts} if experts else {}),
            "text_encoder": self.text_encoder.to_json(),
            "vae": self.vae.to_json(),
        }


def plan_clip(
    step: PlanOutcome,
    *,
    steps: int | None = None,
    text_encoder: TextEncoder | None = None,
    vae_chunk: int = 1,
    vae_compile: bool = False,
    rank: Callable[..., VaePlan] = rank_vae,
    **options: Any,
) -> ClipPlan:
    """The whole clip on ``step``'s slice: ranks the VAE decoder (``options`` go to
    ``rank``; ``vae_compile`` compiles its choice) and adds the phases. ``text_encoder``
    defaults to the host CPU's."""
    phases = denoise_steps(step.workload, steps)
    vae = plan_vae(step.workload, step.slice_, chunk=vae_chunk, compile=vae_compile, rank=rank,
                   **options)  # fmt: skip
    te = text_encoder or host_text_encoder()
    latency = ClipLatency(
        text_encoder_s=te.seconds,
        denoise_s=sum(n for _, n in phases) * step.winner_q2_s,
        vae_decode_s=vae.decode_s,
    )
    return ClipPlan(step=step, vae=vae, text_encoder=te, steps=phases, latency=latency)
