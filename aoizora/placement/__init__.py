"""Physical placements: device orders, the slice's symmetries, the distinct placements of a mesh."""

from __future__ import annotations

__all__: list[str] = []
