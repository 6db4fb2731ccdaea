"""Routing invariants (Hypothesis) plus an independent shortest-path oracle."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.errors import CollectiveError, GraphError, RoutingError, TopologyError
from sim.routing import hop_count, route, route_link_ids
from sim.topology import Slice, load_slice, make_slice


@st.composite
def slice_and_pair(
    draw: st.DrawFn,
) -> tuple[Slice, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    dims = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=dims, max_size=dims)))
    wrap = tuple(draw(st.lists(st.booleans(), min_size=dims, max_size=dims)))
    s = make_slice(shape, wraparound=list(wrap), link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    src = tuple(draw(st.integers(0, n - 1)) for n in shape)
    dst = tuple(draw(st.integers(0, n - 1)) for n in shape)
    order = tuple(draw(st.permutations(range(dims))))
    return s, src, dst, order


def expected_length(s: Slice, src: tuple[int, ...], dst: tuple[int, ...]) -> int:
    total = 0
    for a, b, n, w in zip(src, dst, s.shape, s.wraparound, strict=True):
        d = abs(a - b)
        total += min(d, n - d) if w else d
    return total


@given(slice_and_pair())
def test_route_invariants(
    case: tuple[Slice, tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    s, src, dst, order = case
    path = route(s, src, dst, order=order)
    # Length: Manhattan distance without wrap, ring distance per wrapped dimension.
    assert len(path) == expected_length(s, src, dst)
    # A connected walk from src to dst over real neighbour links of the slice.
    here = src
    for link in path:
        assert link.src == here
        assert s.links[s.link_id(link)] == link
        here = link.dst
    assert here == dst
    # Never a wrap link where the slice has none.
    assert all(s.wraparound[link.dim] for link in path if link.wrap)
    # Dimension order: once it moves along a later dimension, never an earlier one.
    positions = [order.index(link.dim) for link in path]
    assert positions == sorted(positions)
    # Each dimension moves one way only (no back-tracking).
    for dim in range(s.num_dims):
        steps = {(lk.dst[dim] - lk.src[dim]) % s.shape[dim] for lk in path if lk.dim == dim}
        assert len(steps) <= 1
    assert list(route_link_ids(s, src, dst, order=order)) == [s.link_id(lk) for lk in path]


@given(slice_and_pair())
def test_route_is_a_shortest_path(
    case: tuple[Slice, tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    # Independent oracle: BFS over the slice's link graph.
    s, src, dst, order = case
    graph = nx.DiGraph([(lk.src, lk.dst) for lk in s.links])
    graph.add_nodes_from(s.coords)
    assert hop_count(s, src, dst, order=order) == nx.shortest_path_length(graph, src, dst)


def test_tie_rule_goes_positive() -> None:
    s = make_slice([4, 4], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    path = route(s, (3, 0), (1, 0))
    assert [(lk.src, lk.dst, lk.wrap) for lk in path] == [
        ((3, 0), (0, 0), True),
        ((0, 0), (1, 0), False),
    ]
    ring2 = make_slice([2], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    assert [lk.wrap for lk in route(ring2, (0,), (1,))] == [False]
    assert [lk.wrap for lk in route(ring2, (1,), (0,))] == [True]


def test_default_order_is_x_then_y_then_z() -> None:
    s = load_slice("v5p:2x2x4")
    assert [lk.dim for lk in route(s, (0, 0, 0), (1, 1, 3))] == [0, 1, 2, 2, 2]
    assert [lk.dim for lk in route(s, (0, 0, 0), (1, 1, 3), order=(2, 0, 1))] == [2, 2, 2, 0, 1]


def test_same_chip_is_the_empty_route() -> None:
    assert route(load_slice("v5e:2x4"), (1, 1), (1, 1)) == ()


@pytest.mark.parametrize(
    ("src", "dst", "order", "fragment"),
    [
        ((2, 0), (0, 0), None, "source coordinate (2, 0) is not a chip of slice v5e:2x4"),
        ((0, 0), (0, 4), None, "destination coordinate (0, 4) is not a chip"),
        ((0, 0), (0, 0, 0), None, "destination coordinate (0, 0, 0)"),
        ((0, 0), (1, 1), (0, 0), "must be a permutation"),
        ((0, 0), (1, 1), (0, 2), "must be a permutation"),
    ],
)
def test_routing_errors(
    src: tuple[int, ...], dst: tuple[int, ...], order: tuple[int, ...] | None, fragment: str
) -> None:
    with pytest.raises(RoutingError) as info:
        route(load_slice("v5e:2x4"), src, dst, order=order)
    assert fragment in str(info.value)


@pytest.mark.parametrize("bad", [(0.0, 0), (0, 1.0), (True, 0), (0, np.float64(1.0)), "01"])
def test_coordinates_are_integers_at_every_entry(bad: object) -> None:
    # Even after the integer twin was routed and cached: (0.0, 0) == (0, 0).
    s = load_slice("v5e:2x4")
    route(s, (0, 0), (1, 1))
    route_link_ids(s, (0, 0), (1, 1))
    for call in (
        lambda: route(s, bad, (1, 1)),  # type: ignore[arg-type]
        lambda: route_link_ids(s, bad, (1, 1)),  # type: ignore[arg-type]
        lambda: hop_count(s, (1, 1), bad),  # type: ignore[arg-type]
        lambda: simulate(s, [Flow("f", bad, (1, 1), 1.0)]),  # type: ignore[arg-type]
    ):
        with pytest.raises(RoutingError, match="must be an int"):
            call()
    with pytest.raises(GraphError, match="must be an int"):
        simulate(s, [Compute("c", bad, 1.0)])  # type: ignore[arg-type]
    with pytest.raises(CollectiveError, match="must be an int"):
        collective_flows("all-gather", [[bad, (1, 1)]], buffer_bytes=1.0, id_prefix="c", slice_=s)
    with pytest.raises(CollectiveError, match="not a chip coordinate"):
        collective_flows("all-gather", [[bad, (1, 1)]], buffer_bytes=1.0, id_prefix="c")
    assert not s.contains(bad)  # type: ignore[arg-type]
    with pytest.raises(TopologyError):
        s.physical_id(bad)  # type: ignore[arg-type]


def test_numpy_integers_are_integers() -> None:
    s = load_slice("v5e:2x4")
    a, b = (np.int64(0), np.int32(0)), (np.int64(1), np.int64(3))
    assert route(s, a, b) == route(s, (0, 0), (1, 3))
    assert s.physical_id(b) == 7
    r = simulate(s, [Flow("f", a, b, 1e6)])  # type: ignore[arg-type]
    assert r.flow("f").src == (0, 0) and r.flow("f").hops == 4


@given(st.integers(2, 8), st.integers(0, 7), st.integers(0, 7))
def test_tie_rule_properties(half: int, a: int, shift: int) -> None:
    # On an even ring of n = 2*half: a route never exceeds half the ring; it
    # goes the positive way exactly when that way is no longer; and the two
    # directions of a half-way pair go opposite ways round (each positive).
    n = 2 * half
    s = make_slice([n], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    src, dst = (a % n,), ((a + shift) % n,)
    path = route(s, src, dst)
    forward = (dst[0] - src[0]) % n
    assert len(path) == min(forward, n - forward) <= half
    if path:
        positive = (path[0].dst[0] - path[0].src[0]) % n == 1
        assert positive == (forward <= n - forward)
    if forward == half:
        back = route(s, dst, src)
        assert {lk.src for lk in path} | {lk.src for lk in back} == set(s.coords)


def test_wrapped_length_two_axis_uses_both_cables_both_ways() -> None:
    # Two chips joined by two cables: each direction pools both, at twice the
    # bandwidth, and every one of the four directed links carries traffic.
    s = make_slice(
        [2, 2], wraparound=[True, False], link_bandwidth_bytes_per_s=1e9, hop_latency_s=0.0
    )
    flows = [Flow("a", (0, 0), (1, 0), 2e6), Flow("b", (1, 0), (0, 0), 2e6)]
    r = simulate(s, flows)
    assert r.makespan_s == pytest.approx(2e6 / 2e9, rel=1e-12)
    x_links = [lk for lk in r.links if lk.dim == 0 and lk.src[1] == 0]
    assert len(x_links) == 4 and all(lk.bytes_carried == 1e6 for lk in x_links)
