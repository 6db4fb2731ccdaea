"""The v5e memory study (validation/v5e/memory/study.json) against itself and against Stage 1.

The study measured 15 programs on a TPU v5e chip two ways: the runtime's statistics
(``bytes_in_use + bytes_reserved`` with the outputs alive, what ``aoizora measure``
records as ``peak_hbm_bytes``) and a ballast search (the largest zeros buffer beside the
program with which it still ran, and the smallest with which it failed). The second is
an independent measure of the first: the need it brackets must hold the statistics' sum.
Stage 1 must never refuse one of these programs that ran, on the chip's own budget.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from aoizora.candidates.space import enumerate_candidates
from aoizora.cli import main
from aoizora.compile import lower_to_read
from aoizora.measure.memory import held_bytes
from aoizora.request.clip_plan import vae_for
from aoizora.stage1.memory import MEMORY_MARGIN, MEMORY_UNDERESTIMATE
from aoizora.stage1.q1 import rank_stage1
from aoizora.stage1.sweep import score_candidates
from aoizora.studies.validation import read_measurements
from aoizora.studies.validation.format import format_measurements
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan import wan_workload
from sim.topology import load_slice

STUDY = Path(__file__).resolve().parents[2] / "validation" / "v5e" / "memory" / "study.json"
RECORDS = json.loads(STUDY.read_text(encoding="utf-8"))["records"]
RAN = [r for r in RECORDS if r["what"] != "device" and "error" not in r]


class _Device:
    def __init__(self, stats: dict[str, int]) -> None:
        self._stats = stats

    def memory_stats(self) -> dict[str, int]:
        return self._stats


def test_the_statistics_lie_within_the_ballast_bracket_on_every_program() -> None:
    assert len(RAN) >= 10
    for r in RAN:
        held = held_bytes([_Device(r["stats_run1"])])  # what measure records
        limit = r["stats_run1"]["bytes_limit"]
        assert held is not None
        # fits beside the largest ballast that ran, not beside the smallest that failed
        assert limit - r["ballast_fail_bytes"] < held <= limit - r["ballast_ok_bytes"], r
        # the runtime reserves up to XLA's temporaries, and at most 30 % less (docs/measure.md)
        temp = r["analysis"]["temp_size_in_bytes"]
        assert temp / 1.3 <= r["stats_run1"]["bytes_reserved"] <= temp, r


def test_the_chip_budget_is_the_runtime_limit() -> None:
    limits = {r["stats"]["bytes_limit"] for r in RECORDS if r["what"] == "device"}
    assert limits == {int(load_slice("v5e:1x1").chip.memory_budget_bytes)}


def test_the_program_that_failed_needs_more_than_the_budget() -> None:
    failed = [r for r in RECORDS if "error" in r]
    assert [(r["model"], r["clip"]) for r in failed] == [("wan2.2-ti2v-5b", "1280x704x81")]
    assert "RESOURCE_EXHAUSTED" in failed[0]["error"]


@pytest.mark.parametrize(
    ("kind", "model", "clip"),
    [
        ("vae", "wan2.1-1.3b", "832x480x21"),
        ("step", "wan2.2-ti2v-5b", "1280x704x61"),
        ("step", "wan2.1-1.3b", "832x480x21"),
        ("vae", "wan2.2-ti2v-5b", "640x352x41"),
    ],
)
def test_stage1_keeps_what_ran_on_the_chip(kind: str, model: str, clip: str) -> None:
    (rec,) = [
        r for r in RAN if (r["what"], r["model"], r["clip"], r["chunk"]) == (kind, model, clip, 1)
    ]
    held = rec["stats_run1"]["bytes_in_use"] + rec["stats_run1"]["bytes_reserved"]
    w, h, f = (int(x) for x in clip.split("x"))
    step = wan_workload(model, Clip(w, h, f))
    workload = vae_for(step) if kind == "vae" else step
    slice_ = load_slice("v5e:1x1")
    (cand,) = enumerate_candidates(workload, 1).legal[:1]
    sweep = score_candidates(workload, [cand], slice_, lower=lower_to_read, skip_over_hbm=False)
    (est,) = sweep.estimates
    budget = slice_.chip.memory_budget_bytes
    ranking = rank_stage1([est], k=1, hbm_bytes=budget)
    assert ranking.kept_ids == (cand.id,)  # it ran, so Stage 1 must not refuse it
    # and the estimate is within the bounds the refusal and the VAE's compile rest on
    assert held * MEMORY_UNDERESTIMATE <= est.memory_bytes_per_chip <= held * MEMORY_MARGIN


HELD = {
    (r["model"], "x".join(reversed(r["clip"].split("x")))): r["stats_run1"]["bytes_in_use"]
    + r["stats_run1"]["bytes_reserved"]
    for r in RAN
    if r["what"] == "step"
}
MEASURED = [
    row
    for name in ("measure-rows-1.csv", "measure-rows-2.csv")
    for row in read_measurements(STUDY.parent / name)
]


def test_aoizora_measure_records_what_the_study_measured() -> None:
    """``aoizora measure`` on the chip (the same day, plans kept beside the rows) wrote the
    study's figure byte for byte where both measured a step: the tool reads what the
    study read."""
    kept = {hashlib.sha256(p.read_bytes()).hexdigest()[:10]
            for p in STUDY.parent.glob("plan-*.json")}  # fmt: skip
    both = 0
    for row in MEASURED:
        assert row.step is not None and row.peak_hbm_bytes is not None, row.row_id
        assert row.row_id.split("-")[1] in kept, row.row_id  # names a kept plan by sha256
        key = (row.step.model, row.step.clip)
        if key in HELD:
            assert row.peak_hbm_bytes == HELD[key], row.row_id
            both += 1
    assert len(MEASURED) == 8 and both == 3


def test_every_shipped_peak_is_backed_by_a_measurement() -> None:
    shipped = read_measurements(STUDY.parents[2] / "measurements.csv")
    by_tool = {(r.step.model, r.step.clip): r.peak_hbm_bytes for r in MEASURED if r.step}
    peaks = [r for r in shipped if r.peak_hbm_bytes is not None]
    assert len(peaks) >= 10
    for r in peaks:
        assert r.step is not None and r.slice_name == "v5e:1x1", r.row_id
        key = (r.step.model, r.step.clip)
        assert r.peak_hbm_bytes in (HELD.get(key), by_tool.get(key)), r.row_id


@pytest.mark.slow
@pytest.mark.pinned_libtpu
def test_validate_holds_a_measured_peak_to_the_compiled_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plan_cache_dir: Path
) -> None:
    """``aoizora validate`` on the cheapest shipped row with a peak (one compile): within
    5 % (the pinned libtpu's analysis of 1.3B 480x272x33 is 3.065 GB; the chip held 3.064
    GB); the same row with its peak 20 % lower fails --max-memory-mape 5."""
    (row,) = [r for r in read_measurements(STUDY.parents[2] / "measurements.csv")
              if r.row_id == "mem-v5e1x1-wan21-13b-33x272x480"]  # fmt: skip
    path = tmp_path / "row.csv"
    cached = ["--cache-dir", str(plan_cache_dir)]
    path.write_text(format_measurements([row]), encoding="utf-8")
    assert main(["validate", str(path), "--max-memory-mape", "5", "--json", *cached]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["rows"][0]["peak_hbm_bytes"] == row.peak_hbm_bytes
    assert abs(memory["mape_percent"]) < 1.0
    assert row.peak_hbm_bytes is not None
    low = dataclasses.replace(row, peak_hbm_bytes=int(row.peak_hbm_bytes * 0.8))
    path.write_text(format_measurements([low]), encoding="utf-8")
    assert main(["validate", str(path), "--max-memory-mape", "5", *cached]) == 1
    assert "memory gate FAILED" in capsys.readouterr().out
