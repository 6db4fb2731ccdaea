"""The plan file's optional ``alternatives``: runners-up and baselines with their configurations.

Round trip, old plans without the key, every rejection naming the alternative and citing
the schema (jsonschema, an independent validator, rejects the same documents), each
alternative placed by Plan.mesh at its own chips, and -- on a real plan -- every
recorded prediction re-derived by replaying that configuration's compiled graph.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from aoizora.errors import PlanError
from aoizora.hlo.graph import graph_from_text
from aoizora.placement.enumerate import enumerate_placements
from aoizora.plan import Plan, load_plan
from aoizora.plan.alternatives import PlanAlternative
from aoizora.planner import DEFAULT_ORDER_LABEL, run_plan
from aoizora.replay import replay
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice
from tests.aoizora.test_plan import _fake_devices, _plan

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "plan.schema.json").read_text(encoding="utf-8"))


def _alternative(pick: int, *, role: str = "runner-up", name: str = "ctx8") -> PlanAlternative:
    s = load_slice("v5e:2x4")
    placement = enumerate_placements((1, 8), s, mesh_axis_names=("data", "context"))[pick]
    return PlanAlternative(
        role=role,
        name=name,
        candidate_id="data1.context8/seq/ring",
        placement_id=placement.id,
        mesh_axis_names=("data", "context"),
        mesh_shape=(1, 8),
        rules_name="seq",
        logical_rules=(("activation_length", ("context",)),),
        attention="ring",
        physical_ids=tuple(placement.order.physical_ids),
        step_s=0.25,
    )


def _with_alternatives() -> Plan:
    alts = (_alternative(1), _alternative(0, role="baseline", name="existing deployment"))
    return Plan.from_json_dict(
        {**_plan().to_json_dict(), "alternatives": [a.to_json() for a in alts]}
    )


def test_round_trip_and_schema(tmp_path: Path) -> None:
    plan = _with_alternatives()
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = load_plan(path)
    assert loaded == plan and loaded.to_json() == plan.to_json()
    assert [a.role for a in loaded.alternatives] == ["runner-up", "baseline"]
    jsonschema.validate(json.loads(plan.to_json()), SCHEMA)


def test_old_plans_load_and_keep_their_bytes() -> None:
    plain = _plan()
    assert "alternatives" not in plain.to_json_dict()  # plans without them: the same bytes
    assert Plan.from_json(plain.to_json()).alternatives == ()
    data = _with_alternatives().to_json_dict()
    del data["alternatives"]
    assert Plan.from_json_dict(data) == plain


def _broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(_with_alternatives().to_json_dict())
    change(data["alternatives"][0])
    return data


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda a: a.update(role="winner"), "role 'winner'"),
        (lambda a: a["device_order"].update(physical_ids=[0] * 8), "not a permutation"),
        (lambda a: a["mesh"].update(shape=[2, 2]), "mesh shape [2, 2]"),
        (lambda a: a.update(rules=[["activation_length", ["tensor"]]]), "'tensor'"),
        (lambda a: a.update(predicted_step_s=-1.0), "predicted_step_s"),
        (lambda a: a.update(extra=1), "unknown field"),
        (lambda a: a.pop("placement"), "lacks field"),
    ],
)
def test_a_bad_alternative_is_named_and_cites_the_schema(change: Any, needle: str) -> None:
    data = _broken(change)
    with pytest.raises(PlanError) as info:
        Plan.from_json_dict(data)
    message = str(info.value)
    assert message.startswith("alternatives[0]") and needle in message, message
    assert "[schema: docs/plan.schema.json#/properties/alternatives/items" in message
    # What a schema can see (the rest needs the slice: load_plan only).
    if needle not in ("not a permutation", "mesh shape [2, 2]", "'tensor'"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(data, SCHEMA)


def test_alternative_plan_places_each_device_on_its_chip() -> None:
    plan = _with_alternatives()
    for alt in plan.alternatives:
        variant = plan.alternative_plan(alt)
        assert (variant.candidate_id, variant.attention) == (alt.candidate_id, alt.attention)
        assert variant.predicted.winner_s == alt.step_s and variant.alternatives == ()
        mesh = variant.mesh(_fake_devices("v5e:2x4", seed=3))
        assert tuple(d.id for d in mesh.devices.flat) == alt.physical_ids
        assert dict(mesh.shape) == {"data": 1, "context": 8}


@pytest.mark.slow
def test_the_planner_records_every_runner_up_and_baseline(plan_cache_dir: Path) -> None:
    clip = parse_resolution("256x256", frames=5)
    outcome = run_plan(
        wan_workload("wan-tiny", clip), load_slice("v5e:2x2"), top_k=2,
        cache_dir=str(plan_cache_dir),
    )  # fmt: skip
    plan = outcome.plan()
    runners = [a for a in plan.alternatives if a.role == "runner-up"]
    baselines = [a for a in plan.alternatives if a.role == "baseline"]
    others = [s for s in outcome.scored if s is not outcome.winner]
    assert sorted(a.candidate_id for a in runners) == sorted(s.candidate.id for s in others)
    assert [a.step_s for a in runners] == sorted(a.step_s for a in runners)
    assert [(a.name, a.step_s) for a in baselines] == list(plan.predicted.baselines_s)
    assert all(a.placement_id == DEFAULT_ORDER_LABEL for a in baselines)
    graphs = {s.candidate.id: graph_from_text(s.compile.hlo_text) for s in outcome.scored}
    launch = outcome.slice_.chip.compute.program_launch_s  # one call: Q2 and the launch
    for alt in plan.alternatives:  # the recorded prediction is the configuration's own Q2
        variant = plan.alternative_plan(alt)
        simulated = replay(graphs[alt.candidate_id], outcome.slice_, variant.device_order())
        assert simulated.step_time_s + launch == pytest.approx(alt.step_s, rel=1e-9)
    assert Plan.from_json(plan.to_json()) == plan
