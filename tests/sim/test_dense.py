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
  bottlenecks) is the textbook allocation after every update;
- the solve by bottleneck classes (:mod:`sim.classshare`, ``_flowclass.c``)
  does all of the above as well, and keeps its classes exact: every draining
  flow's rate **is** its bottleneck's level (the same double), a class is
  the set of flows bottlenecked at one link, and its per-link counts are its
  members' routes counted afresh.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.classshare import ClassFilling
from sim.engine import Flow, run_core, simulate
from sim.nodes import validate_graph
from sim.problem import build_problem
from sim.pycore import CoreOutput
from sim.sharing import LinkSharing
from sim.topology import Slice
from tests.sim.dag_oracle import reference_replay
from tests.sim.oracle import check_max_min, oracle_problem, reference_max_min
from tests.sim.test_compiled import (
    ALL_CLASSES,
    CLASSES,
    DEFAULT,
    LAZY_ONLY,
    _assert_identical,
    bench,
)


def _dense(seed: int, count: int, side: int) -> tuple[Slice, list[Flow]]:
    """``count`` flows up to 16 MB starting within 5 us: nearly all drain at once."""
    s, nodes = bench.dense_flows(count, side=side, spread_s=5e-6, seed=seed)
    return s, [n for n in nodes if isinstance(n, Flow)]


def _run(
    flows: list[Flow], s: Slice, core: str, pairs: int, class_load: int, *, record: bool = True
) -> CoreOutput:
    problem = build_problem(s, list(flows), validate_graph(s, list(flows)), None)
    return run_core(
        problem, core=core, record_rates=record, batch_pairs=pairs, class_load=class_load
    )


# (batch_pairs, class_load): lazy with whole batches, lazy only, classes from
# 2 pairs a link on (they start and end), classes always.
_MODES = [(DEFAULT, CLASSES), (LAZY_ONLY, -1), (DEFAULT, 2), (DEFAULT, ALL_CLASSES)]


@settings(max_examples=12, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([(60, 4), (120, 4), (90, 8)]),
    st.sampled_from(_MODES),
)
def test_dense_cases_bit_for_bit(seed: int, shape: tuple[int, int], mode: tuple[int, int]) -> None:
    s, flows = _dense(seed, *shape)
    compiled = _run(flows, s, "compiled", *mode)
    python = _run(flows, s, "python", *mode)
    _assert_identical(compiled, python)
    # Dense indeed: at the busiest allocation, most of the flows drain at once.
    assert compiled.rate_log is not None
    assert max(len(snap.rates) for snap in compiled.rate_log) > 0.8 * len(flows)
    # Without a rate log the classes write no per-flow rates until they end
    # (only their clocks run): the same doubles still, in both cores.
    quiet = _run(flows, s, "compiled", *mode, record=False)
    _assert_identical(quiet, _run(flows, s, "python", *mode, record=False))
    assert repr(quiet.finish_s) == repr(compiled.finish_s)
    assert repr(quiet.events) == repr(compiled.events)


@pytest.mark.parametrize("side", [3, 6])
def test_dense_bit_for_bit_links_not_in_whole_blocks(side: int) -> None:
    """The C filling scans link keys in blocks of 16 (sim/_flowclass.c); 3x3 and
    6x6 meshes (24 and 120 links) leave the last block part padding, which must
    never saturate: both cores agree in every mode."""
    s, flows = _dense(7, 40 * side, side)
    for mode in _MODES:
        _assert_identical(_run(flows, s, "compiled", *mode), _run(flows, s, "python", *mode))


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(_MODES))
def test_dense_allocations_are_textbook(seed: int, mode: tuple[int, int]) -> None:
    s, flows = _dense(seed, 100, 4)
    out = _run(flows, s, "compiled", *mode)
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
    ids = [r.id for r in result.flows]
    for class_load in (ALL_CLASSES, 2):  # by classes throughout; from 2 pairs a link on
        out = _run(flows, s, "compiled", DEFAULT, class_load, record=False)
        finish = dict(zip(ids, out.finish_s, strict=True))
        for i in ids:
            assert finish[i] == pytest.approx(want[i][1], rel=1e-9, abs=1e-15), i


def _assert_classes_exact(
    net: LinkSharing, active: list[int], routes: list[tuple[int, ...]]
) -> None:
    """The class invariants: rate is the bottleneck's level to the bit; a class
    is one bottleneck's flows; the per-link counts are the routes counted afresh."""
    c = net.classes
    assert isinstance(c, ClassFilling)
    by_class: dict[int, list[int]] = {}
    for f in active:
        assert net.rate[f] == net.level[net.bottleneck[f]], f
        by_class.setdefault(c.cls[f], []).append(f)
    assert sorted(len(c.members[k]) for k in by_class) == sorted(map(len, by_class.values()))
    for k, flows in by_class.items():
        assert sorted(c.members[k]) == sorted(flows)
        assert len({net.bottleneck[f] for f in flows}) == 1  # one link per class ...
        counts: dict[int, int] = {}
        for f in flows:
            for lk in routes[f]:
                counts[lk] = counts.get(lk, 0) + 1
        assert dict(zip(c.fp_link[k], c.fp_cnt[k], strict=True)) == counts
        for lk, n in counts.items():  # ... and the links' table is its transpose
            assert c.lc_cnt[lk][c.lc_cls[lk].index(k)] == n
    assert len({net.bottleneck[f] for f in active}) == len(by_class)  # ... and one class a link
    assert sum(map(len, c.lc_cls)) == sum(len(c.fp_link[k]) for k in by_class)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(DEFAULT, -1), (-1, -1), (DEFAULT, 0)]))
def test_link_sharing_dense_update_sequences(seed: int, mode: tuple[int, int]) -> None:
    # 60 flows over 6 links of mixed capacities, crossing 1-3 links each; they
    # arrive and leave one or two at a time with most of them present.
    rng = random.Random(seed)
    capacity = [rng.choice([1.0, 2.0, 3.0, 0.5]) for _ in range(6)]
    routes = [tuple(rng.sample(range(6), rng.randint(1, 3))) for _ in range(60)]
    batch_pairs, class_load = mode
    net = LinkSharing(
        capacity, num_flows=len(routes), batch_pairs=batch_pairs, class_load=class_load
    )
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
        if class_load == 0:
            _assert_classes_exact(net, active, routes)
