"""Routing invariants (Hypothesis) plus an independent shortest-path oracle."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import RoutingError
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
        ((2, 0), (0, 0), None, "source coordinate (2, 0) is outside slice v5e:2x4"),
        ((0, 0), (0, 4), None, "destination coordinate (0, 4) is outside"),
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
