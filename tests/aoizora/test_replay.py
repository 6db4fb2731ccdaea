# ruff: noqa: E501  (HLO text lines are long by nature)
"""Replay: closed forms for sync/async/loop steps, an independent simulation, the opaque rule."""

from __future__ import annotations

import pytest

from aoizora.errors import PlacementError
from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import OpaqueNode
from aoizora.hlo.shapes import Shape
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import opaque_cost_s, replay, sim_kind
from sim.collectives import collective_flows
from sim.engine import simulate
from sim.topology import load_chip, load_slice

V5E = load_chip("v5e")
C = V5E.compute  # the compute model's parameters (sim/compute.py): tile 128, no padding below
N = 4096  # the dot below: f32[N,N] x f32[N,N]
# max(FLOPs time, HBM time) plus the kernel's launch (sim/compute.py; v5e measures it); a
# dot alone in its kernel is a bare matmul: it runs at the bare kernels' rate where measured.
DOT_S = (
    max(
        2 * N**3 / (V5E.bf16_flops_per_s * (C.bare_matmul_efficiency or C.matmul_efficiency)),
        3 * N * N * 4 / (V5E.hbm_bandwidth_bytes_per_s * C.hbm_efficiency),
    )
    + C.kernel_overhead_s
)
AG_BYTES = 8 * 2**20  # gathered output per device
# bidir ring over 2 chips: both directions' halves cross the one link 0->1: B/2 bytes + 1 hop
AG_S = V5E.hop_latency_s + (AG_BYTES / 2) / V5E.link_bandwidth_bytes_per_s

HEADER = "HloModule m, is_scheduled=true, num_partitions=2\n"
SYNC = (
    HEADER
    + f"""
ENTRY %main (p: f32[1048576], a: f32[{N},{N}]) -> f32[{N},{N}] {{
  %p = f32[1048576]{{0}} parameter(0)
  %a = f32[{N},{N}]{{1,0}} parameter(1)
  %ag = f32[2097152]{{0}} all-gather(%p), channel_id=1, replica_groups={{{{0,1}}}}, dimensions={{0}}, use_global_device_ids=true
  ROOT %d = f32[{N},{N}]{{1,0}} dot(%a, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
)
ASYNC = (
    SYNC.replace(
        "  %ag = f32[2097152]{0} all-gather(%p),",
        "  %ag = (f32[1048576]{0}, f32[2097152]{0}) all-gather-start(%p),",
    )
    .replace(
        "  ROOT %d = ",
        "  %d = ",
    )
    .replace(
        "rhs_contracting_dims={0}\n}",
        "rhs_contracting_dims={0}\n  %agd = f32[2097152]{0} all-gather-done(%ag)\n  ROOT %t = (f32[4096,4096]{1,0}, f32[2097152]{0}) tuple(%d, %agd)\n}",
    )
)


def _order(slice_name: str, n: int) -> tuple[object, DeviceOrder]:
    s = load_slice(slice_name)
    return s, DeviceOrder.identity(mesh_shape=(n,), slice_=s)


def test_sync_collective_then_compute_adds_up() -> None:
    s, order = _order("v5e:1x2", 2)
    r = replay(graph_from_text(SYNC), s, order)  # type: ignore[arg-type]
    assert r.step_time_s == pytest.approx(AG_S + DOT_S, rel=1e-9)
    (t,) = r.collectives
    assert t.duration_s == pytest.approx(AG_S, rel=1e-9)
    assert t.exposed_s == pytest.approx(AG_S, rel=1e-9)
    assert r.compute_s == pytest.approx(DOT_S, rel=1e-12)


def test_async_collective_hides_behind_compute() -> None:
    s, order = _order("v5e:1x2", 2)
    g = graph_from_text(ASYNC)
    assert g.collectives[0].is_async
    r = replay(g, s, order)  # type: ignore[arg-type]
    assert DOT_S > AG_S
    assert r.step_time_s == pytest.approx(DOT_S, rel=1e-9)  # max(compute, transfer)
    assert r.collectives[0].exposed_s == 0.0
    assert r.collectives[0].duration_s == pytest.approx(AG_S, rel=1e-9)


def test_loop_body_simulated_once_and_multiplied() -> None:
    body = (
        SYNC.split("ENTRY")[0]
        + """
%cond (t: (s32[], f32[1048576])) -> pred[] {
  %t = (s32[], f32[1048576]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(7)
  ROOT %c = pred[] compare(%i, %n), direction=LT
}

%body (u: (s32[], f32[1048576])) -> (s32[], f32[1048576]) {
  %u = (s32[], f32[1048576]{0}) parameter(0)
  %j = s32[] get-tuple-element(%u), index=0
  %v = f32[1048576]{0} get-tuple-element(%u), index=1
  %ag = f32[2097152]{0} all-gather(%v), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  %s = f32[1048576]{0} slice(%ag), slice={[0:1048576]}
  %one = s32[] constant(1)
  %k = s32[] add(%j, %one)
  ROOT %r = (s32[], f32[1048576]{0}) tuple(%k, %s)
}

ENTRY %main (p: f32[1048576]) -> f32[1048576] {
  %p = f32[1048576]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[1048576]{0}) tuple(%zero, %p)
  %loop = (s32[], f32[1048576]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[1048576]{0} get-tuple-element(%loop), index=1
}
"""
    )
    s, order = _order("v5e:1x2", 2)
    g = graph_from_text(body)
    r = replay(g, s, order)  # type: ignore[arg-type]
    # the slice reads and writes 4 MiB; the induction add reads 2 and writes 1 s32; each
    # of the two kernels pays its launch
    slice_s = (2 * 1048576 * 4 + 3 * 4) / (
        V5E.hbm_bandwidth_bytes_per_s * C.hbm_efficiency
    ) + 2 * C.kernel_overhead_s
    assert r.region_times_s[1] == pytest.approx(AG_S + slice_s, rel=1e-9)
    assert r.step_time_s == pytest.approx(7 * (AG_S + slice_s), rel=1e-9)
    assert r.collectives[0].count == 7
    assert r.collectives[0].total_s == pytest.approx(7 * AG_S, rel=1e-9)


def test_replay_equals_an_independent_simulation_per_placement() -> None:
    from tests.aoizora.hlo.compiled import SHARD_BYTES

    text = (
        HEADER.replace("num_partitions=2", "num_partitions=8")
        + """
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[32,64]) -> f32[32,64] {
  %p = f32[32,64]{1,0} parameter(0)
  ROOT %ar = f32[32,64]{1,0} all-reduce(%p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%add
}
"""
    )
    g = graph_from_text(text)
    s = load_slice("v5e:2x4")
    times = {}
    for ids in [(0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 3, 2, 4, 5, 7, 6), (0, 7, 2, 5, 4, 3, 6, 1)]:
        order = DeviceOrder.from_physical_ids(ids, mesh_shape=(8,), slice_=s)
        r = replay(g, s, order)
        groups = [[s.coord_of(ids[d]) for d in grp] for grp in ((0, 1, 2, 3), (4, 5, 6, 7))]
        plan = collective_flows(
            "all-reduce", groups, buffer_bytes=float(SHARD_BYTES), id_prefix="x", slice_=s
        )
        assert r.step_time_s == pytest.approx(simulate(s, plan.nodes).makespan_s, rel=1e-12)
        times[ids] = r.step_time_s
    # a ring order along neighbours beats a placement that scatters each group
    assert times[(0, 1, 3, 2, 4, 5, 7, 6)] < times[(0, 7, 2, 5, 4, 3, 6, 1)]


def test_opaque_rules() -> None:
    q = Shape("bf16", (2, 12, 4096, 128))
    k = Shape("bf16", (2, 12, 32768, 128))
    mask = Shape("s8", (1, 8, 64))
    splash = OpaqueNode(
        0,
        "splash_mha_fwd",
        "tpu_custom_call",
        "jit(step)/splash",
        "c",
        1,
        0,
        (mask, mask, q, k, k),
        q,
        1,
        (),
    )
    flops = 4 * 2 * 12 * 4096 * 32768 * 128  # head_dim 128 fills the 128-wide v5e MXU
    assert C.mxu_tile == 128
    launch_s = C.kernel_overhead_s  # every kernel pays it (sim/compute.py)
    assert opaque_cost_s(splash, V5E) == pytest.approx(
        flops / (V5E.bf16_flops_per_s * C.attention_eff) + launch_s
    )
    a, b, out = Shape("bf16", (512, 4096)), Shape("bf16", (4096, 512)), Shape("bf16", (512, 512))
    mm = OpaqueNode(
        1, "online-softmax", "tpu_custom_call", "online-softmax", "c", 1, 0, (a, b), out, 1, ()
    )
    hbm = V5E.hbm_bandwidth_bytes_per_s * C.hbm_efficiency
    mm_flops_s = 2 * 512 * 4096 * 512 / (V5E.bf16_flops_per_s * C.matmul_efficiency)
    mm_bytes_s = (a.size_bytes + b.size_bytes + out.size_bytes) / hbm
    assert opaque_cost_s(mm, V5E) == pytest.approx(max(mm_flops_s, mm_bytes_s) + launch_s)
    other = OpaqueNode(2, "k", "tpu_custom_call", "", "c", 1, 0, (a,), a, 1, ())
    assert opaque_cost_s(other, V5E) == pytest.approx(2 * a.size_bytes / hbm + launch_s)
    # On a 256-wide MXU, Q.K^T contracts 128 of 256 rows: the attention FLOPs cost 1.5x.
    v6e = load_chip("v6e")
    # A splash call is priced as splash whatever the generation's default kernel.
    eta_splash = dict(v6e.compute.attention_efficiency)["splash"]
    assert v6e.compute.attention_kernel != "splash" and eta_splash != v6e.compute.attention_eff
    ratio = opaque_cost_s(splash, v6e) * v6e.bf16_flops_per_s * eta_splash / flops
    assert v6e.compute.mxu_tile == 256 and ratio == pytest.approx(1.5)


def test_wrong_device_count_is_a_placement_error() -> None:
    s, order = _order("v5e:2x2", 4)
    with pytest.raises(PlacementError, match="runs on 2 devices"):
        replay(graph_from_text(SYNC), s, order)  # type: ignore[arg-type]


@pytest.mark.slow
def test_replay_of_a_compiled_transformer_is_consistent() -> None:
    from tests.aoizora.hlo import compiled

    fixture = compiled.transformer_4x4()
    g = graph_from_text(fixture.text)
    s = load_slice("v5e:4x4")
    order = DeviceOrder.identity(mesh_shape=fixture.mesh_shape, slice_=s)
    r = replay(g, s, order)  # its speed is benchmarks/hlo_bench.py's figure
    assert len(r.collectives) == len(g.collectives)
    assert r.step_time_s >= r.compute_s > 0
    assert {sim_kind(c) for c in g.collectives} <= {"all-gather", "all-reduce", "reduce-scatter"}
    assert any(c.scatter for c in g.collectives)
    exposed = sum(t.total_exposed_s for t in r.collectives)
    assert exposed <= r.step_time_s
    # deterministic: the same input gives the same floats
    assert replay(g, s, order).step_time_s == r.step_time_s
