"""The step-row predictor against the planner's pieces called directly, and
``aoizora validate`` end to end on a file of step rows.

The rows are SYNTHETIC (test only): no public Wan step latency on TPU exists
(validation/README.md). Their "measured" latencies are the independent
predictions times stated factors, so every metric has a known value. The tiny
Wan config on v5e:2x2 is compiled for the real TPU target through the session
plan cache, shared with the planner tests (each sharding compiles once).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

from aoizora.cache import plan_caches
from aoizora.candidates.baselines import Baseline, baseline_candidates
from aoizora.cli import main
from aoizora.compile import compile_candidate
from aoizora.errors import ValidationError
from aoizora.hlo.graph import graph_from_text
from aoizora.metrics import mape_percent
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import replay
from aoizora.studies.validation import COLUMNS, Measurement, parse_measurements, predict_step
from aoizora.studies.validation.step import step_graph
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

pytestmark = pytest.mark.slow

MODEL = "wan-tiny"
SLICE = "v5e:2x2"
CLIP = "5x256x256"  # FRAMESxHEIGHTxWIDTH
SYNTHETIC = "synthetic (test only): no public Wan step measurement exists"

# (row_id, mesh_shape, mesh_axes, attention, device order, baseline sharding, measured factor)
# "existing deployment" = context 4, "maxdiffusion recipe" = data 2 x context 2, both with
# maxdiffusion rules and K/V all-gathered. Two orders of the first sharding (the ring
# 0 1 3 2 and the row-major 0 1 2 3 whose 1->2 and 3->0 neighbours are diagonal), the
# second sharding, and the second again with its axes written the other way round.
ROWS: tuple[tuple[str, str, str, str, tuple[int, ...], str, float], ...] = (
    ("cp4-ring", "4", "context", "gather_kv", (0, 1, 3, 2), "existing deployment", 1.10),
    ("cp4-rowmajor", "4", "context", "", (0, 1, 2, 3), "existing deployment", 1.25),
    ("dp2cp2", "2x2", "data context", "gather_kv", (0, 1, 3, 2), "maxdiffusion recipe", 1.30),
    ("cp2dp2", "2x2", "context data", "", (0, 3, 1, 2), "maxdiffusion recipe", 1.40),
)


def _csv(measured: dict[str, float], *, model: str = MODEL) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row_id, shape, axes, attention, order, _, _ in ROWS:
        cells = {
            "row_id": row_id,
            "kind": "step",
            "slice": SLICE,
            "model": model,
            "clip": CLIP,
            "mesh_shape": shape,
            "mesh_axes": axes,
            "rules_id": "maxdiffusion",
            "attention": attention,
            "device_order": " ".join(map(str, order)),
            "measured_s": repr(measured[row_id]),
            "spread_kind": "unreported",
            "source": SYNTHETIC,
        }
        writer.writerow([cells.get(c, "") for c in COLUMNS])
    return buf.getvalue()


def _canonical_coords(axes: str, order: tuple[int, ...]) -> list[tuple[int, int]]:
    """Chip coordinates in the (data, context) mesh's row-major order, by hand.

    v5e ids are ``x + 2*y`` on a 2x2 slice. A row written as ``context data``
    lists mesh position (c, d) at flat index ``2*c + d``; the canonical mesh is
    (data, context), flat index ``2*d + c``.
    """
    ids: list[int] = list(order)
    if axes == "context data":
        ids = [order[2 * c + d] for d in range(2) for c in range(2)]
    return [(i % 2, i // 2) for i in ids]


@pytest.fixture(scope="module")
def expected(plan_cache_dir: Path) -> dict[str, float]:
    """Every row's step time from compile_candidate + graph_from_text + replay directly,
    and the host's launch a timed call (phase ``step``) holds."""
    workload = wan_workload(MODEL, parse_resolution("256x256", frames=5))
    slice_ = load_slice(SLICE)
    baselines: dict[str, Baseline] = {b.name: b for b in baseline_candidates(workload, slice_)}
    out: dict[str, float] = {}
    for row_id, _, axes, _, order, baseline, _ in ROWS:
        cand = baselines[baseline].candidate
        result = compile_candidate(
            workload, cand, slice_, cache=plan_caches(plan_cache_dir).compiled
        )
        assert result.ok and result.backend == "tpu", result.error
        graph = graph_from_text(result.hlo_text)
        mesh = DeviceOrder.from_coords(
            _canonical_coords(axes, order), mesh_shape=cand.mesh_shape, slice_=slice_
        )
        out[row_id] = replay(graph, slice_, mesh).step_time_s + slice_.chip.compute.program_launch_s
    return out


@pytest.fixture(scope="module")
def rows(expected: dict[str, float]) -> tuple[Measurement, ...]:
    factor = {r[0]: r[6] for r in ROWS}
    return parse_measurements(_csv({k: v * factor[k] for k, v in expected.items()}))


def test_each_prediction_equals_the_direct_replay(
    rows: tuple[Measurement, ...], expected: dict[str, float], plan_cache_dir: Path
) -> None:
    for row in rows:
        assert predict_step(row, cache_dir=str(plan_cache_dir)) == expected[row.row_id]
    # Context 4 on a 2x2 mesh: each collective group runs round the physical
    # 4-cycle whatever order its replica group lists (sim.layout), so row-major
    # order (two diagonal, two-hop pairs in list order) is as fast as the ring.
    assert expected["cp4-ring"] == expected["cp4-rowmajor"]
    # The same sharding and chips written with the axes swapped is the same deployment.
    assert expected["cp2dp2"] == expected["dp2cp2"]


def test_a_profiles_device_time_holds_no_launch(
    rows: tuple[Measurement, ...], expected: dict[str, float], plan_cache_dir: Path
) -> None:
    """Phase ``device`` (a trace's device time, as section 6's v5e rows): the replay alone."""
    launch = load_slice(SLICE).chip.compute.program_launch_s
    assert launch > 0
    for row in rows:
        assert row.step is not None and row.step.phase == "step"
        device = dataclasses.replace(row, step=dataclasses.replace(row.step, phase="device"))
        got = predict_step(device, cache_dir=str(plan_cache_dir))
        assert got == pytest.approx(expected[row.row_id] - launch, rel=1e-12)


def test_rows_sharing_a_sharding_share_one_compiled_graph(
    rows: tuple[Measurement, ...], plan_cache_dir: Path
) -> None:
    by_id = {r.row_id: r for r in rows}
    cache = str(plan_cache_dir)
    ring = step_graph(by_id["cp4-ring"], cache_dir=cache)
    # Memoised per (model, clip, slice, sharding): one graph object for both orders.
    assert step_graph(by_id["cp4-rowmajor"], cache_dir=cache) is ring
    assert step_graph(by_id["cp2dp2"], cache_dir=cache) is step_graph(
        by_id["dp2cp2"], cache_dir=cache
    )
    assert step_graph(by_id["dp2cp2"], cache_dir=cache) is not ring


def test_validate_command_end_to_end(
    tmp_path: Path,
    expected: dict[str, float],
    plan_cache_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The stated factors, smallest to the row predicted fastest (ties in row order): that
    # row is then "measured" fastest too, whichever sharding the compute model favours.
    ranked = sorted(expected, key=lambda k: (expected[k], [r[0] for r in ROWS].index(k)))
    factor = dict(zip(ranked, sorted(r[6] for r in ROWS), strict=True))
    fastest = ranked[0]
    path = tmp_path / "steps.csv"
    path.write_text(_csv({k: v * factor[k] for k, v in expected.items()}), encoding="utf-8")
    args = ["validate", str(path), "--cache-dir", str(plan_cache_dir)]
    gate = ["--min-top1", "1", "--max-mape", "30"]
    assert main([*args, *gate, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (group,) = report["groups"]
    assert (group["workload"], group["slice"], group["n"]) == (f"{MODEL} {CLIP}", SLICE, 4)
    assert {r["row_id"]: r["predicted_s"] for r in group["rows"]} == expected
    # measured = predicted * f, so each row's error is |1 - f| / f.
    mape = 100 * sum(abs(1 - f) / f for f in factor.values()) / len(factor)
    assert group["mape_percent"] == pytest.approx(mape, rel=1e-12)
    assert group["mape_percent"] == pytest.approx(
        mape_percent(list(expected.values()), [expected[k] * factor[k] for k in expected])
    )
    assert group["top1"] is True  # the fastest row is predicted and "measured" fastest
    # Make it the slowest measurement: top-1 fails, the gate exits 1.
    slow = {k: v * factor[k] for k, v in expected.items()}
    slow[fastest] = 10 * max(slow.values())
    path.write_text(_csv(slow), encoding="utf-8")
    assert main([*args, *gate]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED" in out and "top1" in out and fastest in out


def test_unknown_model_names_the_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(_csv({r[0]: 1.0 for r in ROWS}, model="wan9"), encoding="utf-8")
    with pytest.raises(ValidationError, match="row 'cp4-ring' .*model='wan9'"):
        predict_step(parse_measurements(path.read_text())[0])
    assert main(["validate", str(path), "--cache-dir", str(tmp_path / "cache")]) == 2
    assert "model='wan9'" in capsys.readouterr().err
