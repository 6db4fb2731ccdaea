"""``aoizora measure`` times the clip's VAE decode: rows of kind ``vae`` (issue 40).

A plan with a VAE plan gets one more target, the decode with the VAE plan's sharding,
device order and chunk; its row names the VAE, the clip, the mesh and the chunk, and
``aoizora validate`` predicts it by compiling that decode and replaying it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from aoizora.cache import plan_caches
from aoizora.candidates.space import make_candidate
from aoizora.cli import main
from aoizora.compile import compile_candidate
from aoizora.errors import ValidationError
from aoizora.hlo.graph import graph_from_text
from aoizora.measure.rows import measured_row, step_case, step_notes
from aoizora.measure.steps import plan_workload, step_targets
from aoizora.measure.store import RowStore
from aoizora.measure.timing import Timing
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import Plan, PredictedLatencies, plan_inputs
from aoizora.replay import replay
from aoizora.studies.validation import read_measurements
from aoizora.studies.validation.format import parse_measurements
from aoizora.workloads.clip import Clip
from aoizora.workloads.vae import vae_decode_chunk, vae_workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice
from tests.aoizora.synthetic import tpu_environment

CLIP = parse_resolution("256x256", frames=5)
SLICE = "v5e:2x2"
VAE_IDS = (2, 0, 3, 1)  # not 0..3: the row must carry the plan's order


def _vae_plan(chunk: int, clip: Clip) -> Plan:
    workload = vae_workload("vae-tiny", clip, chunk=chunk)
    order = DeviceOrder.from_physical_ids(VAE_IDS, mesh_shape=(1, 4), slice_=load_slice(SLICE))
    return Plan.create(
        model="vae-tiny", workload=workload.name, clip=clip, inputs=plan_inputs(workload),
        mesh_axis_names=workload.mesh_axis_names, order=order,
        rules=workload.rules("spatial"), attention="none",
        candidate_id="width1.height4/spatial/none", placement_id="test order",
        predicted=PredictedLatencies(winner_s=6e-4, baselines_s=(), source="stage1"),
    )  # fmt: skip


def clip_plan(chunk: int = 1, clip: Clip = CLIP) -> Plan:
    workload = wan_workload("wan-tiny", clip)
    order = DeviceOrder.from_physical_ids((0, 1, 3, 2), mesh_shape=(2, 1, 2, 1),
                                          slice_=load_slice(SLICE))  # fmt: skip
    step = Plan.create(
        model="wan-tiny", workload=workload.name, clip=clip, inputs=plan_inputs(workload),
        mesh_axis_names=workload.mesh_axis_names, order=order,
        rules=workload.rules("maxdiffusion"), attention="gather_kv",
        candidate_id="data2.fsdp1.context2.tensor1/maxdiffusion/gather_kv",
        placement_id="test order", predicted=PredictedLatencies(winner_s=1e-3, baselines_s=()),
    )  # fmt: skip
    return dataclasses.replace(step, vae=_vae_plan(chunk, clip))


def test_the_vae_decode_is_a_target_of_its_own_kind_with_its_chunk() -> None:
    plan = clip_plan(chunk=2)
    assert [t.key for t in step_targets(plan, top=0, baselines=False)] == ["winner"]
    *_, vae = step_targets(plan, top=0, baselines=False, vae=True)
    assert (vae.key, vae.kind, vae.roles, vae.predicted_s) == ("vae", "vae", ("vae decode",), 6e-4)
    workload = plan_workload(vae.plan)
    assert workload.name == "vae-tiny@256x256x5[chunk2]" and workload.info["chunk"] == 2
    case = step_case(vae, cpu=False)
    assert (case.model, case.clip, case.mesh_shape, case.mesh_axes) == (
        "vae-tiny", "5x256x256", (1, 4), ("width", "height"))  # fmt: skip
    assert (case.device_order, case.vae_decode_chunk, case.attention_kernel) == (VAE_IDS, 2, None)
    # a plan's VAE workload name says its chunk, and the decode it names is that chunk's
    assert vae_decode_chunk(plan.vae.workload if plan.vae else "") == 2
    one = plan_workload(clip_plan(chunk=1).vae or plan)
    assert one.program_fingerprint != workload.program_fingerprint


def test_a_vae_row_round_trips_and_a_chunk_off_a_vae_row_is_refused() -> None:
    head = (
        "row_id,kind,slice,model,clip,mesh_shape,mesh_axes,rules_id,device_order,"
        "vae_decode_chunk,measured_s,spread_kind,peak_hbm_bytes,source\n"
    )
    (row,) = parse_measurements(
        head + "v,vae,v5e:2x2,wan2.1-vae,21x480x832,1x4,width height,spatial,0 1 2 3,2,1.4,"
        "unreported,6740000000,chip\n"
    )
    assert row.kind == "vae" and row.step is not None and row.step.vae_decode_chunk == 2
    assert row.peak_hbm_bytes == 6_740_000_000
    with pytest.raises(ValidationError, match="vae_decode_chunk='2' must be .* on a 'vae' row"):
        parse_measurements(
            head + "s,step,v5e:2x2,wan2.1-1.3b,21x480x832,1x4,data context,fsdp,0 1 2 3,2,1.4,"
            "unreported,,chip\n"
        )


@pytest.mark.slow
def test_validate_predicts_a_vae_row_by_compiling_the_decode(
    tmp_path: Path, plan_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A VAE row as measure writes it on a TPU: validate compiles the decode (its chunk)
    for the row's slice and replays it with the row's order; memory from that compile."""
    env = tpu_environment(num_devices=4, plan_sha256="ab" * 32, date="2026-12-06")
    out = tmp_path / "rows.csv"
    store = RowStore.open(out, cpu=False, restart=False)
    plan = clip_plan(2, parse_resolution("64x64", frames=9))
    *_, vae = step_targets(plan, top=0, baselines=False, vae=True)
    timing = Timing(samples_s=(0.9, 1.1), warmup=1, peak_hbm_bytes=10_000_000)
    store.add(measured_row(env=env, plan=plan, key=vae.key, timing=timing,
                           about=step_notes(vae, env), step=step_case(vae, cpu=False),
                           step_kind="vae"))  # fmt: skip
    (row,) = read_measurements(out)
    assert (row.kind, row.step.vae_decode_chunk if row.step else 0) == ("vae", 2)
    assert "the VAE decode of the plan's clip" in row.notes and "(stage1)" in row.notes
    assert main(["validate", str(out), "--json", "--cache-dir", str(plan_cache_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    (group,) = report["groups"]
    assert (group["kind"], group["slice"], group["n"]) == ("vae", SLICE, 1)
    (predicted,) = [r["predicted_s"] for r in group["rows"]]
    # the replay of that compile, with the row's order: what the planner's --vae-compile gives
    workload = plan_workload(vae.plan)
    candidate = make_candidate(workload, (1, 4), "spatial", "none")
    cache = plan_caches(str(plan_cache_dir)).compiled  # validate's compile, not another
    result = compile_candidate(workload, candidate, load_slice(SLICE), cache=cache)
    order = DeviceOrder.from_physical_ids(VAE_IDS, mesh_shape=(1, 4), slice_=load_slice(SLICE))
    expected = replay(graph_from_text(result.hlo_text), load_slice(SLICE), order).step_time_s
    # a timed call (phase step) holds the host's launch once
    launch = load_slice(SLICE).chip.compute.program_launch_s
    assert launch > 0 and predicted == pytest.approx(expected + launch, rel=1e-12)


@pytest.mark.slow
def test_the_cpu_dry_run_writes_step_and_vae_rows(tmp_path: Path) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    clip_plan(chunk=1).save(plan_path)
    code = main([
        "measure", str(plan_path), "--backend", "cpu", "--out", str(out), "--top", "0",
        "--no-baselines", "--warmup", "1", "--repeats", "2", "--quiet",
    ])  # fmt: skip
    assert code == 0
    step, vae = read_measurements(out)
    assert (step.kind, vae.kind) == ("step", "vae")
    assert vae.step is not None and vae.step.device_order == VAE_IDS
    assert (vae.step.model, vae.step.clip, vae.step.vae_decode_chunk) == (
        "vae-tiny",
        "5x256x256",
        1,
    )
    assert vae.measured_s > 0 and vae.row_id.endswith("-vae")
    # --no-vae leaves the decode out: with --no-steps nothing is left, refused up front
    code = main(["measure", str(plan_path), "--backend", "cpu", "--out", str(tmp_path / "n.csv"),
                 "--no-steps", "--no-vae", "--quiet"])  # fmt: skip
    assert code == 2 and not (tmp_path / "n.csv").exists()
