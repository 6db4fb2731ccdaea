"""The compute model: MXU padding, efficiencies, attention kernels and the [compute] table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.compute import (
    IDEAL,
    Attention,
    ComputeModel,
    ComputeParams,
    Matmul,
    Work,
    mxu_utilisation,
)
from sim.compute_table import parse_compute_params
from sim.errors import TopologyError
from sim.topology import generations, load_chip

PARAMS = ComputeParams(
    mxu_tile=256,
    matmul_efficiency=0.9,
    hbm_efficiency=0.8,
    attention_efficiency=(("old", 0.4), ("new", 0.8)),
    attention_kernel="new",
)
MODEL = ComputeModel(peak_flops_per_s=1e15, hbm_bandwidth_bytes_per_s=1e12, params=PARAMS)


def _passes(m: int, k: int, n: int, tile: int) -> int:
    """Brute force: MXU cycles of a weight-stationary array, latching the better operand.

    Latch ``B`` (k x n): one pass per (k tile, n tile), each streaming ``m`` rows.
    Latch ``A^T`` (k x m): one pass per (k tile, m tile), each streaming ``n`` rows -- only
    when a pass streams at least half a tile, which hides the next latch's load (the v5e
    VAEs' convolutions to 3 and 12 channels ran latched on their weights).
    """
    latch_b = sum(m for _ in range(0, k, tile) for _ in range(0, n, tile))
    latch_a = sum(n for _ in range(0, k, tile) for _ in range(0, m, tile))
    return min(latch_b, latch_a) if 2 * n >= tile else latch_b


@given(
    st.integers(1, 1200),
    st.integers(1, 1200),
    st.integers(1, 1200),
    st.sampled_from([128, 256]),
)
def test_utilisation_is_useful_macs_over_the_array_s_cycles(m: int, k: int, n: int, t: int) -> None:
    """An independent count: useful MACs / (array cells x cycles) of the cheaper latch."""
    expected = (m * k * n) / (t * t * _passes(m, k, n, t))
    assert mxu_utilisation(m=m, k=k, n=n, tile=t) == pytest.approx(expected)
    assert 0 < mxu_utilisation(m=m, k=k, n=n, tile=t) <= 1


def test_padding_to_the_tile_changes_the_time_as_the_model_says() -> None:
    # Contracting 128 on a 256-wide MXU keeps half the rows: it costs what 256 costs.
    half = MODEL.time_s(Work(matmuls=(Matmul(1, 4096, 128, 4096),)))
    full = MODEL.time_s(Work(matmuls=(Matmul(1, 4096, 256, 4096),)))
    assert half == pytest.approx(full)
    assert half == pytest.approx(2 * 4096 * 256 * 4096 / (1e15 * 0.9))
    # A 128-wide tile does not pad it.
    small = dataclasses.replace(MODEL, params=dataclasses.replace(PARAMS, mxu_tile=128))
    assert small.time_s(Work(matmuls=(Matmul(1, 4096, 128, 4096),))) == pytest.approx(half / 2)


def test_every_parameter_moves_the_time() -> None:
    mm = Work(matmuls=(Matmul(1, 4096, 4096, 4096),))
    att = Work(attention=(Attention(40, 8192, 8192, 128, 128),))
    mem = Work(hbm_bytes=8e9)
    base = [MODEL.time_s(w) for w in (mm, att, mem)]
    for change, moved in (
        ({"matmul_efficiency": 0.45}, 0),
        ({"attention_kernel": "old"}, 1),
        ({"hbm_efficiency": 0.4}, 2),
    ):
        model = dataclasses.replace(MODEL, params=dataclasses.replace(PARAMS, **change))  # type: ignore[arg-type]
        times = [model.time_s(w) for w in (mm, att, mem)]
        assert times[moved] == pytest.approx(2 * base[moved])
        assert [t for i, t in enumerate(times) if i != moved] == [
            t for i, t in enumerate(base) if i != moved
        ]


def test_attention_pads_only_the_head_dim_contraction() -> None:
    a = Attention(lead=40, q_length=8192, kv_length=8192, head_dim=128, value_dim=128)
    # Q.K^T at half the rows, P.V full (latch P, stream V): 1.5x the FLOPs.
    assert a.padded_flops(256) == pytest.approx(1.5 * a.flops)
    assert a.padded_flops(128) == pytest.approx(a.flops)
    assert MODEL.time_s(Work(attention=(a,))) == pytest.approx(1.5 * a.flops / (1e15 * 0.8))


def test_a_kernel_is_bound_by_its_slower_roof() -> None:
    w = Work(matmuls=(Matmul(1, 256, 256, 256),), other_flops=1e9, hbm_bytes=1e9)
    compute = 2 * 256**3 / (1e15 * 0.9) + 1e9 / 1e15
    assert MODEL.time_s(w) == pytest.approx(max(compute, 1e9 / (1e12 * 0.8)))
    assert (w + w).flops == 2 * w.flops and (w + w).hbm_bytes == 2e9


# A chip with every v5e-style relayout term (round numbers, times exact in binary halves).
RELAYOUT = ComputeModel(1.0, 100.0, ComputeParams(
    hbm_efficiency=0.8, kernel_overhead_s=0.75, vmem_kernel_overhead_s=0.125,
    onchip_bandwidth_bytes_per_s=100.0, onchip_copy_bandwidth_bytes_per_s=50.0,
    onchip_full_tile_copy_bandwidth_bytes_per_s=200.0, hbm_retile_copy_efficiency=0.5,
))  # fmt: skip


def test_a_kernel_in_vmem_pays_its_own_fixed_cost() -> None:
    """No HBM byte and no matmul: vmem_kernel_overhead_s; anything else kernel_overhead_s;
    unmeasured (None), kernel_overhead_s for all."""
    vmem = Work(onchip_bytes=100.0)  # 1 s at the on-chip rate
    assert RELAYOUT.time_s(vmem) == 1.125
    assert RELAYOUT.time_s(vmem + Work(hbm_bytes=8.0)) == 1.75  # one HBM byte: a pipeline
    assert RELAYOUT.time_s(vmem + Work(matmuls=(Matmul(1, 1, 1, 1),))) == 2.75  # 2 FLOPs
    assert RELAYOUT.time_s(Work(other_flops=1.0)) == 1.75  # no bytes at all: as before
    unmeasured = dataclasses.replace(
        RELAYOUT, params=dataclasses.replace(RELAYOUT.params, vmem_kernel_overhead_s=None)
    )
    assert unmeasured.time_s(vmem) == 1.75


def test_relayouts_move_at_their_tiles_rates() -> None:
    """Between 8-row tiles in VMEM at the full-tile rate, other on-chip relayouts at the
    copy rate; out of 2-row tiles into 8-row ones in HBM at hbm_retile_copy_efficiency,
    other HBM bytes at hbm_efficiency. Unmeasured, each falls back to the older rate."""
    copy = Work(onchip_copy_bytes=300.0, onchip_copy_full_tile_bytes=100.0)
    assert RELAYOUT.onchip_s(copy) == 200.0 / 50.0 + 100.0 / 200.0  # 4.5 s
    retile = Work(hbm_bytes=100.0, hbm_retile_copy_bytes=60.0)
    assert RELAYOUT.hbm_s(retile) == 40.0 / 80.0 + 60.0 / 50.0  # 1.7 s
    assert (copy + copy).onchip_copy_full_tile_bytes == 200.0
    assert (retile + retile).hbm_retile_copy_bytes == 120.0
    old = dataclasses.replace(RELAYOUT, params=dataclasses.replace(
        RELAYOUT.params, onchip_full_tile_copy_bandwidth_bytes_per_s=None,
        hbm_retile_copy_efficiency=0.0,
    ))  # fmt: skip
    assert old.onchip_s(copy) == 6.0 and old.hbm_s(retile) == 1.25


def test_ideal_is_the_bare_roofline() -> None:
    ideal = ComputeModel(1e15, 1e12, IDEAL)
    w = Work(matmuls=(Matmul(3, 100, 7, 5),), hbm_bytes=10.0)
    assert ideal.time_s(w) == max(w.flops / 1e15, 10.0 / 1e12)


def test_unknown_kernel_is_refused_with_the_known_ones() -> None:
    with pytest.raises(TopologyError, match="known kernels: old, new"):
        PARAMS.with_kernel("tokamax")
    assert PARAMS.with_kernel("old").attention_eff == 0.4
    assert PARAMS.with_efficiencies({"old": 0.5}).attention_efficiency == (
        ("old", 0.5),
        ("new", 0.8),
    )


@pytest.mark.parametrize("generation", generations())
def test_every_shipped_generation_has_a_sourced_compute_table(generation: str) -> None:
    chip = load_chip(generation)
    p = chip.compute
    assert p.mxu_tile in (128, 256)
    assert p.attention_kernel in p.kernels
    keys = {k for k, _ in p.sources}
    assert {"compute.mxu_tile", "compute.matmul_efficiency", "compute.hbm_efficiency"} <= keys
    assert all(src for _, src in p.sources)
    # The per-device model splits a chip's numbers, never its efficiencies.
    dev = chip.per_device()
    assert dev.compute == p
    assert dev.compute_model().peak_flops_per_s * chip.devices_per_chip == chip.bf16_flops_per_s


def test_the_table_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    good = {
        "mxu_tile": {"value": 256, "source": "s"},
        "matmul_efficiency": {"value": 0.9, "source": "s"},
        "hbm_efficiency": {"value": 0.8, "source": "s"},
        "attention_kernel": {"value": "k", "source": "s"},
        "attention_efficiency": {"k": {"value": 0.5, "source": "s"}},
    }
    assert parse_compute_params(good, path).attention_eff == 0.5
    measured = {
        "vmem_kernel_overhead_s": {"value": 2e-8, "source": "s"},
        "hbm_retile_copy_efficiency": {"value": 0.6, "source": "s"},
        "onchip_full_tile_copy_bandwidth_bytes_per_s": {"value": 1.9e12, "source": "s"},
        "lane_transpose_s_per_element": {"value": 4e-12, "source": "s"},
        "bare_matmul_efficiency": {"value": 0.97, "source": "s"},
        "matmul_fused_op_cost": {"value": 0.01, "source": "s"},
        "compiler_cycle_s": {"value": 6e-10, "source": "s"},
    }
    read = parse_compute_params({**good, **measured}, path)
    assert read.lane_transpose_s_per_element == 4e-12
    assert parse_compute_params(good, path).lane_transpose_s_per_element == 0.0
    assert (read.bare_matmul_efficiency, parse_compute_params(good, path).bare_matmul_efficiency
            ) == (0.97, 0.0)  # fmt: skip
    assert (read.matmul_fused_op_cost, parse_compute_params(good, path).matmul_fused_op_cost
            ) == (0.01, 0.0)  # fmt: skip
    assert (read.compiler_cycle_s, parse_compute_params(good, path).compiler_cycle_s
            ) == (6e-10, 0.0)  # fmt: skip
    negative = {**good, "compiler_cycle_s": {"value": -1e-9, "source": "s"}}
    with pytest.raises(TopologyError, match="compiler_cycle_s"):
        parse_compute_params(negative, path)
    too_fast = {**good, "bare_matmul_efficiency": {"value": 3.0, "source": "s"}}
    with pytest.raises(TopologyError, match="bare_matmul_efficiency = 3.0 must be an efficiency"):
        parse_compute_params(too_fast, path)
    assert (read.vmem_kernel_overhead_s, read.hbm_retile_copy_efficiency,
            read.onchip_full_tile_copy_bandwidth_bytes_per_s) == (2e-8, 0.6, 1.9e12)  # fmt: skip
    plain = parse_compute_params(good, path)  # absent: each prices as before it was measured
    assert (plain.vmem_kernel_overhead_s, plain.hbm_retile_copy_efficiency,
            plain.onchip_full_tile_copy_bandwidth_bytes_per_s) == (None, 0.0, None)  # fmt: skip
    assert parse_compute_params(None, path) == IDEAL
    bad_cases = [
        ({"matmul_efficiency": {"value": 0.0, "source": "s"}}, "efficiency in"),
        ({"matmul_efficiency": {"value": math.nan, "source": "s"}}, "efficiency in"),
        ({"mxu_tile": {"value": 0, "source": "s"}}, "positive integer"),
        ({"hbm_efficiency": 0.8}, "value and its source"),
        ({"attention_kernel": {"value": "zz", "source": "s"}}, "not listed"),
        ({"attention_efficiency": {}}, "must list kernel versions"),
        ({"vmem_kernel_overhead_s": {"value": -1e-8, "source": "s"}}, "must be >= 0"),
        ({"hbm_retile_copy_efficiency": {"value": 3.0, "source": "s"}}, "efficiency in"),
        ({"onchip_full_tile_copy_bandwidth_bytes_per_s": {"value": 0, "source": "s"}}, "> 0"),
    ]
    for change, message in bad_cases:
        with pytest.raises(TopologyError, match=message):
            parse_compute_params({**good, **change}, path)
