"""``aoizora measure`` times ``--workload`` plans (issue 40): the plan records the spec it
was made from, measure rebuilds that program (refusing another one), its rows name the
spec, and ``aoizora validate`` predicts them from it as the plan did."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from aoizora.cli import main
from aoizora.errors import MeasureError
from aoizora.measure.rows import measured_row, step_case, step_notes
from aoizora.measure.steps import plan_workload, step_targets
from aoizora.measure.store import RowStore
from aoizora.measure.timing import Timing
from aoizora.plan import WorkloadSource, load_plan
from aoizora.studies.validation import read_measurements
from tests.aoizora.synthetic import tpu_environment

SPEC = "examples/tiny_block.py:make_small"
SLICE = "v5e:2x2"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A --workload plan made by the command, from the repository root (the spec's base)."""
    folder = tmp_path_factory.mktemp("workload")
    out = folder / "plan.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        code = main(["plan", "--workload", SPEC, "--slice", SLICE, "--out", str(out),
                     "--cache-dir", str(folder / "cache"), "--quiet"])  # fmt: skip
    assert code == 0
    return out


def test_the_plan_records_its_spec_and_measure_rebuilds_that_program(
    planned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    plan = load_plan(planned)
    assert plan.source is not None and plan.source.spec == SPEC
    assert plan_workload(plan).program_fingerprint == plan.source.program
    # another program under the same name (the factory changed since): refused, not timed
    other = dataclasses.replace(plan, source=WorkloadSource(SPEC, "0" * 64))
    with pytest.raises(MeasureError, match="now builds another program than the plan's"):
        plan_workload(other)
    monkeypatch.chdir(planned.parent)  # the spec is relative to where aoizora plan ran
    with pytest.raises(MeasureError, match="cannot be loaded here"):
        plan_workload(plan)


@pytest.mark.slow
def test_the_cpu_dry_run_writes_rows_naming_the_spec(
    planned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    out = tmp_path / "rows.csv"
    code = main(["measure", str(planned), "--backend", "cpu", "--out", str(out), "--top", "1",
                 "--warmup", "1", "--repeats", "2", "--quiet"])  # fmt: skip
    assert code == 0
    rows = read_measurements(out)
    plan = load_plan(planned)
    assert len(rows) >= 2 and all(r.kind == "step" and r.step is not None for r in rows)
    winner = rows[0].step
    assert winner is not None
    assert (winner.model, winner.clip, winner.workload) == (plan.workload, "", SPEC)
    assert winner.device_order == plan.physical_ids and winner.mesh_axes == plan.mesh_axis_names
    assert f"one call of {plan.workload} from {SPEC}" in rows[0].notes


@pytest.mark.slow
def test_validate_predicts_a_workload_row_as_the_plan_did(
    planned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Independent paths to one number: the plan's Q2 of its winner (planner, Stage 2)
    and validate's prediction of a TPU row of that winner (rebuilt from the row's spec,
    compiled again, replayed with the row's order)."""
    monkeypatch.chdir(ROOT)
    plan = load_plan(planned)
    env = tpu_environment(num_devices=4, plan_sha256="ef" * 32, date="2026-12-06")
    out = tmp_path / "rows.csv"
    store = RowStore.open(out, cpu=False, restart=False)
    (winner, *_) = step_targets(plan, top=0, baselines=False)
    timing = Timing(samples_s=(1e-3, 1.2e-3), warmup=1)
    about = step_notes(winner, env)
    case = step_case(winner, cpu=False)
    store.add(measured_row(env=env, plan=plan, key=winner.key, timing=timing, about=about,
                           step=case))  # fmt: skip
    assert main(["validate", str(out), "--json", "--cache-dir", str(tmp_path / "c")]) == 0
    (group,) = json.loads(capsys.readouterr().out)["groups"]
    (row,) = group["rows"]
    assert row["predicted_s"] == pytest.approx(plan.predicted.winner_s, rel=1e-9)
