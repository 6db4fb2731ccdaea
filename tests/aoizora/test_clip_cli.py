"""The whole clip on the command line: ``plan`` (default), ``whatif --clip`` and ``serve``,
on the CI-sized model (wan-tiny, vae-tiny) at 64x64x9 on v5e:2x2, sharing one plan cache:
the step and the VAE are compiled once for all of these tests."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.cli import main
from aoizora.plan import load_plan
from sim.topology import load_slice

CLIP = ["--model", "wan-tiny", "--resolution", "64x64", "--frames", "9"]
# Seconds of host text encoding in these tests: a fraction of the tiny clip's TPU time.
TE = ["--text-encoder-s", "0.001"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_plan_reports_the_clip_and_records_the_vae_plan(
    plan_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ["--cache-dir", str(plan_cache_dir), "--top-k", "2"]
    out = tmp_path / "plan.json"
    code, text, err = _run(capsys, "plan", *CLIP, "--slice", "v5e:2x2", *cache, "--json",
                           "--out", str(out))  # fmt: skip
    assert code == 0, err[-2000:]
    s = json.loads(text)
    parts = s["text_encoder_s"] + s["denoise_s"] + s["vae_decode_s"]
    assert s["clip_s"] == pytest.approx(parts) and s["text_encoder_s"] == 3.9  # host default
    assert s["steps"] == 50 and s["text_encoder"]["where"] == "host"
    vae = s["vae"]
    assert vae["workload"] == "vae-tiny@64x64x9" and vae["winner"]["decode_s"] == s["vae_decode_s"]
    # By default the VAE is ranked by Stage 1 alone: its figure is Q1 and nothing of the
    # decoder is compiled (every compile, cached or not, prints a "[compile" line).
    # the decode figure is one call: Stage 1's device time and the host's launch
    launch = load_slice("v5e:2x2").chip.compute.program_launch_s
    assert vae["source"] == "stage1" and vae["winner"]["q1_s"] + launch == s["vae_decode_s"]
    assert vae["compiled"] == [] and vae["winner"]["placement"] == "default order"
    compiles = [ln for ln in err.splitlines() if ln.startswith("[compile")]
    assert compiles and not [ln for ln in compiles if "width" in ln or "vae" in ln], compiles
    assert {b["name"] for b in vae["baselines"]} == {"maxdiffusion spatial", "replicated"}
    assert vae["stage1_order"][0] == vae["winner"]["candidate"]
    plan = load_plan(out)
    assert plan.latency is not None and plan.latency.clip_s == s["clip_s"]
    assert plan.vae is not None and plan.vae.candidate_id == vae["winner"]["candidate"]
    assert plan.vae.slice_name == plan.slice_name == "v5e:2x2"
    assert plan.vae.predicted.source == "stage1" and plan.predicted.source == "simulated"
    # Warm: the same step and VAE, ten steps instead of fifty; the table says it all.
    code, text, err = _run(capsys, "plan", *CLIP, "--slice", "v5e:2x2", *cache, "--steps", "10",
                           "--json", "--out", str(tmp_path / "p10.json"), "--quiet")  # fmt: skip
    ten = json.loads(text)
    assert ten["denoise_s"] == pytest.approx(s["denoise_s"] / 5)
    assert ten["vae_decode_s"] == s["vae_decode_s"] and ten["steps"] == 10
    code, text, _ = _run(capsys, "plan", *CLIP, "--slice", "v5e:2x2", *cache, "--quiet",
                         "--out", str(tmp_path / "t.json"), *TE)  # fmt: skip
    assert code == 0 and "whole clip" in text and "VAE decode plan: " in text
    assert "by Stage 1; baselines by Stage 1: maxdiffusion spatial" in text


@pytest.mark.slow
def test_whatif_clip_adds_the_same_names(
    plan_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ["--cache-dir", str(plan_cache_dir), "--top-k", "2", "--quiet"]
    code, text, err = _run(capsys, "whatif", *CLIP, "--slices", "v5e:2x2", "--clip", "--json",
                           *cache)  # fmt: skip
    assert code == 0, err[-2000:]
    (row,) = json.loads(text)
    assert row["clip_s"] == pytest.approx(
        row["text_encoder_s"] + row["denoise_s"] + row["vae_decode_s"]
    )
    assert row["denoise_s"] == pytest.approx(50 * row["step_s"])
    code, text, _ = _run(capsys, "whatif", *CLIP, "--slices", "v5e:2x2", "--quiet",
                         "--cache-dir", str(plan_cache_dir), "--top-k", "2")  # fmt: skip
    assert "clip (sim)" not in text  # off by default


@pytest.mark.slow
def test_serve_sizes_the_tiny_deployment(
    plan_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ["--cache-dir", str(plan_cache_dir), "--top-k", "2"]
    base = ["serve", *CLIP, "--slices", "v5e:2x2", *cache, *TE, "--replications", "4",
            "--requests", "400"]  # fmt: skip
    code, text, err = _run(capsys, *base, "--rate", "100/s", "--slo-p99", "1", "--json",
                           "--plot", str(tmp_path / "cdf.png"))  # fmt: skip
    assert code == 0, err[-2000:]
    data = json.loads(text)
    options, cheapest = data["options"], data["cheapest"]
    assert cheapest is not None and cheapest in options and cheapest["meets_slo"]
    clip_s = options[0]["clip_s"]
    need = math.floor(100 * clip_s) + 1
    assert options[0]["replicas"] == need  # the fewest stable count first
    for o in options:
        assert o["p50_s"] >= clip_s * 0.999 and o["p50_s"] <= o["p95_s"] <= o["p99_s"]
        assert o["utilisation"] == pytest.approx(100 * clip_s / o["replicas"], rel=0.15)
    assert data["plans"]["v5e:2x2"]["kinds"][0]["vae_plan"]
    assert "[serve] v5e:2x2 x" in err and (tmp_path / "cdf.png").stat().st_size > 1000
    # The same seed, the same answer.
    code, again, _ = _run(capsys, *base, "--rate", "100/s", "--slo-p99", "1", "--json")
    assert json.loads(again)["options"] == options
    # A rate the replicas tried cannot keep up with: one line naming what it needs.
    code, _, err = _run(capsys, *base, "--rate", "100/s", "--slo-p99", "1", "--replicas", "1")
    line = err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("aoizora serve: error: the rate 100/s cannot be served")
    assert f"needs at least {need} replicas" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "2/day"], "--rate '2/day' is not COUNT/UNIT"),
        (["--rate", "2/min", "--slo-p99", "-5"], "--slo-p99 -5.0: must be positive"),
        (["--rate", "2/min", "--replicas", "0-2"], "--replicas '0-2'"),
        (["--rate", "2/min", "--prices", "/nonexistent.toml"], "cannot read prices file"),
        (["--rate", "2/min", "--trace", "t.csv"], "give --rate"),
        (["--rate", "2/min", "--slices", "v9:2x2"], "unknown chip generation 'v9'"),
        (["--rate", "2/min", "--slices", "v4:2x2x1"], "no chip-hour price for generation 'v4'"),
    ],
)
def test_serve_bad_input_is_one_line_exit_2_before_any_work(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    argv = ["serve", "--model", "wan-tiny", "--slices", "v5e:2x2", "--slo-p99", "60", *args]
    if "--slices" in args:  # the given slice replaces the default
        i = argv.index("--slices")
        del argv[i : i + 2]
    proc = subprocess.run([sys.executable, "-m", "aoizora", *argv], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("aoizora serve: error:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "[compile" not in proc.stderr


@pytest.mark.slow
def test_a_vae_that_fits_nowhere_keeps_the_step_and_says_what_would_fit(
    plan_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The decoder over every budget of the slice: the plan holds the step alone, exit 0,
    one warning line naming the smallest slice on which the VAE fits (by XLA's buffer
    assignment); the plan and every compiled configuration carry their per-device memory."""
    import dataclasses

    import aoizora.request.vae_rank as vae_rank
    from sim.topology import Slice

    real_rank = vae_rank._rank

    def tight(workload: object, slice_: Slice, caches: object, say: object) -> object:
        chip = dataclasses.replace(slice_.chip, hbm_bytes=1e3, usable_hbm_bytes=1e3)
        return real_rank(workload, slice_.with_chip(chip), caches, say)  # type: ignore[arg-type]

    monkeypatch.setattr(vae_rank, "_rank", tight)
    out = tmp_path / "plan.json"
    cache = ["--cache-dir", str(plan_cache_dir), "--top-k", "2"]
    code, text, err = _run(capsys, "plan", *CLIP, "--slice", "v5e:2x2", *cache, "--json",
                           "--out", str(out))  # fmt: skip
    assert code == 0, err[-2000:]
    warning = [ln for ln in err.splitlines() if "the clip is left out" in ln]
    assert len(warning) == 1, err[-3000:]
    assert "no sharding of vae-tiny@64x64x9 fits on v5e:2x2" in warning[0]
    # the next bigger slice, whose real budget the best sharding fits by its buffer assignment
    assert "it fits on v5e:2x4 by XLA's buffer assignment" in warning[0]
    s = json.loads(text)
    assert "clip_s" not in s and "vae" not in s  # the step's plan, as --no-clip
    plan = load_plan(out)
    assert plan.vae is None and plan.latency is None
    budget = int(plan.slice.chip.per_device().memory_budget_bytes)
    assert plan.memory is not None and plan.memory.source == "compiled"
    assert plan.memory.budget_bytes == budget == s["winner"]["memory"]["budget_bytes"]
    assert 0 < plan.memory.hbm_bytes_per_chip == s["winner"]["memory"]["hbm_bytes_per_chip"]
    assert all(a.memory is not None and a.memory.fits for a in plan.alternatives)
    compiled = [c for c in s["candidates"] if c["compiled"]]
    assert compiled and all(c["memory"]["source"] == "compiled" for c in compiled)


@pytest.mark.slow
def test_a_vae_with_no_legal_sharding_keeps_the_step_in_plan_and_whatif(
    plan_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A decoder whose latent (9x9: a 72x72 clip) the slice's 4 devices split no way, as
    wan2.1-vae's 90x160 on a 512-device v5p pod: ``plan`` keeps the step (exit 0) and
    says in one warning line why the clip is left out and which sub-slice would plan the
    decode; ``whatif --clip`` keeps the step's row and says the same in it."""
    import aoizora.request.clip_plan as clip_plan
    from aoizora.workloads.clip import Clip
    from aoizora.workloads.vae import vae_workload

    monkeypatch.setattr(
        clip_plan, "vae_for", lambda _wl, chunk=1: vae_workload("vae-tiny", Clip(72, 72, 9))
    )
    out = tmp_path / "plan.json"
    cache = ["--cache-dir", str(plan_cache_dir), "--top-k", "2"]
    code, text, err = _run(capsys, "plan", *CLIP, "--slice", "v5e:2x2", *cache, "--json",
                           "--out", str(out))  # fmt: skip
    assert code == 0, err[-2000:]
    warning = [ln for ln in err.splitlines() if "the clip is left out" in ln]
    assert len(warning) == 1 and "Traceback" not in err, err[-3000:]
    assert "vae-tiny@72x72x9 has no legal sharding over the 4 devices of v5e:2x2" in warning[0]
    assert "a sub-slice such as v5e:1x1 (1 device)" in warning[0] and "()" not in warning[0]
    s = json.loads(text)
    assert "vae" not in s and s["winner"]["candidate"]  # the step's plan, as --no-clip
    assert load_plan(out).vae is None
    code, text, err = _run(capsys, "whatif", *CLIP, "--slices", "v5e:2x2", "--clip", "--json",
                           *cache)  # fmt: skip
    assert code == 0, err[-2000:]
    (row,) = json.loads(text)
    assert row["error"] is None and row["step_s"] == s["winner"]["q2_s"]
    assert "clip_s" not in row and "v5e:1x1" in row["clip_left_out"]
