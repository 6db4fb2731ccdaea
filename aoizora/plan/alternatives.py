"""The configurations a plan records beside its winner: runners-up and baselines.

A plan file's optional ``alternatives`` list holds, for each, what it takes to build
and run it on the slice -- the role (``"runner-up"`` or ``"baseline"``), its name, the
candidate id, the placement id (the planner's label of its device order), the logical
mesh (axis names and shape), the rules (name and pairs), the attention kind, the device
order (libtpu device ids in mesh-flat order) and the predicted step latency
(``predicted_step_s``, simulated like the winner's). ``aoizora measure`` times them
beside the winner (docs/measure.md). Runners-up are every other compiled sharding at
its best placement, fastest first; baselines follow, by name, each in its default
device order. :meth:`aoizora.plan.Plan.alternative_plan` turns one into a plan of its own
(checked against the slice like the winner).

    >>> alt = PlanAlternative(role="baseline", name="existing deployment",
    ...     candidate_id="context4/seq/gather_kv", placement_id="default order",
    ...     mesh_axis_names=("context",),
    ...     mesh_shape=(4,), rules_name="seq", logical_rules=(("length", ("context",)),),
    ...     attention="gather_kv", physical_ids=(0, 1, 3, 2), step_s=0.5)
    >>> PlanAlternative.from_json(alt.to_json(), "alternatives[0]") == alt
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aoizora.candidates.space import Candidate
from aoizora.errors import PlanError
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan.fields import (
    check_keys,
    check_latency,
    check_text,
    json_list,
    json_object,
    json_text,
)
from aoizora.plan.memory import PlanMemory
from aoizora.plan.splash import SPLASH_KEYS, check_splash, splash_from_json, splash_json
from aoizora.workloads.rules import rule_pair_from_json, rule_pairs_to_json

__all__ = ["ALTERNATIVE_ROLES", "PlanAlternative"]

# What an alternative is to the winner: another sharding the planner ranked below it,
# or a deployment it is compared against (aoizora/candidates/baselines.py).
ALTERNATIVE_ROLES: tuple[str, ...] = ("runner-up", "baseline")
_KEYS = (
    "attention",
    "candidate",
    "device_order",
    "mesh",
    "name",
    "placement",
    "predicted_step_s",
    "role",
    "rules",
    "rules_name",
)


@dataclass(frozen=True)
class PlanAlternative:
    """A runner-up or baseline of a plan: one (sharding, placement) and its predicted step.

    The mesh, rules and device order are checked against the plan's slice when the plan
    is built (:meth:`aoizora.plan.Plan.alternative_plan`); here only their types.
    """

    role: str
    name: str
    candidate_id: str
    placement_id: str
    mesh_axis_names: tuple[str, ...]
    mesh_shape: tuple[int, ...]
    rules_name: str
    logical_rules: tuple[tuple[str, tuple[str, ...]], ...]
    attention: str
    physical_ids: tuple[int, ...]
    step_s: float
    memory: PlanMemory | None = None  # its per-device HBM (aoizora.plan.memory)
    splash_blocks: tuple[int, int, int] | None = None  # its splash tiles (None: the 512)
    scoped_vmem_kib: int | None = None  # the VMEM limit they need (None: the default)

    def __post_init__(self) -> None:
        where = f"alternative {self.name!r}"
        if self.memory is not None and not isinstance(self.memory, PlanMemory):
            raise PlanError(f"{where}: memory must be a PlanMemory, got {self.memory!r}")
        check_splash(self.splash_blocks, self.scoped_vmem_kib, f"{where}: ")
        if self.role not in ALTERNATIVE_ROLES:
            raise PlanError(
                f"{where}: role {self.role!r} is not one of {list(ALTERNATIVE_ROLES)}, e.g. "
                "'runner-up'"
            )
        check_text(self.name, "alternative name", "e.g. 'existing deployment'")
        check_text(self.candidate_id, f"{where} candidate", "e.g. 'data2.context4/seq/gather_kv'")
        check_text(self.placement_id, f"{where} placement", "e.g. 'default order'")
        check_text(self.rules_name, f"{where} rules_name", "e.g. 'maxdiffusion'")
        check_text(self.attention, f"{where} attention", "e.g. 'gather_kv'")
        object.__setattr__(self, "step_s", check_latency(self.step_s, f"{where} predicted_step_s"))

    @classmethod
    def of(
        cls,
        role: str,
        name: str,
        candidate: Candidate,
        placement: tuple[str, DeviceOrder],
        step_s: float,
        memory: PlanMemory | None = None,
    ) -> PlanAlternative:
        """The alternative ``candidate`` at ``placement`` (its id and order), predicted at
        ``step_s`` and holding ``memory`` per device."""
        placement_id, order = placement
        return cls(
            role=role,
            name=name,
            candidate_id=candidate.id,
            placement_id=placement_id,
            mesh_axis_names=tuple(candidate.mesh_axis_names),
            mesh_shape=tuple(order.mesh_shape),
            rules_name=candidate.rules.name,
            logical_rules=tuple((k, tuple(v)) for k, v in candidate.rules.pairs),
            attention=candidate.attention,
            physical_ids=tuple(order.physical_ids),
            step_s=step_s,
            memory=memory,
            splash_blocks=candidate.splash_blocks,
            scoped_vmem_kib=candidate.scoped_vmem_kib,
        )

    def to_json(self) -> dict[str, Any]:
        tiles = splash_json(self.splash_blocks, self.scoped_vmem_kib)
        return (
            ({} if self.memory is None else {"memory": self.memory.to_json()})
            | tiles
            | {
                "role": self.role,
                "name": self.name,
                "candidate": self.candidate_id,
                "placement": self.placement_id,
                "mesh": {"axis_names": list(self.mesh_axis_names), "shape": list(self.mesh_shape)},
                "rules_name": self.rules_name,
                "rules": rule_pairs_to_json(self.logical_rules),
                "attention": self.attention,
                "device_order": {"physical_ids": list(self.physical_ids)},
                "predicted_step_s": self.step_s,
            }
        )

    @classmethod
    def from_json(cls, value: Any, where: str) -> PlanAlternative:
        data = json_object(value, where, None)
        check_keys(data, _KEYS, where, ("memory", *SPLASH_KEYS))
        mesh = json_object(data["mesh"], f"{where}.mesh", ("axis_names", "shape"))
        order = json_object(data["device_order"], f"{where}.device_order", ("physical_ids",))
        rules = []
        for i, item in enumerate(json_list(data["rules"], f"{where}.rules")):
            pair = rule_pair_from_json(item)
            if pair is None:
                raise PlanError(
                    f"{where}.rules[{i}] is {item!r}; each rule is [logical name, [mesh "
                    "axes...]], e.g. ['activation_length', ['context']]"
                )
            rules.append(pair)
        try:
            return cls._checked(data, mesh, order, tuple(rules), where)
        except PlanError as exc:  # a field's own check: name the alternative's place
            text = str(exc)
            raise PlanError(text if text.startswith(where) else f"{where}: {text}") from None

    @classmethod
    def _checked(
        cls,
        data: dict[str, Any],
        mesh: dict[str, Any],
        order: dict[str, Any],
        rules: tuple[tuple[str, tuple[str, ...]], ...],
        where: str,
    ) -> PlanAlternative:
        return cls(
            role=json_text(data["role"], f"{where}.role"),
            name=json_text(data["name"], f"{where}.name"),
            candidate_id=json_text(data["candidate"], f"{where}.candidate"),
            placement_id=json_text(data["placement"], f"{where}.placement"),
            mesh_axis_names=tuple(json_list(mesh["axis_names"], f"{where}.mesh.axis_names")),
            mesh_shape=tuple(json_list(mesh["shape"], f"{where}.mesh.shape")),
            rules_name=json_text(data["rules_name"], f"{where}.rules_name"),
            logical_rules=rules,
            attention=json_text(data["attention"], f"{where}.attention"),
            physical_ids=tuple(
                json_list(order["physical_ids"], f"{where}.device_order.physical_ids")
            ),
            step_s=data["predicted_step_s"],
            memory=PlanMemory.from_json(data["memory"], f"{where}.memory")
            if "memory" in data
            else None,
            **splash_from_json(data, where),
        )
