"""The sharding candidate space (:mod:`.space`) and the named baselines (:mod:`.baselines`)."""

from __future__ import annotations

__all__: list[str] = []
