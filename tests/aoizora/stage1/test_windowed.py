"""Stage 1's windowed-einsum rule against libtpu: one-dot programs compiled for v5e:2x4.

Whether XLA windows a dot is read from the compiled program (a
``windowed_dot_general_body_ag`` loop); its cost from the repository's HLO reader (the
loop's kernels' HBM bytes, its permutes' buffers, each times the loop's trip count).
Stage 1 decides from the shape and cost rules of :mod:`aoizora.stage1.windowed` and
prices the loop with its own formulas; both must agree with the compile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import ComputeSegment
from aoizora.stage1 import estimate
from aoizora.stage1.dag import build_dag
from aoizora.stage1.shardy import read_lowered
from sim.topology import load_slice

pytestmark = pytest.mark.slow

SLICE = load_slice("v5e:2x4")


def _dot(mesh: Any, rows: int, k: int, f: int, x_spec: P, w_spec: P) -> Any:
    """``x [2, rows, k] @ w [k, f]`` lowered for the TPU, the result split like ``x``."""
    x = jax.ShapeDtypeStruct((2, rows, k), jnp.bfloat16, sharding=NamedSharding(mesh, x_spec))
    w = jax.ShapeDtypeStruct((k, f), jnp.bfloat16, sharding=NamedSharding(mesh, w_spec))
    fn = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(mesh, x_spec))
    return fn.lower(x, w)


def _compiled_loop(hlo_text: str) -> tuple[bool, float, float]:
    """(windowed?, HBM bytes of the loop's kernels, collective-permute bytes) per step."""
    graph = graph_from_text(hlo_text)
    # Every byte the loop's kernels move, in HBM or (operands libtpu placed in VMEM, S(1))
    # on chip: Stage 1 cannot know the placement, so it counts them all as HBM traffic.
    hbm = sum(
        region.count * (k.hbm_bytes + k.onchip_bytes + k.onchip_copy_bytes)
        for region in graph.regions
        if "windowed" in region.computation
        for step in region.steps
        if isinstance(step, ComputeSegment)
        for k in step.kernels
    )
    permutes = sum(
        c.buffer_bytes * c.count for c in graph.collectives if c.kind == "collective-permute"
    )
    return "windowed_dot_general_body_ag" in hlo_text, hbm, permutes


CASES = [
    # rows, k, f, weight spec, windowed by libtpu (checked when this test was written)
    (8192, 1536, 1536, P("c", None), True),  # split on the contracting dimension
    (8192, 1536, 1536, P(None, "c"), True),  # split on the output dimension
    (1024, 1536, 1536, P("c", None), False),  # too little compute to hide the ring
    (4096, 64, 1536, P(None, "c"), True),  # a 192 KB weight: compute decides, not size
    (1024, 64, 1536, P("c", None), False),
]


@pytest.mark.parametrize(("rows", "k", "f", "w_spec", "windowed"), CASES)
def test_stage1_windows_the_dots_libtpu_windows_and_prices_the_loop_alike(
    tpu_mesh: Callable[..., Any], rows: int, k: int, f: int, w_spec: P, windowed: bool
) -> None:
    mesh = tpu_mesh(("c",), (8,))
    lowered = _dot(mesh, rows, k, f, P(None, "c", None), w_spec)
    compiled_windowed, compiled_hbm, compiled_permutes = _compiled_loop(lowered.compile().as_text())
    assert compiled_windowed == windowed  # libtpu still decides as recorded
    est = estimate(lowered, mesh_axis_sizes={"c": 8}, chip=SLICE.chip, candidate_id="dot",
                   slice_=SLICE)  # fmt: skip
    loop = [n for n in est.nodes if n.reason.startswith("windowed einsum")]
    assert bool(loop) == windowed
    gathers = [n for n in est.nodes if n.collective == "all-gather"]
    if not windowed:
        assert gathers and compiled_permutes == 0  # a plain weight all-gather on both sides
        return
    assert not gathers  # the loop replaces Shardy's all-gather
    hbm = sum(n.hbm_bytes_per_chip * n.count for n in loop if n.kind == "compute")
    permutes = sum(n.bytes_per_device * n.count for n in loop if n.kind != "compute")
    assert hbm == pytest.approx(compiled_hbm, rel=0.01)
    assert permutes == pytest.approx(compiled_permutes, rel=0.01)
    # FLOPs are conserved: the partial dots add up to the whole dot.
    flops = sum(n.flops_per_chip * n.count for n in loop)
    assert flops == pytest.approx(2.0 * 2 * rows * k * f / 8)


def test_a_weight_split_over_part_of_the_mesh_is_gathered_not_windowed(
    tpu_mesh: Callable[..., Any],
) -> None:
    """The shape rule: the weight must be split over every device (here 4 of 8)."""
    mesh = tpu_mesh(("d", "c"), (2, 4))
    lowered = _dot(mesh, 8192, 1536, 1536, P("d", "c", None), P("c", None))
    compiled_windowed, _, _ = _compiled_loop(lowered.compile().as_text())
    assert not compiled_windowed
    est = estimate(lowered, mesh_axis_sizes={"d": 2, "c": 4}, chip=SLICE.chip,
                   candidate_id="dot", slice_=SLICE)  # fmt: skip
    assert not [n for n in est.nodes if n.reason.startswith("windowed einsum")]
    assert [n.axes for n in est.nodes if n.collective == "all-gather"] == [("c",)]


def test_without_times_the_dag_keeps_shardys_all_gather(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("c",), (8,))
    dag = build_dag(read_lowered(_dot(mesh, 8192, 1536, 1536, P(None, "c", None), P("c", None))))
    assert [n.collective for n in dag.nodes if n.kind != "compute"] == ["all-gather"]
