"""aoizora measure: timing that waits for the devices, the plan's device order, the rows.

The dry run (``--backend cpu`` on the 8 host devices tests/conftest.py sets up) runs the
whole harness on wan-tiny with XLA attention: compile on the planned mesh, random
inputs, warm-up and repeats, rows in the measurement format with provenance, resume
after an interruption. Each check goes through a path of its own: the plan file's hash
is recomputed with hashlib, the collectives' groups are read back from the compiled
HLO (XLA's own replica groups), the mesh's devices are compared with the plan by id,
the timing is checked against a clock that only a finished result advances.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aoizora.cli import main
from aoizora.errors import MeasureError, ValidationError
from aoizora.hlo.groups import parse_replica_groups
from aoizora.measure import run as measure_run
from aoizora.measure.collectives import (
    CollectiveTarget,
    collective_program,
    collective_targets,
    fitted_size,
    groups_spec,
    mesh_axis_sets,
    time_collective,
)
from aoizora.measure.devices import mesh_order, plan_mesh
from aoizora.measure.rows import (
    collective_case,
    collective_notes,
    measured_row,
    step_case,
    step_notes,
)
from aoizora.measure.steps import step_targets
from aoizora.measure.store import RowStore
from aoizora.measure.timing import Timing, time_calls
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import Plan, PredictedLatencies, plan_inputs
from aoizora.plan.alternatives import PlanAlternative
from aoizora.studies.validation import (
    Measurement,
    parse_group_spec,
    predict_collective,
    read_measurements,
    validate,
)
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice
from tests.aoizora.synthetic import tpu_environment

CLIP = parse_resolution("128x128", frames=1)
SLICE = "v5e:2x4"
# Ids that differ from their positions: the mesh must follow the ids, not the list.
WINNER_IDS = (5, 7, 1, 3, 4, 6, 0, 2)
RUNNER_IDS = (0, 1, 2, 3, 7, 6, 5, 4)


def _alt(role: str, name: str, shape: tuple[int, ...], ids: tuple[int, ...], step_s: float) -> Any:
    ident = ".".join(
        f"{a}{s}" for a, s in zip(("data", "fsdp", "context", "tensor"), shape, strict=True)
    )
    rules = wan_workload("wan-tiny", CLIP).rules("maxdiffusion")
    return PlanAlternative(
        role=role, name=name, candidate_id=f"{ident}/maxdiffusion/gather_kv",
        placement_id="default order", mesh_axis_names=("data", "fsdp", "context", "tensor"),
        mesh_shape=shape, rules_name=rules.name, logical_rules=rules.pairs,
        attention="gather_kv", physical_ids=ids, step_s=step_s,
    )  # fmt: skip


def tiny_plan(*, alternatives: tuple[Any, ...] | None = None) -> Plan:
    workload = wan_workload("wan-tiny", CLIP)
    order = DeviceOrder.from_physical_ids(
        WINNER_IDS, mesh_shape=(2, 1, 4, 1), slice_=load_slice(SLICE)
    )
    if alternatives is None:
        alternatives = (
            _alt("runner-up", "data1.fsdp1.context8.tensor1", (1, 1, 8, 1), RUNNER_IDS, 2e-3),
            _alt("baseline", "existing deployment", (1, 1, 8, 1), RUNNER_IDS, 2e-3),
            _alt("baseline", "maxdiffusion recipe", (2, 1, 4, 1), tuple(range(8)), 1.5e-3),
        )
    return Plan.create(
        model="wan-tiny", workload=workload.name, clip=CLIP, inputs=plan_inputs(workload),
        mesh_axis_names=workload.mesh_axis_names, order=order,
        rules=workload.rules("maxdiffusion"), attention="gather_kv",
        candidate_id="data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv",
        placement_id="test order", predicted=PredictedLatencies(
            winner_s=1e-3, baselines_s=(("existing deployment", 2e-3),
                                        ("maxdiffusion recipe", 1.5e-3))),
        alternatives=alternatives,
    )  # fmt: skip


# --- timing -------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Pending:
    """A dispatched result: only block_until_ready (the work finishing) moves the clock."""

    def __init__(self, clock: _Clock, work_s: float, log: list[str]) -> None:
        self.clock, self.work_s, self.log = clock, work_s, log

    def block_until_ready(self) -> _Pending:
        self.clock.now += self.work_s
        self.log.append("done")
        return self


def test_timing_waits_for_the_result_not_the_dispatch() -> None:
    clock, log = _Clock(), []

    def dispatch() -> _Pending:
        clock.now += 1e-4  # queueing the work is quick
        log.append("dispatch")
        return _Pending(clock, 0.5, log)

    t = time_calls(dispatch, warmup=2, repeats=3, clock=clock)
    assert t.samples_s == pytest.approx((0.5001,) * 3)  # dispatch + the work, every repeat
    assert log == ["dispatch", "done"] * 5  # each warm-up and repeat waited before the next
    batched = time_calls(dispatch, warmup=0, repeats=2, calls_per_sample=4, clock=clock)
    assert batched.samples_s == pytest.approx((0.5001,) * 2)  # per call: the total / 4


def test_timing_a_jax_step_whose_result_is_late() -> None:
    delay_s = 0.15

    def slow(x: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return x

    step = jax.jit(lambda x: jax.pure_callback(slow, jax.ShapeDtypeStruct((4,), jnp.float32), x))
    x = jnp.ones(4)
    t = time_calls(lambda: step(x) + 1, warmup=1, repeats=3)
    assert t.min_s >= delay_s
    assert t.std_s == pytest.approx(statistics.stdev(t.samples_s))
    assert t.mean_s == pytest.approx(statistics.fmean(t.samples_s))


def test_an_interrupt_waits_for_the_work_in_flight() -> None:
    clock, log = _Clock(), []
    calls = iter(range(100))

    def dispatch() -> _Pending:
        if next(calls) == 3:  # Ctrl-C while the second repeat queues its calls
            raise KeyboardInterrupt
        return _Pending(clock, 0.1, log)

    with pytest.raises(KeyboardInterrupt):
        time_calls(dispatch, warmup=0, repeats=2, calls_per_sample=2, clock=clock)
    assert log == ["done"] * 3  # both calls of repeat 1 and the one queued of repeat 2


def test_bad_counts_are_refused() -> None:
    with pytest.raises(MeasureError, match="at least one repeat"):
        time_calls(lambda: 0, warmup=1, repeats=0)


# --- placement ------------------------------------------------------------------------------


class _TpuDevice:
    def __init__(self, device_id: int, coords: tuple[int, ...]) -> None:
        self.id, self.coords, self.platform = device_id, [*coords, 0], "tpu"


def test_cpu_mesh_follows_the_plan_s_ids_not_the_list_positions() -> None:
    plan = tiny_plan()
    devices = list(reversed(jax.devices()))  # ids 7..0 at positions 0..7
    mesh = plan_mesh(plan, devices, backend="cpu")
    assert tuple(d.id for d in mesh.devices.flat) == WINNER_IDS
    assert mesh_order(mesh, plan, backend="cpu") == plan.physical_ids == WINNER_IDS
    assert mesh.axis_names == plan.mesh_axis_names and mesh.devices.shape == (2, 1, 4, 1)


def test_tpu_mesh_places_by_chip_coordinates() -> None:
    plan = tiny_plan()
    s = load_slice(SLICE)
    # Device ids unrelated to the chips: placement must come from the coordinates.
    devices = [_TpuDevice(100 + 7 - i, c) for i, c in enumerate(s.coords)]
    mesh = plan_mesh(plan, devices, backend="tpu")
    assert [tuple(d.coords[:2]) for d in mesh.devices.flat] == list(plan.coords)
    assert mesh_order(mesh, plan, backend="tpu") == WINNER_IDS


def test_a_mesh_in_another_order_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tiny_plan()
    devices = [_TpuDevice(i, c) for i, c in enumerate(load_slice(SLICE).coords)]

    def reversed_mesh(self: Plan, given: Any) -> jax.sharding.Mesh:  # a broken Plan.mesh
        grid = np.array(list(reversed(list(given))), dtype=object)
        return jax.sharding.Mesh(grid.reshape(self.mesh_shape), self.mesh_axis_names)

    monkeypatch.setattr(Plan, "mesh", reversed_mesh)
    with pytest.raises(MeasureError, match="not the plan's"):
        plan_mesh(plan, devices, backend="tpu")


def test_targets_merge_a_configuration_listed_twice() -> None:
    targets = step_targets(tiny_plan(), top=1, baselines=True)
    assert [t.roles for t in targets] == [
        ("winner",),
        ("runner-up 1", "baseline 'existing deployment'"),
        ("baseline 'maxdiffusion recipe'",),
    ]
    assert [t.plan.physical_ids for t in targets] == [WINNER_IDS, RUNNER_IDS, tuple(range(8))]
    assert [t.key for t in step_targets(tiny_plan(), top=0, baselines=False)] == ["winner"]


# --- collectives ------------------------------------------------------------------------------


def test_collective_groups_are_xla_s_replica_groups_in_the_plan_s_ids() -> None:
    plan = tiny_plan()
    mesh = plan_mesh(plan, list(reversed(jax.devices())), backend="cpu")
    assert mesh_axis_sets(plan) == (("data",), ("context",))
    for axes, kind in [(("context",), "all-gather"), (("data", "context"), "collective-permute")]:
        group = 4 if axes == ("context",) else 8
        target = CollectiveTarget(kind, axes, fitted_size(kind, 4096, group=group), group)
        spec = groups_spec(plan, axes)
        program, x = collective_program(target, mesh)
        hlo = program.lower(x).compile().as_text()
        flat = [d.id for d in mesh.devices.flat]  # HLO names devices by mesh position
        if kind == "collective-permute":
            pairs = re.search(r"source_target_pairs=(\{[\d,{}]*\})", hlo)
            assert pairs is not None
            sent = {
                (flat[int(a)], flat[int(b)]) for a, b in re.findall(r"\{(\d+),(\d+)\}", pairs[1])
            }
            ring = [int(i) for i in spec.removeprefix("devices:").split()]
            assert sent == {(ring[i], ring[(i + 1) % 8]) for i in range(8)}
        else:
            text = re.search(r"all-gather\(.*replica_groups=(\{[\d,{}]*\})", hlo)
            assert text is not None, hlo
            groups = parse_replica_groups(text[1], num_devices=8).groups
            ours = [[int(i) for i in g.split()] for g in spec.removeprefix("devices:").split(";")]
            assert sorted(sorted(flat[i] for i in g) for g in groups) == sorted(map(sorted, ours))
        parse_group_spec(spec, shape=(2, 4))  # the measurement format takes it


def test_sizes_fit_the_groups_and_too_small_sizes_are_refused() -> None:
    plan = tiny_plan()
    targets = collective_targets(plan, sizes_bytes=(1000,), kinds=("all-gather", "all-reduce"))
    assert [(t.axes, t.collective, t.size_bytes) for t in targets] == [
        (("data",), "all-gather", 1000), (("data",), "all-reduce", 1000),
        (("context",), "all-gather", 992), (("context",), "all-reduce", 1000),
    ]  # fmt: skip
    with pytest.raises(MeasureError, match="too small"):
        collective_targets(plan, sizes_bytes=(8,), kinds=("all-gather",))
    with pytest.raises(MeasureError, match="choose from"):
        collective_targets(plan, sizes_bytes=(1024,), kinds=("broadcast",))


# --- the command, end to end on host CPU devices ----------------------------------------------


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int, str]:
    folder = tmp_path_factory.mktemp("measure")
    plan_path, out = folder / "plan.json", folder / "rows.csv"
    tiny_plan().save(plan_path)
    code = main([
        "measure", str(plan_path), "--backend", "cpu", "--out", str(out), "--top", "1",
        "--no-baselines", "--warmup", "1", "--repeats", "2", "--collectives",
        "--sizes", "4KiB", "--kinds", "all-gather,all-reduce", "--quiet",
    ])  # fmt: skip
    return plan_path, out, code, datetime.datetime.now(datetime.UTC).date().isoformat()


@pytest.mark.slow
def test_dry_run_rows_structure_and_provenance(dry_run: tuple[Path, Path, int, str]) -> None:
    plan_path, out, code, today = dry_run
    assert code == 0
    rows = read_measurements(out)
    steps = [r for r in rows if r.kind == "step"]
    collectives = [r for r in rows if r.kind == "collective"]
    assert len(steps) == 2 and len(collectives) == 4
    digest = hashlib.sha256(plan_path.read_bytes()).hexdigest()
    versions = {p: importlib.metadata.version(p) for p in ("jax", "jaxlib", "libtpu")}
    for r in rows:
        assert r.row_id.startswith(f"m-{digest[:10]}-") and r.slice_name == SLICE
        assert r.hardware.startswith("cpu") and "8 host CPU devices" in r.hardware
        assert "1 host" in r.hardware
        assert all(f"{p} {v}" in r.software for p, v in versions.items())
        assert digest in r.source and r.software_date == today
        assert r.spread_kind == "std" and r.spread_s is not None and r.measured_s > 0
        mean = float(re.search(r"mean (\S+) s", r.notes)[1])  # type: ignore[index]
        assert r.measured_s == pytest.approx(mean, rel=1e-5)
        assert "2 repeats after 1 warm-up" in r.notes
    winner, runner = steps
    assert winner.step is not None and runner.step is not None
    assert winner.step.device_order == WINNER_IDS  # exactly the plan's, not 0..7
    assert runner.step.device_order == RUNNER_IDS
    assert (winner.step.model, winner.step.clip, winner.step.mesh_shape) == (
        "wan-tiny", "1x128x128", (2, 1, 4, 1))  # fmt: skip
    assert winner.step.attention_kernel == "xla" and "XLA attention" in winner.notes
    assert "runner-up 1" in runner.notes and "0.002 s per step (simulated)" in runner.notes
    assert {r.collective.groups for r in collectives if r.collective} == {
        groups_spec(tiny_plan(), ("data",)), groups_spec(tiny_plan(), ("context",))}  # fmt: skip


@pytest.mark.slow
def test_validate_and_calibrate_refuse_the_dry_run_rows(
    dry_run: tuple[Path, Path, int, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _, _ = dry_run
    capsys.readouterr()
    for argv in (["validate", str(out)], ["calibrate", str(out), "--generation", "v5e"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"{out}:2: row 'm-" in err and "ran on the host CPU" in err and "v5e:2x4" in err
        assert "measure on the TPU" in err
    with pytest.raises(ValidationError, match="line 2: row"):  # the library refuses too
        validate(read_measurements(out), predictors={"step": lambda r: 1.0})


@pytest.mark.slow
def test_an_interrupted_run_resumes_keeping_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    tiny_plan().save(plan_path)
    argv = ["measure", str(plan_path), "--backend", "cpu", "--out", str(out), "--no-steps",
            "--collectives", "--sizes", "1KiB,2KiB", "--warmup", "0", "--repeats", "2"]  # fmt: skip
    real, calls = time_collective, []

    def interrupted(*args: Any, **kwargs: Any) -> Timing:
        calls.append(args[0])
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third collective
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_run, "time_collective", interrupted)
    assert main(argv) == 130
    assert "interrupted; the rows measured so far are in" in capsys.readouterr().err
    first = read_measurements(out)
    assert len(first) == 2 and not out.with_name("rows.csv.tmp").exists()
    monkeypatch.setattr(measure_run, "time_collective", real)
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [k["row_id"] for k in report["kept"]] == [r.row_id for r in first]
    rows = read_measurements(out)
    assert len(rows) == 2 * 5 * 2 == len(report["kept"]) + len(report["rows"])
    assert rows[:2] == first  # kept as they were, not measured again
    assert len({r.row_id for r in rows}) == len(rows)


@pytest.mark.slow
def test_sigterm_ends_the_run_cleanly_with_its_rows(tmp_path: Path) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    tiny_plan().save(plan_path)
    argv = [sys.executable, "-m", "aoizora", "measure", str(plan_path), "--backend", "cpu",
            "--out", str(out), "--no-steps", "--collectives", "--sizes", "1KiB,2KiB,4KiB",
            "--repeats", "200", "--warmup", "0"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # the first row is in the file: the run is under way
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("aoizora measure: interrupted;")
    rows = read_measurements(out)  # every row written so far, in a file that parses
    assert 1 <= len(rows) < 2 * 5 * 3 and not out.with_name("rows.csv.tmp").exists()


def test_calibrate_takes_measured_collective_rows_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TPU rows as measure writes them (its row builder, provenance and file writer), their
    # times the simulator's at the shipped link numbers, 7% slower: calibrate must read the
    # file as it is and find the bandwidth 7% lower, the hop latency 7% higher.
    plan, slow = tiny_plan(), 1.07
    env = tpu_environment(num_devices=8, plan_sha256="ab" * 32)
    out = tmp_path / "rows.csv"
    store = RowStore.open(out, cpu=False, restart=False)
    sizes = (1 << 16, 1 << 20, 1 << 24)
    for target in collective_targets(plan, sizes_bytes=sizes, kinds=("all-gather",)):
        case = collective_case(target, plan)
        probe = Measurement("p", "collective", SLICE, 1.0, "unreported", "x", collective=case)
        t = slow * predict_collective(probe, overhead_s=0.0)
        timing = Timing(samples_s=(0.99 * t, 1.01 * t), warmup=1)
        about = collective_notes(target, plan)
        store.add(
            measured_row(env=env, plan=plan, key=target.key, timing=timing, about=about,
                         collective=case)
        )  # fmt: skip
    argv = ["calibrate", str(out), "--generation", "v5e", "--overhead", "none", "--dry-run"]
    assert main([*argv, "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    shipped = load_slice(SLICE)
    assert len(fit["residuals"]) == len(store.rows) == 6 and fit["skipped"] == []
    assert fit["link_bandwidth_bytes_per_s"] == pytest.approx(
        shipped.link_bandwidth_bytes_per_s / slow, rel=1e-3
    )
    assert fit["hop_latency_s"] == pytest.approx(shipped.hop_latency_s * slow, rel=1e-3)


def test_without_tpu_devices_measure_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path = tmp_path / "plan.json"
    tiny_plan().save(plan_path)
    assert main(["measure", str(plan_path), "--out", str(tmp_path / "rows.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no TPU devices: JAX sees" in err
    assert "--backend cpu" in err and not (tmp_path / "rows.csv").exists()


def test_cpu_rows_and_a_tpu_run_do_not_mix(tmp_path: Path) -> None:
    out = tmp_path / "rows.csv"
    out.write_text(
        "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source,hardware\n"
        "a,collective,v5e:2x4,all-gather,dims:0,1024,1e-4,unreported,x,cpu (dry run): 8\n"
    )
    with pytest.raises(MeasureError, match="ran on the host CPU"):
        RowStore.open(out, cpu=False, restart=False)
    assert RowStore.open(out, cpu=False, restart=True).rows == []
    assert len(RowStore.open(out, cpu=True, restart=False).rows) == 1


def test_a_failing_target_is_reported_and_the_others_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    tiny_plan().save(plan_path)
    real, calls = time_collective, []

    def flaky(*args: Any, **kwargs: Any) -> Timing:
        calls.append(args[0])
        if len(calls) == 2:
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory\nwhile running")
        return real(*args, **kwargs)

    monkeypatch.setattr(measure_run, "time_collective", flaky)
    argv = ["measure", str(plan_path), "--backend", "cpu", "--out", str(out), "--no-steps",
            "--collectives", "--sizes", "1KiB", "--kinds", "all-reduce", "--repeats", "1",
            "--json"]  # fmt: skip
    assert main(argv) == 1
    report = json.loads(capsys.readouterr().out)
    oom = "RuntimeError: RESOURCE_EXHAUSTED: out of memory while running"  # on one line
    assert report["failed"] == [{"what": calls[1].label, "error": oom}]
    assert [r["row_id"] for r in report["rows"]] == [r.row_id for r in read_measurements(out)]
    assert len(report["rows"]) == 1 and report["rows"][0]["spread_s"] is None  # one repeat


def test_steps_of_a_workload_neither_wan_nor_recorded_are_refused(tmp_path: Path) -> None:
    plan = tiny_plan()
    other = Plan.from_json(plan.to_json().replace('"model": "wan-tiny"', '"model": "mlp"'))
    path = tmp_path / "plan.json"
    other.save(path)
    with pytest.raises(MeasureError, match="neither a Wan model.*re-plan it.*--no-steps"):
        measure_run.run_measure(path, tmp_path / "rows.csv", backend="cpu")
    assert not (tmp_path / "rows.csv").exists()


def test_multi_host_runs_agree_and_take_the_slowest_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from jax.experimental import multihost_utils

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(multihost_utils, "broadcast_one_to_all", lambda x: np.asarray(x) * 0 + 1)
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda x: np.stack([x, x[::-1] * 2]))
    assert measure_run._agreed([False, True]) == [True, True]  # process 0's flags
    slowest = measure_run._slowest_process(Timing(samples_s=(1.0, 3.0), warmup=0))
    assert slowest.samples_s == (6.0, 3.0)  # per repeat, the later of the two hosts


@pytest.mark.slow
def test_validate_predicts_measured_tpu_step_rows_as_they_are(
    tmp_path: Path, plan_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Step rows as measure writes them on a TPU (its row builder and file writer): validate
    # reads the file unchanged and predicts each row with the row's own device order.
    plan = tiny_plan()
    env = tpu_environment(num_devices=8, plan_sha256="cd" * 32)
    out = tmp_path / "rows.csv"
    store = RowStore.open(out, cpu=False, restart=False)
    targets = [t for t in step_targets(plan, top=0, baselines=True) if t.plan.mesh_shape[0] == 2]
    assert [t.key for t in targets] == ["winner", "baseline-maxdiffusion-recipe"]
    for i, target in enumerate(targets):
        case = step_case(target, cpu=False)
        assert case.attention_kernel == "splash"
        timing = Timing(samples_s=(1.0 + i, 1.2 + i), warmup=1)
        about = step_notes(target, env)
        store.add(measured_row(env=env, plan=plan, key=target.key, timing=timing, about=about,
                               step=case))  # fmt: skip
    assert main(["validate", str(out), "--json", "--cache-dir", str(plan_cache_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    (group,) = report["groups"]
    assert (group["kind"], group["slice"], group["n"]) == ("step", SLICE, 2)
    assert [r["measured_s"] for r in group["rows"]] == [1.1, 2.1]
    assert all(r["predicted_s"] > 0 for r in group["rows"])
