"""Which libtpu a figure is for: the running libtpu (``$TPU_LIBRARY_PATH``), the rows' own,
and ``aoizora validate --libtpu`` / ``--also-libtpu`` (issue 56, item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.software import LIBTPU_PATH_VARIABLE, package_version, running_versions
from aoizora.studies.validation.compilers import compiler_note, libtpu_of, side_by_side

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "validation" / "measurements.csv"


def _collective_rows(tmp_path: Path) -> Path:
    """The shipped file's collective rows: validating them replays the simulator and
    compiles nothing (seconds)."""
    lines = SHIPPED.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("row_id,"))
    kind = lines[header].split(",").index("kind")
    keep = [line for line in lines[header + 1 :] if line.split(",")[kind] == "collective"]
    out = tmp_path / "collectives.csv"
    out.write_text("\n".join([*lines[: header + 1], *keep]) + "\n")
    return out


def _fake_wheel(tmp_path: Path, version: str) -> Path:
    """A folder laid out as a libtpu wheel installs: libtpu/libtpu.so and its dist-info."""
    (tmp_path / "libtpu").mkdir()
    library = tmp_path / "libtpu" / "libtpu.so"
    library.write_bytes(b"not a library")
    (tmp_path / f"libtpu-{version}.dist-info").mkdir()
    return library


def test_the_running_libtpu_is_the_library_jax_will_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = package_version("libtpu")
    library = _fake_wheel(tmp_path, "0.0.42.1")
    monkeypatch.setenv(LIBTPU_PATH_VARIABLE, str(library))
    assert package_version("libtpu") == "0.0.42.1"
    assert running_versions()["libtpu"] == "0.0.42.1"
    assert running_versions()["jax"] == package_version("jax")
    stray = tmp_path / "elsewhere.so"
    stray.write_bytes(b"")
    monkeypatch.setenv(LIBTPU_PATH_VARIABLE, str(stray))
    assert package_version("libtpu") == f"custom ({stray})"  # never taken for the pin
    monkeypatch.delenv(LIBTPU_PATH_VARIABLE)
    assert package_version("libtpu") == installed


def test_rows_that_ran_another_libtpu_are_named() -> None:
    cell = "jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, aoizora 0.1.0 (git 29536f0db816+dirty)"
    assert libtpu_of(cell) == "0.0.42.1"
    assert libtpu_of("not stated in the source") is None
    ran = {f"m-{i}": "0.0.42.1" for i in range(5)} | {"m-x": "0.0.52", "sb-1": None}
    note = compiler_note(ran, "0.0.52")
    assert note is not None and note.startswith("5 rows ran libtpu 0.0.42.1 (m-0, m-1, m-2, ...)")
    assert "libtpu 0.0.52" in note and "m-x" not in note
    assert compiler_note(ran, "0.0.42.1") is not None  # m-x ran the other one
    assert compiler_note({"m-x": "0.0.52", "sb-1": None}, "0.0.52") is None


def test_side_by_side_pairs_rows_by_id() -> None:
    a = {"row_id": "a", "measured_s": 2.0, "predicted_s": 1.9}
    b = {"row_id": "b", "measured_s": 1.0, "predicted_s": 1.1}
    ours = {"groups": [{"rows": [a, b]}]}
    theirs = {"groups": [{"rows": [{"row_id": "b", "measured_s": 1.0, "predicted_s": 1.0}]}]}
    pairs = {p.row_id: p for p in side_by_side(ours, theirs)}
    assert pairs["a"].other_predicted_s is None and pairs["a"].predicted_s == 1.9
    assert pairs["b"].other_predicted_s == 1.0 and pairs["b"].measured_s == 1.0


def _validate(rows: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "aoizora", "validate", str(rows), "--json", *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)


def test_validate_names_its_libtpu_and_refuses_a_missing_library(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "libtpu.so"
    done = _validate(_collective_rows(tmp_path), "--libtpu", str(missing))
    assert done.returncode == 2 and done.stdout == ""
    assert f"--libtpu {missing}: no such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_also_libtpu_predicts_every_row_again_in_a_second_process(tmp_path: Path) -> None:
    import libtpu

    library = Path(libtpu.__file__).parent / "libtpu.so"
    done = _validate(_collective_rows(tmp_path), "--also-libtpu", str(library))
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["libtpu"] == package_version("libtpu")
    assert report["also"]["libtpu"] == package_version("libtpu")
    rows = {r["row_id"]: r for g in report["groups"] for r in g["rows"]}
    also = report["also"]["rows"]
    assert len(also) == len(rows) > 0
    for pair in also:  # the same library twice: the same prediction, row by row
        assert (
            pair["other_predicted_s"] == pair["predicted_s"] == rows[pair["row_id"]]["predicted_s"]
        )


def test_plan_refuses_a_missing_libtpu_before_any_work(tmp_path: Path) -> None:
    missing = tmp_path / "libtpu.so"
    command = [sys.executable, "-m", "aoizora", "plan", "--workload", "aoizora.zoo:p013",
               "--slice", "v5e:1x1", "--libtpu", str(missing)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("libtpu.so)") and len(done.stderr.splitlines()) == 1
    assert f"--libtpu {missing}: no such file" in done.stderr
