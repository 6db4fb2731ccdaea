"""AoiZora: topology-aware auto-parallel planning for diffusion transformers on TPU slices."""

from __future__ import annotations

from aoizora.errors import AoizoraError
from aoizora.plan import load_plan

__all__ = ["AoizoraError", "load_plan"]
