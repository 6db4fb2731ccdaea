"""Step rows: their columns and derivations, the shipped public rows, the step gate and the
fit of attention-kernel efficiencies (with synthetic predictors; no compile here)."""

from __future__ import annotations

import hashlib
import itertools
import re
import tomllib
from pathlib import Path

import pytest

from aoizora.errors import ValidationError
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.studies.calibration import CalibrationError
from aoizora.studies.calibration_steps import (
    MIN_ROWS,
    calibrate_steps,
    write_calibrated_steps,
)
from aoizora.studies.validation import (
    COLUMNS,
    Measurement,
    Thresholds,
    format_measurements,
    gate,
    parse_measurements,
    read_measurements,
    validate,
)
from aoizora.studies.validation.validate import RowPrediction, order_pairs
from sim.compute import ComputeParams
from sim.topology import load_chip, load_slice

SHIPPED = Path(__file__).resolve().parents[2] / "validation" / "measurements.csv"
V5E_PROFILES = SHIPPED.parent / "v5e" / "profiles"
TPU_VM_PLANS = SHIPPED.parent / "v5e" / "tpu-vm"
ORDER7X = "0 1 2 3 6 7 4 5"


def _row(**cells: str) -> str:
    base = {
        "row_id": "r",
        "kind": "step",
        "slice": "tpu7x:2x2x1",
        "model": "wan2.1-14b",
        "clip": "81x720x1280",
        "mesh_shape": "2x1x4x1",
        "mesh_axes": "data fsdp context tensor",
        "rules_id": "maxdiffusion",
        "device_order": ORDER7X,
        "measured_s": "2.0",
        "spread_kind": "unreported",
        "source": "s",
    }
    base.update(cells)
    return ",".join(COLUMNS) + "\n" + ",".join(base.get(c, "") for c in COLUMNS) + "\n"


def test_device_ids_of_a_two_device_chip_and_usp_kinds_parse() -> None:
    (row,) = parse_measurements(_row(attention="usp_u2", attention_kernel="custom"))
    assert row.step is not None and row.step.device_order == tuple(map(int, ORDER7X.split()))
    assert row.step.attention == "usp_u2" and row.step.attention_kernel == "custom"
    with pytest.raises(ValidationError, match="permutation of the 8 device ids"):
        parse_measurements(_row(device_order="0 1 3 2", mesh_shape="2x2", mesh_axes="data context"))


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"phase": "generation", "steps": "50", "figure_s": "249.3"}, "needs exactly"),
        ({"phase": "denoise", "steps": "40", "figure_s": "105.3"}, "must be .figure_s"),
        ({"phase": "denoise", "steps": "0", "figure_s": "105.3"}, "positive integer"),
        ({"phase": "week"}, "must be one of"),
        ({"steps": "40"}, "needs exactly"),
        ({"software_date": "2026-13-01"}, "YYYY-MM-DD"),
        ({"status": "old"}, "history"),
        ({"attention_kernel": "two words"}, "one name"),
    ],
)
def test_bad_step_cells_name_the_line_and_the_rule(cells: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=f"<text>:2: .*{message}"):
        parse_measurements(_row(**cells))


def test_derivations_are_checked_and_round_trip() -> None:
    text = _row(phase="denoise", steps="40", figure_s="105.3", measured_s="2.6325")
    (row,) = parse_measurements(text)
    assert row.step is not None and row.step.figure_s == 105.3
    gen = _row(phase="generation", steps="50", figure_s="249.3", other_s="6.55", measured_s="4.855")
    rows = parse_measurements(gen)
    assert parse_measurements(format_measurements(rows)) == rows


def test_a_configuration_is_gated_once() -> None:
    one = _row().splitlines()[1]
    two = one.replace("r,step", "r2,step", 1)
    head = ",".join(COLUMNS)
    with pytest.raises(ValidationError, match="status=history"):
        parse_measurements(f"{head}\n{one}\n{two}\n")
    hist = two.replace(",unreported,", ",unreported,", 1)
    cells = dict(zip(COLUMNS, hist.split(","), strict=True))
    cells["status"] = "history"
    rows = parse_measurements(f"{head}\n{one}\n{','.join(cells[c] for c in COLUMNS)}\n")
    assert [r.gated for r in rows] == [True, False]


def test_the_shipped_public_step_rows_are_public_dated_and_derived() -> None:
    rows = read_measurements(SHIPPED)
    steps = [r for r in rows if r.step is not None and not r.row_id.startswith(("m-", "mem-"))]
    gated = [r for r in steps if r.gated]
    assert len(gated) >= 6
    assert {load_slice(r.slice_name).chip.generation for r in gated} >= {"v6e", "tpu7x"}
    for r in steps:
        assert r.software_date and r.source.startswith("https://github.com/"), r.row_id
        assert r.step is not None and r.step.phase in ("denoise", "generation"), r.row_id
        assert r.spread_s is not None and r.spread_s > 0, r.row_id
        assert r.status != "excluded" or "Excluded" in r.notes, r.row_id
        kernel = r.step.attention_kernel
        assert kernel in load_chip(load_slice(r.slice_name).chip.generation).compute.kernels
    assert parse_measurements(format_measurements(rows)) == rows


def _brute_order(rows: list[RowPrediction]) -> tuple[int, int]:
    agree = total = 0
    for a, b in itertools.combinations(rows, 2):
        if abs(a.measured_s - b.measured_s) > (a.spread_s or 0) + (b.spread_s or 0):
            total += 1
            same = (a.predicted_s < b.predicted_s) == (a.measured_s < b.measured_s)
            agree += same and a.predicted_s != b.predicted_s
    return agree, total


def test_order_pairs_against_brute_force() -> None:
    import random

    rng = random.Random(3)
    for _ in range(200):
        rows = [
            RowPrediction(str(i), rng.uniform(1, 5), rng.uniform(1, 5), rng.uniform(0, 0.5))
            for i in range(rng.randint(2, 6))
        ]
        assert order_pairs(rows) == _brute_order(rows)


def _step_rows(values: dict[str, tuple[float, str, str]]) -> list[Measurement]:
    """Rows id -> (measured, kernel, status) of distinct configurations on tpu7x:2x2x1."""
    text = ""
    kinds = ["gather_kv", "ring", "ulysses", "usp_u2", "usp_u4"]
    for i, (rid, (m, kernel, status)) in enumerate(values.items()):
        r = _row(row_id=rid, measured_s=repr(m), attention=kinds[i], attention_kernel=kernel)
        cells = dict(zip(COLUMNS, r.splitlines()[1].split(","), strict=True))
        cells["status"] = status
        text += ",".join(cells[c] for c in COLUMNS) + "\n"
    return list(parse_measurements(",".join(COLUMNS) + "\n" + text))


def test_step_gate_holds_mape_and_order_only_on_gated_rows() -> None:
    rows = _step_rows(
        {"a": (2.0, "custom", ""), "b": (4.0, "custom", ""), "h": (9.0, "custom", "history")}
    )
    good = {"a": 2.1, "b": 3.9, "h": 1.0}  # the history row is wrong in order and value
    report = validate(rows, predictors={"step": lambda r: good[r.row_id]})
    (g,) = report.groups
    assert g.n == 2 and g.order_pairs == (1, 1) and g.mape_percent == pytest.approx(3.75)
    limits = Thresholds(max_step_mape_percent=5, min_step_order=1)
    assert gate(report, limits) == ()
    swapped = validate(rows, predictors={"step": lambda r: {"a": 4.0, "b": 2.0}.get(r.row_id, 1)})
    metrics = {f.metric for f in gate(swapped, limits)}
    assert metrics == {"step_mape_percent", "step_order"}


def _synthetic(a: dict[str, float], b: dict[str, float]) -> object:
    """A predictor a_i + b_i / eta_kernel of the row's kernel (the model's form, exactly)."""

    def predict(row: Measurement, params: ComputeParams) -> float:
        assert row.step is not None
        eff = dict(params.attention_efficiency)[row.step.attention_kernel or "custom"]
        return a[row.row_id] + b[row.row_id] / eff

    return predict


def test_the_fit_recovers_each_kernel_s_efficiency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = {"custom": 0.7, "tokamax": 0.35}
    a = {"c1": 0.5, "c2": 0.2, "t1": 1.0, "t2": 0.1, "s1": 1.0, "h1": 1.0}
    b = {"c1": 1.6, "c2": 0.8, "t1": 1.2, "t2": 2.0, "s1": 1.0, "h1": 1.0}
    kernel = {
        "c1": "custom",
        "c2": "custom",
        "t1": "tokamax",
        "t2": "tokamax",
        "s1": "splash",
        "h1": "tokamax",
    }
    measured = {r: a[r] + b[r] / truth.get(kernel[r], 0.5) for r in a}
    rows = _step_rows({r: (measured[r], kernel[r], "") for r in ("c1", "c2", "t1", "t2", "s1")})
    hist = _step_rows({"h1": (99.0, "tokamax", "history")})  # must not pull the fit
    fit = calibrate_steps(
        [*rows, *hist],
        generation="tpu7x",
        predict=_synthetic(a, b),
        source_name="synthetic",  # type: ignore[arg-type]
    )
    got = dict(fit.efficiencies)
    assert got == pytest.approx(truth, abs=2e-4)
    assert ("splash", f"1 row(s); a kernel needs {MIN_ROWS} or more") in fit.skipped
    assert ("h1", "status history") in fit.skipped
    assert fit.mape_percent < 0.1
    for k in truth:
        shares = [r.share for r in fit.residuals if r.kernel == k]
        assert sum(shares) == pytest.approx(1.0)
    # Written beside the shipped files and read back through --topology-dir's variable.
    out = write_calibrated_steps(fit, tmp_path / "tpu7x.toml")
    data = tomllib.loads(out.read_text())
    assert data["compute"]["attention_efficiency"]["custom"]["value"] == got["custom"]
    source = data["compute"]["attention_efficiency"]["custom"]["source"]
    assert "--steps" in source and "c1 (" in source and "c2 (" in source
    monkeypatch.setenv("AOIZORA_TOPOLOGIES_DIR", str(tmp_path))
    assert load_chip("tpu7x").compute.attention_eff == got["custom"]
    monkeypatch.delenv("AOIZORA_TOPOLOGIES_DIR")
    assert load_chip("tpu7x").compute.attention_eff != got["custom"]


def test_the_fit_refuses_without_enough_rows() -> None:
    rows = _step_rows({"c1": (2.0, "custom", "")})
    with pytest.raises(CalibrationError, match="no attention kernel of tpu7x"):
        calibrate_steps(rows, generation="tpu7x", predict=lambda r, p: 1.0)
    with pytest.raises(Exception, match="known kernels"):
        calibrate_steps(
            _step_rows({"x": (2.0, "nope", "")}), generation="tpu7x", predict=lambda r, p: 1.0
        )


def _latent_shape(model: str, clip: str) -> tuple[int, ...]:
    """The latents a Wan step of ``clip`` takes (batch 2 for CFG): the VAE compresses time
    4x (``4k+1`` frames) and space 8x (16x and 48 channels for TI2V-5B's VAE)."""
    frames, height, width = (int(x) for x in clip.split("x"))
    channels, stride = (48, 16) if model == "wan2.2-ti2v-5b" else (16, 8)
    return (2, channels, (frames - 1) // 4 + 1, height // stride, width // stride)


def _traced(row: Measurement) -> bool:
    """A row whose time is a saved trace's step (``aoizora measure --profile``)."""
    return "--profile" in row.source


def test_the_row_measured_on_the_tpu_vm_is_its_plans() -> None:
    """The wall-clock row timed on the TPU VM (issue 34) names the plan it measured by its
    sha256; the plan made there is saved, and the row's clip, mesh and candidate are the
    plan's, read from the plan file, not from the CSV."""
    from aoizora.plan import load_plan

    vm_rows = [
        r for r in read_measurements(SHIPPED) if r.row_id.startswith("m-") and not _traced(r)
    ]
    assert [r.row_id for r in vm_rows] == ["m-13f7b2a193-winner"]
    (row,) = vm_rows
    plans = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in TPU_VM_PLANS.glob("*.json")}
    (path,) = [p for digest, p in plans.items() if digest.startswith("13f7b2a193")]
    assert "13f7b2a193" in row.source
    plan = load_plan(path)
    assert plan.provenance.versions()["libtpu"] == "0.0.42.1"  # planned on the VM's libtpu
    assert row.step is not None and plan.slice_name == row.slice_name
    assert f"{plan.clip.frames}x{plan.clip.height}x{plan.clip.width}" == row.step.clip
    assert tuple(plan.mesh_shape) == row.step.mesh_shape
    assert plan.candidate_id.endswith(f"/{row.step.rules_id}/{row.step.attention}")
    assert "winner of the plan: candidate " + plan.candidate_id in row.notes
    # The VM's prediction (its libtpu's HLO) and the measured step agree within 1 %.
    assert row.measured_s == pytest.approx(plan.predicted.winner_s, rel=0.01)


def test_the_rows_aoizora_measured_are_their_traces() -> None:
    """Each v5e row's time is its trace's step and its clip is what its HLO ran: read from
    the saved trace and HLO, not from the CSV."""
    own = [r for r in read_measurements(SHIPPED) if r.row_id.startswith("m-") and _traced(r)]
    assert len(own) >= 12 and {r.slice_name for r in own} == {"v5e:1x1"}
    assert {r.step.model for r in own if r.step} == {"wan2.1-1.3b", "wan2.2-ti2v-5b"}
    clips = {r.step.clip for r in own if r.step}
    assert len({c.split("x")[0] for c in clips}) >= 3  # frame counts
    assert len({c.split("x", 1)[1] for c in clips}) >= 3  # resolutions
    for r in own:
        assert r.step is not None and r.step.attention_kernel == "splash", r.row_id
        profile = load_profile(V5E_PROFILES / f"{r.row_id}.ops.json.gz")
        assert r.measured_s == pytest.approx(profile.step_s, rel=1e-5), r.row_id
        hlo = read_text_file(V5E_PROFILES / f"{r.row_id}.hlo.txt.gz")
        latents = re.search(r"latents[.\d]*: bf16\[([\d,]+)\]", hlo)
        assert latents, r.row_id
        shape = tuple(int(x) for x in latents.group(1).split(","))
        assert shape == _latent_shape(r.step.model, r.step.clip), r.row_id
