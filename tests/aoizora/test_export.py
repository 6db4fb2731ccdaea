"""maxdiffusion export: every Wan sharding exported and read back, or refused in one line.

Plans are built from the real candidate space of Wan 2.1 14B / 1.3B and Wan 2.2 A14B on
v5e, v6e and tpu7x slices (no compile: a plan needs a sharding and a placement, not a
program); the round trip reads the written files with maxdiffusion's semantics
(tests/aoizora/maxdiffusion_reader.py). One CLI test plans wan-tiny for real.
"""

from __future__ import annotations

import ast
import functools
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aoizora.candidates.space import enumerate_candidates
from aoizora.cli import main
from aoizora.errors import ExportError
from aoizora.export.directory import EXPORT_FILES, export_maxdiffusion
from aoizora.export.maxdiffusion import maxdiffusion_export, refusal_reason
from aoizora.export.mesh_hook import mesh_hook_source
from aoizora.export.nearest import Alternative, nearest_expressible, plan_alternatives
from aoizora.placement.enumerate import enumerate_placements
from aoizora.plan import Plan, PredictedLatencies, load_plan, plan_inputs
from aoizora.workloads.wan import model_clip, wan_workload
from sim.topology import load_slice
from tests.aoizora.maxdiffusion_reader import check_export_dir, check_refusal

CASES = (
    ("wan2.1-14b", "720p", "v6e:2x4"),
    ("wan2.1-14b", "720p", "v5e:2x4"),
    ("wan2.1-1.3b", "480p", "tpu7x:2x2x1"),
    ("wan2.2-a14b", "720p", "tpu7x:2x2x1"),
)


@functools.cache
def _plans(model: str, resolution: str, slice_name: str) -> tuple[Plan, ...]:
    """One plan per legal candidate, each at a placement picked by a fixed seed."""
    workload = wan_workload(model, model_clip(model, resolution))
    slice_ = load_slice(slice_name)
    rng = random.Random(7)
    out = []
    for i, cand in enumerate(enumerate_candidates(workload, slice_.num_devices).legal):
        placements = enumerate_placements(
            cand.mesh_shape, slice_, mesh_axis_names=cand.mesh_axis_names
        )
        placement = rng.choice(placements)
        out.append(
            Plan.create(
                model=model,
                clip=workload.clip,
                workload=workload.name,
                inputs=plan_inputs(workload),
                mesh_axis_names=cand.mesh_axis_names,
                order=placement.order,
                rules=cand.rules,
                attention=cand.attention,
                candidate_id=cand.id,
                placement_id=placement.id,
                predicted=PredictedLatencies(
                    winner_s=0.5 + i / 1000,
                    baselines_s=(("existing deployment", 0.9), ("maxdiffusion recipe", 0.7)),
                ),
            )
        )
    return tuple(out)


@pytest.mark.parametrize(("model", "resolution", "slice_name"), CASES)
def test_every_sharding_round_trips_or_is_refused(
    model: str, resolution: str, slice_name: str, tmp_path: Path
) -> None:
    kinds: set[str] = set()
    refused = 0
    for i, plan in enumerate(_plans(model, resolution, slice_name)):
        reason = refusal_reason(plan)
        directory = tmp_path / str(i)
        if reason is None:
            export_maxdiffusion(plan, directory, alternatives=(), among="none")
            run = check_export_dir(plan, directory)
            kinds.add(run.raw["attention"])
            continue
        refused += 1
        with pytest.raises(ExportError) as exc:
            export_maxdiffusion(
                plan, directory, alternatives=plan_alternatives(plan), among="baselines"
            )
        check_refusal(str(exc.value), plan, reason)
        assert not directory.exists()  # a refusal writes nothing
    # maxdiffusion's four kinds, Ulysses x ring included, on every generation; and the
    # shardings it lacks (tensor parallelism, sequences over fsdp) are refused.
    assert kinds == {"flash", "tokamax_ring", "ulysses", "ulysses_ring"}
    assert refused > 0


def test_refusal_reasons_name_what_maxdiffusion_lacks() -> None:
    by_id = {p.candidate_id: p for p in _plans("wan2.1-14b", "720p", "v6e:2x4")}
    tp = refusal_reason(by_id["data2.fsdp1.context2.tensor2/fsdp/ring"])
    assert tp is not None and "tensor-parallel (tensor=2)" in tp
    seq = refusal_reason(by_id["data2.fsdp2.context2.tensor1/fsdp/usp_u2"])
    assert seq is not None and "['context', 'fsdp']" in seq
    tiny = Plan.from_json(by_id["data2.fsdp1.context4.tensor1/fsdp/ring"].to_json())
    other = Plan.from_json(tiny.to_json().replace('"model": "wan2.1-14b"', '"model": "wan-tiny"'))
    reason = refusal_reason(other)
    assert reason is not None and "ships no config for model 'wan-tiny'" in reason
    assert refusal_reason(other, config_file="base_wan_1_3b.yml") is None


def test_nearest_is_the_fastest_expressible_alternative() -> None:
    plans = _plans("wan2.1-14b", "720p", "v6e:2x4")
    alts = [Alternative(p.candidate_id, p, p.predicted.winner_s) for p in reversed(plans)]
    nearest = nearest_expressible(alts, lambda p: refusal_reason(p) is None)
    ok = [a for a in alts if refusal_reason(a.plan) is None]
    assert nearest is not None and nearest.predicted_s == min(a.predicted_s for a in ok)
    assert nearest.label == min(ok, key=lambda a: (a.predicted_s, a.label)).label


class _Device:
    def __init__(self, coords: tuple[int, ...], core: int, ident: int) -> None:
        self.coords, self.core_on_chip, self.id = [*coords, 0][:3], core, ident

    def __repr__(self) -> str:
        return f"D{self.id}"


def _fake_maxdiffusion(monkeypatch: pytest.MonkeyPatch) -> Any:
    import sys
    import types

    package = types.ModuleType("maxdiffusion")
    utils = types.ModuleType("maxdiffusion.max_utils")
    utils.create_device_mesh = lambda config, devices=None, logging=True: "mesh_utils order"  # type: ignore[attr-defined]
    package.max_utils = utils  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "maxdiffusion", package)
    monkeypatch.setitem(sys.modules, "maxdiffusion.max_utils", utils)
    return utils


@pytest.mark.parametrize("slice_name", ["v6e:2x4", "tpu7x:2x2x1"])
def test_mesh_hook_builds_the_planned_mesh(
    slice_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = "wan2.1-14b" if slice_name.startswith("v6e") else "wan2.1-1.3b"
    plan = next(
        p
        for p in _plans(model, "720p" if "14b" in model else "480p", slice_name)
        if refusal_reason(p) is None and p.mesh_shape[0] == 2
    )
    source = mesh_hook_source(plan, config_path="src/maxdiffusion/configs/base_wan_14b.yml")
    imports = {
        n.names[0].name.split(".")[0] if isinstance(n, ast.Import) else (n.module or "")
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Import | ast.ImportFrom)
    }
    assert not any(i.startswith("aoizora") for i in imports)  # plain jax only
    slice_ = plan.slice
    per_chip = slice_.chip.devices_per_chip
    devices = [
        _Device(c, core, slice_.physical_id(c) * per_chip + core)
        for c in slice_.coords
        for core in range(per_chip)
    ]
    random.Random(3).shuffle(devices)
    utils = _fake_maxdiffusion(monkeypatch)
    namespace: dict[str, Any] = {"__name__": "mesh"}
    exec(compile(source, "mesh.py", "exec"), namespace)
    namespace["install"]()
    grid = utils.create_device_mesh(object(), devices=devices)
    assert grid.shape == plan.mesh_shape
    # The same devices in the same places as the plan's own Mesh (placed by coordinates).
    expected = plan.mesh(devices).devices
    assert [d.id for d in grid.flat] == [d.id for d in np.asarray(expected).flat]
    assert [d.id for d in grid.flat] == list(plan.physical_ids)
    with pytest.raises(SystemExit, match=f"the plan is for {slice_name}"):
        utils.create_device_mesh(object(), devices=devices[:-1])


def test_export_command_writes_the_files_or_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plans = {p.candidate_id: p for p in _plans("wan2.1-14b", "720p", "v6e:2x4")}
    good = plans["data2.fsdp1.context4.tensor1/fsdp/usp_u2"]
    good.save(tmp_path / "good.json")
    out = tmp_path / "out"
    assert main(["export", str(tmp_path / "good.json"), "--to", "maxdiffusion", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(EXPORT_FILES)
    check_export_dir(load_plan(tmp_path / "good.json"), out)
    readme = (out / "README.md").read_text()
    step_ms = f"{good.predicted.winner_s * 1e3:.2f} ms"
    assert step_ms in readme and "mesh.py" in readme and "base_wan_14b.yml" in readme
    assert maxdiffusion_export(good).yaml_text() == (out / "maxdiffusion.yml").read_text()
    bad = plans["data2.fsdp1.context2.tensor2/fsdp/ring"]
    bad.save(tmp_path / "bad.json")
    capsys.readouterr()
    code = main(["export", str(tmp_path / "bad.json"), "--to", "maxdiffusion", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "nearest expressible plan: baseline 'maxdiffusion recipe'" in err
    assert not (tmp_path / "b").exists()
    assert main(["export", str(tmp_path / "good.json"), "--to", "vllm", str(out)]) == 2
    assert "exports to ['maxdiffusion']" in capsys.readouterr().err


@pytest.mark.slow
def test_plan_emit_writes_the_winner(
    plan_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "md"
    args = [
        "plan", "--model", "wan-tiny", "--slice", "v5e:2x2", "--resolution", "256x256",
        "--frames", "5", "--top-k", "2", "--out", str(tmp_path / "plan.json"), "--quiet",
        "--cache-dir", str(plan_cache_dir), "--emit", "maxdiffusion", str(out), "--no-clip",
    ]  # fmt: skip
    # wan-tiny has no maxdiffusion config: refused until one is named.
    assert main(args) == 2
    assert "ships no config for model 'wan-tiny'" in capsys.readouterr().err
    code = main([*args, "--maxdiffusion-config", "base_wan_1_3b.yml"])
    err = capsys.readouterr().err
    plan = load_plan(tmp_path / "plan.json")  # written either way
    if refusal_reason(plan, config_file="base_wan_1_3b.yml") is None:
        assert code == 0
        check_export_dir(plan, out)
    else:  # the nearest comes from every sharding the planner ranked
        assert code == 2 and "nearest expressible plan: " in err and not out.exists()
