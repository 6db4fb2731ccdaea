"""Measurement format, collective predictions (cross-checked against closed forms) and
the regression gate on the shipped set. The rank statistics are tested in test_metrics.py,
the step predictor in test_validate_steps.py."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

import aoizora.metrics
import aoizora.studies.validation
from aoizora.cli import main
from aoizora.errors import ValidationError
from aoizora.studies.validation import (
    COLUMNS,
    Measurement,
    StepCase,
    Thresholds,
    collective_nodes,
    default_predictors,
    format_measurements,
    gate,
    parse_group_spec,
    parse_measurements,
    predict_collective,
    read_measurements,
    row_slice,
    validate,
)
from sim.topology import load_slice

SHIPPED = Path(__file__).resolve().parents[2] / "validation" / "measurements.csv"
V5E_PROFILES = SHIPPED.parent / "v5e" / "profiles"
MEMORY_STUDY = SHIPPED.parent / "v5e" / "memory" / "study.json"
# The thresholds validation/README.md documents for the shipped set.
GATE_ARGS = ["--min-spearman", "0.9", "--min-top1", "1", "--max-mape", "35"]

HEADER = ",".join(
    ["row_id", "kind", "slice", "collective", "groups", "size_bytes", "algorithm"]
    + ["measured_s", "spread_s", "spread_kind", "source"]
)


def _collective_csv(*lines: str) -> str:
    return HEADER + "\n" + "\n".join(lines) + "\n"


def _one(line: str) -> Measurement:
    return parse_measurements(_collective_csv(line))[0]


# --------------------------------------------------------------------------- the package


def test_package_reexports_every_name_of_the_old_module() -> None:
    # The names the single-module aoizora.studies.validation exported (callers import them
    # from the package); the rank statistics are aoizora.metrics' own objects.
    old = [
        "COLLECTIVE_KINDS", "COLUMNS", "DIMWISE", "ROW_KINDS", "SPREAD_KINDS", "CollectiveCase",
        "GateFailure", "GroupReport", "Measurement", "Predictor", "RowPrediction", "StepCase",
        "Thresholds", "ValidationReport", "collective_nodes", "default_predictors",
        "format_measurements", "gate", "mape_percent", "parse_group_spec", "parse_measurements",
        "predict_collective", "rank_average", "read_measurements", "row_slice", "spearman",
        "top1_agreement", "validate",
    ]  # fmt: skip
    assert set(old) <= set(aoizora.studies.validation.__all__)
    for name in aoizora.studies.validation.__all__:
        assert hasattr(aoizora.studies.validation, name), name
    for name in aoizora.metrics.__all__:
        assert getattr(aoizora.studies.validation, name) is getattr(aoizora.metrics, name)


# --------------------------------------------------------------------------- format


def test_group_specs_cover_the_slice() -> None:
    groups = parse_group_spec("dims:1", shape=(8, 16))
    assert len(groups) == 8 and all(len(g) == 16 for g in groups)
    assert groups[3] == tuple((3, y) for y in range(16))
    both = parse_group_spec("dims:0+1", shape=(2, 3))
    assert both == (((0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)),)
    assert parse_group_spec("all", shape=(2, 3)) == both
    assert parse_group_spec("ids:5 0;1 2", shape=(2, 3)) == (((1, 2), (0, 0)), ((1, 0), (0, 1)))
    for bad in ("dims:2", "dims:0+0", "ids:0 0", "ids:0 9", "ids:3", "rows", "dims:x"):
        with pytest.raises(ValidationError):
            parse_group_spec(bad, shape=(2, 3))
    # tpu7x: libtpu device ids, two per chip (id = 2 * chip + core).
    two = parse_group_spec("devices:0 2 6 4;1 3 7 5", shape=(2, 2, 1), devices_per_chip=2)
    ring = ((0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0))
    assert two == (ring, ring)
    assert parse_group_spec("devices:5 0", shape=(2, 3)) == parse_group_spec(
        "ids:5 0", shape=(2, 3)
    )
    with pytest.raises(ValidationError, match="0..7"):
        parse_group_spec("devices:0 8", shape=(2, 2, 1), devices_per_chip=2)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("a,collective,v5e:2x4,all-gather,dims:0,100,,1e-6,,bogus,s", "spread_kind"),
        ("a,collective,v5e:2x4,all-gather,dims:0,100,,1e-6,1e-7,unreported,s", "must be empty"),
        ("a,collective,v5e:2x4,all-gather,dims:0,100,,1e-6,,std,s", "needs spread_s"),
        ("a,collective,v5e:2x4,all-gather,dims:0,100,,-1,,unreported,s", "positive"),
        ("a,collective,v5e:2x4,all-gather,dims:0,0,,1e-6,,unreported,s", "size_bytes"),
        ("a,collective,v5e:2x4,all-gatherz,dims:0,10,,1e-6,,unreported,s", "must be one of"),
        ("a,collective,v5e:2x4,all-gather,dims:5,10,,1e-6,,unreported,s", "dims:5"),
        ("a,collective,v5x:2x4,all-gather,dims:0,10,,1e-6,,unreported,s", "v5x"),
        ("a,step,v5e:2x4,all-gather,dims:0,10,,1e-6,,unreported,s", "leave"),
        ("a,collective,v5e:2x4,all-gather,dims:0,10,,1e-6,,unreported,", "'source' is empty"),
        ("a b,collective,v5e:2x4,all-gather,dims:0,10,,1e-6,,unreported,s", "row_id"),
    ],
)
def test_bad_rows_name_their_line(line: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_measurements(_collective_csv(line), name="m.csv")
    assert "m.csv:2:" in str(info.value)
    assert fragment in str(info.value)


def test_header_errors_and_duplicates() -> None:
    with pytest.raises(ValidationError, match="unknown \\['sizee'\\]"):
        parse_measurements("row_id,kind,slice,measured_s,spread_kind,source,sizee\n")
    with pytest.raises(ValidationError, match="missing \\['source'\\]"):
        parse_measurements("row_id,kind,slice,measured_s,spread_kind\n")
    dup = _collective_csv(
        "a,collective,v5e:2x4,all-gather,dims:0,10,,1e-6,,unreported,s",
        "a,collective,v5e:2x4,all-gather,dims:0,20,,1e-6,,unreported,s",
    )
    with pytest.raises(ValidationError, match="repeats line 2"):
        parse_measurements(dup)


def _step_row(row_id: str, order: str, measured_s: float, attention: str = "") -> str:
    cells = {
        "row_id": row_id,
        "kind": "step",
        "slice": "v5e:2x2",
        "model": "wan2.1-1.3b",
        "clip": "81x480x832",
        "mesh_shape": "2x2",
        "mesh_axes": "data context",
        "rules_id": "md",
        "device_order": order,
        "attention": attention,
        "measured_s": repr(measured_s),
        "spread_s": "0.001",
        "spread_kind": "std",
        "source": "synthetic (test only)",
    }
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([cells.get(c, "") for c in COLUMNS])
    return buf.getvalue()


def test_step_rows_parse_round_trip_and_take_a_pluggable_predictor() -> None:
    # Synthetic step rows (no public Wan step latency on TPU exists, see
    # validation/README.md): they exercise the format and the predictor hook.
    text = "\n".join(
        [",".join(COLUMNS), _step_row("s1", "0 1 3 2", 0.50), _step_row("s2", "0 1 2 3", 0.55)]
    )
    rows = parse_measurements(text)
    assert rows[0].step == StepCase(
        model="wan2.1-1.3b",
        clip="81x480x832",
        mesh_shape=(2, 2),
        mesh_axes=("data", "context"),
        rules_id="md",
        device_order=(0, 1, 3, 2),
    )
    assert rows[0].workload == "wan2.1-1.3b 81x480x832"
    assert rows[0].step is not None and rows[0].step.attention is None
    assert parse_measurements(format_measurements(rows)) == rows
    with pytest.raises(ValidationError, match="no 'step' predictor"):
        validate(rows, predictors={"collective": predict_collective})
    # A planner would map device order -> step time; here a fixed table.
    table: dict[tuple[int, ...], float] = {(0, 1, 3, 2): 0.48, (0, 1, 2, 3): 0.60}

    def predict_step(row: Measurement) -> float:
        assert row.step is not None
        return table[row.step.device_order]

    report = validate(rows, predictors={"step": predict_step})
    (group,) = report.groups
    assert (group.n, group.spearman, group.top1) == (2, 1.0, True)
    assert group.mape_percent == pytest.approx(100 * (0.02 / 0.50 + 0.05 / 0.55) / 2)
    bad = _step_row("s3", "0 1 1 2", 0.5)
    with pytest.raises(ValidationError, match="permutation"):
        parse_measurements(",".join(COLUMNS) + "\n" + bad)


def test_step_attention_column_is_optional_and_round_trips() -> None:
    header = ",".join(COLUMNS)
    rows = parse_measurements(header + "\n" + _step_row("s1", "0 1 3 2", 0.5, "ring"))
    assert rows[0].step is not None and rows[0].step.attention == "ring"
    assert parse_measurements(format_measurements(rows)) == rows
    # A file written before the column existed still parses (attention None).
    old_header = [c for c in COLUMNS if c != "attention"]
    line = _step_row("s1", "0 1 3 2", 0.5).split(",")
    del line[COLUMNS.index("attention")]
    (old,) = parse_measurements(",".join(old_header) + "\n" + ",".join(line))
    assert old.step is not None and old.step.attention is None
    with pytest.raises(ValidationError, match="m.csv:2: attention='gather kv'"):
        parse_measurements(
            header + "\n" + _step_row("s", "0 1 3 2", 0.5, "gather kv"), name="m.csv"
        )
    collective = _collective_csv("a,collective,v5e:2x4,all-gather,dims:0,10,,1e-6,,unreported,s")
    lines = collective.splitlines()
    with pytest.raises(ValidationError, match="leave \\['attention'\\] empty"):
        parse_measurements(lines[0] + ",attention\n" + lines[1] + ",ring\n")


TPU_VM_PLANS = sorted((SHIPPED.parent / "v5e" / "tpu-vm").glob("*.json"))


def test_shipped_set_parses_and_cites_a_public_source_per_row() -> None:
    rows = read_measurements(SHIPPED)
    assert len(rows) >= 10
    plans = {hashlib.sha256(p.read_bytes()).hexdigest()[:10] for p in TPU_VM_PLANS}
    study = json.loads(MEMORY_STUDY.read_text(encoding="utf-8"))["records"]
    studied = {(r["model"], "x".join(reversed(r["clip"].split("x")))) for r in study
               if r["what"] == "step" and "error" not in r}  # fmt: skip
    for r in rows:
        # A public row cites its page; a row AoiZora measured names its trace, or the plan
        # it timed (by sha256), kept in the repository (validation/README.md, section 6);
        # a row of the memory study names the study, which holds its record (section 7).
        if r.row_id.startswith("mem-"):
            assert r.source.startswith("validation/v5e/memory/study.py"), r.row_id
            assert r.step is not None and (r.step.model, r.step.clip) in studied, r.row_id
            assert r.peak_hbm_bytes is not None, r.row_id
            continue
        own = r.row_id.startswith("m-")
        assert r.source.startswith("aoizora measure" if own else "https://"), r.row_id
        kept = (V5E_PROFILES / f"{r.row_id}.ops.json.gz").is_file() or (
            r.row_id.split("-")[1] in plans and f"plan sha256 {r.row_id.split('-')[1]}" in r.source
        )
        assert not own or kept, r.row_id
        assert r.hardware and r.software and r.notes, r.row_id
    assert parse_measurements(format_measurements(rows)) == rows


# --------------------------------------------------------------------------- predictions


def test_two_chip_all_gather_matches_closed_form() -> None:
    # Both directions of a 2-member bidirectional ring share the one link
    # 0 -> 1: one hop of latency, then B/2 bytes at the link's bandwidth.
    row = _one("a,collective,v5e:2x2,all-gather,ids:0 1,8000000,,1e-4,,unreported,s")
    s = row_slice(row)
    expected = s.hop_latency_s + 8e6 / 2 / s.link_bandwidth_bytes_per_s
    assert predict_collective(row) == pytest.approx(expected, rel=1e-12)


def test_tpu7x_parallel_core_rings_match_closed_form() -> None:
    # The Ironwood rows: both cores of every chip gather around the same 2x2 ring of
    # chips (docs/validation.md). Per step every link direction carries one B/8 chunk of
    # each core's bidirectional ring: 3 steps of one hop plus B/4 bytes at bandwidth,
    # after the chip's per-collective overhead (paid once).
    size = 2**28
    line = f"a,collective,tpu7x:2x2x1,all-gather,devices:0 2 6 4;1 3 7 5,{size},,1e-3,,unreported,s"
    row = _one(line)
    s = row_slice(row)
    w, lat, o = s.link_bandwidth_bytes_per_s, s.hop_latency_s, s.chip.collective_overhead_s
    assert o > 0  # fitted to the Ironwood rows (topologies/tpu7x.toml)
    assert predict_collective(row) == pytest.approx(o + 3 * (lat + size / 4 / w), rel=1e-9)
    # One core alone would take half the bandwidth time: the chips' links are shared.
    alone = _one(line.replace("devices:0 2 6 4;1 3 7 5", "devices:0 2 6 4"))
    assert predict_collective(alone) == pytest.approx(o + 3 * (lat + size / 8 / w), rel=1e-9)


def test_wrapped_ring_all_gather_matches_scaling_book_form() -> None:
    # v5e:8x16, groups along the wrapped 16 axis: a bidirectional ring with no
    # contention, n-1 steps of one hop and B/(2n) bytes each; in the bandwidth
    # limit V(n-1)/(2n W_one-way), the scaling-book's "V / W_bidirectional".
    size = 2**30
    row = _one(f"a,collective,v5e:8x16,all-gather,dims:1,{size},,1e-2,,unreported,s")
    s = row_slice(row)
    n = 16
    w = s.link_bandwidth_bytes_per_s
    expected = (n - 1) * (s.hop_latency_s + size / (2 * n) / w)
    assert predict_collective(row) == pytest.approx(expected, rel=1e-9)


def test_dimwise_all_reduce_matches_closed_form() -> None:
    # 4x4 torus (wrap forced on): reduce-scatter x on B, y on B/4, then the
    # two all-gathers back; each phase (n-1) steps of one hop, B_phase/(2n) bytes.
    size = 64_000_000
    line = f"a,collective,v5e:4x4,all-reduce,dims:0+1,{size},dimwise,1e-3,,unreported,s"
    row = replace(_one(line), wraparound=(True, True))
    s = row_slice(row)
    assert s.wraparound == (True, True)
    w, lat, n = s.link_bandwidth_bytes_per_s, s.hop_latency_s, 4
    phase = lambda b: (n - 1) * (lat + b / (2 * n) / w)  # noqa: E731
    expected = 2 * (phase(size) + phase(size / n))
    assert predict_collective(row) == pytest.approx(expected, rel=1e-9)
    nodes, done = collective_nodes(row, s)
    assert done == "a/ph3/done" and len(nodes) == 4 * (4 * 4 * (n - 1) * 2 + 1)


def test_calibration_keywords_change_the_slice_numbers() -> None:
    row = _one("a,collective,v5e:2x4,all-gather,dims:1,4000000,,1e-4,,unreported,s")
    base = predict_collective(row)
    faster = predict_collective(row, link_bandwidth_bytes_per_s=9e10, hop_latency_s=0.0)
    slow = row_slice(row)
    assert slow == load_slice("v5e:2x4")
    assert faster < base
    with pytest.raises(ValidationError, match="dimwise"):
        collective_nodes(
            _one("a,collective,v5e:2x4,all-to-all,dims:1,40,dimwise,1e-4,,unreported,s"), slow
        )


# --------------------------------------------------------------------------- the gate


# The step group CI predicts (two tpu7x compiles, about a minute); the whole step gate is
# benchmarks/step_gate.py (every step row compiles its sharding once).
CI_STEP_GROUP = ("wan2.1-14b 81x720x1280", "tpu7x:2x2x1")
STEP_GATE_ARGS = ["--max-step-mape", "15", "--min-step-order", "1"]


def _ci_subset(tmp_path: Path) -> tuple[Path, list[Measurement]]:
    rows = [
        r
        for r in read_measurements(SHIPPED)
        if r.kind == "collective" or (r.workload, r.slice_label) == CI_STEP_GROUP
    ]
    path = tmp_path / "ci_subset.csv"
    path.write_text(format_measurements(rows), encoding="utf-8")
    return path, rows


@pytest.mark.slow
@pytest.mark.pinned_libtpu
def test_gate_passes_on_the_shipped_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plan_cache_dir: Path
) -> None:
    subset, rows = _ci_subset(tmp_path)
    assert sum(r.kind == "step" for r in rows) == 3  # tokamax and tokamax-base2 flash, ring
    cached = ["--cache-dir", str(plan_cache_dir)]  # its compiles: tests/aoizora/conftest.py
    assert main(["validate", str(subset), *GATE_ARGS, *STEP_GATE_ARGS, *cached]) == 0
    out = capsys.readouterr().out
    assert "gate passed" in out
    assert main(["validate", str(subset), *GATE_ARGS, *STEP_GATE_ARGS, "--json", *cached]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is True
    assert report["num_rows"] == sum(r.gated for r in rows)
    # The JSON numbers are the library's numbers.
    lib = validate(rows, predictors=default_predictors(cache_dir=str(plan_cache_dir)))
    assert [g["mape_percent"] for g in report["groups"]] == [g.mape_percent for g in lib.groups]
    assert not gate(lib, Thresholds(min_spearman=0.9, min_top1=1.0, max_mape_percent=35.0))
    # Ironwood is in the gate: both tpu-recipes topologies, ranked right, and (with the
    # overhead fitted to them, topologies/tpu7x.toml) within 10% on average.
    groups = {(g["kind"], g["slice"]): g for g in report["groups"]}
    for name in ("tpu7x:2x2x1", "tpu7x:2x2x2"):
        g = groups[("collective", name)]
        assert g["n"] == 5 and g["spearman"] == 1.0 and g["top1"] and g["mape_percent"] < 10
    # The step group: within the 15% and in the measured order where it matters.
    step = groups[("step", "tpu7x:2x2x1")]
    assert step["mape_percent"] < 15 and step["order_pairs"]["decisive"] >= 1
    assert step["order_agreement"] == 1.0


def _perturbed(tmp_path: Path, change: dict[str, float]) -> Path:
    _, rows = _ci_subset(tmp_path)
    out = []
    for r in rows:
        m = change.get(r.row_id, r.measured_s)
        if r.step is not None and r.step.steps is not None:  # keep the derivation true
            figure = m * r.step.steps + (r.step.other_s or 0.0)
            r = replace(r, step=replace(r.step, figure_s=figure))
        out.append(replace(r, measured_s=m))
    path = tmp_path / "perturbed.csv"
    path.write_text(format_measurements(out), encoding="utf-8")
    return path


@pytest.mark.slow
def test_gate_fails_on_a_perturbed_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = read_measurements(SHIPPED)
    sweep = [r for r in rows if r.row_id.startswith("sb-v5e8x16-ag-")]
    assert len(sweep) >= 5
    # Reverse the measured latencies of the v5e 8x16 size sweep: the largest
    # all-gather now "measures" fastest -> rho < 0, top-1 and MAPE fail.
    reversed_times = {
        r.row_id: t for r, t in zip(sweep, [s.measured_s for s in reversed(sweep)], strict=True)
    }
    path = _perturbed(tmp_path, reversed_times)
    assert main(["validate", str(path), *GATE_ARGS]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED" in out
    assert "spearman" in out and "top1" in out and "mape_percent" in out
    # A single row off by 3x fails only the error bound of its group.
    path = _perturbed(tmp_path, {"sb-v5e4x8-ag-34MB": 3 * 6.8e-4})
    assert main(["validate", str(path), *GATE_ARGS, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(f["slice"], f["metric"]) for f in report["failures"]] == [("v5e:4x8", "mape_percent")]
    # Swap two step rows of the CI group whose measurements are decisively apart: the
    # step order and top-1 fail, MAPE does not (the values stay within 15% of their
    # predictions).
    swap = {"md-7x8-w21-flash-0420": 4.855, "md-7x8-w21-flash": 5.153}
    path = _perturbed(tmp_path, swap)
    assert main(["validate", str(path), *GATE_ARGS, *STEP_GATE_ARGS, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    failed = {(f["slice"], f["metric"]) for f in report["failures"]}
    assert failed == {("tpu7x:2x2x1", "step_order"), ("tpu7x:2x2x1", "top1")}


def test_cli_reports_malformed_files_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(_collective_csv("a,collective,v5e:2x4,all-gather,dims:9,1,,1,,unreported,s"))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aoizora validate: error:") and "bad.csv:2:" in err


@pytest.mark.slow
@pytest.mark.pinned_libtpu
def test_the_compile_seed_serves_the_step_gate_without_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeded compile results are the programs the CI step group lowers to today: a
    fresh cache holding only the seed predicts every step row with no XLA compile (when
    the model's code changes, this fails: refresh the seed, tests/aoizora/compile_seed.py)."""
    import jax

    from aoizora.studies.validation.step import _compiled, predict_step
    from tests.aoizora.compile_seed import seed_compiles

    seed_compiles(tmp_path)
    compiles: list[object] = []

    def refuse(lowered: object, *args: object, **kwargs: object) -> object:
        compiles.append(lowered)
        raise AssertionError("a step row compiled: the compile seed is stale")

    monkeypatch.setattr(jax.stages.Lowered, "compile", refuse)
    _compiled.cache_clear()  # graphs memoised by the gate test in this process
    _, rows = _ci_subset(tmp_path)
    try:
        times = [predict_step(r, cache_dir=str(tmp_path)) for r in rows if r.kind == "step"]
    finally:
        _compiled.cache_clear()
    assert len(times) == 3 and all(t > 0 for t in times) and not compiles
