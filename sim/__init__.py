"""sim: a discrete-event ICI flow simulator for TPU slices.

Collectives are replayed as fluid flows over the directed links of a 2D/3D
mesh or torus with dimension-ordered routing and max-min fair bandwidth
sharing, on top of SimPy. This package never imports :mod:`aoizora`.
"""

from __future__ import annotations

from sim.errors import GraphError, RoutingError, SimError, TopologyError

__all__ = ["GraphError", "RoutingError", "SimError", "TopologyError"]
