"""Q1's overlap model: a two-stream list schedule of the prediction DAG.

Q1 used to charge every collective as fully exposed (``compute + comm``). In a
TPU-compiled step most collectives are asynchronous (``all-gather-start`` /
``-done``, async collective fusions, ``collective-permute-start`` / ``-done``):
XLA's latency-hiding scheduler issues them as soon as their operand exists and
waits for them only at their first consumer, so the compute that depends on
neither runs underneath the transfer. A weight all-gather (FSDP) depends on a
parameter only and hides under the previous matmuls of the layer; a K/V
all-gather can start as soon as K (or V) is projected and hides under the Q
projection, the norms and the other gather's compute. An activation all-to-all
(Ulysses) sits on the critical path and TPU compiles it as a *synchronous*
``all-to-all`` (checked here: every Ulysses compile for v5e has four
synchronous ``all-to-all`` per layer and no async form;
docs/facts.md, Compiled-HLO collectives), so it blocks.

The schedule, per loop body (then scaled by its trip count):

* one **compute stream**: compute nodes in program order; a node starts when
  the stream is free and its dependencies are done (``Node.deps``);
* one **communication stream**: communication nodes in program order (FIFO,
  one collective in flight, as the links of an axis are shared); an
  asynchronous collective starts when its dependencies are done and the stream
  is free -- it does not wait for the compute stream, so it overlaps any
  independent compute;
* a **synchronous** collective (all-to-all) also waits for, and holds, the
  compute stream (``sync_collectives``);
* a loop (``stablehlo.while``) is one block of ``trip * makespan(body)`` that
  holds both streams (XLA finishes every async op of an iteration inside it,
  and iterations do not overlap -- the same assumption as
  :mod:`aoizora.replay`); it starts after the dependencies of its nodes that
  lie outside it.

Q1 is the makespan of the step. With no overlap possible it equals
``compute_s + comm_s`` (the old sum); with perfect overlap it tends to
``max(compute, comm)``. This is the classic list-scheduling bound for a DAG on
two resources (Graham, "Bounds on multiprocessing timing anomalies", 1969;
the same idea as XLA's ``LatencyHidingScheduler``, openxla/xla
``xla/service/latency_hiding_scheduler.cc``, which overlaps async collectives
with independent work). It stays placement-oblivious: durations come from the
per-axis line formulas of :mod:`aoizora.stage1.q1`.

>>> from aoizora.stage1.prediction import Node
>>> def n(i, kind, deps=(), region=0, coll=""):
...     return Node(i, kind, coll, ("x",) if coll else (), (2,) if coll else (), 2 if coll else 1,
...                 0, 0.0, 0.0, 1, deps, "", "", region)
>>> nodes = [n(0, "compute"), n(1, "implicit", coll="all-gather"), n(2, "compute", deps=(1,))]
>>> durations = {0: 3.0, 1: 2.0, 2: 1.0}
>>> makespan_s(nodes, durations, regions=())  # the gather hides under node 0
4.0
>>> nodes[1] = n(1, "implicit", deps=(0,), coll="all-gather")
>>> makespan_s(nodes, durations, regions=())  # now it waits for node 0: fully exposed
6.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aoizora.stage1.prediction import Node

__all__ = ["SYNC_COLLECTIVES", "makespan_s"]

# Collectives TPU-compiled HLO runs synchronously (they block the compute stream).
SYNC_COLLECTIVES = frozenset({"all-to-all"})


def _ancestors(regions: Sequence[tuple[int, int, int]]) -> dict[int, tuple[int, ...]]:
    """Region -> its chain of regions from the root (0) down to itself."""
    parent = {r: p for r, p, _ in regions}
    out: dict[int, tuple[int, ...]] = {0: (0,)}
    for r, _, _ in regions:
        chain = [r]
        while chain[-1] != 0:
            chain.append(parent.get(chain[-1], 0))
        out[r] = tuple(reversed(chain))
    return out


def makespan_s(
    nodes: Sequence[Node],
    durations_s: Mapping[int, float],
    *,
    regions: Sequence[tuple[int, int, int]],
    sync_collectives: frozenset[str] = SYNC_COLLECTIVES,
) -> float:
    """Makespan of one step under the two-stream schedule (module docstring).

    ``durations_s[node_id]`` is the time of one execution of a node;
    ``regions`` the ``(region, parent, trip)`` of every loop body
    (:attr:`~aoizora.stage1.prediction.PredictionDag.regions`). Nodes of a loop body
    must be contiguous in program order, as :func:`~aoizora.stage1.dag.build_dag`
    emits them.
    """
    trips = {r: t for r, _, t in regions}
    chains = _ancestors(regions)
    ordered = sorted(nodes, key=lambda n: n.node_id)
    makespan, _ = _schedule(ordered, 0, durations_s, trips, chains, sync_collectives)
    return makespan


def _schedule(
    nodes: Sequence[Node],
    region: int,
    durations_s: Mapping[int, float],
    trips: Mapping[int, int],
    chains: Mapping[int, tuple[int, ...]],
    sync: frozenset[str],
) -> tuple[float, dict[int, float]]:
    """Schedule ``nodes`` (all in ``region`` or below); (makespan, finish per node id)."""
    depth = len(chains.get(region, (0,)))
    finish: dict[int, float] = {}
    compute_free = 0.0
    comm_free = 0.0
    end = 0.0
    i = 0
    while i < len(nodes):
        node = nodes[i]
        chain = chains.get(node.region, (0,))
        if node.region != region and len(chain) > depth:
            # A loop below this region: its contiguous run of nodes is one block.
            child = chain[depth]
            j = i
            while j < len(nodes) and child in chains.get(nodes[j].region, (0,)):
                j += 1
            run = nodes[i:j]
            inside = {n.node_id for n in run}
            ready = max(
                (finish.get(d, 0.0) for n in run for d in n.deps if d not in inside), default=0.0
            )
            body_s, _ = _schedule(run, child, durations_s, trips, chains, sync)
            start = max(compute_free, comm_free, ready)
            done = start + trips.get(child, 1) * body_s
            for n in run:
                finish[n.node_id] = done
            compute_free = comm_free = end = max(end, done)
            i = j
            continue
        ready = max((finish.get(d, 0.0) for d in node.deps), default=0.0)
        t = float(durations_s.get(node.node_id, 0.0))
        if node.kind == "compute":
            start = max(compute_free, ready)
            compute_free = start + t
        elif node.collective in sync:
            start = max(compute_free, comm_free, ready)
            compute_free = comm_free = start + t
        else:
            start = max(comm_free, ready)
            comm_free = start + t
        finish[node.node_id] = start + t
        end = max(end, start + t)
        i += 1
    return end, finish
