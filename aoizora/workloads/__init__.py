"""Model workloads the planner knows by name (Wan 2.1) and their attention building blocks."""

from __future__ import annotations

__all__: list[str] = []
