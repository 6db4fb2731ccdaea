"""sim: a discrete-event ICI flow simulator for TPU slices.

Collectives are replayed as fluid flows over the directed links of a 2D/3D
mesh or torus with dimension-ordered routing and max-min fair bandwidth
sharing, on a SimPy clock. Each group of a collective runs the algorithm its
physical layout calls for (``auto``: a ring round a physical ring, a folded
ring on a line). This package never imports :mod:`aoizora`.

>>> from sim import collective_flows, load_slice, simulate
>>> s = load_slice("v5e:2x4")
>>> plan = collective_flows("all-gather", [[(0, 0), (1, 0)]], buffer_bytes=9e6, id_prefix="ag")
>>> round(simulate(s, plan.nodes).makespan_s * 1e6, 3)  # 1 us hop + 4.5 MB / 45 GB/s
101.0
"""

from __future__ import annotations

from sim.collectives import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    KINDS,
    CollectivePlan,
    FlowRole,
    GroupPlan,
    collective_flows,
)
from sim.engine import Compute, Flow, max_min_rates, simulate
from sim.errors import CollectiveError, GraphError, RoutingError, SimError, TopologyError
from sim.records import ComputeRecord, Event, FlowRecord, LinkRecord, RateSnapshot, SimResult
from sim.routing import route
from sim.topology import Chip, Link, Slice, generations, load_chip, load_slice, make_slice

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "KINDS",
    "Chip",
    "CollectiveError",
    "CollectivePlan",
    "Compute",
    "ComputeRecord",
    "Event",
    "Flow",
    "FlowRecord",
    "FlowRole",
    "GraphError",
    "GroupPlan",
    "Link",
    "LinkRecord",
    "RateSnapshot",
    "RoutingError",
    "SimError",
    "SimResult",
    "Slice",
    "TopologyError",
    "collective_flows",
    "generations",
    "load_chip",
    "load_slice",
    "make_slice",
    "max_min_rates",
    "route",
    "simulate",
]
