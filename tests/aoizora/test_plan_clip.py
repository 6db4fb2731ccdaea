"""The plan file's optional whole-clip fields: the latency, the VAE's plan, the compute model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from aoizora.errors import PlanError
from aoizora.plan import Plan, PredictedLatencies, load_plan
from aoizora.plan.clip_latency import CLIP_KEYS, ClipLatency
from aoizora.plan.schema import PLAN_JSON_SCHEMA
from aoizora.workloads.rules import Rules
from tests.aoizora.test_plan import _plan

LATENCY = ClipLatency(text_encoder_s=3.9, denoise_s=194.6, vae_decode_s=1.2)


def _vae(step: Plan) -> Plan:
    return dataclasses.replace(
        step, model="wan2.1-vae", workload="wan2.1-vae@832x480x81", inputs=(),
        mesh_axis_names=("width", "height"), rules_name="spatial",
        logical_rules=Rules.of("spatial", [("vae_width", "width")]).pairs,
        attention="none", candidate_id="width2.height4/spatial/none",
    )  # fmt: skip


def _whole() -> Plan:
    step = _plan()
    return dataclasses.replace(step, latency=LATENCY, vae=_vae(step))


def test_round_trip_and_schema(tmp_path: Path) -> None:
    plan = _whole()
    data = json.loads(plan.to_json())
    assert {k: data[k] for k in CLIP_KEYS} == LATENCY.to_json()
    assert data["clip_s"] == pytest.approx(3.9 + 194.6 + 1.2)
    assert data["vae"]["candidate"] == "width2.height4/spatial/none" and "vae" not in data["vae"]
    jsonschema.validate(data, PLAN_JSON_SCHEMA)
    plan.save(tmp_path / "p.json")
    back = load_plan(tmp_path / "p.json")
    assert back == plan and back.to_json() == plan.to_json()
    assert back.vae is not None and back.vae.mesh_axis_names == ("width", "height")
    # A plan without them is still the plan it was (older files load unchanged).
    old = _plan()
    assert load_plan_text(old.to_json()) == old and "clip_s" not in old.to_json()


def load_plan_text(text: str) -> Plan:
    return Plan.from_json(text)


def test_compute_model_is_kept_as_written() -> None:
    data = json.loads(_plan().to_json())
    data["compute_model"] = {"generation": "v5e", "mxu_tile": 128}
    plan = Plan.from_json_dict(data)
    assert json.loads(plan.compute_model) == {"generation": "v5e", "mxu_tile": 128}
    assert json.loads(plan.to_json())["compute_model"] == data["compute_model"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d.update(clip_s=1.0), "clip_s is 1.0 but"),
        (lambda d: d.pop("denoise_s"), "lacks ['denoise_s']"),
        (lambda d: d.update(vae_decode_s=-2), "vae_decode_s is -2"),
        (lambda d: d.update(text_encoder_s="fast"), "text_encoder_s is 'fast'"),
        (lambda d: d["vae"].update(slice="v5e:2x2"), "vae: "),
        (lambda d: d["vae"].update(vae={}), "vae: plan has unknown field(s) ['vae']"),
        (lambda d: d.update(compute_model=3), "compute_model is 3"),
        (lambda d: d.update(alternative="x"), "unknown field(s) ['alternative']"),
    ],
)
def test_bad_optional_fields_are_refused(change: object, needle: str) -> None:
    data = json.loads(_whole().to_json())
    change(data)  # type: ignore[operator]
    with pytest.raises(PlanError) as err:
        Plan.from_json_dict(data)
    assert needle in str(err.value)


def test_the_vae_plan_must_be_on_the_same_slice() -> None:
    step = _plan()
    other = _vae(_plan("v5e:2x2", (2, 2), 0))
    with pytest.raises(PlanError, match="the VAE decodes on the slice that denoised"):
        dataclasses.replace(step, vae=other)


def test_a_vae_figure_from_stage1_says_so_and_round_trips(tmp_path: Path) -> None:
    step = _plan()
    q1 = PredictedLatencies(winner_s=0.49, baselines_s=(("replicated", 3.88),), source="stage1")
    vae = dataclasses.replace(_vae(step), predicted=q1)
    plan = dataclasses.replace(step, latency=LATENCY, vae=vae)
    data = json.loads(plan.to_json())
    assert data["vae"]["predicted_latency_s"]["source"] == "stage1"
    assert data["predicted_latency_s"]["source"] == "simulated"
    jsonschema.validate(data, PLAN_JSON_SCHEMA)
    plan.save(tmp_path / "p.json")
    back = load_plan(tmp_path / "p.json")
    assert back == plan and back.vae is not None and back.vae.predicted.source == "stage1"
    data["vae"]["predicted_latency_s"]["source"] = "guessed"
    with pytest.raises(
        PlanError, match="source is 'guessed'; allowed: \\['simulated', 'stage1'\\]"
    ):
        Plan.from_json_dict(data)
