"""The work budget's units (:class:`aoizora.rank.search.SearchBudget`): what bounding a
node and replaying a placement of a program cost, counted, not timed.

A budget stops the same search at the same node on a busy machine and an idle one:
bounding a node of a sharding costs its :func:`program_size` (the point-to-point
transfers its collectives make, plus a fixed share for the work every node costs) and
replaying one of its placements :data:`REPLAY_COST` times that. Both grow with the
program's group sizes as their CPU time does (docs/placements.md, "The work budget").
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.errors import PlacementError
from aoizora.hlo.graph import CollectiveGraph

__all__ = [
    "DEFAULT_SEARCH_BUDGET",
    "DEFAULT_SEARCH_GAP",
    "NODE_OVERHEAD",
    "ORDER_COST",
    "PAIR_COST",
    "REPLAY_COST",
    "SearchBudget",
    "check_gap_tolerance",
    "program_size",
]

# What bounding one node costs besides its transfers (numpy calls, heap, bookkeeping), in
# transfers: measured ~1 ms a node for small programs against ~0.17 us a transfer for
# large ones on this 2-core machine (docs/placements.md, "The work budget").
NODE_OVERHEAD = 6_000
REPLAY_COST = 100  # an exact replay costs this many bounded nodes of its program
# A node whose pending axis's orders its bound visits (rank.set_bounds.pending_bounds)
# pays ORDER_COST an order visited and NODE_OVERHEAD a pattern bounded: ~60 us and ~1 ms
# on this machine (docs/placements.md, bound 4, "Pending-axis orders").
ORDER_COST = 350
# ... and PAIR_COST a permute pair bounded at one order (aoizora.rank.pending, in numpy:
# 0.25 s for 4,096 orders x 256 pairs on v6e:16x16 here, ~1.4 units), and a node's work
# for every extra timeline it runs over the children's Pareto front.
PAIR_COST = 1


def program_size(graph: CollectiveGraph) -> int:
    """The point-to-point transfers ``graph``'s collectives make once: ``n (n - 1)`` a
    group of ``n`` devices (every member sends to every other, as a ring's steps or an
    all-to-all do), one a collective-permute pair. Placement-independent: the work
    budget's measure of how big a program is.

    >>> from types import SimpleNamespace as C  # a graph's collectives, as far as it looks
    >>> ring = C(groups=((0, 1, 2, 3), (4, 5, 6, 7)), pairs=())
    >>> program_size(C(collectives=[ring, C(groups=(), pairs=((0, 1), (1, 0)))]))
    26
    """
    total = 0
    for c in graph.collectives:
        total += len(c.pairs) if c.pairs else sum(len(g) * (len(g) - 1) for g in c.groups)
    return total


@dataclass(frozen=True)
class SearchBudget:
    """The work a search may do before it stops with its best placement, bound and gap.

    ``work`` counts :func:`program_size` + ``NODE_OVERHEAD`` for every node bounded and
    :data:`REPLAY_COST` times that for every placement replayed (from the Q2 cache
    or not: a resumed search counts what a cold one does). The search checks it
    between nodes, so it may overshoot by one batch of replays.
    """

    work: int

    def __post_init__(self) -> None:
        if isinstance(self.work, bool) or not isinstance(self.work, int) or self.work < 1:
            raise PlacementError(
                f"search budget {self.work!r} must be a positive number of work units, "
                f"e.g. {DEFAULT_SEARCH_BUDGET.work}"
            )


# About 2 CPU minutes for the largest programs measured (256-member rings on v5e:16x16),
# seconds on 16 chips; docs/placements.md, "The work budget".
DEFAULT_SEARCH_BUDGET = SearchBudget(work=500_000_000)
# The default stop: nothing left open can beat the best found by more than 0.1 %.
DEFAULT_SEARCH_GAP = 0.001


def check_gap_tolerance(gap_tolerance: float) -> None:
    """Raise :class:`PlacementError` unless ``0 <= gap_tolerance < 1``."""
    if not 0.0 <= gap_tolerance < 1.0:
        raise PlacementError(
            f"gap tolerance {gap_tolerance!r} must be a fraction in [0, 1), e.g. 0.001 to "
            "stop once no placement left can be more than 0.1% faster; 0 proves the best"
        )
