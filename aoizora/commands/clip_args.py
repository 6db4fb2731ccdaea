"""The arguments of a whole clip, shared by ``plan``, ``whatif`` and ``serve``: the steps,
the text encoder's time and the VAE's decode chunk (docs/serving.md, Clip latency)."""

from __future__ import annotations

import argparse
from typing import Any

from aoizora.errors import WorkloadError
from aoizora.request.text_encoder import HOST_TEXT_ENCODER_S, host_text_encoder

__all__ = ["add_clip_arguments", "check_clip_arguments", "clip_options"]


def add_clip_arguments(p: argparse.ArgumentParser, *, switch: str | None) -> None:
    """``--steps``, ``--text-encoder-s``, ``--vae-chunk``, ``--vae-compile`` and the switch
    that turns the clip on (``--clip``, what-if) or off (``--no-clip``, plan); ``None``:
    always on (serve)."""
    if switch == "--clip":
        p.add_argument(
            "--clip",
            action="store_true",
            help="also rank each slice's VAE decoder (Stage 1) and report clip_s = "
            "text_encoder_s + denoise_s + vae_decode_s (off by default)",
        )
    elif switch == "--no-clip":
        p.add_argument(
            "--no-clip",
            action="store_true",
            help="plan the denoising step only: no VAE plan, no clip_s (Wan models report "
            "the whole clip by default)",
        )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="denoising steps of a clip (default: the model's, maxdiffusion's "
        "num_inference_steps: 50 for wan2.1-14b, 30 for wan2.1-1.3b, 40 for wan2.2-a14b)",
    )
    p.add_argument(
        "--text-encoder-s",
        type=float,
        default=None,
        metavar="SECONDS",
        help="the text encoder's time per request on the host CPU (default "
        f"{HOST_TEXT_ENCODER_S:g}: maxdiffusion's measured conditioning on a v7x-8 host)",
    )
    p.add_argument(
        "--vae-chunk",
        type=int,
        default=1,
        metavar="FRAMES",
        help="latent frames the VAE decodes per scan step (maxdiffusion's vae_decode_chunk, "
        "default %(default)s)",
    )
    p.add_argument(
        "--vae-compile",
        action="store_true",
        help="compile the VAE decoder's chosen sharding and report its simulated decode "
        "(minutes of libtpu code generation for its convolutions); by default the VAE is "
        "ranked by Stage 1 alone and vae_decode_s is Stage 1's Q1 (docs/serving.md)",
    )


def check_clip_arguments(args: argparse.Namespace) -> None:
    """Refuse bad clip arguments before jax starts (:class:`WorkloadError`)."""
    if args.steps is not None and args.steps < 1:
        raise WorkloadError(f"--steps {args.steps}: must be a positive number of steps, e.g. 50")
    if args.vae_chunk < 1:
        raise WorkloadError(
            f"--vae-chunk {args.vae_chunk}: must be a positive number of latent frames, e.g. 1"
        )
    if args.text_encoder_s is not None:
        host_text_encoder(args.text_encoder_s)
    if getattr(args, "clip", False) and getattr(args, "workload", None) is not None:
        raise WorkloadError(
            "--clip needs a Wan model (--model): the clip's VAE and steps are the model's; "
            f"--workload {args.workload!r} has none"
        )


def clip_options(args: argparse.Namespace) -> dict[str, Any]:
    """``steps``, ``text_encoder``, ``vae_chunk`` and ``vae_compile`` for
    :func:`aoizora.request.clip_plan.plan_clip`."""
    return {
        "steps": args.steps,
        "text_encoder": host_text_encoder(args.text_encoder_s),
        "vae_chunk": args.vae_chunk,
        "vae_compile": args.vae_compile,
    }
