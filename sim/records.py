"""What a simulation produces: plain, frozen records that serialise to JSON.

:class:`SimResult` holds one :class:`FlowRecord` per flow (release, start of
drain, finish), one :class:`ComputeRecord` per compute node, one
:class:`LinkRecord` per directed link (bytes carried, busy seconds,
utilisation), the makespan and the exact event log. That is enough to draw a
Chrome/Perfetto trace (flows and computes as slices on a timeline) and a
link-load heatmap (bytes or utilisation per link) without re-running anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from sim.cables import channels
from sim.nodes import Compute, Flow
from sim.topology import Slice

__all__ = [
    "ComputeRecord",
    "Event",
    "FlowRecord",
    "LinkRecord",
    "RateSnapshot",
    "SimResult",
    "build_result",
]


@dataclass(frozen=True)
class FlowRecord:
    """One flow's life.

    ``release_s``: all of ``after`` finished and ``start_s`` reached.
    ``drain_s``: ``release_s + hops * hop_latency_s``, when bytes start to move.
    ``finish_s``: the last byte delivered (``== release_s`` for a 0-hop flow,
    ``== drain_s`` for a zero-byte flow).
    """

    id: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    size_bytes: float
    hops: int
    release_s: float
    drain_s: float
    finish_s: float

    @property
    def duration_s(self) -> float:
        """Release to finish."""
        return self.finish_s - self.release_s


@dataclass(frozen=True)
class ComputeRecord:
    """One compute (or join) node: it runs from ``release_s`` to ``finish_s``."""

    id: str
    chip: tuple[int, ...] | None
    duration_s: float
    release_s: float
    finish_s: float


@dataclass(frozen=True)
class LinkRecord:
    """One directed link's totals over the run.

    ``busy_s`` is the time the link carried any traffic; ``utilisation`` is
    ``bytes_carried / (bandwidth_bytes_per_s * makespan_s)`` (0 when the
    makespan is 0).
    """

    src: tuple[int, ...]
    dst: tuple[int, ...]
    dim: int
    wrap: bool
    bandwidth_bytes_per_s: float
    bytes_carried: float
    busy_s: float
    utilisation: float


class Event(NamedTuple):
    """One entry of the event log: ``kind`` is ``release``, ``drain`` or ``finish``.

    A named tuple (immutable, compared by value): a run logs three per flow, and
    building frozen dataclasses cost more than the run's own bookkeeping.
    """

    time_s: float
    kind: str
    id: str


@dataclass(frozen=True)
class RateSnapshot:
    """The max-min allocation in force from ``time_s`` until the next snapshot.

    ``rates`` pairs each draining flow's id with its rate in bytes/s, in the
    order the flows started draining. Recorded only with
    ``simulate(..., record_rates=True)``.
    """

    time_s: float
    rates: tuple[tuple[str, float], ...]


def _coord(c: tuple[int, ...] | None) -> list[int] | None:
    return None if c is None else list(c)


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced. ``makespan_s`` is the latest finish (0 if empty)."""

    slice_name: str
    shape: tuple[int, ...]
    wraparound: tuple[bool, ...]
    makespan_s: float
    flows: tuple[FlowRecord, ...]
    computes: tuple[ComputeRecord, ...]
    links: tuple[LinkRecord, ...]
    events: tuple[Event, ...]
    rate_log: tuple[RateSnapshot, ...] = ()

    @cached_property
    def _flow_index(self) -> dict[str, FlowRecord]:
        return {rec.id: rec for rec in self.flows}

    @cached_property
    def _finish_index(self) -> dict[str, float]:
        finish = {rec.id: rec.finish_s for rec in self.computes}
        finish.update((rec.id, rec.finish_s) for rec in self.flows)
        return finish

    def flow(self, flow_id: str) -> FlowRecord:
        """The record of flow ``flow_id`` (KeyError if there is none); O(1) after the first call."""
        return self._flow_index[flow_id]

    def finish_s(self, node_id: str) -> float:
        """Finish time of any node, flow or compute; O(1) after the first call."""
        return self._finish_index[node_id]

    def busiest_links(self, count: int = 5) -> tuple[LinkRecord, ...]:
        """The ``count`` links that carried the most bytes (ties: link order)."""
        order = sorted(range(len(self.links)), key=lambda i: (-self.links[i].bytes_carried, i))
        return tuple(self.links[i] for i in order[:count])

    def to_json_dict(self) -> dict[str, Any]:
        """Plain lists/dicts/numbers/strings only, in a fixed order."""
        return {
            "slice": self.slice_name,
            "shape": list(self.shape),
            "wraparound": list(self.wraparound),
            "makespan_s": self.makespan_s,
            "flows": [
                {
                    "id": f.id,
                    "src": list(f.src),
                    "dst": list(f.dst),
                    "size_bytes": f.size_bytes,
                    "hops": f.hops,
                    "release_s": f.release_s,
                    "drain_s": f.drain_s,
                    "finish_s": f.finish_s,
                }
                for f in self.flows
            ],
            "computes": [
                {
                    "id": c.id,
                    "chip": _coord(c.chip),
                    "duration_s": c.duration_s,
                    "release_s": c.release_s,
                    "finish_s": c.finish_s,
                }
                for c in self.computes
            ],
            "links": [
                {
                    "src": list(lk.src),
                    "dst": list(lk.dst),
                    "dim": lk.dim,
                    "wrap": lk.wrap,
                    "bandwidth_bytes_per_s": lk.bandwidth_bytes_per_s,
                    "bytes_carried": lk.bytes_carried,
                    "busy_s": lk.busy_s,
                    "utilisation": lk.utilisation,
                }
                for lk in self.links
            ],
            "events": [[e.time_s, e.kind, e.id] for e in self.events],
        }


def build_result(
    slice_: Slice,
    nodes: Sequence[Flow | Compute],
    *,
    link_routes: Sequence[tuple[int, ...]],
    times: tuple[Sequence[float], Sequence[float], Sequence[float]],
    channel_busy_s: Sequence[float],
    events: Sequence[Event],
    rate_log: Sequence[RateSnapshot],
) -> SimResult:
    """Assemble a :class:`SimResult` from one run's arrays (``times``: release, drain, finish).

    A link's ``bytes_carried`` is the sum of the sizes of the flows routed over
    it: the fluid model delivers every byte of every flow over every link of
    its route (``tests/sim/test_conservation.py`` checks this against the
    integral of the logged rates). The parallel cables of a pooled channel
    (:mod:`sim.cables`) each carry an equal share of its bytes and share its
    busy time.
    """
    release, drain, finish = times
    flows: list[FlowRecord] = []
    computes: list[ComputeRecord] = []
    link_bytes = [0.0] * len(slice_.links)
    for i, node in enumerate(nodes):
        if isinstance(node, Flow):
            size = float(node.size_bytes)
            route = link_routes[i]
            for k in route:
                link_bytes[k] += size
            flows.append(
                FlowRecord(
                    node.id,
                    tuple(node.src),
                    tuple(node.dst),
                    size,
                    len(route),
                    release[i],
                    drain[i],
                    finish[i],
                )
            )
        else:
            chip = None if node.chip is None else tuple(node.chip)
            computes.append(
                ComputeRecord(node.id, chip, float(node.duration_s), release[i], finish[i])
            )
    makespan_s = max(finish, default=0.0)
    return SimResult(
        slice_name=slice_.name,
        shape=slice_.shape,
        wraparound=slice_.wraparound,
        makespan_s=float(makespan_s),
        flows=tuple(flows),
        computes=tuple(computes),
        links=_link_records(slice_, link_bytes, channel_busy_s, makespan_s),
        events=tuple(events),
        rate_log=tuple(rate_log),
    )


def _link_records(
    slice_: Slice, link_bytes: list[float], channel_busy_s: Sequence[float], makespan_s: float
) -> tuple[LinkRecord, ...]:
    pools = channels(slice_)
    pooled = [0.0] * len(pools.cables)
    for k, c in enumerate(pools.channel_of):
        pooled[c] += link_bytes[k]
    bandwidth = slice_.link_bandwidth_bytes_per_s
    records = []
    for k, lk in enumerate(slice_.links):
        c = pools.channel_of[k]
        carried = pooled[c] / pools.cables[c]
        records.append(
            LinkRecord(
                src=lk.src,
                dst=lk.dst,
                dim=lk.dim,
                wrap=lk.wrap,
                bandwidth_bytes_per_s=bandwidth,
                bytes_carried=carried,
                busy_s=channel_busy_s[c],
                utilisation=carried / (bandwidth * makespan_s) if makespan_s > 0 else 0.0,
            )
        )
    return tuple(records)
