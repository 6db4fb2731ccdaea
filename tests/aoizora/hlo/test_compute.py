"""FLOPs of compiled kernels (aoizora/hlo/compute.py) against XLA's own cost analysis."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.hlo.compute import CostModel
from aoizora.hlo.text import parse_module
from sim.costs import window_positions

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def _devices() -> list[object]:
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(topology_name="v5e:2x4", platform="tpu").devices)
    except Exception as e:  # noqa: BLE001 - libtpu raises several kinds
        pytest.skip(f"libtpu AOT topology v5e:2x4 unavailable: {e}")


def _layer(c: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
    """Multi-head self-attention with a projection, one scan layer: TPU writes the
    per-head dots as convolutions whose window stands for the head dimension --
    padded so each window meets the input once (``window={size=8 pad=7_7}``) or
    over a dilated input (``lhs_dilate=8``)."""
    b, s, d = c.shape
    q = (c @ w).reshape(b, s, 8, d // 8).transpose(0, 2, 1, 3)
    p = jax.nn.softmax(jnp.einsum("bhqd,bhkd->bhqk", q, q).astype(jnp.float32), -1)
    a = jnp.einsum("bhqk,bhkd->bhqd", p.astype(c.dtype), q).transpose(0, 2, 1, 3)
    return c + a.reshape(b, s, d), None


@pytest.mark.slow
def test_flops_match_xla_cost_analysis() -> None:
    mesh = Mesh(np.array(_devices()).reshape(8), ("data",))
    x = NamedSharding(mesh, P("data", None, None))
    compiled = (
        jax.jit(
            lambda c, ws: jax.lax.scan(_layer, c, ws)[0],
            in_shardings=(x, NamedSharding(mesh, P())),
            out_shardings=x,
        )
        .trace(
            jax.ShapeDtypeStruct((8, 512, 1024), jnp.bfloat16),
            jax.ShapeDtypeStruct((2, 1024, 1024), jnp.bfloat16),
        )
        .lower()
        .compile()
    )
    text = compiled.as_text()
    assert "pad=7_7" in text and "lhs_dilate=8" in text  # the forms this test is about
    module = parse_module(text)
    model = CostModel(module)
    ours = 0.0
    for comp in module.computations.values():  # XLA counts a loop body once, as here
        if "fused" not in comp.name and "region" in comp.name or comp is module.entry:
            ours += sum(model.instruction(comp, i).flops for i in comp.instructions)
    xla = compiled.cost_analysis()["flops"]
    # Analytic, one layer per chip (batch 1 of 8): the projection, QK^T and PV.
    dots = 2 * 512 * 1024 * 1024 + 2 * (2 * 8 * 512 * 512 * 128)
    assert dots <= ours <= 1.05 * dots  # plus the element-wise work
    assert ours == pytest.approx(xla, rel=0.01)


def test_window_positions_closed_forms() -> None:
    # A padded window meeting a size-1 input once per output position.
    assert window_positions(1, 8, 8, padding_low=7) == 8
    # A valid convolution: every (output, tap) pair; with stride 2 the same count
    # over fewer outputs.
    assert window_positions(10, 8, 3) == 24
    assert window_positions(10, 4, 3, stride=2) == 12
    # Same padding of a 3-tap window: the edge outputs lose one tap each.
    assert window_positions(10, 10, 3, padding_low=1) == 28
    # An input dilated by 2 has holes every other position.
    assert window_positions(3, 5, 1, lhs_dilation=2) == 3
