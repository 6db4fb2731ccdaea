"""Studies built on the planner and the simulator: what-if, validation against
measurements, calibration."""

from __future__ import annotations

__all__: list[str] = []
