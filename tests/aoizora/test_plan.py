"""The plan file: round trip, byte-for-byte determinism, every validation error, Plan.mesh."""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import pytest

import aoizora
from aoizora.errors import PlanError
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.enumerate import enumerate_placements
from aoizora.plan import (
    PLAN_SCHEMA,
    Clip,
    Plan,
    PlanInput,
    PredictedLatencies,
    Provenance,
    compute_model_json,
    load_plan,
)
from aoizora.workloads.rules import Rules, logical_to_pspec
from sim.topology import load_slice

RULES = Rules.of(
    "seq",
    [
        ("activation_batch", ("data",)),
        ("activation_length", "context"),
        ("embed", ("context", "data")),
        ("embed", "data"),  # a fallback rule for the same logical name (Flax semantics)
        ("norm", None),
    ],
)


INPUTS = (
    PlanInput("arg0['w']", (1536, 8960), "bfloat16", ("embed", "mlp")),
    PlanInput(
        "arg1", (2, 32760, 1536), "bfloat16", ("activation_batch", "activation_length", None)
    ),  # noqa: E501
)


def _plan(slice_name: str = "v5e:2x4", mesh_shape: tuple[int, ...] = (2, 4), pick: int = 3) -> Plan:
    s = load_slice(slice_name)
    names = ("data", "context")[: len(mesh_shape)]
    placement = enumerate_placements(mesh_shape, s, mesh_axis_names=names)[pick]
    return Plan.create(
        model="wan2.1-1.3b",
        workload="wan2.1-1.3b@832x480x81",
        clip=Clip(width=832, height=480, frames=81),
        inputs=INPUTS,
        mesh_axis_names=names,
        order=placement.order,
        rules=RULES,
        attention="gather_kv",
        candidate_id="data2.context4/seq/gather_kv",
        placement_id=placement.id,
        predicted=PredictedLatencies(
            winner_s=0.1234567890123,
            baselines_s=(("logical search", 0.15), ("existing deployment", 1 / 3)),
        ),
        provenance=Provenance(aoizora="0.1.0", jax="0.10.2", jaxlib="0.10.2", libtpu=None),
    )


class FakeDevice:
    def __init__(self, device_id: int, coords: Any) -> None:
        self.id = device_id
        if coords is not None:
            self.coords = coords

    def __repr__(self) -> str:
        return f"FakeDevice({self.id})"


def _fake_devices(slice_name: str, *, seed: int = 0) -> list[FakeDevice]:
    s = load_slice(slice_name)
    devices = [FakeDevice(s.physical_id(c), [*c, 0]) for c in s.coords]
    random.Random(seed).shuffle(devices)
    return devices


# --- round trip and determinism ----------------------------------------------------------


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    plan = _plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    loaded = aoizora.load_plan(path)
    assert loaded == plan
    assert path.read_text(encoding="utf-8") == plan.to_json()
    assert loaded.to_json() == plan.to_json()
    assert loaded.device_order() == DeviceOrder.from_coords(
        plan.coords, mesh_shape=(2, 4), slice_=load_slice("v5e:2x4")
    )


def test_json_is_canonical_and_deterministic() -> None:
    first, second = _plan(), _plan()
    assert first.to_json() == second.to_json() == first.to_json()
    text = first.to_json()
    assert text.endswith("}\n") and not text.endswith("\n\n")
    data = json.loads(text)
    # Sorted keys at every level, the schema tag, the labelled predictions.
    assert text == json.dumps(data, sort_keys=True, indent=2) + "\n"
    assert data["schema"] == PLAN_SCHEMA
    assert data["predicted_latency_s"] == {
        "source": "simulated",
        "winner": 0.1234567890123,
        "baselines": {"existing deployment": 1 / 3, "logical search": 0.15},
    }
    assert float(repr(1 / 3)) == 1 / 3 and repr(1 / 3) in text  # shortest round-trip floats
    assert data["rules"] == [
        ["activation_batch", ["data"]],
        ["activation_length", ["context"]],
        ["embed", ["context", "data"]],
        ["embed", ["data"]],
        ["norm", []],
    ]
    assert data["device_order"]["coords"] == [list(c) for c in first.coords]
    assert data["device_order"]["physical_ids"] == list(first.physical_ids)
    assert data["provenance"]["libtpu"] is None


def test_baseline_order_does_not_change_the_bytes() -> None:
    a = PredictedLatencies(winner_s=1.0, baselines_s=(("b", 2.0), ("a", 3.0)))
    b = PredictedLatencies(winner_s=1, baselines_s=(("a", 3), ("b", 2)))
    assert a == b and a.baselines_s == (("a", 3.0), ("b", 2.0))
    assert a.speedups == {"a": 3.0, "b": 2.0}


def test_rules_view_drives_partition_specs() -> None:
    plan = _plan()
    assert plan.rules == RULES
    spec = logical_to_pspec(("activation_batch", "activation_length", "embed"), plan.rules)
    assert spec == jax.sharding.PartitionSpec("data", "context", None)


def test_current_provenance_reads_installed_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    now = Provenance.current()
    assert now.jax == jax.__version__
    assert now.jaxlib == importlib.metadata.version("jaxlib")
    assert now.libtpu == importlib.metadata.version("libtpu")
    real = importlib.metadata.version

    def without_libtpu(name: str) -> str:
        if name == "libtpu":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", without_libtpu)
    # libtpu's import names its own library in $TPU_LIBRARY_PATH (the library jax loads,
    # aoizora.software.package_version): without libtpu that is unset too
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    missing = Provenance.current()
    assert missing.libtpu is None and missing.jax == now.jax
    order = _plan().device_order()
    plan = Plan.create(
        model="m",
        clip=Clip(16, 16, 1),
        mesh_axis_names=("data", "context"),
        order=order,
        rules=RULES,
        attention="none",
        candidate_id="c",
        placement_id="p",
        predicted=PredictedLatencies(winner_s=1e-3),
    )
    assert json.loads(plan.to_json())["provenance"]["libtpu"] is None


# --- validation -----------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[key]
        del node[last]

    return edit


def _swap_first_coords(data: dict[str, Any]) -> None:
    coords = data["device_order"]["coords"]
    coords[1] = list(coords[0])


def _drop_last_coord(data: dict[str, Any]) -> None:
    data["device_order"]["coords"].pop()
    data["device_order"]["physical_ids"].pop()


INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("schema-version", _set("schema", "aoizora.plan/3"), "schema 'aoizora.plan/3'"),
    ("schema-missing", _delete("schema"), "schema None is not supported"),
    ("unknown-field", _set("extra", 1), r"unknown field\(s\) \['extra'\]"),
    ("missing-field", _delete("model"), r"lacks field\(s\) \['model'\]"),
    ("model-empty", _set("model", ""), "model is ''"),
    ("workload-empty", _set("workload", " "), "workload is ' '"),
    ("clip-not-object", _set("clip", [832, 480, 81]), "clip is"),
    ("inputs-not-list", _set("inputs", {"a": 1}), "inputs is"),
    ("input-field", _set("inputs.0.size", 3), r"inputs\[0\] has unknown field\(s\) \['size'\]"),
    ("input-dtype", _set("inputs.0.dtype", "bfloat17"), "dtype 'bfloat17' is not a dtype"),
    ("input-shape", _set("inputs.0.shape", [1536, -1]), r"shape\[1\] is -1"),
    ("input-axes", _set("inputs.1.logical_axes", ["x"]), "must give one name"),
    ("input-axis-type", _set("inputs.1.logical_axes", [1, None, None]), "must give one name"),
    ("clip-width-zero", _set("clip.width", 0), "clip.width is 0"),
    ("clip-frames-text", _set("clip.frames", "81"), "clip.frames is '81'"),
    ("clip-height-bool", _set("clip.height", True), "clip.height is True"),
    ("clip-extra", _set("clip.fps", 16), r"clip has unknown field\(s\) \['fps'\]"),
    ("slice-unknown", _set("slice", "v9:2x4"), "slice 'v9:2x4' is not a valid slice"),
    (
        "slice-other",
        _set("slice", "v5e:4x4"),
        r"mesh.shape \[2, 4\] has 8 devices but slice v5e:4x4 has 16",
    ),
    ("axis-names-dup", _set("mesh.axis_names", ["data", "data"]), "mesh.axis_names"),
    ("axis-names-bad", _set("mesh.axis_names", ["data", "con text"]), "mesh.axis_names"),
    ("mesh-product", _set("mesh.shape", [2, 2]), r"mesh.shape \[2, 2\] has 4 devices"),
    ("mesh-rank", _set("mesh.shape", [2, 4, 1]), "one size per axis name"),
    ("mesh-float", _set("mesh.shape", [2.0, 4]), r"mesh.shape\[0\] is 2.0"),
    ("rules-not-list", _set("rules", {"a": "b"}), "rules is"),
    ("rule-shape", _set("rules.0", ["x", "data"]), r"rules\[0\] is \['x', 'data'\]"),
    ("rule-axis", _set("rules.1", ["x", ["tensor"]]), r"rules\[1\] \('x'\) names mesh axis"),
    ("rule-twice", _set("rules.2", ["x", ["data", "data"]]), "names a mesh axis twice"),
    ("rules-name", _set("rules_name", 3), "rules_name is 3"),
    ("attention", _set("attention", "flash"), "attention 'flash' is not a known"),
    ("candidate", _set("candidate", ""), "candidate is ''"),
    ("placement", _set("placement", 5), "placement is 5"),
    ("coords-count", _drop_last_coord, "device_order.coords has 7 entries"),
    ("coords-dup", _swap_first_coords, r"device_order.coords\[1\] \[.*\] repeats"),
    ("coords-range", _set("device_order.coords.0", [2, 0]), r"device_order.coords\[0\] is"),
    ("coords-float", _set("device_order.coords.0", [0.0, 0]), r"device_order.coords\[0\] is"),
    ("coords-rank", _set("device_order.coords.0", [0, 0, 0]), r"device_order.coords\[0\] is"),
    ("ids-mismatch", _set("device_order.physical_ids.0", 7), r"physical_ids\[0\] is 7"),
    ("ids-float", _set("device_order.physical_ids.0", 0.0), r"physical_ids\[0\] is 0.0"),
    ("ids-count", _set("device_order.physical_ids", [0]), "physical_ids has 1 entries"),
    ("source", _set("predicted_latency_s.source", "measured"), "source is 'measured'"),
    ("winner-negative", _set("predicted_latency_s.winner", -1.0), "winner is -1.0"),
    ("winner-text", _set("predicted_latency_s.winner", "fast"), "winner is 'fast'"),
    (
        "baseline-zero",
        _set("predicted_latency_s.baselines", {"x": 0}),
        r"baselines\['x'\] is 0",
    ),
    ("baselines-list", _set("predicted_latency_s.baselines", [1.0]), "baselines is"),
    ("provenance-type", _set("provenance.jax", 3), "provenance.jax is 3"),
    ("provenance-missing", _delete("provenance.libtpu"), r"provenance lacks field\(s\)"),
    ("scoped-vmem-zero", _set("scoped_vmem_kib", 0), "scoped_vmem_kib 0: .* a positive number"),
    ("scoped-vmem-text", _set("scoped_vmem_kib", "64M"), "scoped_vmem_kib '64M': .* whole"),
]


def invalid_plan_file(
    name: str, edit: Callable[[dict[str, Any]], None], tmp_path: Path
) -> tuple[Path, dict[str, Any]]:
    """A valid plan's document with ``edit`` applied, written to ``tmp_path``; and the
    document."""
    data = copy.deepcopy(_plan().to_json_dict())
    edit(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, data


@pytest.mark.parametrize(("name", "edit", "match"), INVALID, ids=[c[0] for c in INVALID])
def test_every_invalid_field_is_named(
    name: str, edit: Callable[[dict[str, Any]], None], match: str, tmp_path: Path
) -> None:
    path, _ = invalid_plan_file(name, edit, tmp_path)
    with pytest.raises(PlanError, match=match):
        load_plan(path)


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read plan file"):
        load_plan(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "aoizora.plan/1",\n', encoding="utf-8")
    with pytest.raises(PlanError, match="not valid JSON: .* line 2"):
        load_plan(bad)
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(PlanError, match="must be a JSON object"):
        load_plan(bad)
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(PlanError, match="not UTF-8"):
        load_plan(bad)


def test_constructor_validates_too() -> None:
    plan = _plan()
    with pytest.raises(PlanError, match="attention"):
        Plan(**{**plan.__dict__, "attention": "flash"})
    with pytest.raises(PlanError, match="predicted_latency_s.source"):
        PredictedLatencies(winner_s=1.0, source="measured")
    with pytest.raises(PlanError, match="names repeat"):
        PredictedLatencies(winner_s=1.0, baselines_s=(("a", 1.0), ("a", 2.0)))


# --- Plan.mesh ----------------------------------------------------------------------------


@pytest.mark.parametrize("pick", [0, 3, 7])
def test_mesh_on_fake_devices_places_by_coordinates(pick: int) -> None:
    plan = _plan(pick=pick)
    mesh = plan.mesh(_fake_devices("v5e:2x4", seed=pick))
    assert mesh.axis_names == ("data", "context")
    assert dict(mesh.shape) == {"data": 2, "context": 4}
    for pos, device in enumerate(mesh.devices.flat):
        assert tuple(device.coords[:2]) == plan.coords[pos]
        assert device.id == plan.physical_ids[pos]


@pytest.mark.parametrize(
    ("slice_name", "mesh_shape", "pick"),
    [("v5e:2x4", (2, 4), 5), ("v5e:2x2", (1, 4), 2), ("v5e:4x4", (4, 4), 11)],
)
def test_mesh_on_libtpu_aot_devices(
    slice_name: str, mesh_shape: tuple[int, ...], pick: int
) -> None:
    from aoizora.tpu import topology_devices

    plan = _plan(slice_name, mesh_shape, pick)
    devices = topology_devices(load_slice(slice_name))  # the same devices on a TPU VM
    mesh = plan.mesh(list(reversed(devices)))
    assert mesh.devices.shape == mesh_shape
    for pos, device in enumerate(mesh.devices.flat):
        assert tuple(device.coords)[: len(plan.coords[pos])] == plan.coords[pos]
        assert device.id == plan.physical_ids[pos]  # libtpu numbers v5e chips x fastest


def test_mesh_rejects_devices_that_are_not_the_slice() -> None:
    plan = _plan()
    devices = _fake_devices("v5e:2x4")
    with pytest.raises(PlanError, match=r"is for v5e:2x4 \(8 chips\) but 7 devices"):
        plan.mesh(devices[:7])
    with pytest.raises(PlanError, match="has no chip coordinates"):
        plan.mesh([*devices[:7], FakeDevice(99, None)])
    with pytest.raises(PlanError, match=r"both report chip coordinates"):
        plan.mesh([*devices[:7], FakeDevice(99, list(devices[0].coords))])
    with pytest.raises(PlanError, match=r"reports chip coordinates \[2, 0, 0\]"):
        plan.mesh([*devices[:7], FakeDevice(99, [2, 0, 0])])
    with pytest.raises(PlanError, match=r"reports chip coordinates \[0, 0, 1\]"):
        plan.mesh([*devices[:7], FakeDevice(99, [0, 0, 1])])
    with pytest.raises(PlanError, match=r"non-integer chip coordinates \[0.5, 1\]"):
        plan.mesh([*devices[:7], FakeDevice(99, [0.5, 1])])
    # The wrong slice shape: a 4x2 slice's chips do not fit a 2x4 plan.
    wrong = [FakeDevice(i, [i % 4, i // 4, 0]) for i in range(8)]
    with pytest.raises(PlanError, match="not on v5e:2x4"):
        plan.mesh(wrong)


# --- any workload: clip optional, inputs recorded, schema /1 still loads ----------------------


def test_plan_without_clip_round_trips_with_the_same_fields(tmp_path: Path) -> None:
    video = _plan()
    plain = Plan(**{**video.__dict__, "clip": None, "model": "mlp", "workload": "mlp"})
    plain.save(tmp_path / "p.json")
    loaded = load_plan(tmp_path / "p.json")
    assert loaded == plain and loaded.clip is None
    # Every workload's plan has the same fields; only the clip's value differs.
    assert set(json.loads(plain.to_json())) == set(json.loads(video.to_json()))
    assert json.loads(plain.to_json())["clip"] is None


def test_schema_1_plans_still_load(tmp_path: Path) -> None:
    data = _plan().to_json_dict()
    data["schema"] = "aoizora.plan/1"
    del data["inputs"], data["workload"]
    (tmp_path / "old.json").write_text(json.dumps(data), encoding="utf-8")
    old = load_plan(tmp_path / "old.json")
    assert old.inputs == () and old.workload == old.model == "wan2.1-1.3b"
    assert old.clip == Clip(832, 480, 81) and old.coords == _plan().coords
    data["clip"] = None  # /1 always had a clip
    (tmp_path / "old.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PlanError, match="clip is None"):
        load_plan(tmp_path / "old.json")
    data["inputs"] = []  # and never inputs
    (tmp_path / "old.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(PlanError, match=r"unknown field\(s\) \['inputs'\]"):
        load_plan(tmp_path / "old.json")


def test_partition_specs_follow_the_rules_on_the_planned_mesh() -> None:
    plan = _plan()  # data=2 x context=4; RULES map embed -> (context, data) first
    specs = plan.partition_specs()
    assert [i.name for i in plan.inputs] == ["arg0['w']", "arg1"]
    P = jax.sharding.PartitionSpec
    assert specs == (P(("context", "data"), None), P("data", "context", None))
    one_axis = _plan("v5e:2x2", (1, 4), pick=0)  # data=1 is dropped from every spec
    assert one_axis.partition_specs() == (P("context", None), P(None, "context", None))


def test_the_compute_model_is_recorded_and_round_trips(tmp_path: Path) -> None:
    chip = load_slice("v5e:2x4").chip
    model = compute_model_json(chip)
    plan = dataclasses.replace(
        _plan(), compute_model=json.dumps(model, sort_keys=True, separators=(",", ":"))
    )
    path = tmp_path / "plan.json"
    plan.save(path)
    back = aoizora.load_plan(path)
    recorded = json.loads(path.read_text())["compute_model"]
    assert recorded == model and json.loads(back.compute_model) == model
    assert (
        recorded["attention_efficiency"][recorded["attention_kernel"]] == chip.compute.attention_eff
    )
    assert recorded["parameter_file"] == "topologies/v5e.toml"
    # v5e measured a matmul's read stream; a generation that did not says null
    assert recorded["hbm_read_efficiency"] == chip.compute.hbm_read_efficiency > 0.9
    assert compute_model_json(load_slice("v6e:2x2").chip)["hbm_read_efficiency"] is None
    # and the rate of a matmul kernel with nothing fused, above the fused one's
    assert recorded["bare_matmul_efficiency"] > recorded["matmul_efficiency"]
    assert compute_model_json(load_slice("v6e:2x2").chip)["bare_matmul_efficiency"] is None
    assert recorded["matmul_fused_op_cost"] == chip.compute.matmul_fused_op_cost > 0
    assert compute_model_json(load_slice("v6e:2x2").chip)["matmul_fused_op_cost"] is None
    # the cycle of libtpu's estimate, for kernels with a convolution window of their own
    assert recorded["compiler_cycle_s"] == chip.compute.compiler_cycle_s > 0
    assert compute_model_json(load_slice("v6e:2x2").chip)["compiler_cycle_s"] is None
    # A plan without one (written before the compute model) still loads.
    assert Plan.from_json(_plan().to_json()).compute_model == ""
