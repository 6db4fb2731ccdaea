"""A checked DAG as the flat arrays both event cores run on.

:func:`build_problem` turns the nodes :func:`sim.nodes.validate_graph`
accepted into plain lists indexed by node position: sizes, durations, start
times, how many distinct nodes each waits for, the children each releases
(CSR: ``child_idx[child_ptr[i]:child_ptr[i + 1]]``, from
:attr:`sim.nodes.CheckedGraph.children`) and every flow's route, both as
slice link ids (for the records) and as sharing channels (CSR, for the cores;
:mod:`sim.cables`). The compiled core
(``sim/_flowcore.c``) and the pure-Python reference (:mod:`sim.pycore`) read
the same :class:`Problem`, so they cannot disagree about the input.

>>> from sim.nodes import Compute, Flow, validate_graph
>>> from sim.topology import make_slice
>>> s = make_slice([3], link_bandwidth_bytes_per_s=1e9, hop_latency_s=0.0)
>>> nodes = [Flow("a", (0,), (2,), 1e3), Compute("c", None, 0.0, after=("a", "a"))]
>>> p = build_problem(s, nodes, validate_graph(s, nodes), None)
>>> p.link_routes, p.route_ptr, p.waiting, p.child_ptr, p.child_idx
([(0, 1), ()], [0, 2, 2], [0, 1], [0, 1, 1], [1])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cables import channels
from sim.nodes import CheckedGraph, Compute, Flow
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = ["Problem", "build_problem"]


@dataclass(frozen=True)
class Problem:
    """One run's input, by node position ``i`` (see the module doc).

    ``is_flow[i]`` is 1 for a flow and 0 for a compute; ``size_bytes`` is 0.0
    for computes and ``duration_s`` 0.0 for flows; ``ready_s`` the start time;
    ``capacity_bytes_per_s`` is per channel.
    """

    nodes: Sequence[Flow | Compute]
    ids: list[str]
    is_flow: list[int]
    size_bytes: list[float]
    duration_s: list[float]
    ready_s: list[float]
    waiting: list[int]
    child_ptr: list[int]
    child_idx: list[int]
    link_routes: list[tuple[int, ...]]
    route_ptr: list[int]
    route_chan: list[int]
    capacity_bytes_per_s: list[float]
    hop_latency_s: float


def build_problem(
    slice_: Slice,
    nodes: Sequence[Flow | Compute],
    graph: CheckedGraph,
    order: Sequence[int] | None,
) -> Problem:
    """The arrays of one run of ``nodes`` (checked by ``validate_graph``) on ``slice_``."""
    ordering = check_order(slice_, order)
    pools = channels(slice_)
    chan = pools.channel_of
    # Without pooled cables a link is its own channel: its route is its channels.
    same = chan == tuple(range(len(chan)))
    # Endpoints are canonical int tuples (validate_graph): (0.0, 0) never
    # reaches the route cache, where it would equal (0, 0).
    routes: dict[object, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    link_routes: list[tuple[int, ...]] = []
    route_ptr = [0]
    route_chan: list[int] = []
    is_flow: list[int] = []
    size_bytes: list[float] = []
    duration_s: list[float] = []
    for nd, key in zip(nodes, graph.endpoints, strict=True):
        if key is None:
            assert isinstance(nd, Compute)
            link_routes.append(())
            is_flow.append(0)
            size_bytes.append(0.0)
            duration_s.append(float(nd.duration_s))
        else:
            assert isinstance(nd, Flow)
            got = routes.get(key)
            if got is None:
                ids = link_ids(slice_, key[0], key[1], ordering)
                got = routes[key] = (ids, ids if same else tuple(chan[k] for k in ids))
            link_routes.append(got[0])
            route_chan.extend(got[1])
            is_flow.append(1)
            size_bytes.append(float(nd.size_bytes))
            duration_s.append(0.0)
        route_ptr.append(len(route_chan))
    child_ptr = [0]
    child_idx: list[int] = []
    for kids in graph.children:
        child_idx.extend(kids)
        child_ptr.append(len(child_idx))
    return Problem(
        nodes=nodes,
        ids=[nd.id for nd in nodes],
        is_flow=is_flow,
        size_bytes=size_bytes,
        duration_s=duration_s,
        ready_s=[float(nd.start_s) for nd in nodes],
        waiting=list(graph.waiting),
        child_ptr=child_ptr,
        child_idx=child_idx,
        link_routes=link_routes,
        route_ptr=route_ptr,
        route_chan=route_chan,
        capacity_bytes_per_s=list(pools.capacity_bytes_per_s),
        hop_latency_s=slice_.hop_latency_s,
    )
