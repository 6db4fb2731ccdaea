"""AoiZora: topology-aware auto-parallel planning for diffusion transformers on TPU slices."""

from __future__ import annotations

from aoizora.errors import AoizoraError

__all__ = ["AoizoraError"]
