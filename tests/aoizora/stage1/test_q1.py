"""Q1 (compute + communication bound), per-axis bytes, memory, and the top-K ranking."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.errors import AoizoraError
from aoizora.stage1 import (
    Stage1Error,
    Stage1Estimate,
    axis_phases,
    collective_time_s,
    estimate,
    rank_stage1,
)
from aoizora.stage1.memory import MEMORY_MARGIN
from aoizora.stage1.prediction import Node
from sim.topology import load_chip, load_slice


@dataclass(frozen=True)
class UnitChip:
    bf16_flops_per_s: float = 1e12
    hbm_bytes: float = 1e9
    hbm_bandwidth_bytes_per_s: float = 1e11
    link_bandwidth_bytes_per_s: float = 1e9
    hop_latency_s: float = 1e-6


def test_collective_formulas_closed_forms() -> None:
    c = UnitChip()
    v, n, w, h = 8e6, 4, 1e9, 1e-6
    assert collective_time_s(
        "all-gather", group_size=n, bytes_per_device=v, chip=c
    ) == pytest.approx((n - 1) * v / n / w + (n - 1) * h)
    assert collective_time_s("reduce-scatter", group_size=n, bytes_per_device=v, chip=c) == (
        collective_time_s("all-gather", group_size=n, bytes_per_device=v, chip=c)
    )
    assert collective_time_s(
        "all-reduce", group_size=n, bytes_per_device=v, chip=c
    ) == pytest.approx(2 * ((n - 1) * v / n / w + (n - 1) * h))
    # Middle link of a 4-chip line carries 2*2 chunks of V/4 one way.
    assert collective_time_s(
        "all-to-all", group_size=n, bytes_per_device=v, chip=c
    ) == pytest.approx(4 * v / 4 / w + h)
    # On a slice the group gets its best box: 4 chips of a 2x2 form a ring, and the
    # bidirectional ring sends V/(2n) each way in each of n-1 steps.
    ring = collective_time_s(
        "all-gather", group_size=n, bytes_per_device=v, chip=c, slice_=load_slice("v5e:2x2")
    )
    assert ring == pytest.approx((n - 1) * (v / (2 * n) / w + h))
    assert collective_time_s("collective-permute", group_size=n, bytes_per_device=v, chip=c) == (
        pytest.approx(v / w + h)
    )
    assert collective_time_s("all-gather", group_size=1, bytes_per_device=v, chip=c) == 0.0
    with pytest.raises(Stage1Error, match="unknown collective 'broadcast'"):
        collective_time_s("broadcast", group_size=2, bytes_per_device=1.0, chip=c)


def test_axis_phases_are_hierarchical() -> None:
    def node(kind: str) -> Node:
        return Node(0, "implicit", kind, ("a", "b"), (2, 4), 8, 1600, 0.0, 0.0, 1, (), "", "")

    assert axis_phases(node("all-reduce")) == [("a", 2, 1600.0), ("b", 4, 800.0)]
    assert axis_phases(node("all-to-all")) == [("a", 2, 1600.0), ("b", 4, 1600.0)]


def _row_parallel(mesh: Any) -> Any:
    x_sh = NamedSharding(mesh, P("data", "model"))
    w_sh = NamedSharding(mesh, P("model", None))
    out = NamedSharding(mesh, P("data", None))
    args = (
        jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16),
        jax.ShapeDtypeStruct((1024, 512), jnp.bfloat16),
    )
    return (
        jax.jit(lambda x, w: x @ w, in_shardings=(x_sh, w_sh), out_shardings=out)
        .trace(*args)
        .lower()
    )


def test_estimate_closed_form(tpu_mesh: Callable[..., Any]) -> None:
    low = _row_parallel(tpu_mesh(("data", "model"), (2, 4)))
    chip = UnitChip()
    e = estimate(low, mesh_axis_sizes={"data": 2, "model": 4}, chip=chip, candidate_id="row")
    flops = 2 * 256 * 1024 * 512 / 8
    assert e.flops_per_chip == flops
    # Roofline: local x (128x256), w (256x512) and the partial out (128x512), bf16.
    hbm = (128 * 256 + 256 * 512 + 128 * 512) * 2
    assert e.hbm_traffic_bytes_per_chip == hbm
    assert e.compute_s == pytest.approx(max(flops / 1e12, hbm / 1e11))
    reduce_bytes = 128 * 512 * 2
    assert e.comm_bytes_per_axis == (("model", float(reduce_bytes)),)
    assert e.comm_s == pytest.approx(2 * (3 * reduce_bytes / 4 / 1e9 + 3 * 1e-6))
    assert e.q1_s == pytest.approx(e.compute_s + e.comm_s)
    assert dict(e.comm_s_per_axis) == {"model": pytest.approx(e.comm_s)}


def test_estimate_is_deterministic_and_leaves_lowered_untouched(
    tpu_mesh: Callable[..., Any],
) -> None:
    low = _row_parallel(tpu_mesh(("data", "model"), (2, 4)))
    before = low.as_text()
    chip = load_chip("v5e")
    a = estimate(low, mesh_axis_sizes={"data": 2, "model": 4}, chip=chip, candidate_id="c")
    b = estimate(low, mesh_axis_sizes={"data": 2, "model": 4}, chip=chip, candidate_id="c")
    assert json.dumps(a.to_json_dict(), sort_keys=True) == json.dumps(
        b.to_json_dict(), sort_keys=True
    )
    assert low.as_text() == before
    assert "sdy.sharding_rule" not in before


def test_argument_memory_matches_compiled(tpu_mesh: Callable[..., Any]) -> None:
    """Sharded parameters + inputs per chip equal XLA's own argument bytes."""
    low = _row_parallel(tpu_mesh(("data", "model"), (2, 4)))
    e = estimate(
        low, mesh_axis_sizes={"data": 2, "model": 4}, chip=load_chip("v5e"), candidate_id="c"
    )
    mem = low.compile().memory_analysis()
    assert e.argument_bytes_per_chip == mem.argument_size_in_bytes == (128 * 256 + 256 * 512) * 2
    # Temporaries at least hold the output shard (128 x 512 bf16 before slicing).
    assert e.memory_bytes_per_chip >= e.argument_bytes_per_chip + mem.output_size_in_bytes


def test_scan_weights_are_not_counted_twice(tpu_mesh: Callable[..., Any]) -> None:
    """A scan carries its stacked weights through the loop unchanged: XLA keeps them in
    the argument's buffer, and so does Stage 1's memory (no second copy as a temp)."""
    mesh = tpu_mesh(("data", "model"), (2, 4))
    layers, width = 16, 512
    weights_bytes = layers * width * width * 2

    def step(ws: jax.Array, x: jax.Array) -> jax.Array:
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]

    args = (
        jax.ShapeDtypeStruct((layers, width, width), jnp.bfloat16),
        jax.ShapeDtypeStruct((256, width), jnp.bfloat16),
    )
    repl, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data", None))
    low = jax.jit(step, in_shardings=(repl, rows), out_shardings=rows).trace(*args).lower()
    e = estimate(
        low, mesh_axis_sizes={"data": 2, "model": 4}, chip=load_chip("v5e"), candidate_id="s"
    )
    mem = low.compile().memory_analysis()
    assert e.argument_bytes_per_chip == mem.argument_size_in_bytes > weights_bytes
    # Both the compiler's temporaries and Stage 1's stay far below one weight copy.
    assert mem.temp_size_in_bytes < weights_bytes / 4
    assert e.memory_bytes_per_chip - e.argument_bytes_per_chip < weights_bytes / 4


def test_estimate_rejects_other_mesh(tpu_mesh: Callable[..., Any]) -> None:
    low = _row_parallel(tpu_mesh(("data", "model"), (2, 4)))
    with pytest.raises(AoizoraError, match="axis 'model' of size 4"):
        estimate(low, mesh_axis_sizes={"data": 2, "model": 2}, chip=UnitChip(), candidate_id="c")
    with pytest.raises(Stage1Error, match="'tensor'"):
        estimate(
            low,
            mesh_axis_sizes={"data": 2, "model": 4, "tensor": 2},
            chip=UnitChip(),
            candidate_id="c",
        )


# --------------------------------------------------------------------------- ranking


def _est(cid: str, q1: float, mem: int) -> Stage1Estimate:
    return Stage1Estimate(cid, q1, q1, 0.0, 0.0, (), mem, ())


def test_rank_drops_infeasible_with_numbers_and_keeps_top_k() -> None:
    ests = [
        _est("d", 3.0, 10),
        _est("b", 1.0, 10),
        _est("a", 1.0, 10),
        _est("big", 0.1, 30_000_000_000),
        _est("near", 0.2, 20_000_000_000),  # over the budget, within Stage 1's margin
    ]
    r = rank_stage1(ests, k=2, hbm_bytes=16e9)
    assert MEMORY_MARGIN * 16e9 > 20e9  # so "near" is compiled, and the compile decides
    # near ranks first by Q1: compiled beside the top 2 that fit, taking no place of theirs
    assert r.kept_ids == ("near", "a", "b")  # equal Q1: by candidate id
    assert [e.candidate_id for e in r.dropped_weak] == ["d"]
    assert r.dropped_infeasible == (
        (
            "big",
            "Stage 1 estimates 30000000000 B per chip (30.00 GB), over 1.6 x the 16000000000 B "
            "HBM budget (16.00 GB; 1.6 is the most Stage 1 has overestimated a compiled "
            "program by)",
        ),
    )
    ests = [e for e in ests if e.candidate_id != "near"]
    r = rank_stage1(ests, k=2, hbm_bytes=16e9)
    # Input order does not matter.
    assert rank_stage1(list(reversed(ests)), k=2, hbm_bytes=16e9) == r
    assert rank_stage1(ests, k=10, hbm_bytes=16e9).kept_ids == ("a", "b", "d")
    assert json.loads(json.dumps(r.to_json_dict()))["kept"][0]["candidate_id"] == "a"


def test_rank_validates_input() -> None:
    with pytest.raises(Stage1Error, match="k=0 must be a positive integer"):
        rank_stage1([], k=0, hbm_bytes=1.0)
    with pytest.raises(Stage1Error, match="hbm_bytes=0"):
        rank_stage1([], k=1, hbm_bytes=0)
    with pytest.raises(Stage1Error, match=r"repeated: \['a'\]"):
        rank_stage1([_est("a", 1.0, 1), replace(_est("a", 2.0, 1))], k=1, hbm_bytes=1.0)
