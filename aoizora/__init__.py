"""AoiZora: topology-aware auto-parallel planning for diffusion transformers on TPU slices.

The public API: :func:`user_workload` and :class:`Rules` describe a model of your
own for the planner; :func:`load_plan` reads a plan file and builds its Mesh.
"""

from __future__ import annotations

from aoizora.errors import AoizoraError
from aoizora.plan import load_plan
from aoizora.workloads.base import user_workload
from aoizora.workloads.rules import Rules

__all__ = ["AoizoraError", "Rules", "load_plan", "user_workload"]
