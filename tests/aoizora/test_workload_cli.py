"""``aoizora plan|whatif --workload FILE.py:FACTORY``: a model of one's own, its own mesh axes.

The model is ``examples/tiny_block.py`` (a transformer block with mesh axes dp, sp, tp),
planned for real v5e:2x4 and tpu7x:2x2x1 (Ironwood: 4 chips, 8 devices) TPU targets at
CI sizes. The plan file alone (mesh, rules, recorded inputs) must reproduce the
planner's prediction: compiling the user's function with the plan's shardings on the
plan's mesh and replaying it gives the winner's Q2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import pytest
from jax.sharding import NamedSharding

from aoizora.compile import compiled_hlo
from aoizora.hlo.graph import graph_from_text
from aoizora.plan import load_plan
from aoizora.replay import replay
from aoizora.tpu import slice_backend, topology_devices
from aoizora.workloads.factory import load_workload
from aoizora.workloads.rules import logical_to_pspec
from sim.topology import load_slice

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tiny_block.py"
CHATTER = ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "InitGoogle", "Source Location Trace")

needs_libtpu = pytest.mark.skipif(
    slice_backend(load_slice("v5e:2x4")) != "tpu", reason="libtpu unavailable"
)


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aoizora", *args, "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        cwd=ROOT,
        timeout=900,
    )


@pytest.fixture(scope="module")
def cli_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plan cache for this module's CLI runs (the what-if reuses the plans' compiles)."""
    return tmp_path_factory.mktemp("workload-cli-cache")


def _plan(slice_name: str, top_k: str, cache: Path) -> tuple[Path, dict[str, object], str]:
    out = cache.parent / f"plan-{slice_name.replace(':', '-')}.json"
    proc = _cli(
        "plan", "--workload", "examples/tiny_block.py:make_small", "--slice", slice_name,
        "--top-k", top_k, "--out", str(out), "--json", cache=cache,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout), proc.stderr


@pytest.fixture(scope="module")
def planned(cli_cache: Path) -> tuple[Path, dict[str, object], str]:
    return _plan("v5e:2x4", "2", cli_cache)


@pytest.fixture(scope="module")
def planned_tpu7x(cli_cache: Path) -> tuple[Path, dict[str, object], str]:
    return _plan("tpu7x:2x2x1", "1", cli_cache)


def _tiny_block() -> Any:
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        import tiny_block
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    return tiny_block


def _replay_from_the_plan_alone(plan_path: Path, slice_name: str) -> tuple[float, float]:
    """Compile the user's own function with nothing but the plan -- its mesh, its input
    specs, its rules for the output -- and replay that program on the plan's placement:
    (replayed with the host's launch of the call, predicted) step times."""
    tiny_block = _tiny_block()
    plan = load_plan(plan_path)
    slice_ = load_slice(slice_name)
    mesh = plan.mesh(topology_devices(slice_))
    wl = tiny_block.make_small()
    specs = jax.tree.unflatten(jax.tree.structure(wl.abstract_args), plan.partition_specs())
    in_shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs)
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    out_spec = logical_to_pspec(
        ("batch", "length", "embed"), plan.rules, plan.mesh_axis_names, sizes
    )
    jitted = jax.jit(tiny_block.block, in_shardings=in_shardings,
                     out_shardings=NamedSharding(mesh, out_spec))  # fmt: skip
    # compiled_hlo: tpu7x's compiled text comes from the compiler's dump (as_text fails).
    _, text = compiled_hlo(jitted.trace(*wl.abstract_args).lower(), slice_)
    step = replay(graph_from_text(text), slice_, plan.device_order()).step_time_s
    return step + slice_.chip.compute.program_launch_s, plan.predicted.winner_s


@pytest.mark.slow
@needs_libtpu
def test_plan_of_a_model_of_ones_own_builds_its_mesh(
    planned: tuple[Path, dict[str, object], str],
) -> None:
    out, summary, stderr = planned
    plan = load_plan(out)
    wl = load_workload(f"{EXAMPLE}:make_small")
    assert plan.model == plan.workload == "tiny-block" and plan.clip is None
    # The workload's own mesh axes, in the order its rule sets name them.
    assert plan.mesh_axis_names == ("dp", "tp", "sp")
    assert plan.candidate_id == summary["winner"]["candidate"]  # type: ignore[index]
    # Recorded inputs: one per array argument, read independently from the factory's args.
    leaves = jax.tree.leaves_with_path(wl.abstract_args)
    assert [(i.name, i.shape, i.dtype) for i in plan.inputs] == [
        (f"arg{p[0].idx}{jax.tree_util.keystr(p[1:])}", tuple(x.shape), str(x.dtype))
        for p, x in leaves
    ]
    mesh = plan.mesh(list(reversed(topology_devices(load_slice("v5e:2x4")))))
    assert mesh.axis_names == ("dp", "tp", "sp")
    assert dict(mesh.shape) == dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    for pos, device in enumerate(mesh.devices.flat):
        assert tuple(device.coords[:2]) == plan.coords[pos]
    names = [b["name"] for b in summary["baselines"]]  # type: ignore[attr-defined]
    assert names == ["default deployment", "logical search"]
    assert not any(c in stderr for c in CHATTER), stderr[-2000:]


@pytest.mark.slow
@needs_libtpu
def test_the_plan_file_alone_reproduces_the_prediction(
    planned: tuple[Path, dict[str, object], str],
) -> None:
    step, predicted = _replay_from_the_plan_alone(planned[0], "v5e:2x4")
    assert step == pytest.approx(predicted, rel=1e-9)


@pytest.mark.slow
@needs_libtpu
def test_a_tpu7x_plan_file_builds_its_mesh_over_both_cores_of_every_chip(
    planned_tpu7x: tuple[Path, dict[str, object], str],
) -> None:
    out, summary, stderr = planned_tpu7x
    plan = load_plan(out)
    assert plan.slice_name == "tpu7x:2x2x1" and plan.candidate_id == summary["winner"]["candidate"]  # type: ignore[index]
    # Eight devices on four chips: every chip twice, its two device ids 2 x chip + core.
    assert sorted(plan.physical_ids) == list(range(8))
    assert sorted(plan.coords) == sorted(load_slice("tpu7x:2x2x1").coords * 2)
    devices = topology_devices(load_slice("tpu7x:2x2x1"))
    mesh = plan.mesh(list(reversed(devices)))  # placed by chip and core, not by list order
    assert mesh.axis_names == plan.mesh_axis_names == ("dp", "tp", "sp")
    for pos, device in enumerate(mesh.devices.flat):
        assert int(device.id) == plan.physical_ids[pos]
        assert tuple(device.coords) == plan.coords[pos]
        assert int(device.core_on_chip) == plan.physical_ids[pos] % 2
    assert not any(c in stderr for c in CHATTER), stderr[-2000:]
    # And the plan alone reproduces the prediction on Ironwood too.
    step, predicted = _replay_from_the_plan_alone(out, "tpu7x:2x2x1")
    assert step == pytest.approx(predicted, rel=1e-9)


def test_bad_slice_fails_before_any_work_naming_valid_shapes(tmp_path: Path) -> None:
    proc = _cli(
        "plan", "--workload", "examples/tiny_block.py:make_small", "--slice", "v5e:3x3",
        "--out", str(tmp_path / "p.json"), cache=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]  # no progress: nothing started; no chatter
    line = lines[0]
    assert line.startswith("aoizora plan: error: libtpu cannot describe slice 'v5e:3x3'")
    assert "(its first two dimensions must each be 1 or even, and 3x3 has 3 and 3)" in line
    # The nearest v5e shapes libtpu describes: 8 and 10 chips (9 has none).
    assert "8 chips: 2x4, 4x2, 1x8, 8x1; 10 chips: 1x10, 10x1" in line
    assert line.endswith("e.g. --slice v5e:2x4")
    assert not (tmp_path / "p.json").exists()


def test_whatif_checks_every_slice_before_planning(tmp_path: Path) -> None:
    proc = _cli(
        "whatif", "--workload", "examples/tiny_block.py:make_small",
        "--slices", "v5e:2x2,v6e:5x5", cache=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "libtpu cannot describe slice 'v6e:5x5'" in lines[0], proc.stderr
    assert "24 chips: 4x6, 6x4" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--resolution", "480p"], "--resolution apply to --model (Wan) only"),
        (["--frames", "81", "--resolution", "720p"], "--resolution and --frames apply"),
    ],
)
def test_wan_clip_options_with_a_workload_are_errors(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    proc = _cli(
        "plan", "--workload", "examples/tiny_block.py:make_small", "--slice", "v5e:2x4", *args,
        cache=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2 and needle in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_model_and_workload_are_exclusive(tmp_path: Path) -> None:
    proc = _cli(
        "plan", "--model", "wan-tiny", "--workload", "examples/tiny_block.py:make",
        "--slice", "v5e:2x4", cache=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "not allowed with argument" in proc.stderr


@pytest.mark.slow
@needs_libtpu
def test_whatif_plans_a_model_of_ones_own_across_generations(
    cli_cache: Path, planned_tpu7x: tuple[Path, dict[str, object], str]
) -> None:
    proc = _cli(
        "whatif", "--workload", "examples/tiny_block.py:make_small",
        "--slices", "v5e:2x2,tpu7x:2x2x1", "--top-k", "1", "--json", cache=cli_cache,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    assert [(r["slice"], r["num_chips"], r["num_devices"]) for r in rows] == [
        ("v5e:2x2", 4, 4),
        ("tpu7x:2x2x1", 4, 8),
    ]
    for row in rows:
        assert row["error"] is None and row["winner"].endswith("/none")
        assert set(row["baselines_s"]) == {"default deployment", "logical search"}
        assert all(q2 >= row["step_s"] for q2 in row["baselines_s"].values())
    # The tpu7x row is the plan's winner: the same search over the same compiles.
    summary = planned_tpu7x[1]
    assert rows[1]["winner"] == summary["winner"]["candidate"]  # type: ignore[index]
    assert rows[1]["step_s"] == summary["winner"]["q2_s"]  # type: ignore[index]
    assert not any(c in proc.stderr for c in CHATTER)
