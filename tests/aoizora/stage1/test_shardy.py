"""Reading the Shardy-propagated module into typed values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.stage1 import Stage1Error, build_dag, read_lowered
from aoizora.stage1.shardy import AxisRef, Sharding, TensorType, _cost_estimate, _element_bytes


def test_element_bytes() -> None:
    assert [_element_bytes(t) for t in ("bf16", "f32", "i1", "i8", "f8E4M3FN", "complex<f32>")] == [
        2,
        4,
        1,
        1,
        1,
        8,
    ]


def test_cost_estimate_is_read_from_backend_config() -> None:
    cfg = (
        '{"custom_call_config": {"body": "QUJD", "cost_estimate": '
        '{"flops": 12, "transcendentals": 0, "bytes_accessed": 34}}}'
    )
    assert _cost_estimate(cfg) == (12.0, 34.0)
    assert _cost_estimate('{"custom_call_config": {"body": "QUJD"}}') == (None, None)


def test_shard_bytes_pads_like_the_partitioner() -> None:
    t = TensorType((10, 3), 2)
    assert t.shard_bytes(Sharding(((AxisRef("x", 4),), ()))) == 3 * 3 * 2
    assert t.shard_bytes(None) == 60


def test_read_propagated_module(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        def body(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            return jnp.tanh(c @ w), None

        return jax.lax.scan(body, x, None, length=5)[0]

    args = (
        jax.ShapeDtypeStruct((64, 128), jnp.float32),
        jax.ShapeDtypeStruct((128, 128), jnp.float32),
    )
    low = (
        jax.jit(
            f,
            in_shardings=(
                NamedSharding(mesh, P("data", None)),
                NamedSharding(mesh, P(None, "model")),
            ),
        )
        .trace(*args)
        .lower()
    )
    m = read_lowered(low)
    assert m.mesh_axes == (("data", 2), ("model", 4))
    main = m.functions[m.main]
    assert main.arg_shardings == (
        Sharding(((AxisRef("data", 2),), ())),
        Sharding(((), (AxisRef("model", 4),))),
    )
    (loop,) = [op for op in main.body.ops if op.name == "stablehlo.while"]
    # Propagation gave every value a sharding; the dot reads its contracting dims.
    dots = [
        op
        for fn in m.functions.values()
        for op in fn.body.ops
        if op.name == "stablehlo.dot_general"
    ]
    dots += [op for r in loop.regions for op in r.ops if op.name == "stablehlo.dot_general"]
    assert dots and all(op.contracting_dims == (1,) for op in dots)
    assert all(m.value_shardings[op.results[0]] is not None for op in dots)
    assert m.value_types[main.body.args[0]] == TensorType((64, 128), 4)
    assert [n.count for n in build_dag(m).nodes if n.flops_per_chip > 0] == [5]
    # The reshard passes left collectives, never a reshard.
    ops = [op.name for fn in m.functions.values() for op in fn.body.ops]
    ops += [op.name for r in loop.regions for op in r.ops]
    assert "sdy.reshard" not in ops and "sdy.all_gather" in ops


def test_collective_axes_are_read_from_shardy() -> None:
    from jax.sharding import AbstractMesh, AxisType

    mesh = AbstractMesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
    low = (
        jax.jit(
            lambda v: v * 2,
            in_shardings=NamedSharding(mesh, P(("x", "y"), None)),
            out_shardings=NamedSharding(mesh, P("x", "y")),
        )
        .trace(jax.ShapeDtypeStruct((64, 64), jnp.float32))
        .lower(lowering_platforms=("tpu",))
    )
    m = read_lowered(low)
    collectives = [op for op in m.functions[m.main].body.ops if op.name.startswith("sdy.all")]
    assert [(op.name, [a.label for a in op.collective_axes]) for op in collectives] == [
        ("sdy.all_to_all", ["y"])
    ]


def test_program_without_mesh_is_refused() -> None:
    low = jax.jit(lambda x: x + 1).trace(jax.ShapeDtypeStruct((4,), jnp.float32)).lower()
    with pytest.raises(Stage1Error, match="no sdy.mesh"):
        build_dag(read_lowered(low))


def test_not_a_lowered_is_refused() -> None:
    with pytest.raises(Stage1Error, match="pass a jax.stages.Lowered"):
        read_lowered(object())
