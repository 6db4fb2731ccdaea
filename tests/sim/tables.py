"""A minimal ``[compute]`` table for the tests of its sub-tables (splash tiles, tile gathers)."""

from __future__ import annotations

from typing import Any


def compute_table(**extra: Any) -> dict[str, Any]:
    """The required ``[compute]`` entries (kernel ``splash``), and ``extra``."""
    return {
        "mxu_tile": {"value": 128, "source": "s"},
        "matmul_efficiency": {"value": 0.9, "source": "s"},
        "hbm_efficiency": {"value": 0.8, "source": "s"},
        "attention_kernel": {"value": "splash", "source": "s"},
        "attention_efficiency": {"splash": {"value": 0.5, "source": "s"}},
        **extra,
    }
