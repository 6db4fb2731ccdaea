"""Stage 1 against the exhaustive answer (``aoizora plan --exhaustive``): did it keep the
sharding that the compiled programs' best placements rank first, and how well does Q1
order the compiled candidates (Spearman's rho of Q1 against the best Q2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aoizora.errors import PlanError
from aoizora.metrics import spearman
from aoizora.stage1.q1 import Stage1Ranking

__all__ = ["ExhaustiveCheck", "exhaustive_check"]


class Scored(Protocol):
    """A compiled candidate's scores as far as the check reads them (the planner's
    ``CandidateScores``): its candidate's id and its best placement's Q2."""

    @property
    def candidate(self) -> Any: ...

    @property
    def best(self) -> Any: ...


@dataclass(frozen=True)
class ExhaustiveCheck:
    """Stage 1 against the exhaustive answer (``--exhaustive``).

    ``winner`` is the best compiled candidate by Q2 (among those Stage 1 scored);
    ``winner_q1_rank`` its place in Stage 1's order (1 = best Q1); ``top1_hit``
    whether Stage 1 ranked it first; ``kept_hit`` whether Stage 1 handed it to
    Stage 2 (:attr:`PlanOutcome.stage1_picks`; baselines do not count).
    :meth:`to_json_dict` gives ``aoizora plan --json``'s ``exhaustive`` object,
    whose names scripts read.
    """

    winner: str
    winner_q1_rank: int
    spearman_q1_q2: float | None
    top1_hit: bool
    kept_hit: bool
    num_compared: int

    def to_json_dict(self) -> dict[str, Any]:
        names = ("winner", "winner_q1_rank", "spearman_q1_q2", "top1_hit", "kept_hit")
        return {name: getattr(self, name) for name in names}


def exhaustive_check(
    ranking: Stage1Ranking,
    scored: Sequence[Scored],
    *,
    picks: Sequence[str] | None = None,
) -> ExhaustiveCheck:
    """Stage 1's recall against the exhaustive winner; Spearman rho of Q1 vs best Q2.

    Only candidates Stage 1 scored and found feasible compete (a baseline folded
    into an equivalent legal candidate is compiled too, but has no Q1 of its own).
    ``kept_hit`` asks whether the winner is among ``picks`` (what Stage 1 handed
    to Stage 2; default the top-K).
    """
    order = [e.candidate_id for e in (*ranking.kept, *ranking.dropped_weak)]
    q1 = {e.candidate_id: e.q1_s for e in (*ranking.kept, *ranking.dropped_weak)}
    ranked = [s for s in scored if s.candidate.id in q1]
    if not ranked:
        raise PlanError("the exhaustive check found no compiled candidate that Stage 1 scored")
    best = min(ranked, key=lambda s: (s.best.q2_s, s.candidate.id))
    pairs = sorted((s.candidate.id, q1[s.candidate.id], s.best.q2_s) for s in ranked)
    rho = spearman([p[1] for p in pairs], [p[2] for p in pairs]) if len(pairs) > 1 else None
    kept = ranking.kept_ids
    handed = tuple(kept if picks is None else picks)
    return ExhaustiveCheck(
        winner=best.candidate.id,
        winner_q1_rank=order.index(best.candidate.id) + 1,
        spearman_q1_q2=rho,
        top1_hit=bool(kept) and kept[0] == best.candidate.id,
        kept_hit=best.candidate.id in handed,
        num_compared=len(pairs),
    )
