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


def _vae_lines(cp: ClipPlan) -> tuple[str, list[str]]:
    """The VAE phase's note and the lines on its plan: the choice, its figure's source,
    the baselines by Stage 1 (none of them compiled; each one call, Q1 and the launch)."""
    vae = cp.vae
    cand = vae.winner.candidate.id
    if vae.source == "simulated":
        how = f"{vae.workload.name}: {cand} (simulated, compiled)"
        head = (
            f"VAE decode plan: {cand} @ {vae.placement_id} {format_ms(vae.decode_s)} simulated "
            f"(Stage 1's Q1 {format_ms(vae.winner.q1_s)})"
        )
    else:
        how = (
            f"{vae.workload.name}: {cand} (Stage 1's Q1, not compiled; --vae-compile simulates it)"
        )
        head = f"VAE decode plan: {cand} @ {vae.placement_id} {format_ms(vae.decode_s)} by Stage 1"
    base = ", ".join(
        f"{b.name} {format_ms(vae.figure_of(b))}{' (over HBM by Stage 1)' if b.over_hbm else ''}"
        for b in vae.baselines
    )
    lines = [f"{head}; baselines by Stage 1: {base or 'none'}"]
    if vae.memory is not None:
        chunk = vae.workload.info.get("chunk", 1)
        lines.append(f"VAE decode memory (vae_decode_chunk {chunk}): {vae.memory.line()}")
    lines += [f"VAE warning: {w}" for w in vae.warnings]
    return how, lines


def render_clip(cp: ClipPlan) -> str:
    """The clip's phases (every latency simulated but the host text encoder's and, unless
    compiled, the VAE decode's) and the VAE decoder's choice against its baselines."""
    lat = cp.latency
    steps = " + ".join(f"{name} {n}" for name, n in cp.steps if name != "denoise")
    per_step = format_ms(cp.step.winner_q2_s)
    vae_how, vae_lines = _vae_lines(cp)
    phases = [
        ("text encoder", format_s(lat.text_encoder_s),
         f"{cp.text_encoder.where} CPU, not simulated (--text-encoder-s; JSON text_encoder)"),
        ("denoising", format_s(lat.denoise_s),
         f"{cp.total_steps} steps{f' ({steps})' if steps else ''} x {per_step} (simulated)"),
        ("VAE decode", format_s(lat.vae_decode_s), vae_how),
        ("clip", format_s(lat.clip_s), "clip_s = text_encoder_s + denoise_s + vae_decode_s"),
    ]  # fmt: skip
    width = max(len(name) for name, _, _ in phases)
    simulated = "the host's text encoder" + (
        "" if cp.vae.source == "simulated" else " and the VAE decode (Stage 1)"
    )
    lines = ["", f"whole clip (every latency simulated but {simulated}):"]
    lines += [f"  {name.ljust(width)}  {value:>9}  {how}" for name, value, how in phases]
    lines += vae_lines
    return "\n".join(lines) + "\n"
