"""The simulator's one error hierarchy.

Every error raised on bad input to :mod:`sim` is a :class:`SimError`, so callers
(and the ``python -m sim`` command) can catch exactly these and report them in
one line, while genuine bugs still surface as ordinary exceptions.
"""

from __future__ import annotations

__all__ = ["SimError", "TopologyError", "RoutingError", "GraphError", "CollectiveError"]


class SimError(Exception):
    """Base class of every error the simulator raises on bad input."""


class TopologyError(SimError):
    """A slice, chip generation or topology file is malformed or unknown."""


class RoutingError(SimError):
    """A route was asked between coordinates that are not on the slice."""


class GraphError(SimError):
    """A flow/compute DAG is malformed: unknown ids, cycles, impossible values."""


class CollectiveError(SimError):
    """A collective is malformed: unknown kind or algorithm, bad groups or sizes."""
