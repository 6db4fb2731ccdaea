"""The engine: max-min sharing, latency semantics, DAG release, records, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine import Compute, Flow, max_min_rates, simulate
from sim.errors import GraphError, RoutingError
from sim.topology import Slice, make_slice
from tests.sim.oracle import (
    check_max_min,
    oracle_problem,
    reference_finish_times,
    reference_max_min,
)

BW = 1e9
LAT = 1e-6


def line(n: int, *, wrap: bool = False, latency_s: float = LAT) -> Slice:
    return make_slice([n], wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=latency_s)


@st.composite
def sharing_instance(draw: st.DrawFn) -> tuple[list[list[int]], list[float]]:
    num_links = draw(st.integers(1, 6))
    capacity = draw(
        st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 0.5]), min_size=num_links, max_size=num_links)
    )
    routes = draw(
        st.lists(
            st.lists(st.integers(0, num_links - 1), min_size=1, max_size=num_links, unique=True),
            min_size=1,
            max_size=8,
        )
    )
    return routes, capacity


@given(sharing_instance())
def test_max_min_matches_textbook_progressive_filling(
    case: tuple[list[list[int]], list[float]],
) -> None:
    routes, capacity = case
    pair_flow = np.array([f for f, r in enumerate(routes) for _ in r])
    pair_link = np.array([lk for r in routes for lk in r])
    got = max_min_rates(pair_flow, pair_link, len(routes), np.array(capacity))
    want = reference_max_min(routes, capacity)
    assert got.tolist() == pytest.approx(want, rel=1e-9)
    check_max_min(routes, capacity, got.tolist())


@pytest.mark.parametrize("core", ["compiled", "python"])
def test_k_equal_flows_on_one_link_closed_form(core: str) -> None:
    # k flows of size S over h hops share every link: h*latency + k*S/bandwidth.
    s = line(4)
    for k in (1, 2, 3, 7):
        flows = [Flow(f"f{i}", (0,), (3,), 2e6) for i in range(k)]
        result = simulate(s, flows, core=core)
        for rec in result.flows:
            assert rec.finish_s == pytest.approx(3 * LAT + k * 2e6 / BW, rel=1e-12)
            assert rec.drain_s == pytest.approx(3 * LAT, rel=1e-12)
        assert result.makespan_s == pytest.approx(3 * LAT + k * 2e6 / BW, rel=1e-12)


@pytest.mark.parametrize("core", ["compiled", "python"])
def test_exact_event_log(core: str) -> None:
    # a: 0->2 (2 hops), b: 1->2 (1 hop) share link 1->2. b drains alone from
    # 1 us to 2 us (1e3 bytes), both at 0.5e9 until a ends at 2.002 ms, then b
    # alone: 2e6 - 1e3 - 1e6 = 999e3 bytes more, ending at 3.001 ms.
    nodes: list[Flow | Compute] = [
        Flow("a", (0,), (2,), 1e6),
        Flow("b", (1,), (2,), 2e6),
        Compute("c", (2,), 1e-3, after=("a",)),
        Flow("d", (2,), (2,), 5e6, after=("b",)),
    ]
    result = simulate(line(3), nodes, core=core)
    want = [
        (0.0, "release", "a"),
        (0.0, "release", "b"),
        (1e-6, "drain", "b"),
        (2e-6, "drain", "a"),
        (2.002e-3, "finish", "a"),
        (2.002e-3, "release", "c"),
        (3.001e-3, "finish", "b"),
        (3.001e-3, "release", "d"),
        (3.001e-3, "finish", "d"),
        (3.002e-3, "finish", "c"),
    ]
    got = [(e.time_s, e.kind, e.id) for e in result.events]
    assert [(k, i) for _, k, i in got] == [(k, i) for _, k, i in want]
    for (t_got, _, _), (t_want, _, _) in zip(got, want, strict=True):
        assert t_got == pytest.approx(t_want, rel=1e-12, abs=1e-18)
    assert result.makespan_s == pytest.approx(3.002e-3, rel=1e-12)
    d = result.flow("d")
    assert (d.hops, d.release_s, d.finish_s) == (0, d.finish_s, d.release_s)


def test_release_waits_for_start_and_after() -> None:
    nodes: list[Flow | Compute] = [
        Compute("c", (0,), 5e-6),
        Flow("late", (0,), (1,), 1e3, start_s=2e-5, after=("c",)),
        Flow("early", (0,), (1,), 1e3, start_s=1e-6, after=("c",)),
        Compute("join", None, 0.0, after=("late", "early")),
    ]
    result = simulate(line(2), nodes)
    assert result.flow("late").release_s == pytest.approx(2e-5)
    assert result.flow("early").release_s == pytest.approx(5e-6)
    assert result.finish_s("join") == pytest.approx(max(r.finish_s for r in result.flows))


def test_zero_byte_flow_pays_latency_only() -> None:
    result = simulate(line(4), [Flow("z", (3,), (0,), 0.0)])
    assert result.flow("z").finish_s == pytest.approx(3 * LAT)
    assert all(lk.bytes_carried == 0 for lk in result.links)


def test_computes_on_one_chip_overlap_unless_ordered() -> None:
    nodes: list[Flow | Compute] = [
        Compute("x", (0,), 1e-3),
        Compute("y", (0,), 1e-3),
        Compute("z", (0,), 1e-3, after=("y",)),
    ]
    result = simulate(line(2), nodes)
    assert result.finish_s("x") == result.finish_s("y") == pytest.approx(1e-3)
    assert result.finish_s("z") == pytest.approx(2e-3)


@st.composite
def random_flows(draw: st.DrawFn) -> tuple[Slice, list[Flow]]:
    dims = draw(st.integers(1, 2))
    shape = tuple(draw(st.lists(st.integers(2, 4), min_size=dims, max_size=dims)))
    wrap = draw(st.booleans())
    latency = draw(st.sampled_from([0.0, 1e-6]))
    s = make_slice(shape, wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=latency)
    count = draw(st.integers(1, 8))
    flows = []
    for k in range(count):
        src = draw(st.sampled_from(s.coords))
        dst = draw(st.sampled_from(s.coords))
        size = draw(st.sampled_from([0.0, 1e3, 4e3, 1e4, 2.5e4]))
        start = draw(st.sampled_from([0.0, 2e-6, 5e-6, 1.3e-5]))
        flows.append(Flow(f"f{k}", src, dst, size, start_s=start))
    return s, flows


@settings(max_examples=60)
@given(random_flows())
def test_sharing_properties_and_independent_replay(case: tuple[Slice, list[Flow]]) -> None:
    s, flows = case
    result = simulate(s, flows, record_rates=True, core="compiled")
    # Oracle routes and capacities (its own routing; parallel cables pooled).
    paths, capacity = oracle_problem(s, flows)
    # Every allocation ever in force is max-min fair and within capacity.
    for snap in result.rate_log:
        if snap.rates:
            check_max_min([paths[i] for i, _ in snap.rates], capacity, [r for _, r in snap.rates])
    for rec in result.links:
        assert rec.busy_s <= result.makespan_s * (1 + 1e-12)
    # A naive fluid replay (no SimPy, textbook max-min) gives the same finishes.
    want = reference_finish_times(s, flows)
    for rec in result.flows:
        assert rec.finish_s == pytest.approx(want[rec.id], rel=1e-9, abs=1e-15)
        assert rec.drain_s == pytest.approx(rec.release_s + rec.hops * s.hop_latency_s)


def test_link_records_busy_time_and_utilisation() -> None:
    result = simulate(line(3), [Flow("a", (0,), (2,), 1e6)])
    by_pair = {(lk.src, lk.dst): lk for lk in result.links}
    for pair in [((0,), (1,)), ((1,), (2,))]:
        rec = by_pair[pair]
        assert rec.bytes_carried == pytest.approx(1e6)
        assert rec.busy_s == pytest.approx(1e-3)
        assert rec.utilisation == pytest.approx(1e6 / (BW * result.makespan_s))
    assert by_pair[((1,), (0,))].bytes_carried == 0


def test_deterministic_and_json_plain() -> None:
    s = make_slice([3, 3], link_bandwidth_bytes_per_s=BW, hop_latency_s=LAT)
    flows = [Flow(f"f{i}", s.coords[i], s.coords[-1 - i], 1e5 * (i + 1)) for i in range(9)]
    a = json.dumps(simulate(s, flows).to_json_dict(), sort_keys=False)
    b = json.dumps(simulate(s, flows).to_json_dict(), sort_keys=False)
    assert a == b
    data = json.loads(a)
    assert set(data) == {
        "slice",
        "shape",
        "wraparound",
        "makespan_s",
        "flows",
        "computes",
        "links",
        "events",
    }
    assert len(data["links"]) == len(s.links)


def test_empty_graph() -> None:
    result = simulate(line(2), [])
    assert result.makespan_s == 0.0 and result.flows == () and result.events == ()


@pytest.mark.parametrize(
    ("nodes", "error", "fragment"),
    [
        ([Flow("a", (0,), (1,), 1.0), Flow("a", (1,), (0,), 1.0)], GraphError, "duplicate"),
        ([Flow("a", (0,), (1,), 1.0, after=("zz",))], GraphError, "unknown id 'zz'"),
        ([Flow("a", (0,), (1,), -1.0)], GraphError, "size_bytes of node 'a' is -1.0"),
        ([Flow("a", (0,), (1,), math.nan)], GraphError, "finite"),
        ([Flow("a", (0,), (1,), 1.0, start_s=-1.0)], GraphError, "start_s"),
        ([Compute("c", (0,), -2.0)], GraphError, "duration_s"),
        ([Compute("c", (5,), 1.0)], GraphError, "chip coordinate (5,) is not a chip of slice"),
        ([Compute("c", (0.0,), 1.0)], GraphError, "must be an int (not a float or bool)"),
        ([Flow("a", (True,), (1,), 1.0)], RoutingError, "source coordinate (True,)"),
        ([Flow("a", (0,), (1,), 1.0, after=("a",))], GraphError, "lists itself"),
        ([Flow("a", (0,), (9,), 1.0)], RoutingError, "destination coordinate (9,)"),
        ([Flow("", (0,), (1,), 1.0)], GraphError, "non-empty strings"),
    ],
)
def test_bad_graphs_raise(nodes: list[Flow | Compute], error: type, fragment: str) -> None:
    with pytest.raises(error) as info:
        simulate(line(2), nodes)
    assert fragment in str(info.value)


def test_cycle_is_reported_not_hung() -> None:
    nodes = [
        Flow("a", (0,), (1,), 1.0, after=("c",)),
        Flow("b", (0,), (1,), 1.0, after=("a",)),
        Flow("c", (0,), (1,), 1.0, after=("b",)),
        Flow("free", (0,), (1,), 1.0),
    ]
    with pytest.raises(GraphError) as info:
        simulate(line(2), nodes)
    message = str(info.value)
    assert message.startswith("dependency cycle:")
    assert all(f"'{i}'" in message for i in "abc") and "free" not in message
