"""The lumped replay (one representative flow per class) against the engine itself.

Every check compares release and finish times of *every* node with
:func:`sim.engine.simulate` on the same nodes, to 1e-9 relative: symmetric
collectives (where the quotient runs), random traffic (where it usually cannot,
and the engine answers), compiled-style regions on random placements, and a
partition that is not equitable (rejected by the exact check).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from aoizora.placement.enumerate import raw_placements
from aoizora.rank.exact import ExactQ2
from aoizora.rank.lumped import (
    _is_equitable,
    equitable_partition,
    flow_system,
    lumped_times,
    simulate_nodes,
)
from aoizora.replay import collective_plan, replay, simulate_region
from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.topology import Slice, load_slice
from tests.aoizora.synthetic import mesh_program


def _engine_times(s: Slice, nodes: list[Flow | Compute]) -> tuple[np.ndarray, np.ndarray]:
    r = simulate(s, nodes)
    by_id = {f.id: (f.release_s, f.finish_s) for f in r.flows}
    by_id |= {c.id: (c.release_s, c.finish_s) for c in r.computes}
    times = np.asarray([by_id[nd.id] for nd in nodes])
    return times[:, 0], times[:, 1]


def _assert_engine_times(s: Slice, nodes: list[Flow | Compute], *, min_reduction: float) -> int:
    got = simulate_nodes(s, nodes, min_reduction=min_reduction)
    release, finish = _engine_times(s, nodes)
    np.testing.assert_allclose(got.finish_s, finish, rtol=1e-9, atol=0.0)
    np.testing.assert_allclose(got.release_s, release, rtol=1e-9, atol=0.0)
    assert got.makespan_s == pytest.approx(float(finish.max()), rel=1e-9)
    return got.cells


def _rows(s: Slice, axis: int) -> list[list[tuple[int, ...]]]:
    """The chips of ``s`` in lines along ``axis`` (every line a replica group)."""
    lines: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for c in s.coords:
        key = tuple(v for k, v in enumerate(c) if k != axis)
        lines.setdefault(key, []).append(tuple(c))
    return list(lines.values())


@pytest.mark.parametrize(
    ("name", "wrap", "kind", "axis"),
    [
        ("v5e:4x4", True, "all-gather", 1),
        ("v5e:4x4", False, "all-reduce", 0),
        ("v5e:2x4", False, "reduce-scatter", 1),
        ("v5e:4x4", True, "all-to-all", 0),
    ],
)
def test_symmetric_collectives_run_as_classes_with_the_engines_times(
    name: str, wrap: bool, kind: str, axis: int
) -> None:
    s = load_slice(name, wraparound=wrap)
    groups = _rows(s, axis)
    # Two collectives in flight together on the same lines, then a compute.
    a = collective_flows(kind, groups, buffer_bytes=3e6, id_prefix="a", slice_=s)
    b = collective_flows("all-gather", groups, buffer_bytes=1e6, id_prefix="b", slice_=s)
    tail = Compute("t", None, 1e-5, after=(a.done_id, b.done_id))
    nodes = [*a.nodes, *b.nodes, tail]
    cells = _assert_engine_times(s, nodes, min_reduction=2.0)
    # The lines are translates of each other: the quotient ran, far smaller.
    assert 0 < cells <= len(nodes) // 2, (cells, len(nodes))


def test_random_traffic_falls_back_to_the_engine_or_agrees_with_it() -> None:
    rng = random.Random(5)
    s = load_slice("v5e:4x4")
    coords = [tuple(c) for c in s.coords]
    for _ in range(6):
        nodes: list[Flow | Compute] = []
        for i in range(48):
            parents = {f"n{rng.randrange(i)}" for _ in range(rng.randrange(3))} if i else set()
            after = tuple(sorted(parents))
            if rng.random() < 0.25:
                nodes.append(Compute(f"n{i}", None, rng.choice([0.0, 1e-6, 3e-6]), after=after))
            else:
                src, dst = rng.sample(coords, 2)
                size = rng.choice([1e5, 2e5, 0.0])
                start = rng.choice([0.0, 2e-6])
                nodes.append(Flow(f"n{i}", src, dst, size, start_s=start, after=after))
        _assert_engine_times(s, nodes, min_reduction=1.0)


def test_regions_on_random_placements_equal_the_engine() -> None:
    rng = random.Random(7)
    lumped_runs = 0
    for name, wrap, shape in [("v5e:4x4", False, (4, 4)), ("v5e:4x4", True, (2, 8))]:
        s = load_slice(name, wraparound=wrap)
        graph = mesh_program(shape, scale=4)
        placements = list(raw_placements(shape, s, directions=True))
        for p in rng.sample(placements, 3):
            full, _ = simulate_region(graph, s, p.order, 0, {})
            quick, spans = simulate_region(graph, s, p.order, 0, {}, node_times=lumped_times)
            assert quick == pytest.approx(full, rel=1e-9)
            for c in graph.collectives:
                plan = collective_plan(c, p.order.coords, slice_=s, id_prefix="c")
                lumped_runs += _assert_engine_times(s, list(plan.nodes), min_reduction=2.0) > 0
            assert spans
    assert lumped_runs > 0  # the quotient ran on some of them


def test_exact_q2_with_lumped_runs_equals_the_full_replay() -> None:
    s = load_slice("v5e:4x4", wraparound=True)
    graph = mesh_program((4, 4), scale=8)
    exact = ExactQ2(graph, s)
    for p in list(raw_placements((4, 4), s, directions=True))[:4]:
        assert exact.step_time(p.order) == pytest.approx(
            replay(graph, s, p.order).step_time_s, rel=1e-9
        )


def test_a_partition_that_is_not_equitable_is_rejected() -> None:
    s = load_slice("v5e:4x4", wraparound=True)
    groups = _rows(s, 1)
    plan = collective_flows("all-gather", groups, buffer_bytes=1e6, id_prefix="a", slice_=s)
    system = flow_system(s, list(plan.nodes))
    part = equitable_partition(system)
    assert part is not None
    assert _is_equitable(system, part.node_cell, part.channel_cell)
    # Every cell holds nodes of one kind and size (the starting colour is kept).
    for cell in range(part.num_node_cells):
        members = part.node_cell == cell
        assert len(set(system.size_bytes[members].tolist())) == 1
        assert len(set(system.is_flow[members].tolist())) == 1
    # Channels: used links only; merging all channel cells into one breaks the
    # counts (a line's links carry flows, the others none of that cell's).
    merged_nodes = np.zeros_like(part.node_cell)
    assert not _is_equitable(system, merged_nodes, part.channel_cell)
    # Too few classes allowed: the shortcut declines at once.
    assert equitable_partition(system, max_cells=1) is None


def test_renumbering_by_columns_equals_sorting_the_rows_as_records() -> None:
    # _renumber numbers rows column by column; it must give np.unique(rows, axis=1)'s
    # numbering exactly (float columns compared by their int64 bits, as before).
    from aoizora.rank.lumped import _renumber

    rng = np.random.default_rng(28)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        columns = [
            rng.integers(0, 3, n).astype(np.int64),
            rng.choice([0.0, -1.5, 2.5, 1e-9, -0.0], n),
            rng.choice([0.0, 3.0], n),
            rng.integers(-5, 5, n).astype(np.int64),
        ]
        k = int(rng.integers(1, 5))
        rows = np.stack([c.view(np.int64) for c in columns[:k]])
        _, want = np.unique(rows, axis=1, return_inverse=True)
        assert np.array_equal(_renumber(*columns[:k]), want.reshape(-1))
