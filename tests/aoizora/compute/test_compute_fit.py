"""The v5e [compute] table: refitted from the measured kernels and steps it cites, and
tested on the profiled steps it was not fitted to."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from aoizora.errors import MeasureError
from aoizora.studies.compute_fit import (
    ProfiledStep,
    fit_compute,
    read_kernels,
    write_calibrated_compute,
)
from aoizora.studies.explain import explain, op_prices
from sim.compute_table import parse_compute_params
from sim.errors import TopologyError
from sim.topology import load_chip, load_slice
from tests.aoizora.compute.conftest import FIT_ROWS, KERNELS

_SHIPPED_KEYS = (
    "matmul_efficiency",
    "bare_matmul_efficiency",
    "matmul_fused_op_cost",
    "hbm_efficiency",
    "hbm_read_efficiency",
    "kernel_overhead_s",
    "vmem_kernel_overhead_s",
    "hbm_retile_copy_efficiency",
    "onchip_bandwidth_bytes_per_s",
    "onchip_copy_bandwidth_bytes_per_s",
    "onchip_full_tile_copy_bandwidth_bytes_per_s",
)


@pytest.fixture(scope="module")
def refit(v5e_steps: dict[str, ProfiledStep]):  # type: ignore[no-untyped-def]
    provenance, kernels = read_kernels(KERNELS)
    steps = [v5e_steps[r] for r in FIT_ROWS]
    return fit_compute(load_chip("v5e"), kernels, steps, provenance=provenance,
                       kernels_file="validation/v5e/kernels.json")  # fmt: skip


def test_the_shipped_table_is_what_its_measurements_give(refit) -> None:  # type: ignore[no-untyped-def]
    shipped = load_chip("v5e").compute
    for key in _SHIPPED_KEYS:
        assert getattr(shipped, key) == pytest.approx(refit.value(key), rel=1e-3), key
    assert dict(shipped.attention_efficiency)["splash"] == pytest.approx(
        refit.value("attention_efficiency.splash"), rel=1e-3
    )
    step_s, q_block_s = shipped.grid_overheads("splash")
    assert step_s == pytest.approx(refit.value("attention_grid.splash.step_overhead_s"), rel=1e-3)
    assert q_block_s == pytest.approx(
        refit.value("attention_grid.splash.q_block_overhead_s"), rel=1e-3
    )
    for v in refit.values:  # every value says where it came from
        assert "TPU v5 lite" in v.source and "m-24893bf72f-winner" in v.source


def test_the_fit_is_physical(refit) -> None:  # type: ignore[no-untyped-def]
    """Efficiencies are fractions, the overheads a microsecond or less, VMEM faster than HBM."""
    for key in ("matmul_efficiency", "hbm_efficiency", "attention_efficiency.splash"):
        assert 0.5 < refit.value(key) <= 1.0
    # a matmul kernel with its epilogue fused runs slower than one with nothing fused
    assert refit.value("matmul_efficiency") < refit.value("bare_matmul_efficiency") < 1.0
    # and each fused op costs a little: one keeps a kernel above the fused steps' mean rate
    cost = refit.value("matmul_fused_op_cost")
    assert 0.0 < cost < 0.05
    assert 1 / (1 / refit.value("bare_matmul_efficiency") + cost) > refit.value("matmul_efficiency")
    for key in ("kernel_overhead_s", "attention_grid.splash.step_overhead_s"):
        assert 0.0 <= refit.value(key) < 2e-6
    # a read stream beats the read-and-write mix the stream kernels fitted, short of the peak
    assert refit.value("hbm_efficiency") < refit.value("hbm_read_efficiency") < 1.0
    hbm_rate = 8.1e11 * refit.value("hbm_efficiency")
    assert refit.value("onchip_copy_bandwidth_bytes_per_s") > hbm_rate
    assert refit.value("onchip_bandwidth_bytes_per_s") > hbm_rate
    # a kernel in VMEM skips the HBM pipeline's fill and drain; whole tiles move faster than
    # tiles re-cut; re-cutting 2-row tiles into 8-row ones in HBM is slower than a stream
    assert 0.0 <= refit.value("vmem_kernel_overhead_s") < 0.1 * refit.value("kernel_overhead_s")
    assert (refit.value("onchip_full_tile_copy_bandwidth_bytes_per_s")
            > refit.value("onchip_copy_bandwidth_bytes_per_s"))  # fmt: skip
    assert 0.3 < refit.value("hbm_retile_copy_efficiency") < refit.value("hbm_efficiency")


def test_steps_the_fit_never_saw_are_predicted_within_5_percent(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """Every other profiled step (1.3B and TI2V-5B, 272p-720p, 17-81 frames) priced from
    the HLO that ran: MAPE within 5 %, none off by more than 10 %."""
    slice_ = load_slice("v5e:1x1")
    errors = []
    for row, step in sorted(v5e_steps.items()):
        if row in FIT_ROWS:
            continue
        e = explain(step.profile, step.module, op_prices(step.module, slice_.chip))
        errors.append(abs(e.predicted_s / e.step_s - 1.0))
    assert len(errors) >= 8
    assert sum(errors) / len(errors) <= 0.05 and max(errors) <= 0.10


def test_a_written_table_reads_back_as_the_fitted_params(refit, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = write_calibrated_compute(refit, "v5e", tmp_path / "v5e.toml")
    with out.open("rb") as fh:
        data = tomllib.load(fh)
    params = parse_compute_params(data["compute"], out)
    assert params.key() == refit.params.key()


def test_a_bad_kernels_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "k.json"
    bad.write_text('{"kernels": [{"kind": "matmul"}]}')
    with pytest.raises(MeasureError, match="aoizora measure --kernels --out kernels.json"):
        read_kernels(bad)


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"nope": {"step_overhead_s": 1e-7, "q_block_overhead_s": 0, "source": "s"}},
         "must name a kernel"),
        ({"splash": {"step_overhead_s": -1.0, "q_block_overhead_s": 0, "source": "s"}}, ">= 0"),
        ({"splash": {"step_overhead_s": 1e-7, "source": "s"}}, "hold exactly"),
    ],
)  # fmt: skip
def test_a_bad_attention_grid_is_refused(grid: dict, message: str) -> None:  # type: ignore[type-arg]
    with (Path(__file__).resolve().parents[3] / "topologies" / "v5e.toml").open("rb") as fh:
        compute = tomllib.load(fh)["compute"]
    compute["attention_grid"] = grid
    with pytest.raises(TopologyError, match=message):
        parse_compute_params(compute, Path("v5e.toml"))
    assert math.isfinite(load_chip("v5e").compute.onchip_bandwidth_bytes_per_s)
