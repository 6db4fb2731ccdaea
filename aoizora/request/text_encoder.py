"""The text encoder's part of a clip: UMT5-XXL on the host CPU, as maxdiffusion runs it.

maxdiffusion (AI-Hypercomputer/maxdiffusion at 7cfb880, ``pipelines/wan/wan_pipeline.py``)
loads the UMT5 encoder as a PyTorch ``UMT5EncoderModel`` on the host and calls it once
for the prompt and once for the negative prompt (``use_batched_text_encoder: False`` in
``base_wan_14b.yml``); its own comment puts a call at "~10s/call CPU text encoder", and it
caches the embeddings of a repeated prompt pair. So the default is two calls of 10 s,
20 s a request, on the host (docs/facts.md, Text encoder). The host runs it before the
slice denoises; it is not compiled or simulated, and ``--text-encoder-s`` replaces it
(for a faster host, batched prompts, or cached prompts).

    >>> te = host_text_encoder()
    >>> te.seconds, te.where
    (20.0, 'host')
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

__all__ = ["HOST_CALLS", "HOST_SECONDS_PER_CALL", "TextEncoder", "host_text_encoder"]

# maxdiffusion wan_pipeline.py encode_prompt: "the ~10s/call CPU text encoder".
HOST_SECONDS_PER_CALL = 10.0
# base_wan_14b.yml use_batched_text_encoder: False -- prompt and negative prompt apart.
HOST_CALLS = 2
_SOURCE = (
    "maxdiffusion 7cfb880 pipelines/wan/wan_pipeline.py: UMT5 on the host CPU, '~10s/call'; "
    "base_wan_14b.yml use_batched_text_encoder: False (two calls a request)"
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
    """The host-CPU text encoder: maxdiffusion's default, or ``seconds`` if given."""
    if seconds is None:
        return TextEncoder("host", HOST_CALLS * HOST_SECONDS_PER_CALL, _SOURCE)
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        raise WorkloadError(
            f"--text-encoder-s {seconds}: must be a positive number of seconds, e.g. "
            f"--text-encoder-s 10 (default {HOST_CALLS * HOST_SECONDS_PER_CALL:g}: "
            f"maxdiffusion's two host calls)"
        )
    return TextEncoder("host", float(seconds), "given (--text-encoder-s)")
