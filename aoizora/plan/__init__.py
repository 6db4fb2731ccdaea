"""The plan file (:mod:`aoizora.plan.file`) and the values it is made of
(:mod:`aoizora.plan.fields`): ``Plan``, ``load_plan`` and the field types."""

from __future__ import annotations

from aoizora.plan.fields import (
    PlanInput,
    PredictedLatencies,
    Provenance,
    WorkloadSource,
    compute_model_json,
    plan_inputs,
)
from aoizora.plan.file import ALLOWED_ATTENTION, PLAN_SCHEMA, Clip, Plan, load_plan

__all__ = [
    "ALLOWED_ATTENTION",
    "PLAN_SCHEMA",
    "Clip",
    "Plan",
    "PlanInput",
    "PredictedLatencies",
    "Provenance",
    "WorkloadSource",
    "load_plan",
    "compute_model_json",
    "plan_inputs",
]
