"""``aoizora measure --profile`` end to end on the host CPU: the wan-tiny dry run's step
is traced, its trace, compiled HLO and explanation are saved beside the rows, and
``aoizora explain`` on the saved files reads the same ops again (an independent pass).

A child process, like the CPU capture of test_profile.py: creating jax's ProfilerSession
segfaults on some hosts, which must cost this test, not the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.cli import main
from aoizora.studies.validation.format import read_measurements
from tests.aoizora.test_measure import tiny_plan
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_profile_saves_trace_hlo_and_explanation_beside_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    plan = tiny_plan()
    plan.save(plan_path)
    env = child_env(JAX_PLATFORMS="cpu")
    argv = [sys.executable, "-m", "aoizora", "measure", str(plan_path), "--backend", "cpu",
            "--out", str(out), "--top", "0", "--no-baselines", "--warmup", "1",
            "--repeats", "1", "--profile", "--quiet", "--json"]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False
    )
    if done.returncode < 0:
        pytest.skip(f"jax.profiler died of signal {-done.returncode} on this host")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = read_measurements(out)
    where = tmp_path / "rows.profiles"
    trace, hlo = where / f"{row.row_id}.xplane.pb", where / f"{row.row_id}.hlo.txt"
    saved = json.loads((where / f"{row.row_id}.explain.json").read_text())
    assert trace.stat().st_size > 0 and "ENTRY" in hlo.read_text()
    assert saved["ops"] and saved["categories"]
    # explain, run again on the saved files, reads the same ops: the same sums.
    argv = ["explain", str(trace), str(hlo), "--slice", plan.slice_name, "--json"]
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    for key in ("module", "step_s", "device_ops_s", "predicted_s", "categories"):
        assert again[key] == saved[key], key
    assert saved["device_ops_s"] > 0 and saved["step_s"] > 0
