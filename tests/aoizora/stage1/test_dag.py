"""Stage-1 prediction DAG: implicit and explicit communication, cross-checked against
the collectives of the same function compiled for TPU (libtpu AOT, v5e:2x4)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.stage1 import build_dag, read_lowered, reshard_collectives
from aoizora.stage1.prediction import PredictionDag
from aoizora.stage1.shardy import AxisRef, Sharding, TensorType
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


# --------------------------------------------------------------------------- resharding rules

X, Y = AxisRef("x", 2), AxisRef("y", 4)


def test_reshard_collectives_closed_forms() -> None:
    t = TensorType((8, 16), 2)  # 256 bytes
    gather = reshard_collectives(Sharding(((X,), (Y,))), Sharding(((), (Y,))), t)
    assert gather == [("all-gather", (X,), 256 // 4)]
    a2a = reshard_collectives(Sharding(((X,), ())), Sharding(((), (X,))), t)
    assert a2a == [("all-to-all", (X,), 128)]
    # Adding axes is a local slice: no communication.
    assert reshard_collectives(Sharding(((), ())), Sharding(((X,), (Y,))), t) == []
    # Moving y to dim 0 while dropping x: all-to-all on the y-sliced buffer, then gather x.
    both = reshard_collectives(Sharding(((X,), (Y,))), Sharding(((Y,), ())), t)
    assert both == [("all-to-all", (Y,), 256 // 8), ("all-gather", (X,), 256 // 4)]
    # A permutation inside one dimension (x,y) -> (y,x) is an all-to-all over both.
    perm = reshard_collectives(Sharding(((X, Y), ())), Sharding(((Y, X), ())), t)
    assert [(k, axes) for k, axes, _ in perm] == [("all-to-all", (X, Y))]


_dims = st.lists(st.sampled_from([(), (X,), (Y,), (X, Y), (Y, X)]), min_size=2, max_size=2)


@given(_dims, _dims)
def test_reshard_collectives_invariants(src_dims: list[Any], dst_dims: list[Any]) -> None:
    names = lambda dims: [a for d in dims for a in d]  # noqa: E731
    if len(set(names(src_dims))) < len(names(src_dims)) or len(set(names(dst_dims))) < len(
        names(dst_dims)
    ):
        return  # an axis may shard only one dimension
    t = TensorType((16, 32), 4)
    src, dst = Sharding(tuple(src_dims)), Sharding(tuple(dst_dims))
    out = reshard_collectives(src, dst, t)
    if src == dst:
        assert out == []
    kinds = [k for k, _, _ in out]
    assert kinds in ([], ["all-to-all"], ["all-gather"], ["all-to-all", "all-gather"])
    for kind, axes, nbytes in out:
        if kind == "all-gather":
            # Gathering exactly the axes dst lacks, into dst's shard.
            assert set(axes) == set(names(src_dims)) - set(names(dst_dims))
            assert nbytes == t.shard_bytes(dst)
        else:
            # All-to-all over axes both have, on the source shard after slicing new axes.
            assert set(axes) <= set(names(src_dims)) & set(names(dst_dims))
            added = set(names(dst_dims)) - set(names(src_dims))
            assert nbytes * math.prod(a.size for a in added) == t.shard_bytes(src)
    if set(names(src_dims)) <= set(names(dst_dims)) and all(
        [a for a in s if a in names(src_dims)] == list(r)
        for s, r in zip(dst_dims, src_dims, strict=True)
    ):
        assert out == []  # only slicing


# --------------------------------------------------------------------------- implicit, vs HLO


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
    # Each weight is all-gathered over fsdp to its full size (256*1024 bf16).
    assert [(n.kind, n.collective, n.axes, n.bytes_per_device) for n in gathers] == [
        ("implicit", "all-gather", ("fsdp",), 256 * 1024 * 2)
    ] * 2
    # Per chip: 2*M*N*K / 8 for each dot (batch split 8 ways, weights whole).
    assert dag.flops_per_chip == 2 * (2 * 64 * 256 * 1024) / 8
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
    dots = [n for n in dag.nodes if n.kind == "compute"]
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
