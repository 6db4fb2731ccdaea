"""The text encoder's part of a clip: UMT5-XXL on the host CPU, as maxdiffusion runs it.

maxdiffusion (AI-Hypercomputer/maxdiffusion at 7cfb880, ``pipelines/wan/wan_pipeline.py``)
loads the UMT5 encoder as a PyTorch ``UMT5EncoderModel`` on the TPU VM's host CPU and
encodes the prompt and the negative prompt there before the slice denoises. Its timing
summary calls that phase "Conditioning"; the measured figures on a v7x-8 are 3.9 s and
2.2 s (maxdiffusion PR #430, two runs of Wan 2.2), so the default is the slower, 3.9 s a
request (docs/facts.md, Text encoder). It is a host phase: not compiled, not simulated;
``--text-encoder-s`` replaces it (another host, a cached prompt pair -- maxdiffusion
caches the embeddings of a repeated pair -- or its own comment's "~10s/call" for an
unbatched, uncompiled float32 encoder).

    >>> te = host_text_encoder()
    >>> te.seconds, te.where
    (3.9, 'host')
    >>> host_text_encoder(0)
    Traceback (most recent call last):
    ...
    aoizora.errors.WorkloadError: --text-encoder-s 0: must be a positive number of seconds, ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aoizora.errors import WorkloadError

__all__ = ["HOST_TEXT_ENCODER_S", "TextEncoder", "host_text_encoder"]

# maxdiffusion PR #430 TIMING SUMMARY on v7x-8: "Conditioning: 3.9s" (and 2.2 s in a
# second run): the host's UMT5 encoding of both prompts of one request.
HOST_TEXT_ENCODER_S = 3.9
_SOURCE = (
    "maxdiffusion PR #430 (2026-06-25) TIMING SUMMARY on v7x-8: Conditioning 3.9 s "
    "(2.2 s in a second run); UMT5 on the host CPU (pipelines/wan/wan_pipeline.py at 7cfb880)"
)


@dataclass(frozen=True)
class TextEncoder:
    """Where the text encoder runs (``"host"``: the CPU beside the slice) and how long one
    request's encoding takes; ``source`` says where the number comes from."""

    where: str
    seconds: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"where": self.where, "seconds": self.seconds, "source": self.source}


def host_text_encoder(seconds: float | None = None) -> TextEncoder:
    """The host-CPU text encoder: maxdiffusion's measured conditioning, or ``seconds``."""
    if seconds is None:
        return TextEncoder("host", HOST_TEXT_ENCODER_S, _SOURCE)
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise WorkloadError(
            f"--text-encoder-s {seconds}: must be a positive number of seconds, e.g. "
            f"--text-encoder-s 10 (default {HOST_TEXT_ENCODER_S:g}: maxdiffusion's measured "
            "conditioning on a v7x-8 host)"
        )
    return TextEncoder("host", float(seconds), "given (--text-encoder-s)")
