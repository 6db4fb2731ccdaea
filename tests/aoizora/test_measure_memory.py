"""aoizora measure never takes the machine down: memory checked per target, a small CPU clip.

Issue 34: a CPU dry run of a wan-tiny plan at 832x480x81 was killed by the kernel at 24 GB.
Each step's compiled program is now checked against the memory it would run in before any
input is made (a target that would not fit is skipped, the others measured), and the dry
run's steps run at a scaled-down clip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import pytest

from aoizora.commands.measure import _render, parse_cpu_clip
from aoizora.errors import MeasureError
from aoizora.measure import memory
from aoizora.measure.dry_run import DEFAULT_CPU_CLIP, dry_run_plan
from aoizora.measure.memory import (
    HOST_MARGIN,
    TPU_HELD_PER_ANALYSED,
    TargetTooLarge,
    check_memory,
    device_limit_bytes,
    estimated_temp_bytes,
    host_available_bytes,
    require_fit,
)
from aoizora.measure.run import MeasureOptions, run_measure
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import Plan, PredictedLatencies, plan_inputs
from aoizora.plan.alternatives import PlanAlternative
from aoizora.studies.validation import read_measurements
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan import wan_workload
from sim.topology import load_slice

GIB = 1 << 30
SLICE = "v5e:2x4"


def _plan(clip: Clip) -> Plan:
    """wan-tiny on v5e:2x4 at ``clip``: the winner (data2 x context4) and one baseline."""
    workload = wan_workload("wan-tiny", clip)
    rules = workload.rules("maxdiffusion")
    axes = workload.mesh_axis_names
    order = DeviceOrder.from_physical_ids(
        tuple(range(8)), mesh_shape=(2, 1, 4, 1), slice_=load_slice(SLICE)
    )
    baseline = PlanAlternative(
        role="baseline", name="existing deployment",
        candidate_id="data1.fsdp1.context8.tensor1/maxdiffusion/gather_kv",
        placement_id="default order", mesh_axis_names=axes, mesh_shape=(1, 1, 8, 1),
        rules_name=rules.name, logical_rules=rules.pairs, attention="gather_kv",
        physical_ids=tuple(range(8)), step_s=2e-3,
    )  # fmt: skip
    return Plan.create(
        model="wan-tiny", workload=workload.name, clip=clip, inputs=plan_inputs(workload),
        mesh_axis_names=axes, order=order, rules=rules, attention="gather_kv",
        candidate_id="data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv",
        placement_id="test order",
        predicted=PredictedLatencies(winner_s=1e-3, baselines_s=(("existing deployment", 2e-3),)),
        alternatives=(baseline,),
    )  # fmt: skip


class _Stats(SimpleNamespace):
    pass


class _Compiled:
    """A compiled program as memory.check_memory reads it."""

    def __init__(self, arguments: int, outputs: int, temp: int, text: str = "") -> None:
        self.stats = _Stats(
            argument_size_in_bytes=arguments, output_size_in_bytes=outputs,
            temp_size_in_bytes=temp, alias_size_in_bytes=0, generated_code_size_in_bytes=0,
        )  # fmt: skip
        self.text = text

    def memory_analysis(self) -> Any:
        return self.stats

    def as_text(self) -> str:
        return self.text


class _Device:
    device_kind = "TPU v5 lite"

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def memory_stats(self) -> dict[str, int] | None:
        return None if self.limit is None else {"bytes_limit": self.limit, "bytes_in_use": 0}


def test_host_available_memory_is_read_from_meminfo() -> None:
    assert host_available_bytes("MemTotal: 100 kB\nMemAvailable:     2 kB\n") == 2048
    assert host_available_bytes("MemTotal: 100 kB\n") is None
    assert (host_available_bytes() or 0) > 0  # this Linux machine's


def test_a_tpu_target_is_checked_against_each_devices_limit() -> None:
    """Refused only when even the least share of its analysis a TPU was seen to hold
    (TPU_HELD_PER_ANALYSED) would not fit, or its arguments and outputs alone."""
    compiled = _Compiled(arguments=6 * GIB, outputs=1 * GIB, temp=14 * GIB)  # 21 GiB
    devices = [_Device(16 * GIB), _Device(15 * GIB)]
    check = check_memory(compiled, devices, backend="tpu")
    assert check.need_bytes == int(21 * GIB * TPU_HELD_PER_ANALYSED)
    assert check.have_bytes == 15 * GIB and not check.fits
    with pytest.raises(
        TargetTooLarge, match=r"needs 16\.59 GiB .*TPU v5 lite memory per device: 15\.00 GiB"
    ):
        require_fit(check, backend="tpu")
    # the Wan 2.1 VAE decode of 1280x720x21: analysed at 15.95 GiB, held 13.22 GiB and ran
    vae = _Compiled(arguments=int(0.29 * GIB), outputs=int(0.05 * GIB), temp=int(15.61 * GIB))
    assert check_memory(vae, [_Device(16_909_336_064)], backend="tpu").fits
    # arguments alone over the limit: refused whatever the share
    big = _Compiled(arguments=16 * GIB, outputs=0, temp=0)
    assert not check_memory(big, devices, backend="tpu").fits
    # no bytes_limit from the runtime: the chip's HBM from the topology file
    assert device_limit_bytes([_Device(None)], fallback=16e9) == 16_000_000_000
    assert check_memory(compiled, [_Device(None)], backend="tpu").fits  # no limit known


def test_a_cpu_dry_run_needs_the_program_once_per_host_device() -> None:
    compiled = _Compiled(arguments=1 * GIB, outputs=0, temp=1 * GIB)
    meminfo = f"MemAvailable: {20 * GIB // 1024} kB\n"
    check = check_memory(compiled, [object()] * 8, backend="cpu", meminfo=meminfo)
    assert check.need_bytes == 16 * GIB and check.have_bytes == int(20 * GIB * HOST_MARGIN)
    assert check.fits and "x 8 host devices" in check.detail
    check = check_memory(compiled, [object()] * 9, backend="cpu", meminfo=meminfo)
    assert not check.fits
    with pytest.raises(TargetTooLarge, match="--cpu-clip"):
        require_fit(check, backend="cpu")


def test_cpu_temporaries_are_estimated_from_the_hlo() -> None:
    # XLA's CPU backend reports no temporaries, not even an attention's score matrix.
    def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        scores = jnp.einsum("hqd,hkd->hqk", q, k)
        return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(scores, axis=-1), v)

    x = jax.ShapeDtypeStruct((4, 1024, 64), jnp.float32)
    compiled = jax.jit(attention).lower(x, x, x).compile()  # the tests run JAX on the CPU
    scores_bytes = 4 * 1024 * 1024 * 4
    assert compiled.memory_analysis().temp_size_in_bytes < scores_bytes
    assert estimated_temp_bytes(compiled.as_text()) >= scores_bytes
    check = check_memory(compiled, jax.devices("cpu")[:1], backend="cpu")
    assert check.need_bytes >= scores_bytes and "temp est. from the HLO" in check.detail
    assert estimated_temp_bytes("not HLO") == 0


def test_the_dry_run_clip() -> None:
    big = _plan(Clip(128, 128, 5))
    scaled, note = dry_run_plan(big, Clip(128, 128, 1))
    assert scaled.clip == Clip(128, 128, 1) and scaled.workload == "wan-tiny@128x128x1"
    assert "scaled down to 128x128x1 from the plan's 128x128x5" in note
    assert dry_run_plan(big, None) == (big, "")  # --cpu-clip plan
    assert dry_run_plan(big, DEFAULT_CPU_CLIP) == (big, "")  # never larger than the plan's
    with pytest.raises(MeasureError, match="--cpu-clip 250x256x5: .*multiples of 16"):
        dry_run_plan(big, Clip(250, 256, 5))
    assert parse_cpu_clip("256x256x5") == DEFAULT_CPU_CLIP and parse_cpu_clip(" Plan ") is None
    with pytest.raises(MeasureError, match="e.g. --cpu-clip 256x256x5"):
        parse_cpu_clip("480p")


@pytest.fixture
def one_tight_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The host has room for the first step checked, not for the second."""
    calls: list[int] = []

    def available(meminfo: str | None = None) -> int:
        calls.append(1)
        return 64 * GIB if len(calls) == 1 else 1024

    monkeypatch.setattr(memory, "host_available_bytes", available)
    yield calls


@pytest.mark.slow
def test_a_target_that_would_not_fit_is_skipped_and_the_others_measured(
    tmp_path: Path, one_tight_host: list[int]
) -> None:
    plan_file, out = tmp_path / "plan.json", tmp_path / "rows.csv"
    _plan(Clip(128, 128, 5)).save(plan_file)
    said: list[str] = []
    report = run_measure(
        plan_file, out, backend="cpu", devices=jax.devices("cpu")[:8], progress=said.append,
        options=MeasureOptions(top=0, warmup=0, repeats=1, cpu_clip=Clip(128, 128, 1)),
    )  # fmt: skip
    assert len(one_tight_host) == 2
    assert [what for what, _, _ in report.measured] == [
        "winner (data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv)"
    ]
    ((what, why),) = report.skipped
    assert what.startswith("baseline 'existing deployment'") and not report.failed
    assert "would not fit in memory" in why and "host MemAvailable" in why and "\n" not in why
    rows = read_measurements(out)
    assert len(rows) == 1 and rows[0].step is not None
    assert rows[0].step.clip == "1x128x128"  # the clip that ran, not the plan's
    assert "clip scaled down to 128x128x1 from the plan's 128x128x5" in rows[0].notes
    assert any("dry run: clip scaled down" in line for line in said)
    text = _render(report)
    assert "1 skipped (memory)" in text and f"SKIPPED {what}: would not fit" in text
    assert report.to_json_dict()["skipped"] == [{"what": what, "reason": why}]
