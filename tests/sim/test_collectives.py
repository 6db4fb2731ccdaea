"""Collectives as flows: flow structure per algorithm and closed-form timings."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from sim.collectives import ALGORITHMS, DEFAULT_ALGORITHM, collective_flows
from sim.engine import Compute, Flow, simulate
from sim.errors import CollectiveError
from sim.topology import Slice, load_slice, make_slice

BW = 4.5e10
LAT = 1e-6


def ring_slice(n: int, *, wrap: bool) -> Slice:
    return make_slice([n], wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=LAT)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize(
    ("kind", "algorithm", "flows_per_group", "chunk_fraction", "total_fraction"),
    [
        # (kind, algorithm, flow count(n), flow size / B, injected bytes / B per group)
        ("all-gather", "ring", lambda n: n * (n - 1), lambda n: 1 / n, lambda n: n - 1),
        (
            "all-gather",
            "bidir_ring",
            lambda n: 2 * n * (n - 1),
            lambda n: 1 / (2 * n),
            lambda n: n - 1,
        ),
        ("reduce-scatter", "ring", lambda n: n * (n - 1), lambda n: 1 / n, lambda n: n - 1),
        (
            "reduce-scatter",
            "bidir_ring",
            lambda n: 2 * n * (n - 1),
            lambda n: 1 / (2 * n),
            lambda n: n - 1,
        ),
        ("all-reduce", "ring", lambda n: 2 * n * (n - 1), lambda n: 1 / n, lambda n: 2 * (n - 1)),
        (
            "all-reduce",
            "bidir_ring",
            lambda n: 4 * n * (n - 1),
            lambda n: 1 / (2 * n),
            lambda n: 2 * (n - 1),
        ),
        ("all-to-all", "pairwise", lambda n: n * (n - 1), lambda n: 1 / n, lambda n: n - 1),
    ],
)
def test_flow_structure(
    n: int,
    kind: str,
    algorithm: str,
    flows_per_group: Callable[[int], int],
    chunk_fraction: Callable[[int], float],
    total_fraction: Callable[[int], int],
) -> None:
    buffer_bytes = 8.0e6
    groups = [[(i, g) for i in range(n)] for g in range(2)]
    plan = collective_flows(
        kind, groups, buffer_bytes=buffer_bytes, algorithm=algorithm, id_prefix="c", after=("x",)
    )
    assert plan.kind == kind and plan.algorithm == algorithm
    assert len(plan.flows) == 2 * flows_per_group(n)
    for f in plan.flows:
        assert f.size_bytes == pytest.approx(buffer_bytes * chunk_fraction(n))
        assert f.src != f.dst and f.src[1] == f.dst[1]  # stays inside its group
    assert plan.total_bytes == pytest.approx(2 * buffer_bytes * total_fraction(n))
    ids = [node.id for node in plan.nodes]
    assert len(set(ids)) == len(ids)
    join = plan.nodes[-1]
    assert isinstance(join, Compute) and join.id == plan.done_id == "c/done"
    assert join.chip is None and join.duration_s == 0.0
    # Only the first step waits for the collective's own dependencies.
    known = set(ids) | {"x"}
    for node in plan.nodes:
        assert set(node.after) <= known


def test_ring_dependencies_forward_the_received_chunk() -> None:
    plan = collective_flows(
        "all-gather", [[(0,), (1,), (2,)]], buffer_bytes=3.0, algorithm="ring", id_prefix="ag"
    )
    by_id = {f.id: f for f in plan.flows}
    assert by_id["ag/g0/cw/s0/1"].after == ()
    assert by_id["ag/g0/cw/s1/1"].after == ("ag/g0/cw/s0/0", "ag/g0/cw/s0/1")
    assert (by_id["ag/g0/cw/s1/2"].src, by_id["ag/g0/cw/s1/2"].dst) == ((2,), (0,))
    assert plan.nodes[-1].after == ("ag/g0/cw/s1/0", "ag/g0/cw/s1/1", "ag/g0/cw/s1/2")


@pytest.mark.parametrize("n", [3, 4, 8, 16])
def test_bidir_ring_all_gather_on_a_physical_ring_matches_formula(n: int) -> None:
    # Contention-free: each step moves B/(2n) over one hop each way round the
    # ring, so the all-gather takes (n-1) * (latency + B / (2 n bandwidth)).
    s = ring_slice(n, wrap=True)
    buffer_bytes = 16e6
    plan = collective_flows(
        "all-gather", [[(i,) for i in range(n)]], buffer_bytes=buffer_bytes, id_prefix="ag"
    )
    result = simulate(s, plan.nodes)
    want = (n - 1) * (LAT + buffer_bytes / (2 * n * BW))
    assert result.finish_s(plan.done_id) == pytest.approx(want, rel=1e-12)
    # And the unidirectional ring: (n-1) * (latency + B / (n bandwidth)).
    uni = collective_flows(
        "all-gather",
        [[(i,) for i in range(n)]],
        buffer_bytes=buffer_bytes,
        algorithm="ring",
        id_prefix="u",
    )
    assert simulate(s, uni.nodes).makespan_s == pytest.approx(
        (n - 1) * (LAT + buffer_bytes / (n * BW)), rel=1e-12
    )


def test_v5e_full_row_ring_uses_the_wrap_link() -> None:
    s = load_slice("v5e:16x16")
    row = [(x, 3) for x in range(16)]
    plan = collective_flows("all-gather", [row], buffer_bytes=16e6, id_prefix="row")
    result = simulate(s, plan.nodes)
    bw, lat = s.link_bandwidth_bytes_per_s, s.hop_latency_s
    assert result.makespan_s == pytest.approx(15 * (lat + 16e6 / (32 * bw)), rel=1e-12)
    assert any(lk.wrap and lk.bytes_carried > 0 for lk in result.links)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bidir_ring_without_wrap_doubles(n: int) -> None:
    # On a line the closing hop runs back over every link, so each link carries
    # two flows per step: (n-1) * (B/n) / bandwidth with zero latency, the
    # scaling-book's no-wraparound all-gather time.
    s = make_slice([n], link_bandwidth_bytes_per_s=BW, hop_latency_s=0.0)
    plan = collective_flows(
        "all-gather", [[(i,) for i in range(n)]], buffer_bytes=16e6, id_prefix="ag"
    )
    assert simulate(s, plan.nodes).makespan_s == pytest.approx((n - 1) * (16e6 / n) / BW, rel=1e-12)


def test_all_reduce_is_twice_all_gather_when_contention_free() -> None:
    s = ring_slice(6, wrap=True)
    group = [[(i,) for i in range(6)]]
    ag = collective_flows("all-gather", group, buffer_bytes=6e6, id_prefix="ag")
    ar = collective_flows("all-reduce", group, buffer_bytes=6e6, id_prefix="ar")
    assert simulate(s, ar.nodes).makespan_s == pytest.approx(
        2 * simulate(s, ag.nodes).makespan_s,
        rel=1e-12,
    )


def test_all_to_all_pairwise_closed_form_on_two_chips() -> None:
    s = ring_slice(2, wrap=False)
    plan = collective_flows("all-to-all", [[(0,), (1,)]], buffer_bytes=9e6, id_prefix="a")
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(LAT + 4.5e6 / BW, rel=1e-12)


def test_two_devices_of_one_chip_exchange_without_links() -> None:
    # Devices 2c and 2c+1 share chip c (tpu7x): of each device's three B/4 chunks, the one
    # to its on-chip peer is a 0-hop flow; the two to the other chip share one link
    # direction with the other device's two, so 4 x B/4 cross it: LAT + B / BW.
    s = ring_slice(2, wrap=False)
    group = [[(0,), (0,), (1,), (1,)]]
    plan = collective_flows("all-to-all", group, buffer_bytes=8e6, id_prefix="a")
    result = simulate(s, plan.nodes)
    assert result.makespan_s == pytest.approx(LAT + 8e6 / BW, rel=1e-12)
    local = [f for f in plan.flows if f.src == f.dst]
    assert len(local) == 4 and all(result.flow(f.id).finish_s == 0.0 for f in local)


def test_collective_permute_and_later_nodes_wait_for_done() -> None:
    s = load_slice("v5e:2x4")
    plan = collective_flows(
        "collective-permute",
        (),
        pairs=[((0, 0), (1, 0)), ((1, 0), (0, 0)), ((0, 1), (0, 1))],
        buffer_bytes=4.5e6,
        id_prefix="cp",
    )
    assert plan.algorithm == "direct" and len(plan.flows) == 3
    nodes = [*plan.nodes, Compute("next", (0, 0), 1e-6, after=(plan.done_id,))]
    result = simulate(s, nodes)
    flows_end = max(r.finish_s for r in result.flows)
    assert flows_end == pytest.approx(1e-6 + 1e-4, rel=1e-12)
    assert result.finish_s(plan.done_id) == pytest.approx(flows_end)
    assert result.finish_s("next") == pytest.approx(flows_end + 1e-6)


def test_singleton_groups_make_no_flows_and_join_waits_for_after() -> None:
    plan = collective_flows(
        "all-reduce", [[(0, 0)], [(1, 0)]], buffer_bytes=1e6, id_prefix="ar", after=("a", "b")
    )
    assert plan.flows == ()
    assert plan.nodes == (Compute("ar/done", None, 0.0, after=("a", "b")),)


def test_defaults() -> None:
    assert DEFAULT_ALGORITHM == {
        "all-gather": "bidir_ring",
        "reduce-scatter": "bidir_ring",
        "all-reduce": "bidir_ring",
        "all-to-all": "pairwise",
        "collective-permute": "direct",
    }
    assert all(DEFAULT_ALGORITHM[k] in ALGORITHMS[k] for k in ALGORITHMS)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"kind": "broadcast"}, "valid kinds: all-gather"),
        ({"algorithm": "tree"}, "valid for all-gather: bidir_ring, ring"),
        ({"kind": "all-to-all", "algorithm": "ring"}, "valid for all-to-all: pairwise"),
        ({"buffer_bytes": -1.0}, "finite and >= 0"),
        ({"buffer_bytes": math.inf}, "finite and >= 0"),
        ({"groups": [[]]}, "non-empty list"),
        ({"groups": [[0, 1]]}, "is not a chip coordinate"),
        ({"id_prefix": ""}, "non-empty string"),
        ({"after": "x"}, "tuple of node ids"),
        ({"kind": "collective-permute"}, "takes pairs="),
        ({"pairs": [((0, 0), (1, 0))]}, "only for collective-permute"),
    ],
)
def test_bad_collectives(kwargs: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {
        "kind": "all-gather",
        "groups": [[(0, 0), (1, 0)]],
        "buffer_bytes": 1e6,
        "id_prefix": "c",
    }
    args.update(kwargs)
    kind = args.pop("kind")
    groups = args.pop("groups")
    with pytest.raises(CollectiveError) as info:
        collective_flows(kind, groups, **args)
    assert fragment in str(info.value)


def test_plans_compose_into_one_dag() -> None:
    s = load_slice("v5e:2x4")
    rows = [[(0, y), (1, y)] for y in range(4)]
    cols = [[(x, y) for y in range(4)] for x in range(2)]
    first = collective_flows("all-gather", rows, buffer_bytes=1e6, id_prefix="a")
    second = collective_flows(
        "reduce-scatter", cols, buffer_bytes=1e6, id_prefix="b", after=(first.done_id,)
    )
    result = simulate(s, [*first.nodes, *second.nodes])
    start_b = min(r.release_s for r in result.flows if r.id.startswith("b/"))
    assert start_b == pytest.approx(result.finish_s(first.done_id))
    assert isinstance(first.nodes[0], Flow)


@pytest.mark.parametrize("n", [4, 8, 16])
def test_pairwise_all_to_all_on_an_even_ring(n: int) -> None:
    # Positive-way distances 1..n/2 (the tie goes positive) load every link
    # with (n/2)(n/2+1)/2 chunks of B/n: (1 + 2/n) x the scaling-book V/(4 W).
    s = make_slice([n], wraparound=True, link_bandwidth_bytes_per_s=BW, hop_latency_s=0.0)
    buffer_bytes = 8e6
    plan = collective_flows(
        "all-to-all", [[(i,) for i in range(n)]], buffer_bytes=buffer_bytes, id_prefix="a"
    )
    want = (n // 2) * (n // 2 + 1) / 2 * buffer_bytes / (n * BW)
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(want, rel=1e-9)
    scaling_book = n * buffer_bytes / (4 * 2 * BW)
    assert want == pytest.approx((1 + 2 / n) * scaling_book)
