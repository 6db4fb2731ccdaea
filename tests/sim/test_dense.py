"""Dense traffic (issue 28): most flows in flight at once, every update re-sharing a crowded mesh.

The benchmark's dense case (``benchmarks/sim_bench.py``: sizes up to 16 MB,
starts spread over far less time than the flows take to drain), scaled down
so that the pure-Python core and the oracles finish in seconds:

- the compiled core and the pure-Python core agree **bit for bit** (every
  release, drain and finish double, the event log, busy seconds, the rate
  log) on random dense cases, lazily and with big batches solved whole;
- every allocation the compiled core logs is the **textbook** max-min one
  (oracle routing, reference progressive filling), within 1e-9;
- every finish time equals the **full-recompute replay**
  (:mod:`tests.sim.dag_oracle`), within 1e-9;
- :class:`sim.sharing.LinkSharing` on long random update sequences with
  dozens of flows on a few links (every departure or arrival moves many
  bottlenecks) is the textbook allocation after every update.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import Flow, run_core, simulate
from sim.nodes import validate_graph
from sim.problem import build_problem
from sim.sharing import LinkSharing
from sim.topology import Slice
from tests.sim.dag_oracle import reference_replay
from tests.sim.oracle import check_max_min, oracle_problem, reference_max_min
from tests.sim.test_compiled import DEFAULT, LAZY_ONLY, _assert_identical, bench


def _dense(seed: int, count: int, side: int) -> tuple[Slice, list[Flow]]:
    """``count`` flows up to 16 MB starting within 5 us: nearly all drain at once."""
    s, nodes = bench.dense_flows(count, side=side, spread_s=5e-6, seed=seed)
    return s, [n for n in nodes if isinstance(n, Flow)]


@settings(max_examples=8, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([(60, 4), (120, 4), (90, 8)]),
    st.sampled_from([DEFAULT, LAZY_ONLY]),
)
def test_dense_cases_bit_for_bit(seed: int, shape: tuple[int, int], pairs: int) -> None:
    s, flows = _dense(seed, *shape)
    problem = build_problem(s, list(flows), validate_graph(s, list(flows)), None)
    compiled = run_core(problem, core="compiled", record_rates=True, batch_pairs=pairs)
    python = run_core(problem, core="python", record_rates=True, batch_pairs=pairs)
    _assert_identical(compiled, python)
    # Dense indeed: at the busiest allocation, most of the flows drain at once.
    assert compiled.rate_log is not None
    assert max(len(snap.rates) for snap in compiled.rate_log) > 0.8 * len(flows)


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([DEFAULT, LAZY_ONLY]))
def test_dense_allocations_are_textbook(seed: int, pairs: int) -> None:
    s, flows = _dense(seed, 100, 4)
    problem = build_problem(s, list(flows), validate_graph(s, list(flows)), None)
    out = run_core(problem, core="compiled", record_rates=True, batch_pairs=pairs)
    paths, capacity = oracle_problem(s, flows)
    assert out.rate_log
    for snap in out.rate_log:
        if snap.rates:
            routes = [paths[i] for i, _ in snap.rates]
            want = reference_max_min(routes, capacity)
            got = [r for _, r in snap.rates]
            assert got == pytest.approx(want, rel=1e-9), snap.time_s
            check_max_min(routes, capacity, got)


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_dense_finish_times_match_full_recompute(seed: int) -> None:
    s, flows = _dense(seed, 80, 4)
    result = simulate(s, list(flows), core="compiled")
    want = reference_replay(s, list(flows))
    for r in result.flows:
        assert r.finish_s == pytest.approx(want[r.id][1], rel=1e-9, abs=1e-15), r.id


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([DEFAULT, -1]))
def test_link_sharing_dense_update_sequences(seed: int, batch_pairs: int) -> None:
    # 60 flows over 6 links of mixed capacities, crossing 1-3 links each; they
    # arrive and leave one or two at a time with most of them present.
    rng = random.Random(seed)
    capacity = [rng.choice([1.0, 2.0, 3.0, 0.5]) for _ in range(6)]
    routes = [tuple(rng.sample(range(6), rng.randint(1, 3))) for _ in range(60)]
    net = LinkSharing(capacity, num_flows=len(routes), batch_pairs=batch_pairs)
    for f, r in enumerate(routes):
        net.set_route(f, r)
    waiting = list(range(len(routes)))
    active: list[int] = []
    while waiting or active:
        arrivals = [waiting.pop(0) for _ in range(min(len(waiting), rng.randint(0, 2)))]
        leave = rng.randint(0 if arrivals else 1, 1) if len(active) > 40 or not waiting else 0
        departures = [active.pop(rng.randrange(len(active))) for _ in range(leave)]
        if not arrivals and not departures:
            continue
        net.update(0.0, arrivals=arrivals, departures=departures)
        active.extend(arrivals)
        got = [net.rate[f] for f in active]
        want = reference_max_min([routes[f] for f in active], capacity)
        assert got == pytest.approx(want, rel=1e-9)
        for f in active:
            assert net.level[net.bottleneck[f]] == pytest.approx(net.rate[f], rel=1e-9)
