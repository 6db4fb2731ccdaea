"""Q1's overlap schedule (closed forms on small DAGs) and the all-to-all relayout term."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.stage1 import build_dag, estimate, read_lowered
from aoizora.stage1.prediction import RELAYOUT_PASSES, Node
from aoizora.stage1.schedule import makespan_s


def _node(
    i: int, kind: str, *, deps: tuple[int, ...] = (), region: int = 0, coll: str = ""
) -> Node:
    axes, sizes = (("x",), (2,)) if coll else ((), ())
    return Node(i, kind, coll, axes, sizes, 2 if coll else 1, 0, 0.0, 0.0, 1, deps, "", "", region)


def test_independent_gather_hides_under_compute() -> None:
    # c0 (a) | ag (g, no deps) | c2 (b) needs ag: the gather overlaps c0.
    for a, g, b in ((3.0, 2.0, 1.0), (1.0, 5.0, 2.0), (2.0, 2.0, 0.5)):
        nodes = [_node(0, "compute"), _node(1, "implicit", coll="all-gather"),
                 _node(2, "compute", deps=(1,))]  # fmt: skip
        got = makespan_s(nodes, {0: a, 1: g, 2: b}, regions=())
        assert got == pytest.approx(max(a, g) + b)


def test_dependent_gather_is_exposed() -> None:
    nodes = [_node(0, "compute"), _node(1, "implicit", deps=(0,), coll="all-gather"),
             _node(2, "compute", deps=(1,))]  # fmt: skip
    assert makespan_s(nodes, {0: 3.0, 1: 2.0, 2: 1.0}, regions=()) == pytest.approx(6.0)


def test_all_to_all_blocks_compute() -> None:
    # An all-to-all with no dependency would overlap if it were async; it is sync on TPU,
    # so it waits for the compute stream and holds it: a + t + b.
    nodes = [_node(0, "compute"), _node(1, "implicit", coll="all-to-all"), _node(2, "compute")]
    assert makespan_s(nodes, {0: 3.0, 1: 2.0, 2: 1.0}, regions=()) == pytest.approx(6.0)
    nodes[1] = _node(1, "implicit", coll="all-gather")  # async: hides under c0
    assert makespan_s(nodes, {0: 3.0, 1: 2.0, 2: 1.0}, regions=()) == pytest.approx(4.0)


def test_loop_body_scheduled_once_times_trip_count() -> None:
    # Outer c0 (1 s); a loop of 5 trips whose body is [c1 (2 s) | ag (3 s) | c3 needs ag (1 s)]:
    # body = max(2, 3) + 1 = 4 s; then c4 (0.5 s) after the loop. Total 1 + 5*4 + 0.5.
    nodes = [
        _node(0, "compute"),
        _node(1, "compute", region=1),
        _node(2, "implicit", region=1, coll="all-gather"),
        _node(3, "compute", deps=(2,), region=1),
        _node(4, "compute", deps=(3,)),
    ]
    durations = {0: 1.0, 1: 2.0, 2: 3.0, 3: 1.0, 4: 0.5}
    assert makespan_s(nodes, durations, regions=((1, 0, 5),)) == pytest.approx(21.5)
    # Nested: the same loop inside a 2-trip outer loop (region 2 > region 1).
    nested = [_node(n.node_id, n.kind, deps=n.deps, region={0: 0, 1: 2}[n.region],
                    coll=n.collective) for n in nodes]  # fmt: skip
    nested[0] = _node(0, "compute", region=1)
    got = makespan_s(nested, durations, regions=((1, 0, 2), (2, 1, 5)))
    assert got == pytest.approx(2 * (1.0 + 5 * 4.0) + 0.5)


def test_no_overlap_equals_sum() -> None:
    # A chain (every node depends on the previous one) cannot overlap: Q1 = sum.
    kinds = ["compute", "implicit", "compute", "implicit", "compute"]
    colls = ["", "all-gather", "", "all-reduce", ""]
    nodes = [_node(i, k, deps=(i - 1,) if i else (), coll=c)
             for i, (k, c) in enumerate(zip(kinds, colls, strict=True))]  # fmt: skip
    durations = {i: 0.5 + i for i in range(5)}
    assert makespan_s(nodes, durations, regions=()) == pytest.approx(sum(durations.values()))


def test_fsdp_weight_gather_overlaps_in_estimate(tpu_mesh: Callable[..., Any]) -> None:
    # FSDP MLP: batch and both weights sharded on "fsdp" (8 chips). The w2 gather depends
    # on a parameter only, so it runs during the first matmul; the w1 gather is exposed.
    mesh = tpu_mesh(("fsdp",), (8,))
    m, k = 256, 1024
    batch = NamedSharding(mesh, P("fsdp", None))
    weight = NamedSharding(mesh, P("fsdp", None))
    low = (
        jax.jit(
            lambda x, w1, w2: jnp.dot(jax.nn.gelu(jnp.dot(x, w1)), w2),
            in_shardings=(batch, weight, weight),
            out_shardings=batch,
        )
        .trace(
            jax.ShapeDtypeStruct((m, k), jnp.bfloat16),
            jax.ShapeDtypeStruct((k, k), jnp.bfloat16),
            jax.ShapeDtypeStruct((k, k), jnp.bfloat16),
        )
        .lower()
    )
    chip = type("C", (), {"bf16_flops_per_s": 1e12, "hbm_bytes": 1e9,
                          "hbm_bandwidth_bytes_per_s": 1e18,
                          "link_bandwidth_bytes_per_s": 1e9, "hop_latency_s": 0.0})()  # fmt: skip
    e = estimate(low, mesh_axis_sizes={"fsdp": 8}, chip=chip, candidate_id="fsdp")
    gathers = [n for n in e.nodes if n.kind != "compute"]
    assert [(n.collective, n.bytes_per_device) for n in gathers] == [("all-gather", k * k * 2)] * 2
    t_gather = 7 * (k * k * 2 / 8) / 1e9  # (n-1) V/n / W on a line of 8
    t_mm = 2 * (m // 8) * k * k / 1e12  # batch split 8 ways, weights whole
    assert e.comm_s == pytest.approx(2 * t_gather)
    assert e.compute_s == pytest.approx(2 * t_mm)
    # gather w1 | mm1 waits for it; gather w2 runs during mm1; mm2 waits for both.
    assert e.q1_s == pytest.approx(t_gather + max(t_mm, t_gather) + t_mm)
    assert e.q1_s < e.compute_s + e.comm_s


def test_all_to_all_reshard_adds_relayout(tpu_mesh: Callable[..., Any]) -> None:
    mesh = tpu_mesh(("data", "model"), (2, 4))

    def f(x: jax.Array) -> jax.Array:
        y = jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("model", None)))
        return jax.lax.with_sharding_constraint(y + 1, NamedSharding(mesh, P(None, "model")))

    low = (
        jax.jit(
            f,
            in_shardings=NamedSharding(mesh, P("model", None)),
            out_shardings=NamedSharding(mesh, P(None, "model")),
        )
        .trace(jax.ShapeDtypeStruct((64, 128), jnp.float32))
        .lower()
    )
    dag = build_dag(read_lowered(low))
    (a2a,) = [n for n in dag.nodes if n.collective == "all-to-all"]
    relayouts = [n for n in dag.nodes if n.reason == "relayout around all-to-all"]
    assert [n.deps for n in relayouts] == [(a2a.node_id,)]
    # Two transposes of the buffer, each a read and a write: 4 V bytes, V = 64*128*4/4.
    assert a2a.bytes_per_device == 64 * 128 * 4 // 4
    assert relayouts[0].hbm_bytes_per_chip == RELAYOUT_PASSES * a2a.bytes_per_device == 4 * 8192
