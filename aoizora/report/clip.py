"""The whole clip in a plan report: text encoder + denoising + VAE decode, and the VAE's plan.

>>> format_s(412.345), format_s(0.0123)
('412.3 s', '12.30 ms')
"""

from __future__ import annotations

from aoizora.report.summary import format_ms
from aoizora.request.clip_plan import ClipPlan

__all__ = ["format_s", "render_clip"]


def format_s(seconds: float | None) -> str:
    """Seconds with one decimal, milliseconds below a second (``'n/a'`` for None)."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.1f} s" if seconds >= 1 else format_ms(seconds)


def render_clip(cp: ClipPlan) -> str:
    """The clip's phases (every latency simulated but the host text encoder's) and the
    VAE decoder's winner against its baselines."""
    lat, vae = cp.latency, cp.vae
    steps = " + ".join(f"{name} {n}" for name, n in cp.steps if name != "denoise")
    per_step = format_ms(cp.step.winner_q2_s)
    phases = [
        ("text encoder", format_s(lat.text_encoder_s),
         f"{cp.text_encoder.where} CPU, not simulated (--text-encoder-s; JSON text_encoder)"),
        ("denoising", format_s(lat.denoise_s),
         f"{cp.total_steps} steps{f' ({steps})' if steps else ''} x {per_step} (simulated)"),
        ("VAE decode", format_s(lat.vae_decode_s),
         f"{vae.workload.name}: {vae.winner.candidate.id} (simulated)"),
        ("clip", format_s(lat.clip_s), "clip_s = text_encoder_s + denoise_s + vae_decode_s"),
    ]  # fmt: skip
    width = max(len(name) for name, _, _ in phases)
    lines = ["", "whole clip (every latency simulated but the host's text encoder):"]
    lines += [f"  {name.ljust(width)}  {value:>9}  {how}" for name, value, how in phases]
    base = ", ".join(
        f"{b.name} {format_ms(b.q2_s)}" for b in vae.baselines if b.name != "logical search"
    )
    lines.append(
        f"VAE decode plan: {vae.winner.candidate.id} @ {vae.winner_placement.placement_id} "
        f"{format_ms(vae.winner_q2_s)}; baselines: {base or 'none'}"
    )
    return "\n".join(lines) + "\n"
