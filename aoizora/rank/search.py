"""Branch and bound over the placements of every compiled sharding at once.

Each compiled sharding brings its placement tree
(:class:`~aoizora.placement.space.PlacementSpace`, mesh axes placed in the
order of the traffic they carry) and a few given orders (jax's default). One
heap holds the open nodes of every tree, keyed by a proven lower bound on the
Q2 of every placement below them (:class:`~aoizora.rank.bounds_of_nodes.NodeBounds`).
After the given orders it replays a few *probes*: of ``probes`` random
root-to-leaf walks of each tree, the best two by leaf bound (leaf bounds are
tight where inner ones are loose), so a big tree has a good incumbent at once.
The search pops the most promising node; a leaf goes to the exact replay, an
inner node is split and its children bounded; any node whose bound is no
better than the best Q2 found so far (the *incumbent*) is proven worse with
everything under it and never visited. When the heap empties, the best
placement found is the optimum of the family; when a deadline stops the
search first, the smallest bound left open says how far from optimal it can
be (the *gap*). With ``gap_tolerance`` the search also stops once the gap is
that small: a node whose bound is within the tolerance of the incumbent is left
open under its bound, not proven worse, so the reported bound and gap stay true
(the standard relative-gap stop of branch and bound, e.g. MIP solvers' ``MIPGap``).

Exact replays run in batches of ``batch_size`` leaves (in a process pool or
on Ray when the caller's ``evaluate`` fans out); the incumbent changes only
between batches and the batch size does not depend on the number of
workers, so the nodes visited -- and the plan -- are the same serial or
parallel. Leaves giving a device order already simulated (several
descriptions can give one order, and with ``directions`` several orders one
symmetry class) are counted, not replayed.

``per_job=True`` keeps one incumbent per sharding, so every sharding's best
placement is exact (the planner's ``--exhaustive`` needs each one's best);
by default the incumbent is global, which proves far more of the space worse.

A :class:`SearchBudget` bounds the search by the *work* it does, counted, not timed
(:mod:`aoizora.rank.work`); a deadline by the clock (:mod:`aoizora.rank.cutoff`).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from aoizora.errors import PlacementError
from aoizora.hlo.graph import CollectiveGraph
from aoizora.interrupts import pause_point
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.space import Node, PlacementSpace
from aoizora.placement.symmetry import canonical_rows, slice_automorphisms
from aoizora.rank.bounds_of_nodes import NodeBounds
from aoizora.rank.cutoff import ReplayCut, replays_until
from aoizora.rank.search_progress import progress_line
from aoizora.rank.search_report import JobReport, Leaf, Scored, SearchReport, relative_gap
from aoizora.rank.work import (
    DEFAULT_SEARCH_BUDGET,
    DEFAULT_SEARCH_GAP,
    NODE_OVERHEAD,
    ORDER_COST,
    PAIR_COST,
    REPLAY_COST,
    SearchBudget,
    check_gap_tolerance,
    program_size,
)

__all__ = [
    "DEFAULT_SEARCH_BUDGET",
    "DEFAULT_SEARCH_GAP",
    "REPLAY_COST",
    "Job",
    "JobReport",
    "Leaf",
    "Scored",
    "SearchBudget",
    "SearchReport",
    "check_gap_tolerance",
    "program_size",
    "relative_gap",
    "search_placements",
]

Progress = Callable[[str], None]
_EXTRA_COMPLEXITY = (10**6, 10**6, 10**6, 1)  # given orders sort after every described one
_PROBES_KEPT = 2  # probe leaves replayed a tree (the best of its random walks by leaf bound)
# The share of the work budget a tree's probe walks may take beyond ``probes`` walks: on
# v5e:16x16 a 64-way Ulysses program's best class turned up in 3 of 8 seeds of 64 walks
# and in 7 of 8 of 256 (docs/placements.md, "Bounds from sub-axis sets").
_PROBE_SHARE = 0.02
_PROBE_BATCH = 2  # probes replayed at once (then the incumbent filters the rest)
# Of a deadline, the share the roots may take: the probes, which find a pod's best placement
# in seconds (tpu7x:8x8x8: 3.3 s), get the rest (with all 20 s its roots left them none).
_ROOTS_SHARE = 0.5


@dataclass(frozen=True)
class Job:
    """One compiled sharding to place: its collective graph and its placement tree.

    ``extra_orders`` are leaves besides the tree's (e.g. jax's default order,
    or an explicit list of placements); those named in ``forced`` are replayed
    whatever their bound (the baselines need them). ``tree=False`` searches the
    extra orders only.
    """

    name: str
    graph: CollectiveGraph
    space: PlacementSpace
    extra_orders: tuple[tuple[str, DeviceOrder], ...] = ()
    forced: tuple[str, ...] = ()
    tree: bool = True


@dataclass
class _JobState:
    job: Job
    bounds: NodeBounds
    perms: np.ndarray
    scored: dict[tuple[int, ...], Scored] = field(default_factory=dict)
    simulated: int = 0
    repeats: int = 0
    proven_worse: int = 0
    total: int = 0
    node_cost: int = NODE_OVERHEAD  # work units a node bound costs (program_size + overhead)
    side_work: int = 0  # work units charged so far for its bounds' pending-axis visits

    def best(self) -> float:
        return min((s.q2_s for s in self.scored.values()), default=math.inf)

    def class_key(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        row = np.asarray([ids], dtype=np.int64)
        return tuple(canonical_rows(row, self.perms)[0].tolist())


_Entry = tuple[float, int, int, "Node | Leaf"]


class _Search:
    def __init__(
        self,
        jobs: Sequence[Job],
        evaluate: Callable[[Sequence[Leaf]], Sequence[float]],
        *,
        batch_size: int,
        per_job: bool,
        algorithm: str | Mapping[str, str] | None,
        gap_tolerance: float = 0.0,
        budget: SearchBudget | None = None,
    ) -> None:
        self.evaluate = evaluate
        self.budget = budget
        self.work = 0  # work units spent (SearchBudget)
        self.stopped_by: str | None = None
        self.batch_size = batch_size
        self.per_job = per_job
        self.gap_tolerance = gap_tolerance
        self.heap: list[_Entry] = []
        self.seq = itertools.count()
        self.nodes_bounded = 0
        self.states: list[_JobState] = []
        for job in jobs:
            bounds = NodeBounds(job.graph, job.space, algorithm=algorithm)
            perms = np.asarray(slice_automorphisms(job.space.slice), dtype=np.int64)
            total = (job.space.count() if job.tree else 0) + len(job.extra_orders)
            cost = program_size(job.graph) + NODE_OVERHEAD
            self.states.append(_JobState(job, bounds, perms, total=total, node_cost=cost))
        self.best = [math.inf] * len(self.states)  # best Q2 replayed so far, per job
        self.raw: dict[tuple[int, tuple[int, ...]], int] = {}  # descriptions per queued class
        self.stop_at = math.inf  # perf_counter() time past which no node is split or bounded
        self.probes_cut = False  # the deadline stopped the probes
        self.roots_floored = 0  # roots pushed under their job's floor, not bounded
        self.roots_stop_at = math.inf  # past it no root is bounded (the probes get the rest)
        self.s_per_replay_work = 0.0  # the forced replays' seconds a work unit
        self.deferred: list[Leaf] = []  # given orders the deadline left to the heap

    # -- incumbents --------------------------------------------------------------

    def incumbent(self, j: int) -> float:
        return self.best[j] if self.per_job else min(self.best, default=math.inf)

    def past_limit(self) -> bool:
        """Past the budget or ``stop_at``, with a placement replayed (a search always finds
        one); says which in ``stopped_by``."""
        if min(self.best, default=math.inf) == math.inf:
            return False
        if self.past_deadline():  # first: past both, the deadline is what cut the search
            return True
        if self.budget is not None and self.work >= self.budget.work:
            self.stopped_by = "budget"
            return True
        return False

    def past_deadline(self, stop_at: float | None = None) -> bool:
        """Past ``stop_at`` (default: the search's), with a placement replayed; says so in
        ``stopped_by``."""
        at = self.stop_at if stop_at is None else stop_at
        if min(self.best, default=math.inf) == math.inf or time.perf_counter() < at:
            return False
        self.stopped_by = "deadline"
        return True

    def bounded(self, j: int) -> None:
        """Count one node bound of job ``j`` (its work too)."""
        self.nodes_bounded += 1
        self.work += self.states[j].node_cost

    def node_bound(self, j: int, node: Node) -> float:
        """Bound ``node`` of job ``j``, counting its work and what the bound did beyond
        a node's usual (the orders and patterns of a pending axis it visited)."""
        self.bounded(j)
        st = self.states[j]
        got = st.bounds.bound(node)
        pend = st.bounds.pending
        side = (
            pend.orders_visited * ORDER_COST
            + pend.patterns_bounded * NODE_OVERHEAD
            + pend.permutes_bounded * PAIR_COST
            + st.bounds.timelines_over_children * st.node_cost
        )
        self.work += side - st.side_work
        st.side_work = side
        return got

    # -- the heap ------------------------------------------------------------------

    def push(self, bound: float, j: int, item: Node | Leaf) -> None:
        heapq.heappush(self.heap, (bound, next(self.seq), j, item))

    def prune(self, j: int, item: Node | Leaf) -> None:
        st = self.states[j]
        st.proven_worse += 1 if isinstance(item, Leaf) else st.job.space.count(item)

    def seed(self) -> list[Leaf]:
        """Push every extra order; return the forced leaves (replayed before the roots)."""
        forced: list[Leaf] = []
        for j, st in enumerate(self.states):
            job = st.job
            for label, order in job.extra_orders:
                leaf = Leaf(j, label, order.physical_ids, _EXTRA_COMPLEXITY)
                if label in job.forced:
                    forced.append(leaf)
                    continue
                bound = self.leaf_bound(j, order.physical_ids)
                self.push(bound, j, leaf)
        return forced

    def seed_roots(self) -> None:
        """Push every tree's roots, each under its bound (whatever the budget) -- or, once
        past :data:`_ROOTS_SHARE` of the deadline, under its job's *floor*: the step with
        every collective taking no time, below every placement's Q2 (a pod's roots can take
        minutes to bound: 1,086 of 8,192 devices each on tpu7x:16x16x16)."""
        for j, st in enumerate(self.states):
            if not st.job.tree:
                continue
            floor: float | None = None
            for root in st.job.space.roots():
                if not self.past_deadline(self.roots_stop_at):
                    self.push(self.node_bound(j, root), j, root)
                    continue
                if floor is None:
                    free = {c.id: 0.0 for c in st.job.graph.collectives}
                    floor = st.bounds.timeline.step_time(free)
                self.push(floor, j, root)
                self.roots_floored += 1

    def probe(self, descents: int, keep: int) -> list[tuple[float, Leaf]]:
        """Leaves of each tree worth replaying first: of ``descents`` random
        root-to-leaf walks (seeded, so the same every run), the ``keep`` best by leaf
        bound, if that bound beats the incumbent.

        Leaf bounds are tight where inner bounds are not (an axis not yet placed
        is bounded at one hop), so on a big tree best-first alone widens the top
        levels and replays nothing; a good incumbent from the probes proves more
        of the tree worse and is the answer if a deadline stops the search. The
        probes are extra placements: counted in the job's total when replayed, once.
        """
        out: list[tuple[float, Leaf]] = []
        for j, st in enumerate(self.states):
            space = st.job.space
            # A cheap program walks more: up to 8x, within _PROBE_SHARE of the budget.
            share = _PROBE_SHARE * (self.budget or DEFAULT_SEARCH_BUDGET).work
            walks = max(descents, min(8 * descents, int(share) // st.node_cost))
            n = min(walks, space.count() // 8) if st.job.tree else 0
            if self.open_bound(j) >= self.incumbent(j):
                n = 0  # no leaf of this tree can beat the incumbent
            rng = random.Random(j)
            seen = {st.class_key(o.physical_ids) for _, o in st.job.extra_orders}
            found: list[tuple[float, str, Leaf]] = []
            for _ in range(n):
                if self.past_deadline():  # the given orders (or the roots) took it all
                    self.probes_cut = True
                    break
                node = space.random_leaf(rng)
                leaf = Leaf(j, space.label(node), space.physical_ids(node), space.complexity(node))
                key = st.class_key(leaf.physical_ids)
                if key not in seen:
                    seen.add(key)
                    found.append((self.node_bound(j, node), leaf.label, leaf))
            best = sorted(found, key=lambda t: t[:2])[:keep]
            out.extend((bound, leaf) for bound, _, leaf in best if bound < self.incumbent(j))
        return sorted(out, key=lambda t: (t[0], t[1].label, t[1].job))

    def replay_probes(self, probed: Sequence[tuple[float, Leaf]]) -> None:
        """Replay the probes, lowest leaf bound first, ``_PROBE_BATCH`` at a time; a
        probe whose bound no longer beats the incumbent is dropped (leaf bounds are
        within 0.5 % of Q2, so one far above the best replayed would only cost its
        replay: a 256-chip gather program's costs ~60x a Ulysses program's)."""
        for start in range(0, len(probed), _PROBE_BATCH):
            if self.past_deadline():
                self.probes_cut = True
                break
            batch = [
                leaf
                for bound, leaf in probed[start : start + _PROBE_BATCH]
                if bound < self.incumbent(leaf.job)
            ]
            # Not one the deadline would stop halfway, at the rate the forced replays ran
            # (tpu7x:16x16x16: 544 s for two of 8,192 devices).
            cost = sum(REPLAY_COST * self.states[leaf.job].node_cost for leaf in batch)
            if self.past_deadline(self.stop_at - cost * self.s_per_replay_work):
                self.probes_cut = True
                break
            for leaf in batch:
                self.states[leaf.job].total += 1  # an extra placement of its sharding
            if batch:
                self.record(batch)

    def record_forced(self, forced: Sequence[Leaf]) -> None:
        """Replay the other shardings' given orders (cheapest first) as far as the deadline
        holds at the first one's rate, one at a time, each cut at the deadline
        (:mod:`aoizora.rank.cutoff`: the rate can be minutes off); the rest wait in the
        heap under their leaf bound."""
        fits, spent = [], 0.0
        for leaf in sorted(forced, key=lambda x: (self.states[x.job].node_cost, x.job)):
            cost = REPLAY_COST * self.states[leaf.job].node_cost * self.s_per_replay_work
            if time.perf_counter() < self.stop_at - spent - cost:  # not past_deadline:
                fits.append(leaf)  # a deferral alone does not stop the search
                spent += cost
        for leaf in (x for x in forced if x not in fits):
            self.deferred.append(leaf)
            self.push(self.leaf_bound(leaf.job, leaf.physical_ids), leaf.job, leaf)
        for leaf in fits:  # one at a time: each cut at the deadline
            self.deferred += self.record([leaf])

    def finish_forced(self) -> None:
        """A search that ended by itself (proven, within the gap, the budget) did not need
        its deadline: the given orders it left unreplayed are replayed (the baselines')."""
        for leaf in [x for x in self.deferred if not self.states[x.job].scored]:
            if self.stopped_by != "deadline":
                self.record([leaf])

    def leaf_bound(self, j: int, ids: tuple[int, ...]) -> float:
        st = self.states[j]
        self.bounded(j)
        # Chip coordinates, as the tree's leaves are bounded (on tpu7x an id names a
        # core, not a chip).
        return st.bounds.leaf_bound(st.job.space.chip_coords(ids))

    def collect(self) -> list[Leaf]:
        """Pop nodes until a batch of new leaves is ready (or nothing is left)."""
        batch: list[Leaf] = []
        keys: dict[tuple[int, tuple[int, ...]], int] = {}  # class -> its place in the batch
        within_gap: list[_Entry] = []  # open, but at most gap_tolerance better than the best
        while self.heap and len(batch) < self.batch_size:
            if self.past_limit():
                break  # what is left stays open, under its bound
            entry = heapq.heappop(self.heap)
            bound, _, j, item = entry
            if bound >= self.incumbent(j):
                self.prune(j, item)
                if not self.per_job:  # the heap is ordered: everything left is no better
                    for _, _, k, rest in self.heap:
                        self.prune(k, rest)
                    self.heap.clear()
                continue
            if bound >= self.incumbent(j) * (1.0 - self.gap_tolerance):
                self.stopped_by = "gap"
                within_gap.append(entry)
                if not self.per_job:  # the heap is ordered: the gap is within the tolerance
                    break
                continue
            self.split_or_take(bound, j, item, batch, keys)
        for entry in within_gap:
            heapq.heappush(self.heap, entry)
        return batch

    def split_or_take(
        self,
        bound: float,
        j: int,
        item: Node | Leaf,
        batch: list[Leaf],
        keys: dict[tuple[int, tuple[int, ...]], int],
    ) -> None:
        """Queue the leaf ``item`` for replay, or bound and push the children of a node."""
        if isinstance(item, Leaf):
            self.take_leaf(item, batch, keys)
            return
        st = self.states[j]
        space = st.job.space
        if space.is_leaf(item):
            leaf = Leaf(j, space.label(item), space.physical_ids(item), space.complexity(item))
            self.take_leaf(leaf, batch, keys)
            return
        for child in space.children(item):
            if self.past_limit():
                # Past the deadline or the budget a child keeps its parent's bound
                # (every placement under the child is under the parent too).
                self.push(bound, j, child)
                continue
            child_bound = self.node_bound(j, child)
            if child_bound >= self.incumbent(j):
                self.prune(j, child)
            else:
                self.push(child_bound, j, child)

    def take_leaf(
        self, leaf: Leaf, batch: list[Leaf], keys: dict[tuple[int, tuple[int, ...]], int]
    ) -> None:
        """Queue a new class for replay; count a class already replayed or queued."""
        st = self.states[leaf.job]
        key = st.class_key(leaf.physical_ids)
        if key in st.scored:
            st.repeats += 1
            st.scored[key] = _merge(st.scored[key], leaf)
        elif (leaf.job, key) in keys:
            st.repeats += 1
            i = keys[(leaf.job, key)]
            batch[i] = min(batch[i], leaf, key=lambda x: (x.complexity, x.label))
            self.raw[(leaf.job, key)] = self.raw.get((leaf.job, key), 1) + 1
        else:
            keys[(leaf.job, key)] = len(batch)
            batch.append(leaf)

    def record(self, batch: Sequence[Leaf]) -> list[Leaf]:
        """Replay ``batch`` and score it; a replay cut at the deadline (NaN or
        :class:`ReplayCut`, :mod:`aoizora.rank.cutoff`) leaves its leaf open in the heap
        under its leaf bound; never before one placement is scored (the first sharding's
        given orders: the plan's figure). Returns the leaves cut."""
        until = self.stop_at if min(self.best) < math.inf else math.inf
        try:
            with replays_until(until):
                q2s = list(self.evaluate(batch))
        except ReplayCut:
            q2s = [math.nan] * len(batch)
        if len(q2s) != len(batch):
            raise PlacementError(f"evaluate returned {len(q2s)} times for {len(batch)} placements")
        left = [leaf for leaf, q2 in zip(batch, q2s, strict=True) if math.isnan(q2)]
        for leaf in left:
            self.push(self.leaf_bound(leaf.job, leaf.physical_ids), leaf.job, leaf)
        for leaf, q2 in zip(batch, q2s, strict=True):
            if math.isnan(q2):
                continue
            st = self.states[leaf.job]
            st.simulated += 1
            self.work += REPLAY_COST * st.node_cost
            key = st.class_key(leaf.physical_ids)
            st.scored[key] = Scored(leaf, float(q2), self.raw.pop((leaf.job, key), 1))
            self.best[leaf.job] = min(self.best[leaf.job], float(q2))
        return left

    def open_bound(self, j: int) -> float:
        return min((b for b, _, k, _ in self.heap if k == j), default=math.inf)


def _merge(scored: Scored, leaf: Leaf) -> Scored:
    """Another label of an already replayed class: keep the simplest as the id."""
    keep, other = sorted((scored.leaf, leaf), key=lambda x: (x.complexity, x.label))
    aliases = scored.aliases
    if other.complexity == _EXTRA_COMPLEXITY and other.label not in aliases:
        aliases = (*aliases, other.label)
    return Scored(keep, scored.q2_s, scored.num_raw + 1, aliases)


def search_placements(
    jobs: Sequence[Job],
    evaluate: Callable[[Sequence[Leaf]], Sequence[float]],
    *,
    batch_size: int = 8,
    per_job: bool = False,
    deadline_s: float | None = None,
    gap_tolerance: float = 0.0,
    budget: SearchBudget | None = None,
    probes: int = 64,
    algorithm: str | Mapping[str, str] | None = None,
    progress: Progress | None = None,
    progress_every_s: float = 10.0,
) -> SearchReport:
    """The best placement over every job's family: exact, or with a proven gap.

    ``evaluate`` replays a batch of leaves exactly (in order). ``budget`` (work,
    :class:`SearchBudget`; ``None``: no limit) and ``deadline_s`` (seconds from the
    start, so it depends on the machine's load) stop the search: past either no node
    is split or bounded (children of a node being split keep its bound), the batch
    already collected is replayed, and the report carries the bound left open.
    The given orders are replayed, and the roots bounded and the probes walked and replayed,
    whatever the budget; the first sharding's given orders always, the others' after the
    probes (cheapest first) as far as the deadline holds, each cut at it
    (:mod:`aoizora.rank.cutoff`), the rest left in the heap under their leaf bound;
    past the deadline the roots left wait under their sharding's floor and the probes stop
    (the bound still gives the gap).
    ``probes`` random walks a tree seed its probes (0: none). ``gap_tolerance``
    (a fraction, e.g. ``0.001``) stops the search once no open
    placement can beat the best found by more than that fraction of it; the
    default 0 searches until the best placement is proven. ``progress`` gets a
    line every ``progress_every_s`` seconds and one at the end.
    """
    if not jobs:
        raise PlacementError("search_placements needs at least one job (a compiled sharding)")
    if batch_size < 1:
        raise PlacementError(f"batch_size={batch_size} must be a positive integer, e.g. 8")
    check_gap_tolerance(gap_tolerance)
    t0 = time.perf_counter()
    run = _Search(
        jobs, evaluate, batch_size=batch_size, per_job=per_job, algorithm=algorithm,
        gap_tolerance=gap_tolerance, budget=budget,
    )  # fmt: skip
    if deadline_s is not None:
        run.stop_at = t0 + deadline_s
        run.roots_stop_at = t0 + _ROOTS_SHARE * deadline_s
    forced = run.seed()
    if forced:  # the first sharding's (Stage 1's best) first: its rate prices the others'
        first = [leaf for leaf in forced if leaf.job == forced[0].job]
        started, work = time.perf_counter(), run.work
        run.record(first)  # never cut: nothing is scored yet
        run.s_per_replay_work = (time.perf_counter() - started) / max(1, run.work - work)
    run.seed_roots()  # after the first forced: past the deadline, under floors
    run.replay_probes(run.probe(probes, _PROBES_KEPT))  # its Q2 filters them
    # The other shardings' given orders (the baselines') after the probes: under a
    # deadline the best placement comes first (v5p:8x8x8's three took its 37 s, the probes
    # none, and its winner was the default order, 31 % slower than the probes' 264.44 ms).
    run.record_forced([leaf for leaf in forced if forced and leaf.job != forced[0].job])
    last = time.perf_counter()
    if progress is not None:  # the given orders and probes can take minutes on 256 chips
        progress(progress_line(run, last - t0))
    pause_point("search")  # a test seam (aoizora.interrupts), a no-op otherwise
    while True:
        batch = run.collect()
        if not batch:
            break
        run.record(batch)
        now = time.perf_counter()
        if progress is not None and now - last >= progress_every_s:
            last = now
            progress(progress_line(run, now - t0))
        if deadline_s is not None and now - t0 >= deadline_s:
            run.stopped_by = "deadline"
            break
    run.finish_forced()
    report = _report(run, time.perf_counter() - t0)
    if progress is not None:
        progress(progress_line(run, report.seconds, final=report))
    return report


def _report(run: _Search, seconds: float) -> SearchReport:
    jobs = []
    for j, st in enumerate(run.states):
        scored = sorted(st.scored.values(), key=lambda s: (s.q2_s, s.leaf.label))
        jobs.append(
            JobReport(
                scored=tuple(scored),
                num_placements=st.total,
                simulated=st.simulated,
                repeats=st.repeats,
                proven_worse=st.proven_worse,
                bound_s=run.open_bound(j),
            )
        )
    candidates = [(s.q2_s, run.states[j].job.name, s.leaf.label, j, s) for j, r in enumerate(jobs)
                  for s in r.scored]  # fmt: skip
    if not candidates:
        raise PlacementError("the search replayed no placement (every job was empty)")
    _, _, _, wj, winner = min(candidates, key=lambda c: c[:3])
    bound = min([winner.q2_s, *(r.bound_s for r in jobs)])
    complete = all(r.open == 0 for r in jobs)
    return SearchReport(
        tuple(jobs), wj, winner, bound, seconds, run.nodes_bounded, work=run.work,
        stopped_by=None if complete else run.stopped_by,
    )  # fmt: skip
