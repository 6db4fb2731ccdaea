"""A whole clip's latency: the text encoder, every denoising step and the VAE decode.

``clip_s = text_encoder_s + denoise_s + vae_decode_s``; the four names are an
interface: they are the top-level keys of ``aoizora plan --json``, of a plan file
(docs/plan.schema.json) and of the ``whatif --clip`` and ``serve`` outputs.

    >>> lat = ClipLatency(text_encoder_s=20.0, denoise_s=300.0, vae_decode_s=2.5)
    >>> lat.clip_s, sorted(lat.to_json())
    (322.5, ['clip_s', 'denoise_s', 'text_encoder_s', 'vae_decode_s'])
    >>> ClipLatency.from_json({**lat.to_json(), "clip_s": 1.0}, "plan")
    Traceback (most recent call last):
    ...
    aoizora.errors.PlanError: plan clip_s is 1.0 but text_encoder_s + denoise_s + ... = 322.5; ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aoizora.errors import PlanError

__all__ = ["CLIP_KEYS", "ClipLatency"]

# The JSON names, in the order a clip runs.
CLIP_KEYS: tuple[str, ...] = ("text_encoder_s", "denoise_s", "vae_decode_s", "clip_s")
_PARTS = CLIP_KEYS[:3]


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PlanError(f"{field} is {value!r}; it must be a finite number of seconds, e.g. 2.5")
    if value <= 0:
        raise PlanError(f"{field} is {value!r}; it must be positive seconds, e.g. 2.5")
    return float(value)


@dataclass(frozen=True)
class ClipLatency:
    """The predicted phases of one clip, in seconds (simulated where compiled)."""

    text_encoder_s: float
    denoise_s: float
    vae_decode_s: float

    def __post_init__(self) -> None:
        for name in _PARTS:
            object.__setattr__(self, name, _seconds(getattr(self, name), name))

    @property
    def clip_s(self) -> float:
        return self.text_encoder_s + self.denoise_s + self.vae_decode_s

    def to_json(self) -> dict[str, float]:
        """The four keys, with the names scripts read."""
        return {name: getattr(self, name) for name in CLIP_KEYS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> ClipLatency:
        """The latency from ``data``'s four keys; ``clip_s`` must be the sum of the others."""
        missing = [k for k in CLIP_KEYS if k not in data]
        if missing:
            raise PlanError(
                f"{where} has {sorted(set(CLIP_KEYS) - set(missing))} but lacks {missing}; "
                f"a clip latency has all of {list(CLIP_KEYS)}"
            )
        latency = cls(*(data[k] for k in _PARTS))
        total = _seconds(data["clip_s"], "clip_s")
        if not math.isclose(total, latency.clip_s, rel_tol=1e-9):
            raise PlanError(
                f"{where} clip_s is {total!r} but text_encoder_s + denoise_s + ... = "
                f"{latency.clip_s!r}; clip_s must be text_encoder_s + denoise_s + vae_decode_s"
            )
        return latency
