"""Stage-2 ranking at scale: proven bounds, exact shortcuts and the placement search."""

from __future__ import annotations

__all__: list[str] = []
