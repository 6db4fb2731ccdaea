"""The ring (and all-to-all) schedule in arrays equals the flow-by-flow loops, bit for bit.

:func:`aoizora.rank.rings.ring_schedule` stands in for building a ring
collective's flows in the lower bound (:func:`plan_lower_bound`) and in the
exact closed form (:meth:`ExactQ2._closed_form`): on random groups of random
slices (wrapped or not, one or two devices a chip, every ring kind, both
ring algorithms, pairwise all-to-all) both must give exactly the same floats, and the overlap
test the same verdict.
"""

from __future__ import annotations

import random

import pytest

from aoizora.rank.bound import (
    LinkCapacities,
    collective_lower_bound,
    ideal_lower_bound,
    plan_lower_bound,
)
from aoizora.rank.exact import _TOUCH_REL, ExactQ2
from aoizora.rank.rings import ring_schedule
from aoizora.replay import collective_plan
from sim.collectives import ALGORITHMS, CollectivePlan, collective_flows, group_plans
from sim.engine import Flow
from sim.topology import Slice, load_slice
from tests.aoizora.synthetic import mesh_program

SLICES = [("v5e:4x4", False), ("v5e:4x4", True), ("v5e:2x4", False), ("v5e:8x8", False),
          ("tpu7x:2x2x1", False)]  # fmt: skip
KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")


def _slice(name: str, wrap: bool) -> Slice:
    return load_slice(name, wraparound=True) if wrap else load_slice(name)


def _random_groups(rng: random.Random, s: Slice) -> list[list[tuple[int, ...]]]:
    chips = [c for c in s.coords for _ in range(s.chip.devices_per_chip)]
    rng.shuffle(chips)
    size = rng.choice([n for n in (2, 3, 4, 8) if n <= len(chips)])
    count = rng.randint(1, max(1, len(chips) // size))
    return [chips[g * size : (g + 1) * size] for g in range(count)]


@pytest.mark.parametrize(("name", "wrap"), SLICES)
def test_ring_schedule_equals_the_flow_by_flow_bound_and_closed_form(name: str, wrap: bool) -> None:
    s = _slice(name, wrap)
    rng = random.Random(name + str(wrap))
    net = LinkCapacities(s)
    exact = ExactQ2(mesh_program((2,), scale=1), s)
    verdicts = set()
    for trial in range(60):
        kind = KINDS[trial % 4]
        algorithm = rng.choice([None, "ring", "bidir_ring"] if kind != "all-to-all" else [None])
        groups = _random_groups(rng, s)
        size = rng.choice([0.0, 3e5, 4.5e6, 7e7])
        plan = collective_flows(kind, groups, buffer_bytes=size, algorithm=algorithm,
                                id_prefix="c", slice_=s)  # fmt: skip
        assert group_plans(kind, groups, algorithm=algorithm, slice_=s) == plan.groups
        bound = ring_schedule(kind, groups, buffer_bytes=size, slice_=s, route=net.route,
                              capacity=net.capacity, algorithm=algorithm)  # fmt: skip
        assert bound is not None
        assert max(bound.done_s, bound.link_bound_s(net.capacity)) == plan_lower_bound(plan, net)
        ring = ring_schedule(kind, groups, buffer_bytes=size, slice_=s, route=exact._route,
                             capacity=exact.caps.capacity, algorithm=algorithm)  # fmt: skip
        assert ring is not None
        closed = exact._closed_form(plan)
        verdicts.add(closed is None)
        assert ring.overlaps(touch_rel=_TOUCH_REL) == (closed is None)
        if closed is not None:
            assert ring.done_s == closed
        links = {r for f in plan.flows if f.size_bytes > 0 for r in exact._route(f.src, f.dst)}
        assert ring.resources() == links
    assert verdicts == {True, False}  # both the closed form and the engine's case were met


@pytest.mark.parametrize("shape", [(2, 4), (8,)])
def test_collective_lower_bound_equals_the_plan_bound_for_every_collective(
    shape: tuple[int, ...],
) -> None:
    s = load_slice("v5e:2x4")
    net = LinkCapacities(s)
    rng = random.Random(3)
    graph = mesh_program(shape, scale=8, same_axis=True)
    kinds = set()
    for _ in range(5):
        coords = list(s.coords)
        rng.shuffle(coords)
        for c in graph.collectives:
            kinds.add(c.kind)
            plan = collective_plan(c, coords, slice_=s, id_prefix="b")
            assert collective_lower_bound(c, coords, net) == plan_lower_bound(plan, net)
    assert "collective-permute" in kinds and len(kinds) > 1
    assert ring_schedule("collective-permute", [], buffer_bytes=4e6, slice_=s,
                         route=net.route, capacity=net.capacity) is None  # fmt: skip
    assert (
        ring_schedule(
            "all-gather",
            [list(s.coords)[:4]],
            buffer_bytes=4e6,
            slice_=s,
            route=net.route,
            capacity=net.capacity,
            algorithm="bidir_line",
        )
        is None
    )


def _longest_path(plan: CollectivePlan, latency_s: float, capacity: float) -> float:
    """The reference: every flow's contention-free time, node by node."""
    finish: dict[str, float] = {}
    for node in plan.nodes:
        ready = max([node.start_s, *(finish.get(d, 0.0) for d in node.after)])
        if isinstance(node, Flow):
            finish[node.id] = ready + latency_s + node.size_bytes / capacity
        else:
            finish[node.id] = ready + node.duration_s
    return finish[plan.done_id]


@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-reduce", "all-to-all",
                                  "collective-permute"])  # fmt: skip
def test_ideal_bound_equals_the_longest_path_of_the_flows(kind: str) -> None:
    net = LinkCapacities(load_slice("v5e:4x4"))
    for n in range(2, 10) if kind != "collective-permute" else (2,):
        for hops in (1, 2, 3):
            for size in (0.0, 1e3, 4.5e6, 3.3e7):
                members = [(i,) for i in range(n)]
                paths = []
                for algorithm in ALGORITHMS[kind][1:]:  # auto picks one of the others
                    if kind == "collective-permute":
                        plan = collective_flows(kind, (), pairs=[(members[0], members[1])],
                                                buffer_bytes=size, algorithm=algorithm,
                                                id_prefix="b")  # fmt: skip
                    else:
                        plan = collective_flows(kind, [members], buffer_bytes=size,
                                                algorithm=algorithm, id_prefix="b")  # fmt: skip
                    latency = hops * net.hop_latency_s
                    paths.append(_longest_path(plan, latency, net.max_capacity))
                got = ideal_lower_bound(kind, n, size, hops=hops, net=net)
                if kind == "all-to-all":
                    # ... times the blocks one first link must carry (tested on every
                    # member set of small slices in tests/aoizora/test_set_bounds.py)
                    per_link = -(-(n - 1) // net.first_hop_directions)
                    latency = hops * net.hop_latency_s
                    assert got == latency + per_link * (size / n) / net.max_capacity
                    assert got >= min(paths)
                    continue
                assert got == min(paths)
