"""Stage-1 prediction DAG: implicit and explicit communication, cross-checked against
the collectives of the same function compiled for TPU (libtpu AOT, v5e:2x4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.stage1 import build_dag, read_lowered
from aoizora.stage1.prediction import PredictionDag
from tests.aoizora.stage1.hlo_oracle import bytes_by_axes, hlo_collectives, while_bodies

BF16 = jnp.bfloat16


def _abstract(*shapes: tuple[int, ...]) -> tuple[jax.ShapeDtypeStruct, ...]:
    return tuple(jax.ShapeDtypeStruct(s, BF16) for s in shapes)


def _predicted(dag: PredictionDag) -> dict[tuple[str, tuple[str, ...]], float]:
    return bytes_by_axes(
        [(n.collective, n.axes, n.bytes_per_device * n.count) for n in dag.comm_nodes]
    )


def _compiled(low: Any, mesh: Any, *, trips: int = 1) -> dict[tuple[str, tuple[str, ...]], float]:
    """Collective bytes of the TPU-compiled program; while-body ones times ``trips``."""
    text = low.compile().as_text()
    bodies = set(while_bodies(text))
    axes = list(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    return bytes_by_axes(
        [
            (c.kind, c.axes, c.nbytes * (trips if c.computation in bodies else 1))
            for c in hlo_collectives(text, axes)
        ]
    )


# --------------------------------------------------------------------------- implicit, vs HLO


@pytest.mark.pinned_libtpu
def test_fsdp_mlp_gathers_weights(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "fsdp"), (2, 4))

    def mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
        return jnp.dot(jax.nn.gelu(jnp.dot(x, w1)), w2)

    batch = NamedSharding(mesh, P(("data", "fsdp"), None))
    weight = NamedSharding(mesh, P("fsdp", None))
    low = (
        jax.jit(mlp, in_shardings=(batch, weight, weight), out_shardings=batch)
        .trace(*_abstract((64, 256), (256, 1024), (1024, 256)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    gathers = [n for n in dag.comm_nodes]
    # Each weight is all-gathered over fsdp to its full size (256*1024 bf16): XLA's
    # choice; Shardy alone would move the batch to the contracting dimension by an
    # all-to-all and all-reduce partial sums (aoizora.stage1.partitioner).
    assert [(n.kind, n.collective, n.axes, n.bytes_per_device) for n in gathers] == [
        ("implicit", "all-gather", ("fsdp",), 256 * 1024 * 2)
    ] * 2
    # Per chip: 2*M*N*K / 8 for each dot (batch split 8 ways, weights whole).
    assert dag.flops_per_chip == 2 * (2 * 64 * 256 * 1024) / 8
    assert _predicted(dag) == _compiled(low, mesh)


def test_reordering_axes_in_one_dimension_is_one_permute(tpu_mesh: Callable[..., Any]) -> None:
    """(x, y) -> (y, x) on one dimension moves every shard once: a collective-permute
    (Shardy's reshard-to-collectives and the compiled program agree; the old hand
    model said an 8-way all-to-all plus a relayout)."""
    mesh = tpu_mesh(("x", "y"), (2, 4))
    low = (
        jax.jit(
            lambda v: v * 2,
            in_shardings=NamedSharding(mesh, P(("x", "y"), None)),
            out_shardings=NamedSharding(mesh, P(("y", "x"), None)),
        )
        .trace(*_abstract((64, 64)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    assert [(n.collective, n.bytes_per_device) for n in dag.comm_nodes] == [
        ("collective-permute", 64 * 64 * 2 // 8)
    ]
    assert not [n for n in dag.nodes if n.reason == "relayout around all-to-all"]
    compiled = _compiled(low, mesh)
    assert [(kind, b) for (kind, _), b in compiled.items()] == [("collective-permute", 1024)]


@pytest.mark.parametrize(
    ("shape", "new_shape", "axis"),
    [((32, 16), (4, 8, 16), 0), ((32, 16), (4, 8, 16), 1), ((16, 16), (2, 8, 16), 0)],
)
def test_reshape_then_reduce_bytes_match_compiled(
    tpu_mesh: Callable[..., Any], shape: tuple[int, ...], new_shape: tuple[int, ...], axis: int
) -> None:
    """A reshape that splits a dimension sharded over (x, y), then a reduction: the
    partial sums and the gather of the rest cost what the compiled program moves."""
    mesh = tpu_mesh(("x", "y"), (2, 4))
    low = (
        jax.jit(
            lambda v: v.reshape(new_shape).sum(axis),
            in_shardings=NamedSharding(mesh, P(("x", "y"), None)),
            out_shardings=NamedSharding(mesh, P()),
        )
        .trace(jax.ShapeDtypeStruct(shape, jnp.float32))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    predicted = sorted(n.bytes_per_device for n in dag.comm_nodes)
    compiled = sorted(b for (_, _), b in _compiled(low, mesh).items())
    assert predicted == compiled


@pytest.mark.parametrize(("rows", "gathers_weight"), [(256, False), (4096, True)])
def test_xla_gathers_the_weight_where_that_moves_fewer_bytes(
    tpu_mesh: Callable[..., Any], rows: int, gathers_weight: bool
) -> None:
    """An activation gathered by a sharding constraint meets a weight sharded on the
    contracting dimension: Shardy slices the activation and all-reduces partial sums;
    XLA (what the TPU compile runs) all-gathers the weight instead when the gather
    moves no more bytes than the all-reduce of the result, and otherwise drops the
    constraint's all-gather that the slice would undo."""
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        full = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", None)))
        return full @ w

    low = (
        jax.jit(
            f,
            in_shardings=(
                NamedSharding(mesh, P("data", "model")),
                NamedSharding(mesh, P("model", None)),
            ),
            out_shardings=NamedSharding(mesh, P("data", None)),
        )
        .trace(*_abstract((rows, 512), (512, 128)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    weight, result = 512 * 128 * 2, rows // 2 * 128 * 2
    assert gathers_weight == (weight <= result)
    got = [(n.collective, n.bytes_per_device) for n in dag.comm_nodes]
    if gathers_weight:  # the activation by the constraint, then the whole weight
        assert got == [("all-gather", rows // 2 * 512 * 2), ("all-gather", weight)]
    else:  # partial sums; the constraint's gather and the dot's slice cancel
        assert got == [("all-reduce", result)]
    assert _predicted(dag) == _compiled(low, mesh)


def test_sharded_contracting_dim_all_reduces(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))
    x_sh = NamedSharding(mesh, P("data", "model"))
    w_sh = NamedSharding(mesh, P("model", None))
    low = (
        jax.jit(
            lambda x, w: x @ w,
            in_shardings=(x_sh, w_sh),
            out_shardings=NamedSharding(mesh, P("data", None)),
        )
        .trace(*_abstract((16, 256), (256, 512)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    (red,) = dag.comm_nodes
    # Partial sums of the (16/2) x 512 bf16 output reduced over the contracting axis.
    assert (red.kind, red.collective, red.axes, red.bytes_per_device) == (
        "implicit",
        "all-reduce",
        ("model",),
        16 // 2 * 512 * 2,
    )
    assert _predicted(dag) == _compiled(low, mesh)


@pytest.mark.parametrize(
    ("first", "second", "kind"),
    [
        (P("data", "model"), P(None, "model"), "all-gather"),
        (P("data", None), P(None, "data"), "all-to-all"),
    ],
)
def test_reshard_between_sharding_constraints(
    tpu_mesh: Callable[..., Any], first: P, second: P, kind: str
) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array) -> jax.Array:
        y = jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, first))
        return jax.lax.with_sharding_constraint(y + 1, NamedSharding(mesh, second))

    low = (
        jax.jit(
            f, in_shardings=NamedSharding(mesh, first), out_shardings=NamedSharding(mesh, second)
        )
        .trace(*_abstract((64, 128)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    assert [(n.kind, n.collective) for n in dag.comm_nodes] == [("implicit", kind)]
    assert _predicted(dag) == _compiled(low, mesh)


def test_scan_multiplies_by_trip_count(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array, ws: jax.Array) -> jax.Array:
        return jax.lax.scan(lambda c, w: (jnp.tanh(c @ w), None), x, ws)[0]

    layers = 6
    low = (
        jax.jit(
            f,
            in_shardings=(
                NamedSharding(mesh, P("data", None)),
                NamedSharding(mesh, P(None, "model", None)),
            ),
            out_shardings=NamedSharding(mesh, P("data", None)),
        )
        .trace(*_abstract((64, 128), (layers, 128, 128)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    in_loop = [n for n in dag.nodes if n.count == layers]
    assert {n.kind for n in in_loop} == {"compute", "implicit"}
    assert dag.flops_per_chip == layers * 2 * 64 * 128 * 128 / 8
    assert _predicted(dag) == _compiled(low, mesh, trips=layers)


def test_nested_scans_multiply(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array) -> jax.Array:
        def outer(c: jax.Array, _: None) -> tuple[jax.Array, None]:
            inner = jax.lax.scan(lambda d, _: (d @ d, None), c, None, length=4)[0]
            return inner, None

        return jax.lax.scan(outer, x, None, length=3)[0]

    sh = NamedSharding(mesh, P("data", "model"))
    low = jax.jit(f, in_shardings=sh, out_shardings=sh).trace(*_abstract((64, 64))).lower()
    dag = build_dag(read_lowered(low))
    dots = [n for n in dag.nodes if n.flops_per_chip > 0]
    assert [n.count for n in dots] == [12]
    assert not dag.warnings


# --------------------------------------------------------------------------- explicit


def test_shard_map_collectives_are_explicit(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def body(x: jax.Array) -> jax.Array:
        a = jax.lax.all_gather(x, "model", axis=1, tiled=True)
        b = jax.lax.psum(a, "data")
        c = jax.lax.ppermute(b, "model", [(i, (i + 1) % 4) for i in range(4)])
        return jax.lax.all_to_all(c, "model", 1, 0, tiled=True)

    def f(x: jax.Array) -> jax.Array:
        return jax.shard_map(
            body, mesh=mesh, in_specs=P("data", "model"), out_specs=P("data", "model")
        )(x)

    sh = NamedSharding(mesh, P("data", "model"))
    low = jax.jit(f, in_shardings=sh, out_shardings=sh).trace(*_abstract((64, 128))).lower()
    dag = build_dag(read_lowered(low))
    local = 32 * 128 * 2  # the gathered local block, bf16
    assert [
        (n.kind, n.collective, n.axes, n.group_size, n.bytes_per_device) for n in dag.comm_nodes
    ] == [
        ("explicit", "all-gather", ("model",), 4, local),
        ("explicit", "all-reduce", ("data",), 2, local),
        ("explicit", "collective-permute", ("model",), 4, local),
        ("explicit", "all-to-all", ("model",), 4, local),
    ]
    assert _predicted(dag) == _compiled(low, mesh)
    # Explicit collectives follow each other in the DAG.
    ids = [n.node_id for n in dag.comm_nodes]
    assert [n.deps for n in dag.comm_nodes][1:] == [(i,) for i in ids[:-1]]


@pytest.mark.slow
def test_pallas_kernel_in_shard_map_boundary(tpu_mesh: Callable[..., Any]) -> None:
    """K/V replicated on the sequence inside shard_map: all-gathered at the boundary."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mesh = tpu_mesh(("data", "context"), (2, 4))
    heads, seq, head_dim = 2, 512, 128
    mask = sm.MultiHeadMask([sm.FullMask((seq // 4, seq)) for _ in range(heads)])
    kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    q_spec, kv_spec = P("data", None, "context", None), P("data", None, None, None)

    def f(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jax.shard_map(
            jax.vmap(kernel), mesh=mesh, in_specs=(q_spec, kv_spec, kv_spec), out_specs=q_spec,
            check_vma=False,
        )(q, k, v)  # fmt: skip

    sh = NamedSharding(mesh, q_spec)
    shape = (2, heads, seq, head_dim)
    low = (
        jax.jit(f, in_shardings=(sh, sh, sh), out_shardings=sh)
        .trace(*_abstract(shape, shape, shape))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    kv_bytes = 1 * heads * seq * head_dim * 2  # one CFG half, whole sequence
    assert [(n.kind, n.collective, n.axes, n.bytes_per_device) for n in dag.comm_nodes] == [
        ("implicit", "all-gather", ("context",), kv_bytes)
    ] * 2
    (attn,) = [n for n in dag.nodes if n.kind == "compute"]
    # QK^T and PV per local head: 2*Sq*Skv*D each, Sq = seq/4 local queries.
    assert attn.flops_per_chip == heads * 2 * (seq // 4) * seq * (head_dim + head_dim)
    assert _predicted(dag) == _compiled(low, mesh)


def test_dag_dependencies_point_backwards(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array, w: jax.Array) -> jax.Array:
        h = jax.lax.with_sharding_constraint(x @ w, NamedSharding(mesh, P(None, "model")))
        return h @ w.T

    low = (
        jax.jit(
            f,
            in_shardings=(
                NamedSharding(mesh, P("data", "model")),
                NamedSharding(mesh, P("model", None)),
            ),
        )
        .trace(*_abstract((64, 128), (128, 128)))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    assert [n.node_id for n in dag.nodes] == list(range(len(dag.nodes)))
    assert all(d < n.node_id for n in dag.nodes for d in n.deps)
    assert any(n.deps for n in dag.nodes)


def test_convolution_flops_count_only_taps_on_real_input(tpu_mesh: Callable[..., Any]) -> None:
    """A strided, padded, dilated convolution: Stage 1 counts only the taps that meet
    real input (sim.costs.window_positions, XLA's HandleConvolution rule)."""
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def conv(x: jax.Array, k: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(
            x, k, (2, 1), ((1, 1), (0, 0)), rhs_dilation=(1, 2),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )  # fmt: skip

    low = (
        jax.jit(
            conv,
            in_shardings=(NamedSharding(mesh, P("data")), NamedSharding(mesh, P())),
            out_shardings=NamedSharding(mesh, P("data")),
        )
        .trace(
            jax.ShapeDtypeStruct((8, 32, 32, 64), jnp.float32),
            jax.ShapeDtypeStruct((3, 3, 64, 128), jnp.float32),
        )
        .lower()
    )
    dag = build_dag(read_lowered(low))
    (node,) = [n for n in dag.nodes if n.flops_per_chip > 0]
    # Height: 16 outputs at stride 2 over 1 row of padding each side: the first output
    # loses one of its 3 taps (47 pairs). Width: 28 outputs of a 3-tap window dilated
    # by 2, all inside (84 pairs). Batch 8 over data=2 -> 4 per chip.
    assert node.flops_per_chip == 2 * 4 * 64 * 128 * 47 * 84
    # XLA's cost analysis of what it compiled counts at least that (it may rewrite
    # the dilated window into a padded one).
    assert node.flops_per_chip <= low.compile().cost_analysis()["flops"]
