"""The simulated timeline as a Chrome/Perfetto trace (open it at ui.perfetto.dev).

Layout (Chrome "JSON Array/Object" trace format, times in microseconds):

- one process per chip, ``chip <id> (x,y)``: thread ``compute`` carries the
  chip's compute nodes, threads ``send k`` carry the flows the chip sends --
  one complete (``"ph": "X"``) event per flow, from its release to its last
  byte, with hops, bytes and the drain start in ``args``. Overlapping events
  go to separate lanes (greedy interval partitioning), because a trace thread
  must hold properly nested slices.
- one process ``ICI links`` with a thread per directed link: one ``busy``
  event per maximal interval in which some flow was draining over the link
  (the flow's route comes from :func:`sim.routing.route_link_ids`, the same
  function the engine uses). Their durations add up to the link's ``busy_s``.
- one process ``joins`` for compute nodes that sit on no chip (collective
  completion joins, barriers).

Exactly one event of category ``flow`` per flow and one of category
``compute`` per compute node; ``M`` events name the processes and threads.

>>> from sim.collectives import collective_flows
>>> from sim.engine import simulate
>>> from sim.topology import load_slice
>>> s = load_slice("v5e:2x2")
>>> plan = collective_flows("all-gather", [[(0, 0), (1, 0)]], buffer_bytes=2e6, id_prefix="ag")
>>> t = chrome_trace(simulate(s, plan.nodes), s)
>>> sorted({e["cat"] for e in t["traceEvents"] if e["ph"] == "X"})
['compute', 'flow', 'link']
>>> len([e for e in t["traceEvents"] if e.get("cat") == "flow"]) == len(plan.flows)
True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aoizora.atomic import write_atomic
from sim.records import SimResult
from sim.routing import route_link_ids
from sim.topology import Slice

__all__ = ["LINKS_PID", "JOINS_PID", "chip_pid", "chrome_trace", "write_chrome_trace"]

LINKS_PID = 1
JOINS_PID = 2
_CHIP_PID_BASE = 100
_US = 1e6  # Chrome trace timestamps are microseconds


def chip_pid(physical_id: int) -> int:
    """The trace process id of chip ``physical_id``."""
    return _CHIP_PID_BASE + physical_id


def _lanes(intervals: Sequence[tuple[float, float, int]]) -> dict[int, int]:
    """Lane per interval (start, end, key): first lane free at the start, in start order."""
    ends: list[float] = []
    lane_of: dict[int, int] = {}
    for start, end, key in sorted(intervals):
        for lane, last in enumerate(ends):
            if last <= start:
                ends[lane] = end
                lane_of[key] = lane
                break
        else:
            lane_of[key] = len(ends)
            ends.append(end)
    return lane_of


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float, int]]:
    """Merge overlapping (start, end) intervals; each result counts the intervals merged."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
            merged[-1][2] += 1
        else:
            merged.append([start, end, 1])
    return [(a, b, int(n)) for a, b, n in merged]


def _meta(pid: int, tid: int | None, kind: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": kind, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    else:
        event["tid"] = 0
    return event


def _span(
    name: str, cat: str, start_s: float, end_s: float, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
    """A complete (``"ph": "X"``) event from ``start_s`` to ``end_s`` on thread ``(pid, tid)``."""
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": start_s * _US,
        "dur": (end_s - start_s) * _US,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _link_name(slice_: Slice, i: int) -> str:
    link = slice_.links[i]
    axis = "xyz"[link.dim]
    forward = link.dst[link.dim] > link.src[link.dim]
    sign = "+" if forward != link.wrap else "-"
    wrap = " wrap" if link.wrap else ""
    return f"{axis}{sign} {link.src}->{link.dst}{wrap}"


def _compute_events(result: SimResult, slice_: Slice) -> list[dict[str, Any]]:
    """Compute nodes: lanes per chip; joins (no chip) on their own process."""
    events: list[dict[str, Any]] = []
    per_chip_compute: dict[int, list[tuple[float, float, int]]] = {}
    for k, c in enumerate(result.computes):
        if c.chip is not None:
            per_chip_compute.setdefault(slice_.physical_id(c.chip), []).append(
                (c.release_s, c.finish_s, k)
            )
    compute_lane: dict[int, int] = {}
    for pid in sorted(per_chip_compute):
        lanes = _lanes(per_chip_compute[pid])
        compute_lane.update(lanes)
        for lane in sorted(set(lanes.values())):
            label = "compute" if lane == 0 else f"compute {lane}"
            events.append(_meta(chip_pid(pid), lane, "thread_name", label))
    for k, c in enumerate(result.computes):
        if c.chip is None:
            pid, tid = JOINS_PID, 0
        else:
            pid, tid = chip_pid(slice_.physical_id(c.chip)), compute_lane[k]
        args = {"duration_s": c.duration_s, "chip": None if c.chip is None else list(c.chip)}
        events.append(_span(c.id, "compute", c.release_s, c.finish_s, pid, tid, args))
    return events


def _flow_events(
    result: SimResult, slice_: Slice, routing_order: Sequence[int] | None
) -> tuple[list[dict[str, Any]], dict[int, list[tuple[float, float]]]]:
    """Flows: lanes per sending chip, numbered after the compute lanes; and when each
    link was busy draining them."""
    events: list[dict[str, Any]] = []
    per_chip_flows: dict[int, list[tuple[float, float, int]]] = {}
    for k, f in enumerate(result.flows):
        per_chip_flows.setdefault(slice_.physical_id(f.src), []).append(
            (f.release_s, f.finish_s, k)
        )
    link_busy: dict[int, list[tuple[float, float]]] = {}
    for pid in sorted(per_chip_flows):
        lanes = _lanes(per_chip_flows[pid])
        first = 1000  # send lanes sort after compute lanes
        for lane in sorted(set(lanes.values())):
            events.append(_meta(chip_pid(pid), first + lane, "thread_name", f"send {lane}"))
        for _, _, k in sorted(per_chip_flows[pid]):
            f = result.flows[k]
            args = {
                "src": list(f.src),
                "dst": list(f.dst),
                "size_bytes": f.size_bytes,
                "hops": f.hops,
                "drain_us": f.drain_s * _US,
            }
            events.append(
                _span(f.id, "flow", f.release_s, f.finish_s, chip_pid(pid), first + lanes[k], args)
            )
            if f.finish_s > f.drain_s and f.hops > 0:
                for link in route_link_ids(slice_, f.src, f.dst, order=routing_order).tolist():
                    link_busy.setdefault(int(link), []).append((f.drain_s, f.finish_s))
    return events, link_busy


def chrome_trace(
    result: SimResult,
    slice_: Slice,
    *,
    routing_order: Sequence[int] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], ...}``.

    ``slice_`` and ``routing_order`` must be the ones the run used (they give
    each flow's links).
    """
    events: list[dict[str, Any]] = []
    events.append(_meta(LINKS_PID, None, "process_name", "ICI links"))
    events.append(_meta(JOINS_PID, None, "process_name", "joins"))
    events.append(_meta(JOINS_PID, 0, "thread_name", "joins"))
    for pid, coord in enumerate(slice_.coords):
        events.append(_meta(chip_pid(pid), None, "process_name", f"chip {pid} {coord}"))
        events.append(_meta(chip_pid(pid), None, "process_sort_index", str(pid)))
    events += _compute_events(result, slice_)
    flow_events, link_busy = _flow_events(result, slice_, routing_order)
    events += flow_events
    for i in range(len(slice_.links)):
        events.append(_meta(LINKS_PID, i, "thread_name", _link_name(slice_, i)))
    for i in sorted(link_busy):
        for start, end, count in _union(link_busy[i]):
            args = {"flows": count, "bytes_carried_total": result.links[i].bytes_carried}
            events.append(_span("busy", "link", start, end, LINKS_PID, i, args))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "slice": result.slice_name,
            "makespan_s": result.makespan_s,
            "name": name or result.slice_name,
            "generator": "aoizora.pictures.trace",
        },
    }


def write_chrome_trace(trace: dict[str, Any], path: str | Path) -> Path:
    """Write ``trace`` as compact JSON (stable key order; same input, same bytes)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(trace, separators=(",", ":")) + "\n")
    return out
