"""How long a replica (one slice running its plans) takes for a request, or a batch of two.

A replica serves a request whole and in order, as maxdiffusion's pipeline does: the text
encoder on the host, every denoising step on the slice, the VAE decode on the slice
(the clip latency of :mod:`aoizora.request.clip_plan`). Host and slice do not overlap
two requests' phases (not modelled: a server that encodes the next prompt while the
slice denoises would be faster).

A batch of two requests of one kind runs the denoising step compiled for two clips
(``batch_step_s``: one step of both); the text encoder and the VAE decode run once per
clip. A kind is batched only where that is faster per clip than one at a time.

    >>> ks = KindService(text_encoder_s=20.0, step_s=4.0, vae_decode_s=2.0, batch_step_s=7.0)
    >>> ks.clip_s(50), ks.batch_s(50, 2), ks.batches(50)
    (222.0, 394.0, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aoizora.errors import ServingError
from aoizora.serving.requests import Request, RequestKind
from aoizora.workloads.clip import Clip

__all__ = ["KindService", "SliceService"]


@dataclass(frozen=True)
class KindService:
    """One request kind's phases on one slice (seconds; ``batch_step_s`` is the step of a
    batch of two clips, None when no such plan was made or it did not fit)."""

    text_encoder_s: float
    step_s: float
    vae_decode_s: float
    batch_step_s: float | None = None

    def clip_s(self, steps: int) -> float:
        """One clip alone: ``text_encoder_s + steps x step_s + vae_decode_s``."""
        return self.text_encoder_s + steps * self.step_s + self.vae_decode_s

    def batch_s(self, steps: int, clips: int) -> float:
        """``clips`` clips of this kind together (1, or 2 with a batch plan)."""
        if clips == 1:
            return self.clip_s(steps)
        if clips != 2 or self.batch_step_s is None:
            raise ServingError(f"no plan for a batch of {clips} clips of this kind")
        return clips * (self.text_encoder_s + self.vae_decode_s) + steps * self.batch_step_s

    def batches(self, steps: int) -> bool:
        """Whether a batch of two is faster per clip than one clip at a time."""
        return self.batch_step_s is not None and self.batch_s(steps, 2) / 2 < self.clip_s(steps)


@dataclass(frozen=True)
class SliceService:
    """Every request kind's service on one slice (keyed by model and clip: the steps of a
    request scale its denoising)."""

    slice_spec: str
    num_chips: int
    generation: str
    kinds: Mapping[tuple[str, Clip], KindService]

    def of(self, kind: RequestKind) -> KindService:
        got = self.kinds.get((kind.model, kind.clip))
        if got is None:
            raise ServingError(f"{self.slice_spec} has no plan for {kind.label}")
        return got

    def seconds(self, batch: Sequence[Request]) -> float:
        """The replica time of ``batch`` (requests of one kind)."""
        kind = batch[0].kind
        return self.of(kind).batch_s(kind.steps, len(batch))

    def batches(self, kind: RequestKind) -> bool:
        return self.of(kind).batches(kind.steps)

    def mean_service_s(self, requests: Sequence[Request]) -> float:
        """Mean time one request takes alone: the load each brings (for utilisation)."""
        return sum(self.of(r.kind).clip_s(r.kind.steps) for r in requests) / len(requests)
