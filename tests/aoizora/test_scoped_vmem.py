"""A plan's scoped VMEM limit (``scoped_vmem_kib``): carried wherever its program is compiled,
run or exported.

The plan file round-trips it (and jsonschema, an independent validator, accepts and
refuses what load_plan does); ``aoizora measure`` compiles the TPU step with it and
never hands XLA:CPU the flag (what the compile receives is recorded); the rows record it
and read back; ``validate`` rebuilds the row's candidate with it and hands that to the
compile; the maxdiffusion export passes the libtpu flag (``mesh.py`` puts it in
``LIBTPU_INIT_ARGS``) and leaves ``flash_block_sizes``' backward blocks as they were.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import jax
import jsonschema
import pytest

from aoizora.candidates.space import Candidate
from aoizora.compile import compiler_options
from aoizora.errors import PlanError, ValidationError
from aoizora.export.maxdiffusion import maxdiffusion_export
from aoizora.export.maxdiffusion_table import FLASH_BLOCK_SIZES
from aoizora.export.mesh_hook import mesh_hook_source
from aoizora.export.readme import readme_text
from aoizora.measure.environment import Environment
from aoizora.measure.rows import measured_row, step_case, step_notes
from aoizora.measure.steps import step_options, step_targets, time_step
from aoizora.measure.timing import Timing
from aoizora.plan import Plan, load_plan
from aoizora.plan.alternatives import PlanAlternative
from aoizora.plan.fields import Provenance
from aoizora.studies.validation import step as validation_step
from aoizora.studies.validation.format import (
    COLUMNS,
    format_measurements,
    parse_measurements,
)
from aoizora.studies.validation.step import row_program
from aoizora.workloads.wan import wan_workload
from tests.aoizora.synthetic import tpu_environment
from tests.aoizora.test_measure import CLIP, tiny_plan
from tests.aoizora.test_plan import _plan

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "plan.schema.json").read_text(encoding="utf-8"))
TILES = (512, 8192, 512)
LIMIT = 65536  # KiB: maxdiffusion's Wan recipes' --xla_tpu_scoped_vmem_limit_kib
FLAG = "--xla_tpu_scoped_vmem_limit_kib=65536"


def _limit_of(options: dict[str, Any]) -> int | None:
    """The scoped VMEM limit XLA options set (None: none set)."""
    assert set(options) <= {"xla_tpu_scoped_vmem_limit_kib"}, options
    value = options.get("xla_tpu_scoped_vmem_limit_kib")
    return None if value is None else int(value)


def _tiled(plan: Plan, limit: int | None = LIMIT) -> Plan:
    return dataclasses.replace(plan, splash_blocks=TILES, scoped_vmem_kib=limit)


def _limited_alternatives() -> tuple[PlanAlternative, ...]:
    """tiny_plan's alternatives: its runner-up at the winner's tiles under a smaller limit."""
    runner, *rest = tiny_plan().alternatives
    return (dataclasses.replace(runner, splash_blocks=TILES, scoped_vmem_kib=32768), *rest)


# --- the plan file ----------------------------------------------------------------------


def test_a_plan_with_a_limit_round_trips_and_plans_without_one_keep_their_bytes(
    tmp_path: Path,
) -> None:
    plan = _tiled(tiny_plan(alternatives=_limited_alternatives()))
    plan.save(tmp_path / "plan.json")
    loaded = load_plan(tmp_path / "plan.json")
    assert loaded == plan and loaded.to_json() == plan.to_json()
    data = json.loads(plan.to_json())
    jsonschema.validate(data, SCHEMA)
    assert (data["splash_blocks"], data["scoped_vmem_kib"]) == (list(TILES), LIMIT)
    runner = loaded.alternative_plan(loaded.alternatives[0])
    assert (runner.splash_blocks, runner.scoped_vmem_kib) == (TILES, 32768)
    baseline = loaded.alternative_plan(loaded.alternatives[1])
    assert (baseline.splash_blocks, baseline.scoped_vmem_kib) == (None, None)
    # a plan without the key (every plan written before it): loads at the default, and
    # one without a limit writes no key
    del data["scoped_vmem_kib"]
    old = Plan.from_json_dict(data)
    assert old.scoped_vmem_kib is None and old.splash_blocks == TILES
    assert "scoped_vmem_kib" not in old.to_json_dict()
    assert Plan.from_json(old.to_json()) == old


def test_an_alternative_built_from_a_candidate_carries_its_limit() -> None:
    plan = tiny_plan()
    alt = plan.alternatives[0]
    cand = Candidate(alt.mesh_axis_names, alt.mesh_shape, alt.rules_name,
                     plan.rules, alt.attention, TILES, LIMIT)  # fmt: skip
    order = plan.alternative_plan(alt).device_order()
    made = PlanAlternative.of("runner-up", cand.id, cand, ("p", order), 1e-3)
    assert (made.splash_blocks, made.scoped_vmem_kib) == (TILES, LIMIT)
    assert made.candidate_id.endswith("/splash512x8192x512@vmem64MiB")
    assert PlanAlternative.from_json(made.to_json(), "alternatives[0]") == made


@pytest.mark.parametrize(
    ("limit", "match"),
    [
        (0, "scoped_vmem_kib 0: .* a positive number of KiB .* e.g. 65536"),
        (-4096, "scoped_vmem_kib -4096: .* a positive number of KiB"),
        (True, "scoped_vmem_kib True: .* a whole number of KiB"),
        (65536.0, "scoped_vmem_kib 65536.0: .* a whole number of KiB"),
        ("64MiB", "scoped_vmem_kib '64MiB': .* a whole number of KiB"),
    ],
)
def test_a_bad_limit_is_refused_by_load_plan_and_the_schema(limit: Any, match: str) -> None:
    data = {**_plan().to_json_dict(), "splash_blocks": list(TILES), "scoped_vmem_kib": limit}
    with pytest.raises(PlanError, match=match) as exc:
        Plan.from_json_dict(data)
    assert "[schema: docs/plan.schema.json#/properties/scoped_vmem_kib]" in str(exc.value)
    if isinstance(limit, float):  # JSON Schema's integer holds 65536.0; load_plan does not
        return
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


def test_a_limit_without_tiles_is_refused_on_the_plan_and_its_alternatives() -> None:
    data = {**_plan().to_json_dict(), "scoped_vmem_kib": LIMIT}
    with pytest.raises(PlanError, match="scoped_vmem_kib 65536 is given without splash_blocks"):
        Plan.from_json_dict(data)
    with pytest.raises(jsonschema.ValidationError, match="'splash_blocks' is a dependency"):
        jsonschema.validate(data, SCHEMA)
    plan = tiny_plan()
    alts = copy.deepcopy(plan.to_json_dict()["alternatives"])
    alts[1]["scoped_vmem_kib"] = LIMIT
    data = {**plan.to_json_dict(), "alternatives": alts}
    with pytest.raises(PlanError, match=r"^alternatives\[1\]: .*without splash_blocks"):
        Plan.from_json_dict(data)
    with pytest.raises(jsonschema.ValidationError, match="'splash_blocks' is a dependency"):
        jsonschema.validate(data, SCHEMA)


# --- aoizora measure --------------------------------------------------------------------


def test_measure_times_each_limit_apart_and_only_a_tpu_compile_gets_it() -> None:
    plan = _tiled(tiny_plan(alternatives=_limited_alternatives()))
    by_key = {t.key: t for t in step_targets(plan, top=1, baselines=True)}
    assert by_key["winner"].plan.scoped_vmem_kib == LIMIT
    assert by_key["runner-up-1"].plan.scoped_vmem_kib == 32768
    # the same sharding and tiles under another limit is another configuration
    other = _tiled(tiny_plan(), limit=32768)
    assert step_targets(other, top=0, baselines=False)[0].configuration != (
        by_key["winner"].configuration
    )
    target = by_key["winner"]
    tpu, cpu = step_case(target, cpu=False), step_case(target, cpu=True)
    assert (tpu.splash_blocks, tpu.scoped_vmem_kib) == (TILES, LIMIT)
    assert (cpu.splash_blocks, cpu.scoped_vmem_kib) == (None, None)
    cand = Candidate(plan.mesh_axis_names, plan.mesh_shape, plan.rules_name, plan.rules,
                     plan.attention, TILES, LIMIT)  # fmt: skip
    assert step_options(cand, "tpu") == compiler_options(cand)  # as the planner compiled it
    assert _limit_of(step_options(cand, "tpu")) == LIMIT
    assert step_options(cand, "cpu") == {}


def _cpu_environment(plan: Plan) -> Environment:
    return Environment(
        backend="cpu", device_kind="cpu", num_devices=8, num_hosts=1,
        versions=Provenance.current(), date="2026-09-01", plan_file="plan.json",
        plan_sha256="ab" * 32,
    )  # fmt: skip


@pytest.mark.slow
def test_a_cpu_step_compiles_without_the_flag_and_its_row_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = _tiled(tiny_plan(alternatives=()))
    (target,) = step_targets(plan, top=0, baselines=False)
    received: list[Any] = []
    compile_ = jax.stages.Lowered.compile

    def recording(self: Any, compiler_options: Any = None) -> Any:
        received.append(compiler_options)
        return compile_(self, compiler_options=compiler_options)

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    timing = time_step(target, wan_workload("wan-tiny", CLIP), jax.devices(), backend="cpu",
                       warmup=0, repeats=1)  # fmt: skip
    assert received and all(o is None for o in received)  # no TPU flag for XLA:CPU
    env = _cpu_environment(plan)
    notes = step_notes(target, env)
    assert "scoped VMEM limit, 65536 KiB" in notes and "not applied" in notes
    row = measured_row(env=env, plan=plan, key=target.key, timing=timing, about=notes,
                       step=step_case(target, cpu=True))  # fmt: skip
    assert row.step is not None and row.step.scoped_vmem_kib is None


def _tpu_rows(plan: Plan) -> str:
    env = tpu_environment(num_devices=8, plan_sha256="cd" * 32)
    rows = []
    for i, target in enumerate(step_targets(plan, top=1, baselines=False)):
        timing = Timing(samples_s=(1.0 + i, 1.1 + i), warmup=1)
        rows.append(measured_row(env=env, plan=plan, key=target.key, timing=timing,
                                 about=step_notes(target, env),
                                 step=step_case(target, cpu=False)))  # fmt: skip
    return format_measurements(rows)


def test_rows_record_the_limit_and_files_without_one_keep_their_columns() -> None:
    text = _tpu_rows(_tiled(tiny_plan(alternatives=_limited_alternatives())))
    assert "scoped_vmem_kib" in text.splitlines()[0].split(",")
    rows = parse_measurements(text)
    assert [(r.step.splash_blocks, r.step.scoped_vmem_kib) for r in rows if r.step] == [
        (TILES, LIMIT),
        (TILES, 32768),
    ]
    assert format_measurements(rows) == text
    plain = _tpu_rows(_tiled(tiny_plan(), limit=None))
    header = plain.splitlines()[0].split(",")
    assert header == [c for c in COLUMNS if c != "scoped_vmem_kib"]  # as written before
    assert all(r.step and r.step.scoped_vmem_kib is None for r in parse_measurements(plain))


@pytest.mark.parametrize(
    ("tiles", "limit"), [("512x8192x512", "0"), ("512x8192x512", "64M"), ("", "65536")]
)
def test_a_bad_limit_cell_is_refused_naming_the_line(tiles: str, limit: str) -> None:
    text = _tpu_rows(_tiled(tiny_plan(alternatives=()))).splitlines()
    header = text[0].split(",")
    cells = text[1].split(",")
    # the row's notes hold no comma before these columns: edit them by position
    cells[header.index("splash_blocks")] = tiles
    cells[header.index("scoped_vmem_kib")] = limit
    with pytest.raises(ValidationError, match=rf":2: scoped_vmem_kib='{limit}' must be a pos"):
        parse_measurements("\n".join([text[0], ",".join(cells)]) + "\n")


# --- aoizora validate -------------------------------------------------------------------


def test_validate_compiles_a_row_with_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    (row, _) = parse_measurements(
        _tpu_rows(_tiled(tiny_plan(alternatives=_limited_alternatives())))
    )
    _, candidate = row_program(row)
    assert candidate.splash_blocks == TILES
    assert _limit_of(compiler_options(candidate)) == LIMIT
    handed: list[Candidate] = []

    class _Stop(Exception):
        pass

    def compile_candidate(workload: Any, cand: Candidate, slice_: Any, **_: Any) -> Any:
        handed.append(cand)
        raise _Stop

    monkeypatch.setattr(validation_step, "compile_candidate", compile_candidate)
    with pytest.raises(_Stop):
        validation_step.step_graph(row)
    (compiled,) = handed
    assert compiled == candidate
    assert _limit_of(compiler_options(compiled)) == LIMIT


# --- the maxdiffusion export ----------------------------------------------------------------


def test_the_export_passes_the_flag_beside_the_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _tiled(tiny_plan())
    export = maxdiffusion_export(plan, config_file="base_wan_1_3b.yml")
    assert export.libtpu_flags == (FLAG,)
    blocks = dict(export.overrides)["flash_block_sizes"]
    assert (blocks["block_q"], blocks["block_kv"], blocks["block_kv_compute"]) == TILES
    backward = {k: v for k, v in blocks.items() if k not in ("block_q", "block_kv",
                                                              "block_kv_compute")}  # fmt: skip
    assert backward == {k: v for k, v in FLASH_BLOCK_SIZES.items() if k in backward}
    assert not any("vmem" in a for a in export.args())  # pyconfig takes no libtpu flag
    assert f"# and in the environment: LIBTPU_INIT_ARGS={FLAG}" in export.yaml_text()
    readme = readme_text(export)
    assert f'export LIBTPU_INIT_ARGS="${{LIBTPU_INIT_ARGS:-}} {FLAG}"' in readme
    csv_text = readme.split("```csv\n")[1].split("```")[0].replace("SECONDS", "1.5")
    (row,) = parse_measurements(csv_text)
    assert row.step is not None and (row.step.splash_blocks, row.step.scoped_vmem_kib) == (
        TILES,
        LIMIT,
    )
    # mesh.py adds the flag to what the environment already holds, once, before jax
    source = mesh_hook_source(plan, config_path="base_wan_1_3b.yml")
    assert source.index("LIBTPU_INIT_ARGS") < source.index("import jax")
    for before, after in (("--xla_foo=1", f"--xla_foo=1 {FLAG}"), (FLAG, FLAG), (None, FLAG)):
        if before is None:
            monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
        else:
            monkeypatch.setenv("LIBTPU_INIT_ARGS", before)
        exec(compile(source, "mesh.py", "exec"), {"__name__": "mesh"})
        assert os.environ["LIBTPU_INIT_ARGS"] == after


def test_an_export_without_a_limit_is_unchanged() -> None:
    plan = _tiled(tiny_plan(), limit=None)
    export = maxdiffusion_export(plan, config_file="base_wan_1_3b.yml")
    assert export.libtpu_flags == ()
    assert "LIBTPU" not in export.yaml_text() + readme_text(export)
    assert "LIBTPU" not in mesh_hook_source(plan, config_path="base_wan_1_3b.yml")
    assert "scoped_vmem_kib" not in readme_text(export)
