"""What a plan shows: the summary table (:mod:`.summary`), the report folder
(:mod:`.directory`) and its pictures."""

from __future__ import annotations

__all__: list[str] = []
