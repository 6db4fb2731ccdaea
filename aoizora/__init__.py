"""AoiZora: topology-aware auto-parallel planning for diffusion transformers on TPU slices.

The public API: :func:`user_workload` and :class:`Rules` describe a model of your
own for the planner; :func:`load_plan` reads a plan file and builds its Mesh.

They load on first use (PEP 562): importing the package, as the command line does,
does not start jax, so bad input (an unknown generation, a slice libtpu cannot
describe) is refused in well under a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from aoizora.errors import AoizoraError

if TYPE_CHECKING:
    from aoizora.plan import load_plan
    from aoizora.workloads.base import user_workload
    from aoizora.workloads.rules import Rules

__all__ = ["AoizoraError", "Rules", "load_plan", "user_workload"]

# Public name -> the module that defines it.
_LAZY = {
    "Rules": "aoizora.workloads.rules",
    "load_plan": "aoizora.plan",
    "user_workload": "aoizora.workloads.base",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aoizora' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
