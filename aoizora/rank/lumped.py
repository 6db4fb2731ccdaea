"""The engine's answer for symmetric traffic, one representative per class of alike flows.

A 256-chip ring collective is 65,280 flows per direction, every step of it
the same 256 flows shifted round the ring. The engine (:mod:`sim.engine`)
follows every one of them; this module follows one per class and gets the
same times.

**Why it is exact.** Partition the nodes (flows and computes) and the
channels (the engine's shared links, :mod:`sim.cables`) into cells such that

- nodes of one cell have the same kind, size, start, duration and hop count;
- every node of a cell has the same number of parents (``after``) in each
  node cell;
- every flow of a cell crosses the same number of channels of each channel
  cell, and every channel of a cell carries the same number of flows of
  each node cell (and channels of a cell have the same capacity).

Such a partition is *equitable*. Then at every instant all nodes of a cell are
in the same state, by induction over the engine's instants: a node is
released when its last parent finishes, and its parents' cells finish
together; a flow drains after its hops' latency; and the max-min fair rates
are constant on cells, because progressive filling raises the rates of all
unfrozen flows together and the fair share ``(capacity - frozen load) /
unfrozen flows`` of every channel of a cell is the same, so they saturate at
the same level and freeze whole cells. So the engine's run is the run of the
*quotient*: one fluid flow per cell, which loads each channel of cell ``L``
``m[L, F]`` times (the number of ``F`` flows on each such channel), with
max-min fairness weighted by those counts. :func:`simulate_cells` runs the
quotient with the engine's own rules (instants, batched updates, the
finish tolerance), so the two agree to float rounding.

**Finding the partition.** Colour refinement (the 1-dimensional
Weisfeiler-Leman algorithm) from the attributes above and each node's depth
in the DAG (constant on the cells of the coarsest equitable partition, see
:func:`equitable_partition`), with the multisets of neighbour colours hashed
and mixed with the old colours in 64 bits, for speed. Hashing could merge what
should stay apart, so the result is *verified* exactly before it is used (the
starting attributes constant per cell, integer neighbour counts equal); a
partition that fails, or does not shrink the problem enough (refinement only
splits, so it stops as soon as there are too many cells), sends the nodes to
the engine instead (:func:`simulate_nodes`). The planner's exact Q2
(:class:`aoizora.rank.exact.ExactQ2`) runs every engine run through here.

Checked against the engine on random programs, placements and slices to
1e-9 relative (``tests/aoizora/test_lumped.py``).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.rank.cutoff import CHECK_EVERY, check
from sim.cables import channels
from sim.engine import Compute, Flow, simulate
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = [
    "FlowSystem",
    "NodeTimes",
    "Partition",
    "equitable_partition",
    "flow_system",
    "lumped_times",
    "refine_round",
    "simulate_cells",
    "simulate_nodes",
]

# The engine's rules, mirrored (sim/engine.py: a flow predicted to finish within
# this relative distance of now finishes now; sim/sharing.py: rates closer than
# this are unchanged).
_FINISH_REL_TOL = 1e-12
_RATE_REL_TOL = 1e-12
_RELEASE, _DRAIN, _DONE = 0, 1, 2
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class FlowSystem:
    """A node list as arrays: everything the engine's times depend on, nothing else.

    Node ``i`` is a flow when ``is_flow[i]``; ``pair_node``/``pair_channel``
    list each (flow, channel it crosses); ``parent``/``child`` each dependency
    edge (distinct parents only, as the engine counts them). Channels are
    numbered over the used ones only, ``capacity`` in bytes/s.
    """

    is_flow: np.ndarray
    size_bytes: np.ndarray
    start_s: np.ndarray
    duration_s: np.ndarray
    hops: np.ndarray
    pair_node: np.ndarray
    pair_channel: np.ndarray
    parent: np.ndarray
    child: np.ndarray
    capacity: np.ndarray
    latency_s: float

    @property
    def num_nodes(self) -> int:
        return int(self.is_flow.size)


def flow_system(slice_: Slice, nodes: Sequence[Flow | Compute]) -> FlowSystem:
    """The arrays of ``nodes`` on ``slice_`` (routes as the engine's channels)."""
    pools = channels(slice_)
    index = {nd.id: i for i, nd in enumerate(nodes)}
    routes: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}
    ordering = check_order(slice_, None)  # the engine's dimension order
    n = len(nodes)
    is_flow = np.zeros(n, dtype=bool)
    size = np.zeros(n)
    start = np.zeros(n)
    duration = np.zeros(n)
    hops = np.zeros(n, dtype=np.int64)
    pair_node: list[int] = []
    pair_channel: list[int] = []
    parent: list[int] = []
    child: list[int] = []
    for i, nd in enumerate(nodes):
        start[i] = nd.start_s
        for dep in set(nd.after):
            parent.append(index[dep])
            child.append(i)
        if isinstance(nd, Flow):
            is_flow[i] = True
            size[i] = nd.size_bytes
            key = (tuple(nd.src), tuple(nd.dst))
            links = routes.get(key)
            if links is None:
                links = routes[key] = link_ids(slice_, key[0], key[1], ordering)
            hops[i] = len(links)
            for k in links:
                pair_node.append(i)
                pair_channel.append(pools.channel_of[k])
        else:
            duration[i] = nd.duration_s
    used, pc = np.unique(np.asarray(pair_channel, dtype=np.int64), return_inverse=True)
    capacity = np.asarray(pools.capacity_bytes_per_s, dtype=float)[used]
    return FlowSystem(
        is_flow=is_flow, size_bytes=size, start_s=start, duration_s=duration, hops=hops,
        pair_node=np.asarray(pair_node, dtype=np.int64), pair_channel=pc.astype(np.int64),
        parent=np.asarray(parent, dtype=np.int64), child=np.asarray(child, dtype=np.int64),
        capacity=capacity, latency_s=float(slice_.hop_latency_s),
    )  # fmt: skip


# -- the partition ---------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """Cell numbers of every node and every (used) channel; cells are numbered from 0."""

    node_cell: np.ndarray
    channel_cell: np.ndarray

    @property
    def num_node_cells(self) -> int:
        return int(self.node_cell.max()) + 1 if self.node_cell.size else 0

    @property
    def num_channel_cells(self) -> int:
        return int(self.channel_cell.max()) + 1 if self.channel_cell.size else 0


def _depths(system: FlowSystem) -> np.ndarray:
    """Longest chain of dependencies ending at each node (level-synchronous topological order)."""
    n = system.num_nodes
    order = np.argsort(system.parent, kind="stable")
    kids = system.child[order]
    ptr = np.searchsorted(system.parent[order], np.arange(n + 1))
    waiting = np.bincount(system.child, minlength=n)
    depth = np.zeros(n, dtype=np.int64)
    frontier = np.flatnonzero(waiting == 0)
    level = 0
    while frontier.size:
        depth[frontier] = level
        lo, hi = ptr[frontier], ptr[frontier + 1]
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            break
        offsets = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total)
        reached = kids[offsets]
        np.subtract.at(waiting, reached, 1)
        frontier = np.unique(reached[waiting[reached] == 0])
        level += 1
    return depth


def _renumber(*columns: np.ndarray) -> np.ndarray:
    """Dense cell numbers for the distinct rows of ``columns`` (exact; in sorted order).

    Column by column: the rank of a row's prefix times the number of distinct values
    of the next column plus that value's rank, re-densified, is the rank of the longer
    prefix in lexicographic order -- the numbering ``np.unique(rows, axis=1)`` gives
    (each column compared as int64 bits, as there), without sorting rows as records
    (which took seconds on the 130,000-flow runs of a 256-chip ring).
    """
    code = np.zeros(columns[0].shape[0] if columns else 0, dtype=np.int64)
    for c in columns:
        bits = np.asarray(c).view(np.int64) if c.dtype != np.int64 else np.asarray(c)
        values, rank = np.unique(bits, return_inverse=True)
        _, code = np.unique(code * len(values) + rank.reshape(-1), return_inverse=True)
        code = code.reshape(-1)
    return code.astype(np.int64)


def _refine(colour: np.ndarray, *hashes: np.ndarray) -> np.ndarray:
    """Dense numbers of (colour, hashes...) by one 64-bit mix: far faster than exact rows.

    A collision could merge what should stay apart; :func:`_is_equitable`
    checks the result exactly, so a collision can only cost the shortcut.
    """
    with np.errstate(over="ignore"):
        key = colour.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        for h in hashes:
            key = (key ^ h) * np.uint64(0xBF58476D1CE4E5B9)
            key ^= key >> np.uint64(31)
    _, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _wrapping_sum(values: np.ndarray, target: np.ndarray, size: int) -> np.ndarray:
    """Per target element: the wrapping (mod 2**64) sum of ``values`` over its edges."""
    out = np.zeros(size, dtype=np.uint64)
    np.add.at(out, target, values)
    return out


def _constant_on_cells(values: np.ndarray, cell: np.ndarray) -> bool:
    """Whether ``values`` (the exact starting colour) is one value per cell."""
    _, first = np.unique(cell, return_index=True)
    return bool(np.array_equal(values, values[first][cell]))


def _is_equitable(system: FlowSystem, node_cell: np.ndarray, channel_cell: np.ndarray) -> bool:
    """Exact check: every member of a cell has the same count of neighbours in every cell."""
    sizes_n = np.bincount(node_cell)
    sizes_c = np.bincount(channel_cell)
    relations = (
        (system.pair_node, node_cell, system.pair_channel, channel_cell, sizes_n),
        (system.pair_channel, channel_cell, system.pair_node, node_cell, sizes_c),
        (system.child, node_cell, system.parent, node_cell, sizes_n),
    )
    for elem, elem_cell, nbr, nbr_cell, sizes in relations:
        if elem.size == 0:
            continue
        # (element, neighbour cell) -> count, then (element cell, neighbour cell, count)
        # -> how many elements: a cell is equitable iff that is the whole cell. Pairs
        # are packed into one int64 (both factors are below 2**31 here).
        width = int(nbr_cell.max()) + 1
        keys, counts = np.unique(elem * width + nbr_cell[nbr], return_counts=True)
        el, nb = np.divmod(keys, width)
        top = int(counts.max()) + 1
        triples, members = np.unique(
            (elem_cell[el] * width + nb) * top + counts, return_counts=True
        )
        if np.any(members != sizes[triples // (width * top)]):
            return False
    return True


def refine_round(
    system: FlowSystem,
    node: np.ndarray,
    chan: np.ndarray,
    counts: tuple[int, int],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """One round of colour refinement of (node cells, channel cells), ``counts`` cells of
    each: a node's new colour hashes its cell, its channels' cells and its parents' cells;
    a channel's, its cell and the cells of the flows on it (random weights summed: equal
    multisets give equal sums)."""
    n, m = system.num_nodes, system.capacity.size
    w_chan, w_parent, w_flow = (
        rng.integers(0, _MASK, size=k, dtype=np.uint64, endpoint=True)
        for k in (counts[1], counts[0], counts[0])
    )
    by_links = _wrapping_sum(w_chan[chan[system.pair_channel]], system.pair_node, n)
    by_parents = _wrapping_sum(w_parent[node[system.parent]], system.child, n)
    on_chan = _wrapping_sum(w_flow[node[system.pair_node]], system.pair_channel, m)
    return _refine(node, by_links, by_parents), _refine(chan, on_chan)


def equitable_partition(
    system: FlowSystem,
    *,
    max_rounds: int = 64,
    max_cells: int | None = None,
    depths: np.ndarray | None = None,
) -> Partition | None:
    """The coarsest equitable partition by colour refinement, verified; None if unverified.

    Depth in the DAG is a safe starting colour: on the coarsest equitable
    partition it is constant per cell already (the members of a cell have
    the same multiset of parent cells, so a cell mixing depths would have a
    parent cell mixing smaller ones -- down to depth 0, where no node has
    parents). Starting from it saves one refinement round per level of a
    ring's dependent steps. Refinement only splits cells, so once there are
    more than ``max_cells`` node cells the answer is None at once. ``depths``
    replaces the depths as the starting colour (:mod:`aoizora.rank.compact`,
    whose column system is not a DAG).
    """
    n, m = system.num_nodes, system.capacity.size
    start_node = _renumber(
        system.is_flow.astype(np.int64), system.size_bytes, system.start_s,
        system.duration_s, system.hops, _depths(system) if depths is None else depths,
    )  # fmt: skip
    start_chan = _renumber(system.capacity)
    node, chan = start_node, start_chan
    limit = n if max_cells is None else max_cells
    rng = np.random.default_rng(0x5EED)
    counts = (int(node.max()) + 1 if n else 0, int(chan.max()) + 1 if m else 0)
    for _ in range(max_rounds):
        if counts[0] > limit:
            return None
        node, chan = refine_round(system, node, chan, counts, rng)
        grown = (int(node.max()) + 1 if n else 0, int(chan.max()) + 1 if m else 0)
        if grown == counts:
            break
        counts = grown
    else:
        return None
    if counts[0] > limit:
        return None
    exact = _constant_on_cells(start_node, node) and _constant_on_cells(start_chan, chan)
    if not exact or not _is_equitable(system, node, chan):
        return None
    return Partition(node, chan)


# -- the quotient run --------------------------------------------------------------------


@dataclass(frozen=True)
class _Cells:
    """The quotient: one node per cell, one channel per channel cell, weighted incidences."""

    is_flow: list[bool]
    size_bytes: list[float]
    start_s: list[float]
    duration_s: list[float]
    hops: list[int]
    parents: list[tuple[int, ...]]
    children: list[list[int]]
    links: list[list[tuple[int, float]]]  # node cell -> (channel cell, flows per channel)
    capacity: list[float]


def _quotient(system: FlowSystem, part: Partition) -> _Cells:
    cells = part.num_node_cells
    _, rep = np.unique(part.node_cell, return_index=True)
    mine = rep[part.node_cell[system.child]] == system.child
    parents: list[set[int]] = [set() for _ in range(cells)]
    for c, p in zip(
        part.node_cell[system.child[mine]].tolist(),
        part.node_cell[system.parent[mine]].tolist(),
        strict=True,
    ):
        parents[c].add(p)
    children: list[list[int]] = [[] for _ in range(cells)]
    for c in range(cells):
        for p in sorted(parents[c]):
            children[p].append(c)
    links: list[list[tuple[int, float]]] = [[] for _ in range(cells)]
    if system.pair_node.size:
        chan_sizes = np.bincount(part.channel_cell)
        keys, counts = np.unique(
            np.stack([part.node_cell[system.pair_node], part.channel_cell[system.pair_channel]]),
            axis=1,
            return_counts=True,
        )
        for f, lk, k in zip(keys[0].tolist(), keys[1].tolist(), counts.tolist(), strict=True):
            links[f].append((lk, k / int(chan_sizes[lk])))
    _, chan_rep = np.unique(part.channel_cell, return_index=True)
    return _Cells(
        is_flow=system.is_flow[rep].tolist(),
        size_bytes=system.size_bytes[rep].tolist(),
        start_s=system.start_s[rep].tolist(),
        duration_s=system.duration_s[rep].tolist(),
        hops=system.hops[rep].tolist(),
        parents=[tuple(sorted(p)) for p in parents],
        children=children,
        links=links,
        capacity=system.capacity[chan_rep].tolist(),
    )


def _max_min(cells: _Cells, active: Sequence[int]) -> dict[int, float]:
    """Weighted progressive filling over the draining cells (a channel of cell L carries
    ``m`` flows of each cell on it, so a cell's rate counts ``m`` times there)."""
    weight: dict[int, float] = {}
    users: dict[int, list[int]] = {}
    for f in active:
        for lk, m in cells.links[f]:
            weight[lk] = weight.get(lk, 0.0) + m
            users.setdefault(lk, []).append(f)
    residual = {lk: cells.capacity[lk] for lk in weight}
    heap = [(residual[lk] / w, lk) for lk, w in weight.items()]
    heapq.heapify(heap)
    rate: dict[int, float] = {}
    while heap:
        share, lk = heapq.heappop(heap)
        w = weight[lk]
        if w <= 0 or share != residual[lk] / w:
            continue  # a stale entry
        share = max(share, 0.0)
        for f in users[lk]:
            if f in rate:
                continue
            rate[f] = share
            for other, m in cells.links[f]:
                if other == lk:
                    continue
                residual[other] -= m * share
                weight[other] -= m
                if weight[other] > 0:
                    heapq.heappush(heap, (residual[other] / weight[other], other))
        weight[lk] = 0.0
    return rate


class _CellRun:
    """The engine's life cycle (sim/engine.py ``_Run``), one cell at a time."""

    def __init__(self, cells: _Cells, latency_s: float) -> None:
        self.cells = cells
        k = len(cells.is_flow)
        self.latency_s = latency_s
        self.waiting = [len(p) for p in cells.parents]
        self.ready = list(cells.start_s)
        self.release = [math.nan] * k
        self.drain = [math.nan] * k
        self.finish = [math.nan] * k
        self.now = 0.0
        self.agenda: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.work: list[int] = []
        self.arrivals: list[int] = []
        self.active: dict[int, None] = {}
        self.remaining = [0.0] * k
        self.updated = [0.0] * k
        self.rate = [0.0] * k
        self.predicted = [math.inf] * k

    def _at(self, time_s: float, action: int, c: int) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, (time_s, self.seq, action, c))

    def _release(self, c: int) -> None:
        now = self.now
        self.release[c] = now
        cells = self.cells
        if not cells.is_flow[c]:
            if cells.duration_s[c] > 0:
                self._at(now + cells.duration_s[c], _DONE, c)
            else:
                self._finish(c)
            return
        hops = cells.hops[c]
        if hops == 0:
            self.drain[c] = now
            self._finish(c)
        elif self.latency_s > 0:
            self._at(now + hops * self.latency_s, _DRAIN, c)
        else:
            self._drain(c)

    def _drain(self, c: int) -> None:
        self.drain[c] = self.now
        if self.cells.size_bytes[c] == 0:
            self._finish(c)
        else:
            self.arrivals.append(c)

    def _finish(self, c: int) -> None:
        now = self.now
        self.finish[c] = now
        for k in self.cells.children[c]:
            self.waiting[k] -= 1
            if now > self.ready[k]:
                self.ready[k] = now
            if self.waiting[k] == 0:
                if self.ready[k] > now:
                    self._at(self.ready[k], _RELEASE, k)
                else:
                    self.work.append(k)

    def _run_work(self) -> None:
        i = 0
        while i < len(self.work):
            self._release(self.work[i])
            i += 1
        self.work.clear()

    def _departures(self) -> list[int]:
        limit = self.now * (1.0 + _FINISH_REL_TOL)
        done = [c for c in self.active if self.predicted[c] <= limit]
        for c in done:
            del self.active[c]
        return done

    def _reshare(self) -> None:
        now = self.now
        for c in self.arrivals:
            self.active[c] = None
            self.remaining[c] = self.cells.size_bytes[c]
            self.updated[c] = now
            self.rate[c] = 0.0
        self.arrivals = []
        solved = _max_min(self.cells, list(self.active))
        for c in self.active:
            r = solved[c]
            old = self.rate[c]
            if old > 0.0 and abs(r - old) <= _RATE_REL_TOL * r:
                continue  # unchanged: the old prediction stands
            if old > 0.0:
                self.remaining[c] -= old * (now - self.updated[c])
                self.updated[c] = now
            self.rate[c] = r
            left = max(self.remaining[c], 0.0)
            self.predicted[c] = now + left / r if r > 0.0 else math.inf

    def _instant(self) -> None:
        now = self.now
        while self.agenda and self.agenda[0][0] <= now:
            _, _, action, c = heapq.heappop(self.agenda)
            if action == _RELEASE:
                self._release(c)
            elif action == _DRAIN:
                self._drain(c)
            else:
                self._finish(c)
            self._run_work()
        leaving = False
        while True:
            done = self._departures()
            if not done:
                break
            leaving = True
            for c in done:
                self._finish(c)
            self._run_work()
        if leaving or self.arrivals:
            self._reshare()

    def run(self) -> None:
        for c in range(len(self.waiting)):
            if self.waiting[c] == 0:
                if self.ready[c] > 0:
                    self._at(self.ready[c], _RELEASE, c)
                else:
                    self.work.append(c)
        self._run_work()
        for instant in itertools.count():
            if instant % CHECK_EVERY == 0:
                check()  # a search's deadline (aoizora.rank.cutoff)
            if self.arrivals:
                t = self.now
            else:
                t = self.agenda[0][0] if self.agenda else math.inf
                t = min([t, *(self.predicted[c] for c in self.active)])
            if t == math.inf:
                break
            self.now = max(t, self.now)
            self._instant()
        if any(math.isnan(f) for f in self.finish):
            raise RuntimeError("the quotient run ended with unfinished cells")


def simulate_cells(system: FlowSystem, part: Partition) -> tuple[list[float], list[float]]:
    """Release and finish time of every node cell: the engine's, by the quotient."""
    run = _CellRun(_quotient(system, part), system.latency_s)
    run.run()
    return run.release, run.finish


@dataclass(frozen=True)
class NodeTimes:
    """Release and finish of every node (in the order given) and the makespan.

    ``cells`` is the number of classes simulated (0 when the engine ran).
    """

    release_s: np.ndarray
    finish_s: np.ndarray
    cells: int

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max()) if self.finish_s.size else 0.0


def simulate_nodes(
    slice_: Slice, nodes: Sequence[Flow | Compute], *, min_reduction: float = 8.0
) -> NodeTimes:
    """The engine's release and finish times of ``nodes``: by the quotient when the
    traffic is symmetric enough (``min_reduction`` nodes per class), else by the engine."""
    if len(nodes) >= 4 * min_reduction:
        system = flow_system(slice_, nodes)
        part = equitable_partition(system, max_cells=int(len(nodes) / min_reduction))
        if part is not None:
            release, finish = simulate_cells(system, part)
            cell = part.node_cell
            return NodeTimes(
                np.asarray(release)[cell], np.asarray(finish)[cell], part.num_node_cells
            )
    result = simulate(slice_, nodes)
    by_id = {f.id: (f.release_s, f.finish_s) for f in result.flows}
    by_id.update({c.id: (c.release_s, c.finish_s) for c in result.computes})
    times = np.asarray([by_id[nd.id] for nd in nodes], dtype=float).reshape(-1, 2)
    return NodeTimes(times[:, 0], times[:, 1], 0)


def lumped_times(slice_: Slice, nodes: Sequence[Flow | Compute]) -> tuple[list[float], list[float]]:
    """Release and finish of every node, in order (:func:`simulate_nodes`' arrays).

    The shape :func:`aoizora.replay.simulate_region` takes as ``node_times``.
    """
    times = simulate_nodes(slice_, nodes)
    return times.release_s.tolist(), times.finish_s.tolist()
