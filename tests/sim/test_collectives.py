"""Collectives as flows: flow structure per algorithm and closed-form timings."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from sim.collectives import ALGORITHMS, DEFAULT_ALGORITHM, collective_flows
from sim.coords import Coord
from sim.engine import Compute, Flow, simulate
from sim.errors import CollectiveError
from sim.layout import folded, snake_cycle, snake_path
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
        "all-gather",
        [[(i,) for i in range(n)]],
        buffer_bytes=16e6,
        algorithm="bidir_ring",
        id_prefix="ag",
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
    assert plan.algorithm == "auto" and plan.groups == () and len(plan.flows) == 3
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
    assert set(DEFAULT_ALGORITHM.values()) == {"auto"}
    assert all(DEFAULT_ALGORITHM[k] in ALGORITHMS[k] for k in ALGORITHMS)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"kind": "broadcast"}, "valid kinds: all-gather"),
        ({"algorithm": "tree"}, "valid for all-gather: auto, bidir_ring, bidir_line, ring"),
        ({"kind": "all-to-all", "algorithm": "ring"}, "valid for all-to-all: auto, pairwise"),
        ({"groups": [[(0.0, 0), (1, 0)]]}, "is not a chip coordinate"),
        ({"overhead_s": -1.0}, "overhead_s -1.0 must be finite and >= 0"),
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


@pytest.mark.parametrize(
    ("name", "group", "fragment"),
    [
        ("v5e:2x4", [(0, 0), (0, 0)], "chip (0, 0) 2 times; a chip of v5e:2x4 hosts 1 device"),
        ("tpu7x:2x2x1", [(0, 0, 0)] * 3, "(0, 0, 0) 3 times; a chip of tpu7x:2x2x1 hosts 2"),
    ],
)
def test_a_chip_appears_once_per_device(name: str, group: list[Coord], fragment: str) -> None:
    s = load_slice(name)
    with pytest.raises(CollectiveError, match=re.escape(fragment)):
        collective_flows("all-gather", [group], buffer_bytes=1e6, id_prefix="c", slice_=s)
    # One entry per device is a group: the two cores of a tpu7x chip.
    if s.chip.devices_per_chip == 2:
        plan = collective_flows(
            "all-gather", [group[:2]], buffer_bytes=1e6, id_prefix="c", slice_=s
        )
        assert all(f.src == f.dst for f in plan.flows) and plan.flows


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


# -- the algorithms TPUs run, with hop latency on (docs/simulator.md) ---------

STEPS = {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 2}


@pytest.mark.parametrize("kind", list(STEPS))
@pytest.mark.parametrize("n", [2, 4, 5, 8, 16])
def test_auto_on_a_line_is_the_folded_ring(kind: str, n: int) -> None:
    # No wrap-around: the ring 0, 2, 4, ..., 5, 3, 1 crosses at most two links
    # per hop and each link carries one ring flow per direction and step:
    # (n-1) (2 latency + B/(n bw)) per phase (n = 2: one link, 1 latency);
    # whatever order the replica group lists. (n = 3 is faster: there every
    # link pairs a 2-hop flow with a 1-hop one that starts draining earlier.)
    s = ring_slice(n, wrap=False)
    group = [(i,) for i in range(n)]
    shuffled = group[1::2] + group[::2]
    plan = collective_flows(kind, [shuffled], buffer_bytes=8e6, id_prefix="c", slice_=s)
    assert plan.groups[0].algorithm == "bidir_ring"
    assert plan.groups[0].members == tuple(group[i] for i in folded(range(n)))
    hops = 2 if n > 2 else 1
    want = STEPS[kind] * (n - 1) * (hops * LAT + 8e6 / (n * BW))
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("kind", list(STEPS))
@pytest.mark.parametrize("n", [2, 3, 4, 7, 16])
def test_bidir_line_closed_form(kind: str, n: int) -> None:
    # Every chunk both ways along the line, one link per step: the
    # scaling-book's edge-to-edge account, (n-1) (latency + B/(n bw)).
    s = ring_slice(n, wrap=False)
    group = [[(i,) for i in range(n)]]
    plan = collective_flows(
        kind, group, buffer_bytes=8e6, algorithm="bidir_line", id_prefix="c", slice_=s
    )
    assert plan.groups[0].algorithm == "bidir_line"
    want = STEPS[kind] * (n - 1) * (LAT + 8e6 / (n * BW))
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(want, rel=1e-12)


def test_group_order_ring_on_a_line_pays_the_closing_hop() -> None:
    # The 16-chip, 1 MB all-gather: in replica-group order the closing
    # hop crosses 15 links and every step waits for it; folded, each step
    # takes 2 latencies + B/(n bw): 15 * 3.39 us = 50.8 us.
    s = ring_slice(16, wrap=False)
    group = [[(i,) for i in range(16)]]
    ring = collective_flows(
        "all-gather", group, buffer_bytes=1e6, algorithm="bidir_ring", id_prefix="r"
    )
    auto = collective_flows("all-gather", group, buffer_bytes=1e6, id_prefix="a", slice_=s)
    t_ring = simulate(s, ring.nodes).makespan_s
    t_auto = simulate(s, auto.nodes).makespan_s
    assert t_auto == pytest.approx(15 * (2 * LAT + 1e6 / (16 * BW)), rel=1e-12)
    assert t_ring > 15 * 15 * LAT > 4 * t_auto


@pytest.mark.parametrize("kind", list(STEPS))
@pytest.mark.parametrize("n", [3, 4, 16])
def test_auto_on_a_wrapped_axis_is_the_physical_ring(kind: str, n: int) -> None:
    s = ring_slice(n, wrap=True)
    group = [(i,) for i in range(n)][::-1]
    plan = collective_flows(kind, [group], buffer_bytes=8e6, id_prefix="c", slice_=s)
    assert plan.groups[0].algorithm == "bidir_ring"
    want = STEPS[kind] * (n - 1) * (LAT + 8e6 / (2 * n * BW))
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    ("shape", "wrap", "group_box", "algorithm"),
    [
        ((2, 4), False, ((0, 2), (0, 4)), "bidir_ring"),  # all 8 chips: a Hamiltonian cycle
        ((4, 4), False, ((0, 4), (0, 4)), "bidir_ring"),
        ((4, 4), False, ((2, 4), (0, 2)), "bidir_ring"),  # a 2x2 block of a bigger slice
        ((2, 2, 2), False, ((0, 2), (0, 2), (0, 2)), "bidir_ring"),
        ((4, 2, 2), True, ((0, 4), (0, 2), (0, 2)), "bidir_ring"),
    ],
)
def test_auto_on_a_box_walks_a_snake(
    shape: tuple[int, ...],
    wrap: bool,
    group_box: tuple[tuple[int, int], ...],
    algorithm: str,
) -> None:
    # A Hamiltonian cycle: one link per ring hop, nothing shared, so with
    # latency on the all-reduce takes 2 (n-1)(latency + B/(2n bw)).
    s = make_slice(shape, wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=LAT)
    group = sorted(
        c for c in s.coords if all(lo <= x < hi for x, (lo, hi) in zip(c, group_box, strict=False))
    )
    n = len(group)
    plan = collective_flows("all-reduce", [group], buffer_bytes=4e6, id_prefix="c", slice_=s)
    assert plan.groups[0].algorithm == algorithm
    walk = plan.groups[0].members
    hops = [
        sum(abs(a - b) for a, b in zip(p, q, strict=False))
        for p, q in zip(walk, walk[1:], strict=False)
    ]
    assert hops == [1] * (n - 1)
    pairs = zip(walk, walk[1:] + walk[:1], strict=True)
    assert all(sum(abs(a - b) for a, b in zip(p, q, strict=True)) == 1 for p, q in pairs)
    want = 2 * (n - 1) * (LAT + 4e6 / (2 * n * BW))
    assert simulate(s, plan.nodes).makespan_s == pytest.approx(want, rel=1e-12)


def test_auto_picks_per_axis_on_v5e_8x16() -> None:
    # v5e:8x16 wraps on its 16 axis only: groups along y are rings, along x lines.
    s = load_slice("v5e:8x16")
    along_y = collective_flows(
        "all-gather",
        [[(x, y) for y in range(16)] for x in range(8)],
        buffer_bytes=1e6,
        id_prefix="y",
        slice_=s,
    )
    along_x = collective_flows(
        "all-gather",
        [[(x, y) for x in range(8)] for y in range(16)],
        buffer_bytes=1e6,
        id_prefix="x",
        slice_=s,
    )
    arc = collective_flows(
        "all-gather", [[(0, y) for y in range(4)]], buffer_bytes=1e6, id_prefix="a", slice_=s
    )
    assert {g.algorithm for g in along_y.groups} == {"bidir_ring"}
    assert along_y.groups[0].members == tuple((0, y) for y in range(16))
    assert along_x.groups[0].members == tuple((x, 0) for x in folded(range(8)))
    assert arc.groups[0].members == ((0, 0), (0, 2), (0, 3), (0, 1))  # an arc: folded


def test_odd_box_is_a_folded_snake() -> None:
    s = make_slice((3, 3), link_bandwidth_bytes_per_s=BW, hop_latency_s=LAT)
    plan = collective_flows(
        "all-gather", [list(s.coords)], buffer_bytes=1e6, id_prefix="c", slice_=s
    )
    snake = [(x, y) for y, xs in enumerate([range(3), range(2, -1, -1), range(3)]) for x in xs]
    assert plan.groups[0].members == tuple(snake[i] for i in folded(range(9)))


def test_overhead_comes_from_the_chip_and_delays_the_first_flows() -> None:
    s = make_slice([4], link_bandwidth_bytes_per_s=BW, hop_latency_s=LAT)
    chip = dataclasses.replace(s.chip, collective_overhead_s=3e-6)
    s2 = make_slice([4], chip=chip)
    group = [[(i,) for i in range(4)]]
    plain = collective_flows("all-gather", group, buffer_bytes=4e6, id_prefix="c", slice_=s)
    paid = collective_flows(
        "all-gather", group, buffer_bytes=4e6, id_prefix="c", slice_=s2, after=("x",)
    )
    assert plain.overhead_s == 0.0 and paid.overhead_s == 3e-6
    assert paid.nodes[0] == Compute("c/overhead", None, 3e-6, 0.0, ("x",))
    t_plain = simulate(s, plain.nodes).makespan_s
    t_paid = simulate(s2, [Compute("x", None, 0.0), *paid.nodes]).makespan_s
    assert t_paid == pytest.approx(t_plain + 3e-6, rel=1e-12)


def test_snakes_visit_every_cell_once_through_neighbours() -> None:
    for sides in ([2, 3], [4, 4], [3, 4], [2, 2, 2], [3, 3, 2], [5, 3]):
        for cells, closed in ((snake_path(sides), False), (snake_cycle(sides), True)):
            if cells is None:
                assert math.prod(sides) % 2 == 1
                continue
            assert sorted(cells) == sorted(itertools.product(*[range(n) for n in sides]))
            walk = cells + cells[:1] if closed else cells
            for p, q in zip(walk, walk[1:], strict=False):
                assert sum(abs(a - b) for a, b in zip(p, q, strict=False)) == 1
