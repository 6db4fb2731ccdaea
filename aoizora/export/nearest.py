"""The one-line refusal: why a plan cannot be exported, and the nearest plan that can.

"Nearest" is the expressible alternative with the lowest predicted step time among
what is known beside the plan:

* after ``aoizora plan`` (:func:`outcome_alternatives`): every compiled sharding at its
  best placement, ranked by the same Q2 as the winner (baselines included: they are
  compiled);
* for a plan file (:func:`plan_alternatives`): the baselines the file records whose
  sharding is defined by name -- Wan's ``existing deployment`` (context = every device)
  and ``maxdiffusion recipe`` (data 2 x context the rest), both maxdiffusion's rules and
  ``gather_kv`` in maxdiffusion's own device order (aoizora/candidates/baselines.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aoizora.errors import AoizoraError, ExportError
from aoizora.plan.fields import PredictedLatencies
from aoizora.plan.file import Plan
from aoizora.planner import PlanOutcome
from aoizora.workloads.wan_config import WAN_RULE_SETS

__all__ = [
    "Alternative",
    "nearest_expressible",
    "outcome_alternatives",
    "plan_alternatives",
    "refusal_line",
]


@dataclass(frozen=True)
class Alternative:
    """A plan that could be exported instead: its name, plan and predicted step (simulated)."""

    label: str
    plan: Plan
    predicted_s: float


def _variant(
    plan: Plan, *, mesh: dict[str, int], rules_name: str, attention: str, predicted_s: float
) -> Plan:
    rules = next(r for r in WAN_RULE_SETS if r.name == rules_name)
    shape = tuple(mesh.get(a, 1) for a in plan.mesh_axis_names)
    ident = ".".join(f"{a}{s}" for a, s in zip(plan.mesh_axis_names, shape, strict=True))
    return dataclasses.replace(
        plan,
        mesh_shape=shape,
        rules_name=rules.name,
        logical_rules=rules.pairs,
        attention=attention,
        candidate_id=f"{ident}/{rules.name}/{attention}",
        placement_id="mesh_utils default",
        predicted=PredictedLatencies(winner_s=predicted_s),
    )


def plan_alternatives(plan: Plan) -> tuple[Alternative, ...]:
    """The baselines ``plan`` records whose sharding is known by name (module docstring).

    Their device order is maxdiffusion's own (``mesh_utils``), which the plan file does not
    hold: the returned plans keep ``plan``'s order and serve only to check expressibility.
    """
    if "context" not in plan.mesh_axis_names:
        return ()
    n = plan.num_devices
    meshes = {
        "existing deployment": {"context": n},
        "maxdiffusion recipe": {"data": 2, "context": n // 2},
    }
    out = []
    for name, seconds in plan.predicted.baselines_s:
        mesh = meshes.get(name)
        if mesh is None or n % 2 and "data" in mesh:
            continue
        try:
            variant = _variant(
                plan,
                mesh=mesh,
                rules_name="maxdiffusion",
                attention="gather_kv",
                predicted_s=seconds,
            )
        except AoizoraError:
            continue  # a mesh this plan's slice cannot hold
        out.append(Alternative(f"baseline {name!r} ({variant.candidate_id})", variant, seconds))
    return tuple(out)


def outcome_alternatives(outcome: PlanOutcome) -> tuple[Alternative, ...]:
    """Every compiled sharding of ``outcome`` at its best placement, fastest first."""
    base = outcome.plan()
    out = []
    for scores in outcome.scored:
        cand, best = scores.candidate, scores.best
        plan = dataclasses.replace(
            base,
            mesh_shape=tuple(best.order.mesh_shape),
            rules_name=cand.rules.name,
            logical_rules=cand.rules.pairs,
            attention=cand.attention,
            candidate_id=cand.id,
            placement_id=best.placement_id,
            coords=tuple(tuple(c) for c in best.order.coords),
            physical_ids=tuple(best.order.physical_ids),
            predicted=dataclasses.replace(base.predicted, winner_s=best.q2_s),
        )
        out.append(Alternative(f"{cand.id} at placement {best.placement_id}", plan, best.q2_s))
    return tuple(sorted(out, key=lambda a: (a.predicted_s, a.label)))


def nearest_expressible(
    alternatives: Sequence[Alternative], expressible: Callable[[Plan], bool]
) -> Alternative | None:
    """The fastest alternative ``expressible`` accepts (ties: by label), or None."""
    ok = [a for a in alternatives if expressible(a.plan)]
    return min(ok, key=lambda a: (a.predicted_s, a.label)) if ok else None


def refusal_line(
    plan: Plan, reason: str, nearest: Alternative | None, *, among: str
) -> ExportError:
    """The one-line refusal for ``plan``: the reason and the nearest expressible plan."""
    step_ms = plan.predicted.winner_s * 1e3
    head = f"maxdiffusion cannot express plan {plan.candidate_id} ({step_ms:.2f} ms per step): "
    if nearest is None:
        return ExportError(f"{head}{reason}; no plan {among} is expressible either")
    ratio = nearest.predicted_s / plan.predicted.winner_s
    return ExportError(
        f"{head}{reason}; nearest expressible plan: {nearest.label} at "
        f"{nearest.predicted_s * 1e3:.2f} ms per step (simulated, {ratio:.2f}x this plan's)"
    )
