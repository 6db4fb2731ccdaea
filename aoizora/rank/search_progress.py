"""The placement search's progress lines (:func:`aoizora.rank.search.search_placements`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["progress_line"]


# What the line reads of the search (aoizora.rank.search imports this module, so it is
# described here by shape, not imported back).
class _Job(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def simulated(self) -> int: ...
    @property
    def proven_worse(self) -> int: ...
    @property
    def repeats(self) -> int: ...
    def best(self) -> float: ...


class _Budget(Protocol):
    @property
    def work(self) -> int: ...


class _Run(Protocol):
    @property
    def states(self) -> Sequence[_Job]: ...
    @property
    def heap(self) -> Sequence[tuple[float, int, int, Any]]: ...
    @property
    def work(self) -> int: ...
    @property
    def budget(self) -> _Budget | None: ...
    @property
    def nodes_bounded(self) -> int: ...
    @property
    def probes_cut(self) -> bool: ...
    @property
    def roots_floored(self) -> int: ...


class _Report(Protocol):
    @property
    def stopped_by(self) -> str | None: ...


def progress_line(run: _Run, seconds: float, *, final: _Report | None = None) -> str:
    """One ``[search]`` line: time, nodes, work, the placements' fates, best, bound and
    gap; the final one (``final``) says what stopped the search, an earlier one whether
    the deadline cut the probes short."""
    total = sum(st.total for st in run.states)
    simulated = sum(st.simulated for st in run.states)
    worse = sum(st.proven_worse for st in run.states)
    repeats = sum(st.repeats for st in run.states)
    best = min((st.best() for st in run.states), default=math.inf)
    bound = min([best, *(b for b, _, _, _ in run.heap)])
    gap = 0.0 if best <= 0 or math.isinf(best) else max(0.0, (best - bound) / best)
    head = "[search] done" if final is not None else "[search]"
    spent = f"{run.work:,} work" + (f" of {run.budget.work:,}" if run.budget else "")
    why = ""
    if final is not None and final.stopped_by is not None:
        why = {"budget": "; the work budget is spent", "deadline": "; the deadline passed",
               "gap": "; within the gap asked for"}.get(final.stopped_by, "")  # fmt: skip
    elif final is None and run.probes_cut:  # at a pod's size the given orders can spend it
        why = "; probes cut short: the deadline passed"
    if run.roots_floored:
        why += f"; {run.roots_floored} roots under their sharding's floor (not bounded)"
    return (
        f"{head} {seconds:.1f} s, {run.nodes_bounded} nodes bounded, {spent}: {simulated} "
        f"simulated, {repeats} repeats, {worse} proven worse, "
        f"{total - simulated - repeats - worse} open of {total} placements; best "
        f"{best * 1e3:.2f} ms, bound {bound * 1e3:.2f} ms, gap {gap * 100:.2f}%{why}"
    )
