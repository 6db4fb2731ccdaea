"""What a placement search replays and reports (:func:`aoizora.rank.search.search_placements`):
the leaves it hands the exact replay, their scores, and its report per sharding and overall,
with the bound left open and the gap."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JobReport", "Leaf", "Scored", "SearchReport", "relative_gap"]


@dataclass(frozen=True)
class Leaf:
    """One complete placement handed to the exact replay."""

    job: int
    label: str
    physical_ids: tuple[int, ...]
    complexity: tuple[int, int, int, int]


@dataclass(frozen=True)
class Scored:
    """A simulated placement: its Q2 and the other labels that gave the same class."""

    leaf: Leaf
    q2_s: float
    num_raw: int = 1
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobReport:
    """What the search did for one sharding.

    ``num_placements`` counts the family's descriptions plus the extra orders
    and the probes replayed;
    each was either replayed (``simulated`` distinct classes), a repeat of a
    class already replayed (``repeats``), ``proven_worse`` by a bound, or left
    open by a deadline (``open``). ``bound_s``: no open placement of this
    sharding replays faster (``inf`` when none is open).
    """

    scored: tuple[Scored, ...]
    num_placements: int
    simulated: int
    repeats: int
    proven_worse: int
    bound_s: float

    @property
    def open(self) -> int:
        return self.num_placements - self.simulated - self.repeats - self.proven_worse


@dataclass(frozen=True)
class SearchReport:
    """The search's answer: the best placement found, the bound and the gap.

    ``seconds`` and ``nodes_bounded`` are the search's own, also when the report
    was read back from the cache (``cached=True``, :mod:`aoizora.rank.search_cache`).
    ``work`` is what it spent of its :class:`SearchBudget`; ``stopped_by`` says what
    ended it before the optimum was proven: ``"budget"``, ``"deadline"``, ``"gap"``
    (within the gap tolerance), or ``None``.
    """

    jobs: tuple[JobReport, ...]
    winner_job: int
    winner: Scored
    bound_s: float
    seconds: float
    nodes_bounded: int
    cached: bool = False
    work: int = 0
    stopped_by: str | None = None

    @property
    def complete(self) -> bool:
        return all(j.open == 0 for j in self.jobs)

    @property
    def gap(self) -> float:
        """(best found - bound) / best found; 0 when the search proved the optimum."""
        return relative_gap(self.winner.q2_s, self.bound_s)


def relative_gap(best_s: float, bound_s: float) -> float:
    """``(best_s - bound_s) / best_s``; 0 when the bound reaches the best (proven).
    >>> relative_gap(2.0, 1.5), relative_gap(2.0, 2.5)
    (0.25, 0.0)
    """
    return 0.0 if bound_s >= best_s or best_s <= 0 else (best_s - bound_s) / best_s
