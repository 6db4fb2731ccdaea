"""The engine's incremental max-min updates against full recomputation.

The engine re-solves only the flows an arrival or departure can change
(:mod:`sim.maxmin`). A wrong restriction shows up as wrong finish times, so
these tests replay random DAGs (flows, computes, ``after``) and compare every
node's release and finish with a naive full-recompute replay
(:mod:`tests.sim.dag_oracle`), and check :class:`sim.sharing.LinkSharing`
after every batch of a random update sequence, both lazily and solving every
flow, against textbook progressive filling.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import Compute, Flow, simulate
from sim.maxmin import max_min_rates, progressive_filling, saturation_level
from sim.sharing import LinkSharing
from sim.topology import Slice, make_slice
from tests.sim.dag_oracle import reference_replay
from tests.sim.oracle import check_max_min, reference_max_min
from tests.sim.test_engine import sharing_instance

BW = 1e9


@st.composite
def random_dags(draw: st.DrawFn) -> tuple[Slice, list[Flow | Compute]]:
    shape = tuple(draw(st.lists(st.integers(2, 4), min_size=2, max_size=2)))
    wrap = draw(st.booleans())
    latency = draw(st.sampled_from([0.0, 1e-6]))
    s = make_slice(shape, wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=latency)
    count = draw(st.integers(1, 16))
    nodes: list[Flow | Compute] = []
    for k in range(count):
        earlier = [n.id for n in nodes]
        after = (
            tuple(draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True)))
            if earlier
            else ()
        )
        start = draw(st.sampled_from([0.0, 0.0, 2e-6, 5e-6, 1.3e-5]))
        if draw(st.integers(0, 4)) == 0:
            chip = draw(st.sampled_from([None, *s.coords]))
            duration = draw(st.sampled_from([0.0, 1e-6, 3e-6, 1e-5]))
            nodes.append(Compute(f"c{k}", chip, duration, start_s=start, after=after))
        else:
            src = draw(st.sampled_from(s.coords))
            dst = draw(st.sampled_from(s.coords))
            size = draw(st.sampled_from([0.0, 1e3, 4e3, 1e4, 2.5e4]))
            nodes.append(Flow(f"f{k}", src, dst, size, start_s=start, after=after))
    return s, nodes


def _assert_matches_reference(s: Slice, nodes: list[Flow | Compute]) -> None:
    result = simulate(s, nodes, core="compiled")  # the fast path (test_compiled: == python)
    want = reference_replay(s, nodes)
    got = {r.id: (r.release_s, r.finish_s) for r in result.flows}
    got.update({r.id: (r.release_s, r.finish_s) for r in result.computes})
    assert got.keys() == want.keys()
    for node_id, (release_s, finish_s) in want.items():
        assert got[node_id][0] == pytest.approx(release_s, rel=1e-9, abs=1e-15), node_id
        assert got[node_id][1] == pytest.approx(finish_s, rel=1e-9, abs=1e-15), node_id


@settings(max_examples=80, deadline=None)
@given(random_dags())
def test_dag_finish_times_match_full_recompute_reference(
    case: tuple[Slice, list[Flow | Compute]],
) -> None:
    _assert_matches_reference(*case)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_many_concurrent_flows_match_full_recompute_reference(seed: int) -> None:
    # 40 flows with staggered starts on a 4x4 mesh: many flows drain at once,
    # so the recomputed component is a strict part of the draining set.
    rng = random.Random(seed)
    s = make_slice((4, 4), link_bandwidth_bytes_per_s=BW, hop_latency_s=1e-6)
    nodes: list[Flow | Compute] = []
    for k in range(40):
        src, dst = rng.sample(s.coords, 2)
        after = (f"f{rng.randrange(k)}",) if k and rng.random() < 0.2 else ()
        nodes.append(
            Flow(
                f"f{k}", src, dst, rng.uniform(1e3, 4e4), start_s=rng.uniform(0, 2e-5), after=after
            )
        )
    _assert_matches_reference(s, nodes)


@st.composite
def update_sequences(
    draw: st.DrawFn,
) -> tuple[list[float], list[tuple[int, ...]], list[tuple[list[int], list[int]]]]:
    """Capacities, routes, and batches of (arrivals, departures) that keep the set consistent."""
    num_links = draw(st.integers(1, 7))
    capacity = draw(
        st.lists(st.sampled_from([1.0, 2.0, 3.0, 0.5]), min_size=num_links, max_size=num_links)
    )
    num_flows = draw(st.integers(1, 14))
    routes = [
        tuple(draw(st.lists(st.integers(0, num_links - 1), min_size=1, max_size=3, unique=True)))
        for _ in range(num_flows)
    ]
    waiting, active = list(range(num_flows)), []
    batches: list[tuple[list[int], list[int]]] = []
    while waiting or active:
        arrive = draw(st.integers(0 if active else 1, min(3, len(waiting)))) if waiting else 0
        leave = draw(st.integers(0 if arrive else 1, min(2, len(active)))) if active else 0
        arrivals = [waiting.pop(0) for _ in range(arrive)]
        departures = [active.pop(draw(st.integers(0, len(active) - 1))) for _ in range(leave)]
        active.extend(arrivals)
        batches.append((arrivals, departures))
    return capacity, routes, batches


@settings(max_examples=150, deadline=None)
@given(
    update_sequences(),
    st.sampled_from([LinkSharing.__init__.__kwdefaults__["batch_pairs"], -1]),
    st.sampled_from([-1, 0, 1]),
)
def test_link_sharing_after_every_update_is_the_textbook_allocation(
    case: tuple[list[float], list[tuple[int, ...]], list[tuple[list[int], list[int]]]],
    batch_pairs: int,
    class_load: int,
) -> None:
    # The lazy update, the whole numpy solve and the solve by classes (always,
    # or from 1 pair a link on, so that it starts and ends), after every batch:
    # the textbook rates, a max-min allocation, and a consistent structure
    # (each flow's bottleneck is on its route, saturated, at its rate).
    capacity, routes, batches = case
    net = LinkSharing(
        capacity, num_flows=len(routes), batch_pairs=batch_pairs, class_load=class_load
    )
    for f, r in enumerate(routes):
        net.set_route(f, r)
    active: list[int] = []
    for arrivals, departures in batches:
        before = {f: net.rate[f] for f in active}
        changed = dict(net.update(0.0, arrivals=arrivals, departures=departures))
        active = [f for f in active if f not in departures] + arrivals
        want = reference_max_min([routes[f] for f in active], capacity)
        got = [net.rate[f] for f in active]
        assert got == pytest.approx(want, rel=1e-9)
        check_max_min([routes[f] for f in active], capacity, got)
        for f in active:
            b = net.bottleneck[f]
            assert b in routes[f] and net.level[b] == pytest.approx(net.rate[f], rel=1e-9)
            if f not in arrivals and net.rate[f] != before[f]:
                assert changed[f] == before[f]  # every change is reported, with its old rate
        assert set(arrivals) <= set(changed)


@given(sharing_instance())
def test_progressive_filling_matches_textbook(case: tuple[list[list[int]], list[float]]) -> None:
    routes, capacity = case
    got = progressive_filling(dict(enumerate(routes)), dict(enumerate(capacity)))
    assert list(got) == list(range(len(routes)))
    assert list(got.values()) == pytest.approx(reference_max_min(routes, capacity), rel=1e-9)
    pair_flow = np.array([f for f, r in enumerate(routes) for _ in r])
    pair_link = np.array([lk for r in routes for lk in r])
    vectorised = max_min_rates(pair_flow, pair_link, len(routes), np.array(capacity))
    assert list(got.values()) == pytest.approx(vectorised.tolist(), rel=1e-9)


@given(
    st.lists(st.floats(0.01, 1.0), max_size=6),
    st.integers(1, 4),
)
def test_saturation_level_solves_its_equation(old: list[float], k: int) -> None:
    capacity = sum(old) + 0.5  # the old rates fit, with room to spare
    level = saturation_level(old, new_flows=k, capacity=capacity)
    load = sum(min(r, level) for r in old) + k * level
    assert load == pytest.approx(capacity, rel=1e-12)
    # Brute force: the load is increasing in the level, so bisection finds it.
    lo, hi = 0.0, capacity
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(r, mid) for r in old) + k * mid < capacity:
            lo = mid
        else:
            hi = mid
    assert level == pytest.approx(lo, rel=1e-9)
