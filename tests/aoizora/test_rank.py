"""Stage-2 ranking at scale, checked against the full replay and brute force.

- the exact shortcut (:class:`ExactQ2`) equals :func:`replay` to 1e-9 relative on
  random placements (both of its paths taken: composed regions and joint runs);
- every bound of every search node is at most the best full replay under it;
- the search returns the exhaustive optimum on every mesh shape up to 4x4, per
  sharding and across shardings; with a deadline it reports a bound and a gap.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoizora.cli import main
from aoizora.errors import PlacementError
from aoizora.hlo.nodes import CollectiveGraph
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.enumerate import enumerate_placements, raw_placements
from aoizora.placement.space import Node, PlacementSpace
from aoizora.rank.bounds_of_nodes import NodeBounds, collective_shapes, traffic_order
from aoizora.rank.exact import ExactQ2
from aoizora.rank.jobs import mesh_job
from aoizora.rank.search import Job, Leaf, SearchBudget, search_placements
from aoizora.replay import replay
from sim.topology import Slice, load_slice
from tests.aoizora.synthetic import mesh_program, twin_permutes

EXACT_CASES = [
    ("v5e:2x4", False, (2, 4)),
    ("v5e:2x4", False, (8,)),
    ("v5e:4x4", False, (4, 4)),
    ("v5e:4x4", False, (2, 2, 4)),
    ("v5e:4x4", True, (2, 8)),
    ("v5e:4x4", True, (16,)),
    # Two devices a chip: groups with both cores of a chip (0-hop flows).
    ("tpu7x:2x2x1", False, (2, 4)),
    ("tpu7x:2x2x1", False, (8,)),
]


def _slice(name: str, wrap: bool) -> Slice:
    return load_slice(name, wraparound=True) if wrap else load_slice(name)


def _full(
    graph: CollectiveGraph, slice_: Slice, shape: tuple[int, ...], ids: tuple[int, ...]
) -> float:
    order = DeviceOrder.from_physical_ids(ids, mesh_shape=shape, slice_=slice_)
    return replay(graph, slice_, order).step_time_s


def test_exact_shortcut_equals_the_full_replay_on_random_placements() -> None:
    totals = {"closed_form": 0, "engine_alone": 0, "regions_composed": 0, "regions_simulated": 0,
              "regions_approximated": 0}  # fmt: skip
    rng = random.Random(11)
    for name, wrap, shape in EXACT_CASES:
        s = _slice(name, wrap)
        for scale, same_axis in ((1, True), (8, False)):
            graph = mesh_program(shape, scale=scale, same_axis=same_axis)
            exact = ExactQ2(graph, s)
            placements = list(raw_placements(shape, s, directions=True))
            for p in rng.sample(placements, min(4, len(placements))):
                full = replay(graph, s, p.order).step_time_s
                assert exact.step_time(p.order) == pytest.approx(full, rel=1e-9), (name, p.id)
            for k, v in exact.stats.items():
                totals[k] += v
    # Both answers are exercised: composed timelines and joint engine runs, closed
    # forms and isolated engine runs; none is approximated (that takes a million flows).
    assert totals.pop("regions_approximated") == 0
    assert all(v > 0 for v in totals.values()), totals


def _exhaustive(graph: CollectiveGraph, s: Slice, shape: tuple[int, ...], directions: bool) -> dict:
    # The exact shortcut stands in for the full replay here (equal to 1e-9, tested
    # above): the search must find the minimum of whatever it is given.
    exact = ExactQ2(graph, s)
    return {
        p.physical_ids: exact.step_time(p.order)
        for p in enumerate_placements(shape, s, directions=directions)
    }


@cache
def _search_truth(name: str, shape: tuple[int, ...]) -> list[dict]:
    """Every placement's exact Q2 of each of ``_jobs``' programs on ``name``: the same tables
    for each test that searches a SEARCH_CASES case (computed once a module)."""
    s = load_slice(name)
    return [_exhaustive(job.graph, s, shape, False) for job in _jobs(s, shape)]


def _walk(space: PlacementSpace) -> list[Node]:
    out: list[Node] = []
    stack = list(space.roots())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(space.children(node))
    return out


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("v5e:2x2", (4,)),
        ("v5e:2x2", (2, 2)),
        ("v5e:2x4", (2, 4)),
        ("v5e:2x4", (8,)),
        ("tpu7x:2x2x1", (2, 4)),
    ],
)
@pytest.mark.parametrize("twins", [False, True])
def test_every_node_bound_is_below_every_replay_under_it(
    name: str, shape: tuple[int, ...], twins: bool
) -> None:
    s = load_slice(name)
    graph = mesh_program(shape, scale=4, twins=twins)
    for axis_order in (None, tuple(reversed(range(len(shape))))):
        space = PlacementSpace(shape, s, axis_order=axis_order)
        bounds = NodeBounds(graph, space)
        q2: dict[tuple[int, ...], float] = {}
        for node in _walk(space):
            under = [
                q2.setdefault(ids, _full(graph, s, shape, ids))
                for ids in {space.physical_ids(leaf) for leaf in space.leaves(node)}
            ]
            assert bounds.bound(node) <= min(under) * (1 + 1e-12), (
                space.label(node) if space.is_leaf(node) else node
            )


# One slice of every generation: each prices compute with its own [compute] table (v5e's
# measured launch, on-chip rates and splash grid included), so a change to the compute
# model that moved a bound above the replay it bounds fails here.
GENERATION_CASES = [
    ("v5e:2x4", (2, 4)),
    ("v6e:2x4", (4, 2)),
    ("v5p:2x2x2", (2, 4)),
    ("v4:2x2x2", (8,)),
    ("tpu7x:2x2x1", (2, 4)),
]


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    case=st.sampled_from(GENERATION_CASES),
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([1, 8]),
)
def test_bounds_stay_below_the_replay_on_random_placements_of_every_generation(
    case: tuple[str, tuple[int, ...]], seed: int, scale: int
) -> None:
    name, shape = case
    s = load_slice(name)
    graph = mesh_program(shape, scale=scale, twins=True, halves=True)
    order = traffic_order(collective_shapes(graph, shape), shape)
    space = PlacementSpace(shape, s, axis_order=order)
    bounds = NodeBounds(graph, space)
    rng = random.Random(seed)
    node = rng.choice(space.roots())
    path = [node]
    while not space.is_leaf(node):  # a random root-to-leaf walk, every node on it bounded
        node = rng.choice(list(space.children(node)))
        path.append(node)
    q2 = _full(graph, s, shape, space.physical_ids(node))
    for n in path:
        assert bounds.bound(n) <= q2 * (1 + 1e-12), (name, space.label(node), n)
    assert bounds.leaf_bound(space.chip_coords(space.physical_ids(node))) <= q2 * (1 + 1e-12)


def test_twins_raise_a_leaf_bound_to_the_replay_when_they_contend() -> None:
    """Two identical permutes in flight share every link: the bound of the pair, not of
    one alone, is what the replay takes (before twins, leaf bounds were 11 % below the
    replay on the Wan 14B Ulysses-ring step of v6e:16x16, and the search gap 15.9 %)."""
    s = load_slice("v5e:2x4")
    shape = (2, 4)
    alone = mesh_program(shape, scale=8)
    paired = mesh_program(shape, scale=8, twins=True)
    space = PlacementSpace(shape, s)
    b_alone, b_paired = NodeBounds(alone, space), NodeBounds(paired, space)
    gained = 0
    for leaf in list(space.leaves())[:12]:
        rows = space.chip_coords(space.physical_ids(leaf))
        q2 = _full(paired, s, shape, space.physical_ids(leaf))
        bound = b_paired.leaf_bound(rows)
        isolated = b_paired.timeline.step_time(  # each twin bounded alone: the old bound
            {sh.collective.id: b_paired._plan(sh.collective, rows, sh) if sh.group_size > 1
             else 0.0 for sh in b_paired.shapes})  # fmt: skip
        assert isolated <= bound <= q2 * (1 + 1e-12)
        gained += bound > isolated * (1 + 1e-9)
        assert b_alone.leaf_bound(rows) <= bound  # twins only add work
    assert gained > 0
    # Twins alone on a ring of neighbours: the bound is the replay, to rounding, at a
    # leaf and at every node above it (so a bound that counted a twin too many fails).
    graph = twin_permutes(shape, scale=8)
    bounds = NodeBounds(graph, space)
    tight = 0
    for leaf in space.leaves():
        q2 = _full(graph, s, shape, space.physical_ids(leaf))
        bound = bounds.leaf_bound(space.chip_coords(space.physical_ids(leaf)))
        assert bound <= q2 * (1 + 1e-12)
        tight += bound == pytest.approx(q2, rel=1e-9)
    root_bound = min(bounds.bound(r) for r in space.roots())
    assert tight > 0 and root_bound == pytest.approx(
        min(_full(graph, s, shape, space.physical_ids(leaf)) for leaf in space.leaves()), rel=1e-9
    )


@pytest.mark.parametrize(("name", "shape"), [("v5e:2x4", (2, 4)), ("v5e:4x4", (8, 2))])
@pytest.mark.parametrize("halves", [False, True])
def test_search_with_twins_returns_the_exhaustive_optimum(
    name: str, shape: tuple[int, ...], halves: bool
) -> None:
    """Twin permutes (bounded together), and with ``halves`` part-axis all-to-alls beside
    them: the pending axis's children then bound both at once (aoizora.rank.pending)."""
    s = load_slice(name)
    graphs = [mesh_program(shape, scale=k, twins=True, halves=halves) for k in (2, 16)]
    jobs = [
        Job(f"twins{k}", g, PlacementSpace(shape, s, axis_order=traffic_order(
            collective_shapes(g, shape), shape)))
        for k, g in zip((2, 16), graphs, strict=True)
    ]  # fmt: skip
    truth = [_exhaustive(g, s, shape, False) for g in graphs]

    def evaluate(batch: list[Leaf]) -> list[float]:
        return [truth[leaf.job][leaf.physical_ids] for leaf in batch]

    report = search_placements(jobs, evaluate, per_job=True)
    for jr, t in zip(report.jobs, truth, strict=True):
        assert jr.open == 0 and jr.scored[0].q2_s == min(t.values())
    across = search_placements(jobs, evaluate)
    assert across.winner.q2_s == min(min(t.values()) for t in truth) and across.gap == 0.0


SEARCH_CASES = [
    ("v5e:2x2", (4,)),
    ("v5e:2x2", (2, 2)),
    ("v5e:2x4", (8,)),
    ("v5e:2x4", (2, 4)),
    ("v5e:2x4", (4, 2)),
    ("v5e:2x4", (2, 2, 2)),
    ("v5e:4x4", (16,)),
    ("v5e:4x4", (4, 4)),
    ("v5e:4x4", (2, 8)),
    ("v5e:4x4", (8, 2)),
    ("v5e:4x4", (2, 2, 4)),
    ("tpu7x:2x2x1", (8,)),
    ("tpu7x:2x2x1", (2, 4)),
    ("tpu7x:2x2x1", (2, 2, 2)),
]


def _jobs(s: Slice, shape: tuple[int, ...], *, directions: bool = False) -> list[Job]:
    jobs = []
    for scale in (2, 16):  # two "shardings": small and large transfers
        graph = mesh_program(shape, scale=scale)
        order = traffic_order(collective_shapes(graph, shape), shape)
        space = PlacementSpace(shape, s, axis_order=order, directions=directions)
        jobs.append(Job(f"scale{scale}", graph, space))
    return jobs


def _replays(
    graphs: list[CollectiveGraph], s: Slice, shape: tuple[int, ...]
) -> Callable[[list[Leaf]], list[float]]:
    """A search's evaluate: each leaf's exact Q2 (``ExactQ2``) under its job's graph."""
    exact = [ExactQ2(graph, s) for graph in graphs]

    def evaluate(batch: list[Leaf]) -> list[float]:
        return [
            exact[leaf.job].step_time(
                DeviceOrder.from_physical_ids(leaf.physical_ids, mesh_shape=shape, slice_=s)
            )
            for leaf in batch
        ]

    return evaluate


@pytest.mark.parametrize(("name", "shape"), SEARCH_CASES)
def test_search_returns_the_exhaustive_optimum(name: str, shape: tuple[int, ...]) -> None:
    s = load_slice(name)
    jobs = _jobs(s, shape)
    truth = _search_truth(name, shape)

    def evaluate(batch: list[Leaf]) -> list[float]:
        return [truth[leaf.job][leaf.physical_ids] for leaf in batch]

    per_job = search_placements(jobs, evaluate, per_job=True)
    for jr, t in zip(per_job.jobs, truth, strict=True):
        assert jr.open == 0 and jr.scored[0].q2_s == min(t.values())
        assert jr.simulated + jr.repeats + jr.proven_worse == jr.num_placements
        assert sum(sc.num_raw for sc in jr.scored) == jr.simulated + jr.repeats
    across = search_placements(jobs, evaluate, batch_size=3)
    best = min(min(t.values()) for t in truth)
    assert across.winner.q2_s == best and across.gap == 0.0 and across.complete
    assert across.bound_s == best
    # Global pruning proves more of the space worse than per-sharding pruning.
    assert sum(j.simulated for j in across.jobs) <= sum(j.simulated for j in per_job.jobs)


def test_search_with_directions_matches_every_class() -> None:
    s = load_slice("v5e:2x4")
    jobs = _jobs(s, (2, 4), directions=True)
    truth = [_exhaustive(job.graph, s, (2, 4), True) for job in jobs]
    full = {ids: v for t in truth for ids, v in t.items()}

    def evaluate(batch: list[Leaf]) -> list[float]:
        return [_full(jobs[leaf.job].graph, s, (2, 4), leaf.physical_ids) for leaf in batch]

    report = search_placements(jobs, evaluate, per_job=True)
    for jr, t in zip(report.jobs, truth, strict=True):
        assert jr.scored[0].q2_s == pytest.approx(min(t.values()), rel=1e-12)
    assert full


def test_a_deadline_leaves_a_bound_and_a_gap() -> None:
    s = load_slice("v5e:4x4")
    jobs = _jobs(s, (4, 4))
    evaluate = _replays([job.graph for job in jobs], s, (4, 4))
    lines: list[str] = []

    report = search_placements(
        jobs, evaluate, batch_size=1, deadline_s=0.0, progress=lines.append, progress_every_s=0.0
    )
    assert not report.complete and sum(j.open for j in report.jobs) > 0
    assert report.bound_s <= report.winner.q2_s and 0.0 <= report.gap < 1.0
    assert lines and lines[-1].startswith("[search] done") and "open of" in lines[-1]
    full = search_placements(jobs, evaluate)
    assert full.winner.q2_s >= report.bound_s  # the bound held
    assert full.winner.q2_s <= report.winner.q2_s


def test_the_tree_counts_its_leaves_without_visiting_them() -> None:
    for name, shape in [*SEARCH_CASES[:7], *SEARCH_CASES[-3:]]:  # tpu7x: the core sub-axis
        s = load_slice(name)
        for directions in (False, True):
            space = PlacementSpace(shape, s, directions=directions)
            assert space.count() == len(raw_placements(shape, s, directions=directions))
    big = PlacementSpace((2, 64, 2), load_slice("v5e:16x16"))
    assert big.count() == 175716  # raw descriptions; listed in docs/placements.md
    assert math.isfinite(NodeBounds(mesh_program((2, 64, 2)), big).bound(big.roots()[0]))


def test_the_planner_runs_the_compiled_core_and_the_python_core_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # aoizora calls sim.engine.simulate without choosing a core: it must get
    # the compiled one, and the pure-Python core (what runs without a C
    # compiler) must give the same floats, so plans do not depend on the build.
    import sim.engine

    calls = {"compiled": 0, "python": 0}
    for name, wrapped in (("compiled", "_run_compiled"), ("python", "run_python")):
        real = getattr(sim.engine, wrapped)

        def counted(*args: object, _real: object = real, _name: str = name, **kw: object) -> object:
            calls[_name] += 1
            return _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(sim.engine, wrapped, counted)

    def run() -> list[tuple[float, ...]]:
        out = []
        for name, wrap, shape in EXACT_CASES[:4]:
            s = _slice(name, wrap)
            graph = mesh_program(shape, scale=8, same_axis=False)
            exact = ExactQ2(graph, s)
            for p in list(raw_placements(shape, s, directions=True))[:3]:
                full = replay(graph, s, p.order)
                out.append((full.step_time_s, *full.region_times_s, exact.step_time(p.order)))
        return out

    compiled = run()
    assert calls["compiled"] > 0 and calls["python"] == 0
    monkeypatch.setattr(sim.engine, "compiled_core", lambda: (None, "blocked by the test"))
    monkeypatch.setattr(sim.engine, "_warned", True)
    python = run()
    assert calls["python"] == calls["compiled"]  # nothing served from a cache
    assert repr(python) == repr(compiled)  # equal text: equal doubles


@pytest.mark.parametrize(("name", "shape"), SEARCH_CASES)
def test_a_gap_tolerance_stops_within_it_and_its_bound_holds(
    name: str, shape: tuple[int, ...]
) -> None:
    s = load_slice(name)
    jobs = _jobs(s, shape)
    truth = _search_truth(name, shape)
    optimum = min(min(t.values()) for t in truth)

    def evaluate(batch: list[Leaf]) -> list[float]:
        return [truth[leaf.job][leaf.physical_ids] for leaf in batch]

    exact = search_placements(jobs, evaluate, batch_size=1)
    zero = search_placements(jobs, evaluate, batch_size=1, gap_tolerance=0.0)
    assert zero.jobs == exact.jobs and zero.winner == exact.winner and zero.complete
    saved: dict[float, int] = {}
    for tol in (0.01, 0.3):
        report = search_placements(jobs, evaluate, batch_size=1, gap_tolerance=tol)
        assert report.gap <= tol and report.bound_s <= optimum  # the bound held
        assert report.winner.q2_s * (1.0 - tol) <= optimum + 1e-15
        # Stopping early only cuts the same search short.
        assert sum(j.simulated for j in report.jobs) <= sum(j.simulated for j in exact.jobs)
        saved[tol] = saved.get(tol, 0) + sum(j.open for j in report.jobs)
        per_job = search_placements(jobs, evaluate, per_job=True, gap_tolerance=tol)
        for jr, t in zip(per_job.jobs, truth, strict=True):
            best = jr.scored[0].q2_s
            assert best * (1.0 - tol) <= min(t.values()) + 1e-15
            assert min(jr.bound_s, best) <= min(t.values())
    if len(truth[0]) > 4:  # v5e:2x2 has too few classes to stop any earlier
        assert saved[0.3] > 0  # a 30% tolerance stops before every class is settled


def test_a_gap_tolerance_outside_0_1_is_refused() -> None:
    s = load_slice("v5e:2x2")
    jobs = _jobs(s, (2, 2))
    for bad in (-0.1, 1.0, math.nan):
        with pytest.raises(PlacementError, match=r"must be a fraction in \[0, 1\)"):
            search_placements(jobs, lambda batch: [1.0] * len(batch), gap_tolerance=bad)


@pytest.mark.parametrize("command", ["plan", "whatif"])
def test_the_cli_refuses_a_search_gap_outside_0_1(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--slice", "v5e:2x2"] if command == "plan" else ["--slices", "v5e:2x2"]
    code = main([command, "--model", "wan2.1-1.3b", *where, "--search-gap", "1.5"])
    err = capsys.readouterr().err
    assert code == 2 and "--search-gap 1.5: must be a fraction in [0, 1)" in err


@pytest.mark.parametrize("shape", [(4, 4), (2, 8), (16,), (2, 2, 4)])
def test_probes_beat_a_bad_given_order_before_any_node_is_split(shape: tuple[int, ...]) -> None:
    s = load_slice("v5e:4x4")
    graph = mesh_program(shape, scale=16)
    space = PlacementSpace(
        shape, s, axis_order=traffic_order(collective_shapes(graph, shape), shape)
    )
    ids = list(range(16))
    random.Random(3).shuffle(ids)
    bad = DeviceOrder.from_physical_ids(tuple(ids), mesh_shape=shape, slice_=s)
    job = Job("j", graph, space, (("scrambled", bad),), ("scrambled",))
    evaluate = _replays([graph], s, shape)

    optimum = search_placements([job], evaluate).winner.q2_s
    spent = SearchBudget(work=1)  # past it after the forced order: no node is split
    alone = search_placements([job], evaluate, budget=spent, probes=0)
    probed = search_placements([job], evaluate, budget=spent)
    assert alone.winner.leaf.label == "scrambled"  # the forced order only
    assert optimum <= probed.winner.q2_s < alone.winner.q2_s
    assert probed.bound_s <= optimum  # the bound holds with probes
    jr = probed.jobs[0]
    assert jr.num_placements == space.count() + 1 + (jr.simulated - 1)  # probes are extras
    assert jr.simulated + jr.repeats + jr.proven_worse + jr.open == jr.num_placements
    again = search_placements([job], evaluate, budget=spent)
    assert again.jobs == probed.jobs and again.winner == probed.winner  # seeded: the same


def test_a_random_leaf_is_a_leaf_of_the_tree_and_the_seed_decides_it() -> None:
    s = load_slice("v5e:4x4")
    space = PlacementSpace((2, 2, 4), s)
    labels = {space.label(leaf) for leaf in space.leaves()}
    drawn = [space.label(space.random_leaf(random.Random(seed))) for seed in range(40)]
    assert set(drawn) <= labels and len(set(drawn)) > 10
    assert drawn == [space.label(space.random_leaf(random.Random(seed))) for seed in range(40)]


@pytest.mark.parametrize("name", ["v5e:2x4", "tpu7x:2x2x1"])
def test_a_given_order_is_bounded_like_the_same_leaf_of_the_tree(name: str) -> None:
    # Given orders are libtpu ids; on tpu7x an id names a core, not a chip, so the
    # bound must read them as device-grid coordinates (it indexed chips before).
    s = load_slice(name)
    shape = (2, 4)
    graph = mesh_program(shape, scale=4)
    space = PlacementSpace(shape, s)
    bounds = NodeBounds(graph, space)
    for leaf in space.leaves():
        ids = space.physical_ids(leaf)
        assert space.chip_coords(ids) == [tuple(r) for r in space.coords(leaf).tolist()]
        assert bounds.leaf_bound(space.chip_coords(ids)) == bounds.bound(leaf)
    job = mesh_job("j", graph, s, mesh_shape=shape, mesh_axis_names=("a", "b"), max_placements=4)
    evaluate = _replays([graph], s, shape)

    report = search_placements([job], evaluate)  # --max-placements: listed orders only
    listed = [
        evaluate([Leaf(0, label, o.physical_ids, (0, 0, 0, 0))])[0] for label, o in job.extra_orders
    ]
    assert report.winner.q2_s == min(listed) and report.complete


def test_a_probe_that_cannot_beat_the_probes_replayed_first_is_not_replayed() -> None:
    """Probes replay lowest leaf bound first, two at a time: the large program's (16x the
    bytes) come after the small one's and are dropped once those are in."""
    s = load_slice("v5e:4x4")
    shape = (4, 4)
    jobs = _jobs(s, shape)
    graphs = [j.graph for j in jobs]
    replays = _replays(graphs, s, shape)
    seen: list[list[Leaf]] = []

    def evaluate(batch: list[Leaf]) -> list[float]:
        seen.append(list(batch))
        return replays(batch)

    report = search_placements(jobs, evaluate, deadline_s=0.0)  # forced and probes only
    assert not any(j.extra_orders for j in jobs)  # no given orders: the first batch probes
    first = seen[0]
    assert len(first) == 2 and {leaf.job for leaf in first} == {0}  # the small program's
    assert len(seen) == 1  # the large program's probes were dropped, not replayed
    large = report.jobs[1]
    assert large.simulated == 0 and large.num_placements == jobs[1].space.count()
    for jr in report.jobs:
        assert jr.simulated + jr.repeats + jr.proven_worse + jr.open == jr.num_placements
