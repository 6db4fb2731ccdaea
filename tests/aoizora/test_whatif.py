"""What-if studies: slice specs, rows re-derived from the plans, CSV/JSON, failures kept."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import aoizora.studies.whatif
from aoizora.cache import JsonCache, links_key
from aoizora.commands.whatif import render_rows, rows_to_csv
from aoizora.hlo.graph import graph_from_text
from aoizora.planner import run_plan
from aoizora.replay import replay, step_link_totals
from aoizora.studies.whatif import run_whatif, whatif_row
from aoizora.workloads.base import Workload, user_workload
from aoizora.workloads.rules import Rules
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.errors import TopologyError
from sim.topology import parse_slice_spec

CLIP = parse_resolution("256x256", frames=5)


@pytest.mark.parametrize(
    ("spec", "shape", "wrap"),
    [
        ("v5e:2x4", (2, 4), (False, False)),
        ("v5e:4x4+wrap", (4, 4), (True, True)),
        ("v5e:4x4+wrap=01", (4, 4), (False, True)),
        ("v5e:8x16", (8, 16), (False, True)),  # v5e wraps only a full 16-chip axis
        ("v5p:2x2x4", (2, 2, 4), (False, False, False)),
    ],
)
def test_parse_slice_spec(spec: str, shape: tuple[int, ...], wrap: tuple[bool, ...]) -> None:
    s = parse_slice_spec(spec)
    assert s.shape == shape and s.wraparound == wrap


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("v5e:4x4+wrp", "NAME\\[\\+wrap"),
        ("v5e:4x4+wrap=1x", "NAME\\[\\+wrap"),
        ("v5e", "must look like '<generation>:<shape>'"),
        ("4x4", "must look like '<generation>:<shape>'"),
    ],
)
def test_parse_slice_spec_rejects_malformed(spec: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_slice_spec(spec)


@pytest.mark.parametrize("spec", ["v5e:2x4", "v5e:4x4+wrap", "v5e:4x4+wrap=01", "v5e:8x16"])
def test_slice_spec_round_trips(spec: str) -> None:
    assert parse_slice_spec(spec).spec == spec


def test_parse_slice_spec_wrong_flag_count() -> None:
    with pytest.raises(TopologyError):
        parse_slice_spec("v5e:4x4+wrap=101")


@pytest.mark.slow
def test_run_whatif_rows_match_their_plans(plan_cache_dir: Path) -> None:
    workload = wan_workload("wan-tiny", CLIP)
    specs = ["v5e:2x2", "v5e:2x2+wrap", "v4:2x2x2"]
    slices = [parse_slice_spec(s) for s in specs]
    rows = run_whatif(workload, slices, top_k=2, cache_dir=str(plan_cache_dir))
    assert [r.spec for r in rows] == specs
    ok, wrapped, v4 = rows
    # v4 has two TensorCores per chip: libtpu's 16 devices do not match 8 chips.
    assert v4.error is not None and v4.step_s is None
    assert "failed" in render_rows(rows)
    for row, spec in ((ok, "v5e:2x2"), (wrapped, "v5e:2x2+wrap")):
        assert row.error is None
        outcome = run_plan(workload, parse_slice_spec(spec), top_k=2, cache_dir=str(plan_cache_dir))
        assert row.step_s == outcome.winner_q2_s
        assert row.winner == outcome.winner.candidate.id
        # what one device holds, as the plan says it: the winner's compiled analysis
        assert row.memory == outcome.memory(outcome.winner.compile)
        graph = graph_from_text(outcome.winner.compile.hlo_text)
        run = replay(graph, outcome.slice_, outcome.winner_placement.order)
        # Busy time over the whole step: every region's link records times its runs.
        utils = [t.busy_s / run.step_time_s for t in step_link_totals(run, graph)]
        assert row.peak_link_utilisation == max(utils)
        assert row.mean_link_utilisation == pytest.approx(sum(utils) / len(utils))
        for name, q2 in row.baselines_s:
            assert q2 is not None and row.speedup_over(name) == pytest.approx(q2 / row.step_s)
    assert wrapped.wraparound == (True, True) and ok.wraparound == (False, False)
    # On a 2-long ring the wrap cable parallels the direct one, and the simulator
    # pools both (sim.cables): twice the bandwidth each way, so a faster step.
    assert wrapped.step_s < ok.step_s
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert [p["slice"] for p in parsed] == specs
    assert float(parsed[0]["step_s"]) == ok.step_s
    assert ok.memory is not None and ok.memory.source == "compiled" and ok.memory.fits
    assert int(parsed[0]["hbm_bytes_per_chip"]) == ok.memory.hbm_bytes_per_chip
    assert v4.memory is None and parsed[2]["hbm_bytes_per_chip"] == ""
    assert ok.memory.cell() in render_rows(rows)
    assert parsed[2]["error"] == v4.error


@pytest.mark.slow
def test_a_warm_row_reads_the_winners_link_utilisation(
    plan_cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = "v5e:2x2"
    outcome = run_plan(
        wan_workload("wan-tiny", CLIP), parse_slice_spec(spec), top_k=2,
        cache_dir=str(plan_cache_dir),
    )  # fmt: skip
    links = JsonCache(tmp_path)
    cold = whatif_row(spec, outcome, cache=links)
    assert cold == whatif_row(spec, outcome)  # the cache changes nothing

    def no_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("the winner was replayed again")

    monkeypatch.setattr(aoizora.studies.whatif, "replay", no_replay)
    assert whatif_row(spec, outcome, cache=links) == cold
    with pytest.raises(AssertionError, match="replayed again"):
        whatif_row(spec, outcome, cache=JsonCache(tmp_path / "empty"))
    # The key is the device order itself: another placement is another entry.
    order = outcome.winner_placement.order
    keys = {
        links_key(hlo_text=outcome.winner.compile.hlo_text, slice_=outcome.slice_, physical_ids=ids)
        for ids in (order.physical_ids, tuple(reversed(order.physical_ids)))
    }
    assert len(keys) == 2


@pytest.mark.slow
def test_whatif_cli_json_and_csv(plan_cache_dir: Path, tmp_path: Path) -> None:
    out_csv = tmp_path / "w.csv"
    proc = subprocess.run(
        [
            sys.executable, "-m", "aoizora", "whatif", "--model", "wan-tiny",
            "--resolution", "256x256", "--frames", "5", "--slices", "v5e:2x2",
            "--top-k", "2", "--json", "--csv", str(out_csv),
        ],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, AOIZORA_CACHE_DIR=str(plan_cache_dir)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert len(data) == 1 and data[0]["slice"] == "v5e:2x2" and data[0]["error"] is None
    assert data[0]["step_s"] > 0
    assert set(data[0]["memory"]) == {"hbm_bytes_per_chip", "budget_bytes", "source"}
    assert out_csv.read_text().startswith("slice,num_chips,")


def test_whatif_cli_bad_spec_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aoizora", "whatif", "--model", "wan-tiny", "--slices", "v5e:4x4+x"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, AOIZORA_CACHE_DIR=str(tmp_path)),
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("aoizora whatif: error: slice spec")


def _mlp() -> Workload:
    """A compute-heavy two-layer MLP: cheap to compile, so three generations fit in CI."""

    def mlp(w1: jax.Array, w2: jax.Array, x: jax.Array) -> jax.Array:
        return jax.nn.gelu(x @ w1) @ w2

    bf16 = jnp.bfloat16
    return user_workload(
        "mlp",
        mlp,
        (
            jax.ShapeDtypeStruct((1024, 4096), bf16),
            jax.ShapeDtypeStruct((4096, 1024), bf16),
            jax.ShapeDtypeStruct((8, 2048, 1024), bf16),
        ),
        (("embed", "mlp"), ("mlp", "embed"), ("batch", "length", "embed")),
        out_logical_axes=("batch", "length", "embed"),
        rule_sets=(Rules.of("dp_tp", [("batch", "data"), ("mlp", "tensor")]),),
    )


@pytest.mark.slow
def test_whatif_across_generations_in_one_table(plan_cache_dir: Path) -> None:
    specs = ["v5e:2x4", "v6e:2x4", "tpu7x:2x2x1"]
    rows = run_whatif(
        _mlp(), [parse_slice_spec(s) for s in specs], top_k=1, cache_dir=str(plan_cache_dir)
    )
    assert [r.spec for r in rows] == specs and all(r.error is None for r in rows), rows
    assert [(r.num_chips, r.num_devices) for r in rows] == [(8, 8), (8, 8), (4, 8)]
    # Eight devices each: a tpu7x device (half of 2307 TFLOP/s) outruns a v6e chip
    # (918), which outruns a v5e chip (197), on this compute-bound step.
    v5e, v6e, tpu7x = (r.step_s for r in rows)
    assert v5e is not None and v6e is not None and tpu7x is not None
    assert v5e > v6e > tpu7x
    table = render_rows(rows)
    # header, rule, a row per slice, then the compute model of each generation
    assert len(table.splitlines()) == 2 + 3 + 3 and "4 (8 devices)" in table
    assert table.count("compute model (") == 3 and "topologies/tpu7x.toml" in table
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert [int(r["num_devices"]) for r in parsed] == [8, 8, 8]


def _row(spec: str, baselines: tuple[tuple[str, float | None], ...], error: str | None = None):  # type: ignore[no-untyped-def]
    from aoizora.studies.whatif import WhatIfRow

    ok = error is None
    return WhatIfRow(
        spec=spec, num_chips=8, num_devices=8, wraparound=(False, False),
        winner="w" if ok else None, placement="p" if ok else None,
        step_s=1e-3 if ok else None, baselines_s=baselines,
        peak_link_utilisation=0.5 if ok else None, mean_link_utilisation=0.25 if ok else None,
        plan_s=1.0 if ok else None, error=error,
    )  # fmt: skip


def test_table_columns_follow_the_workloads_baselines() -> None:
    wan = [_row("v5e:2x4", (("existing deployment", 2e-3), ("maxdiffusion recipe", 1.5e-3),
                            ("logical search", 1e-3)))]  # fmt: skip
    mine = [
        _row("v5e:2x4", (("default deployment", 3e-3), ("logical search", 1.2e-3))),
        _row("v5e:3x3", (), error="libtpu cannot describe slice 'v5e:3x3'"),
    ]
    wan_header = render_rows(wan).splitlines()[0].split("  ")
    mine_lines = render_rows(mine).splitlines()
    assert [c.strip() for c in wan_header if "vs" in c] == [
        "vs existing",
        "vs recipe",
        "vs logical",
    ]
    assert [c.strip() for c in mine_lines[0].split("  ") if "vs" in c] == [
        "vs default",
        "vs logical",
    ]
    assert "3.00x" in mine_lines[2] and "1.20x" in mine_lines[2]
    assert mine_lines[3].split()[:3] == ["v5e:3x3", "8", "failed"]
    assert mine_lines[3].endswith("libtpu cannot describe slice 'v5e:3x3'")
    # The CSV has the same columns for every workload; a baseline a workload lacks is empty.
    wan_csv = list(csv.DictReader(io.StringIO(rows_to_csv(wan))))
    mine_csv = list(csv.DictReader(io.StringIO(rows_to_csv(mine))))
    assert list(wan_csv[0]) == list(mine_csv[0])
    assert (wan_csv[0]["default_deployment_s"], wan_csv[0]["existing_deployment_s"]) == (
        "",
        "0.002",
    )
    assert (mine_csv[0]["default_deployment_s"], mine_csv[0]["existing_deployment_s"]) == (
        "0.003",
        "",
    )


def test_a_slice_out_of_memory_is_its_rows_error_and_the_study_goes_on() -> None:
    """A MemoryError while one slice is planned becomes that row's one-line error (the
    phase and slice it ran out in); the next slice is still planned."""
    from aoizora.errors import WorkerDied
    from aoizora.interrupts import phase
    from aoizora.studies.whatif import run_whatif
    from aoizora.workloads.wan import parse_resolution, wan_workload
    from sim.topology import load_slice

    planned: list[str] = []

    def plan(_wl: object, slice_: Any, **_kw: object) -> Any:
        planned.append(slice_.name)
        with phase(f"the placement search on {slice_.name}"):
            if len(planned) == 1:
                raise MemoryError
            raise WorkerDied("a worker process died during the compiles: killed by SIGKILL")

    wl = wan_workload("wan-tiny", parse_resolution("64x64", frames=9))
    rows = run_whatif(wl, [load_slice("v5e:2x2"), load_slice("v5e:2x4")], plan=plan)
    assert planned == ["v5e:2x4", "v5e:2x2"]  # the most devices first
    first, second = (r.error or "" for r in rows)  # the rows in the given order
    assert second.startswith("out of memory during the placement search on v5e:2x4")
    assert first.startswith("a worker process died") and "\n" not in first + second


def test_slices_are_planned_largest_first_and_reported_in_the_given_order() -> None:
    """A pod's fixed work (Stage 1, a round of compiles) comes out of the smaller slices'
    shares of a time bound, not past its end: the most devices are planned first (ties
    in the given order); the rows keep the order the user gave, and so do the progress
    lines' counts."""
    from aoizora.studies.whatif import run_whatif
    from aoizora.workloads.wan import parse_resolution, wan_workload
    from sim.topology import load_slice

    planned: list[str] = []

    def plan(_wl: object, slice_: Any, **_kw: object) -> Any:
        planned.append(slice_.spec)
        raise MemoryError

    lines: list[str] = []
    specs = ["v5e:2x2", "v5e:4x4", "v6e:2x4", "v5e:2x4", "v5p:2x2x2"]
    wl = wan_workload("wan-tiny", parse_resolution("64x64", frames=9))
    rows = run_whatif(wl, [load_slice(s) for s in specs], plan=plan, progress=lines.append)
    assert planned == ["v5e:4x4", "v6e:2x4", "v5e:2x4", "v5p:2x2x2", "v5e:2x2"]
    assert [r.spec for r in rows] == specs
    starts = [line for line in lines if line.startswith("== what-if ") and "/5: " in line]
    assert [line.split()[2] for line in starts] == ["1/5:", "2/5:", "3/5:", "4/5:", "5/5:"]
    assert [line.split()[3] for line in starts] == planned
