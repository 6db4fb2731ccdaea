"""Set-decided collectives (aoizora/rank/set_bounds.py), checked against leaves and replays.

- on every node of small trees, each set-decided collective's node bound is at most
  its bound at every leaf below, and equal to it once its span axes all have a set;
- on random inner nodes of v5e:8x8 and v5e:16x16 trees, the node bound is at most the
  exact Q2 (the full replay on 8x8) of random leaves below;
- collectives whose flows follow the logical order are not set-decided.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.space import Node, PlacementSpace
from aoizora.rank.bound import LinkCapacities, ideal_lower_bound, plan_lower_bound
from aoizora.rank.bounds_of_nodes import NodeBounds, collective_shapes, traffic_order
from aoizora.rank.exact import ExactQ2
from aoizora.rank.set_bounds import (
    all_sub_axes,
    candidate_sets,
    is_set_decided,
    is_span_decided,
)
from aoizora.replay import replay
from sim.collectives import collective_flows
from sim.engine import simulate
from sim.topology import load_slice, parse_slice_spec
from tests.aoizora.synthetic import mesh_program
from tests.aoizora.test_rank import _walk  # every node of a tree, roots first


def _decided(bounds: NodeBounds, node: Node) -> dict[int, tuple[float, bool]]:
    """Each decided collective's node bound, and whether it is exact at this node."""
    every = all_sub_axes(node)
    chosen = {c.axis for c in node.chosen}
    out: dict[int, tuple[float, bool]] = {}
    for sh in bounds.shapes:
        cid = sh.collective.id
        if cid in bounds._set_key:
            value = bounds._set_bound(sh, bounds._set_key[cid], node, every)
            out[cid] = (value, len(candidate_sets(bounds.space, node, sh.span)) == 1)
        elif cid in bounds._span_key and sh.span <= chosen:
            key = bounds._span_key[cid]
            out[cid] = (bounds.sets.placed_bound(sh.collective, key, node, sh.span), True)
    for cid, (value, exact) in _pending(bounds, node).items():
        out[cid] = (value, exact)
    return out


def _pending(bounds: NodeBounds, node: Node) -> dict[int, tuple[float, bool]]:
    """Each pending-decided collective's bound at ``node`` (the least over its children):
    order-free ones by pattern, permutes by the batched bound."""
    pending = bounds.space.pending_axis(node)
    if pending is None:
        return {}
    got = bounds._pending_values(node, pending, frozenset(c.axis for c in node.chosen))
    if got is None:
        return {}
    least = got.least()
    return {
        sh.collective.id: (least[key], False)
        for sh in bounds.shapes
        if (key := bounds._span_key.get(sh.collective.id)) in least
    }


@pytest.mark.parametrize(
    ("name", "shape", "directions"),
    [
        ("v5e:2x4", (2, 4), False),
        ("v5e:2x4", (2, 2, 2), True),
        ("v5e:4x4", (4, 4), False),
        ("v5e:4x4", (2, 2, 4), False),
        ("v5e:4x4", (4, 2, 2), False),
        ("v5e:2x4", (4, 2), True),
        ("tpu7x:2x2x1", (2, 4), False),
        ("tpu7x:2x2x1", (4, 2), False),
    ],
)
def test_a_set_bound_is_below_every_leaf_and_exact_once_the_set_is_known(
    name: str, shape: tuple[int, ...], directions: bool
) -> None:
    s = load_slice(name)
    graph = mesh_program(shape, scale=4, halves=True)
    space = PlacementSpace(shape, s, directions=directions)
    bounds = NodeBounds(graph, space)
    assert bounds._set_key and bounds._span_key  # the synthetic program has both kinds
    pending_checked = 0
    by_id = {sh.collective.id: sh for sh in bounds.shapes}
    leaf_values: dict[tuple[int, ...], dict[int, float]] = {}
    checked = exact = 0
    spans = set()
    for node in _walk(space):
        if space.is_leaf(node):
            continue
        mine = _decided(bounds, node)
        pending_checked += len(_pending(bounds, node))
        for leaf in space.leaves(node):
            ids = space.physical_ids(leaf)
            if ids not in leaf_values:
                rows = [tuple(r) for r in space.coords(leaf).tolist()]
                leaf_values[ids] = {c: bounds._plan(sh.collective, rows, sh)
                                    for c, sh in by_id.items() if sh.group_size > 1}  # fmt: skip
            for c, (value, is_exact) in mine.items():
                at_leaf = leaf_values[ids][c]
                assert value <= at_leaf * (1 + 1e-12), (node, c)
                checked += 1
                if is_exact:
                    assert value == pytest.approx(at_leaf, rel=1e-12), (node, c)
                    exact += 1
                    spans.add(c in bounds._span_key)
    assert checked > 0 and exact > 0 and spans == {False, True}
    assert pending_checked > 0 or shape[0] < 4  # halves: parts of an axis of 4 or more


def _random_inner(space: PlacementSpace, rng: random.Random) -> Node:
    """A random inner node: a random root, then random children for a random depth."""
    node = rng.choice([r for r in space.roots() if not space.is_leaf(r)])
    for _ in range(rng.randrange(2 * len(space.axis_order))):
        kids = [k for k in space.children(node) if not space.is_leaf(k)]
        if not kids:
            break
        node = rng.choice(kids)
    return node


@pytest.mark.parametrize(
    ("name", "shape", "leaves"),
    [("v5e:8x8", (4, 16), 3), ("v5e:8x8", (2, 8, 4), 3), ("v5e:16x16", (2, 64, 2), 1),
     ("v5e:8x8", (16, 4), 3), ("v5e:8x8+wrap", (8, 8), 3)],
)  # fmt: skip
def test_random_nodes_of_big_trees_are_bounded_below_their_leaves(
    name: str, shape: tuple[int, ...], leaves: int
) -> None:
    s = parse_slice_spec(name)
    graph = mesh_program(shape, scale=2, halves=True)  # halves: axes of 4 or more
    order = traffic_order(collective_shapes(graph, shape), shape)
    space = PlacementSpace(shape, s, axis_order=order)
    bounds = NodeBounds(graph, space)
    exact = ExactQ2(graph, s)
    rng = random.Random(28)
    tight = 0
    # Random inner nodes, and set nodes of the first axis placed (where the pending-axis
    # bound of the halves' all-to-alls applies).
    first = [k for r in space.roots() if not space.is_leaf(r) for k in space.children(r)]
    nodes = [_random_inner(space, rng) for _ in range(6)] + rng.sample(first, 3)
    for node in nodes:
        node_bound = bounds.bound(node)
        for i in range(leaves):
            leaf = space.random_leaf(rng, node)
            ids = space.physical_ids(leaf)
            order_ = DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=s)
            q2 = exact.step_time(order_)
            # the full replay too, of a node's first leaf, where it takes under a second
            # (test_rank checks the exact shortcut against it leaf by leaf)
            if len(ids) <= 64 and i == 0:
                assert q2 == pytest.approx(replay(graph, s, order_).step_time_s, rel=1e-9)
            assert node_bound <= q2 * (1 + 1e-12), space.label(leaf)
            assert bounds.bound(leaf) <= q2 * (1 + 1e-12)
            tight += node_bound >= 0.5 * q2
    assert tight > 0
    assert bounds.pending.patterns_bounded > 0 or not bounds._pending


def test_only_whole_fiber_groups_under_auto_are_set_decided() -> None:
    shape = (2, 4)
    fibers = [[0, 1, 2, 3], [4, 5, 6, 7]]
    span = frozenset({1})
    assert is_set_decided("all-gather", fibers, [], span, shape, None)
    assert is_set_decided("all-to-all", fibers, [], span, shape, {"all-gather": "ring"})
    # a named ring walks the replica group's order
    assert not is_set_decided("all-gather", fibers, [], span, shape, "ring")
    # pairs follow the logical order
    assert not is_set_decided("collective-permute", [], [(0, 1)], span, shape, None)
    # groups that are part of a fiber: which part depends on the axis's order
    halves = [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert not is_set_decided("all-gather", halves, [], span, shape, None)
    # groups that miss some fibers: which fibers depends on the other axes
    assert not is_set_decided("all-gather", fibers[:1], [], span, shape, None)
    # ... but part-fiber groups repeating one pattern are decided once the span is placed
    assert is_span_decided(halves, [], span, shape)
    assert is_span_decided([], [(0, 1), (4, 5)], span, shape)
    assert not is_span_decided([], [(0, 1), (5, 6)], span, shape)  # two patterns
    assert not is_span_decided([], [(0, 1)], span, shape)  # one off-span position only
    assert not is_span_decided([[0, 1], [2, 3], [4, 5, 6, 7]], [], span, shape)


@pytest.mark.parametrize(
    ("name", "wrap", "n"),
    [("v5e:2x4", False, 3), ("v5e:2x4", False, 4), ("v5e:4x4", False, 4), ("v5e:4x4", False, 5),
     ("v5e:4x4", True, 4), ("v5e:4x4", True, 6), ("v5e:1x8", False, 4)],
)  # fmt: skip
def test_the_all_to_all_bound_holds_on_every_member_set(name: str, wrap: bool, n: int) -> None:
    # Every set of n chips (each is some completion's group): the one-hop bound with
    # ceil((n - 1) / W) blocks on one first link is at most the group's own bound
    # (plan_lower_bound of its flows, itself below the engine), and the engine's time.
    s = load_slice(name, wraparound=True) if wrap else load_slice(name)
    net = LinkCapacities(s)
    size = 4.5e6
    ideal = ideal_lower_bound("all-to-all", n, size, hops=1, net=net)
    tight = math.inf
    chips = sorted(itertools.product(*(range(k) for k in s.shape)))
    for members in itertools.combinations(chips, n):
        plan = collective_flows("all-to-all", [list(members)], buffer_bytes=size,
                                id_prefix="a", slice_=s)  # fmt: skip
        own = plan_lower_bound(plan, net) - s.chip.collective_overhead_s
        assert ideal <= own * (1 + 1e-12), members
        tight = min(tight, own)
    for members in list(itertools.combinations(chips, n))[::97]:  # a sample in the engine
        plan = collective_flows("all-to-all", [list(members)], buffer_bytes=size,
                                id_prefix="a", slice_=s)  # fmt: skip
        ran = simulate(s, plan.nodes).makespan_s - s.chip.collective_overhead_s
        assert ideal <= ran * (1 + 1e-12), members
    # and on slices without wrap-around it is attained by some set (a 2x2 block)
    if not wrap and s.shape[0] > 1 and n == 4:
        assert ideal == pytest.approx(tight, rel=1e-12)


def test_a_group_listed_in_another_order_is_another_pattern() -> None:
    # Named ring algorithms walk groups as listed: the same set in another order at
    # another off-span position would put other flows there.
    assert not is_span_decided([[0, 1], [2, 3], [5, 4], [6, 7]], [], frozenset({1}), (2, 4))


@pytest.mark.parametrize(
    ("name", "shape", "directions"),
    [("v5e:4x4", (4, 4), False), ("v5e:2x4", (4, 2), True), ("v5e:8x8", (8, 8), False),
     ("tpu7x:2x2x1", (4, 2), False)],
)  # fmt: skip
def test_pending_values_are_every_childs_placed_bound(
    name: str, shape: tuple[int, ...], directions: bool
) -> None:
    """Brute force: every child's placed bound, one by one (no patterns shared), equals
    its entry in the pending values -- the order-free all-to-alls' by pattern, the
    permute's (twins: two copies) by the batched numpy bound."""
    s = load_slice(name)
    space = PlacementSpace(shape, s, directions=directions)
    graph = mesh_program(shape, halves=True, twins=True)
    bounds = NodeBounds(graph, space)
    fresh = NodeBounds(graph, space)  # its own caches
    assert len(bounds._pending) == 2  # the two part-axis all-to-alls
    assert [p.copies for p in bounds._permutes.values()] == [(1, 2)]  # the ring and its twin
    checked = {"free": 0, "permute": 0}
    for root in space.roots():
        for node in space.children(root):
            pending = space.pending_axis(node)
            if pending is None:
                continue
            kids = list(space.children(node))
            assert space.order_count(node) == len(kids)
            got = bounds._pending_values(node, pending, frozenset(c.axis for c in node.chosen))
            if got is None:
                continue
            assert got.children == len(kids)
            for sh in fresh.shapes:
                key = fresh._span_key.get(sh.collective.id)
                if key is None or got.of(key) is None:
                    continue
                for copies in (1, 2) if sh.collective.pairs else (1,):
                    each = [
                        fresh._plan(sh.collective, _rows(space, k), sh, copies=copies)
                        if sh.collective.pairs
                        else fresh.sets.placed_bound(sh.collective, key, k, sh.span)
                        for k in kids
                    ]
                    assert got.of(key, copies=copies) == pytest.approx(each, rel=1e-12)
                checked["permute" if sh.collective.pairs else "free"] += 1
    assert checked["free"] > 0 and checked["permute"] > 0
    # Children sharing a pattern were bounded once.
    assert 0 < bounds.pending.patterns_bounded < bounds.pending.orders_visited


def _rows(space: PlacementSpace, node: Node) -> list[tuple[int, ...]]:
    """Chips of one completion below ``node`` (any: a placed permute's flows are the same)."""
    leaf = next(space.leaves(node))
    return [tuple(r) for r in space.coords(leaf).tolist()]


@pytest.mark.parametrize(("name", "shape"), [("v5e:4x4", (4, 4)), ("v5e:4x4+wrap", (8, 2))])
def test_the_childrens_timelines_bound_tighter_than_each_collective_alone(
    name: str, shape: tuple[int, ...]
) -> None:
    """At a pending node, the least timeline over the children (each child's own bounds
    together) is at least the timeline of each collective's least, above it somewhere
    (no child gives every collective its least), and below every leaf's replay under it."""
    s = parse_slice_spec(name)
    graph = mesh_program(shape, scale=8, halves=True, twins=True)
    order = traffic_order(collective_shapes(graph, shape), shape)
    space = PlacementSpace(shape, s, axis_order=order)
    bounds = NodeBounds(graph, space)
    apart = NodeBounds(graph, space)
    apart._over_children = lambda d, j, _: apart.timeline.step_time(d, j)  # type: ignore[method-assign]
    exact = ExactQ2(graph, s)
    raised = 0
    for root in space.roots():
        for node in space.children(root):
            if node.pending is None:
                continue
            together, alone = bounds.bound(node), apart.bound(node)
            assert together >= alone * (1 - 1e-12)
            raised += together > alone * (1 + 1e-9)
            if raised == 1 and together > alone * (1 + 1e-9):
                for leaf in itertools.islice(space.leaves(node), 0, None, 7):
                    o = DeviceOrder.from_physical_ids(
                        space.physical_ids(leaf), mesh_shape=shape, slice_=s
                    )
                    assert together <= exact.step_time(o) * (1 + 1e-12)
    assert raised > 0
    assert bounds.timelines_over_children > 0
