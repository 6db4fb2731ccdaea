"""The time bound: how long ``aoizora plan`` or ``aoizora whatif`` may take.

A command with no tuning flags should finish in the time a user waits on any slice: a
plan by default within :data:`DEFAULT_MINUTES`, a what-if within the same for the whole
study, each slice getting the time left divided by the slices left (a slice that ends
early leaves its rest to the next). ``--max-minutes`` sets it (0: none). What the bound
does, phase by phase:

- **Stage 1** runs whole: every legal candidate is scored (its estimates are cached).
- **The compiles.** A round of compiles (one per worker) is expected to take about as long
  as Stage 1 took on the same slice (measured here: 110-150 s of Stage 1 against compiles
  of 59-199 s on 512-2,048 devices, 25-110 s against 57-151 s on 64-256). When the time left
  does not hold :data:`ROUNDS_FOR_BASELINES` such rounds, the baselines are left out (one
  line says so and names the flag) and Stage 1's picks cut to one round. 1.5 from two cold
  what-ifs here: 2 left out v5e:16x16's baselines at load 5 (186 s left, Stage 1 109 s),
  and 1.5 makes the same choices as 2 on the three pod slices.
- **The placement search** stops when the time is up (as ``--search-seconds`` does), with
  its best placement, bound and gap; it gets at least :data:`MIN_SEARCH_S`. The first
  pick's given order (its default order) is always replayed; every other replay (probes,
  the baselines' given orders, minutes each on a pod) is cut at the deadline
  (:mod:`aoizora.rank.cutoff`), its placement left open under its bound: a baseline left
  out has no figure, and a line says so.

So a slice can end later than its share by what must run whatever the bound (Stage 1, one
round of compiles, the first pick's given order, a replay's last stretch between two clock
reads); the line says which bound stopped what. A what-if plans its largest slice first, so
that most of this comes out of the shares of the slices after it
(:func:`aoizora.studies.whatif.run_whatif`), and keeps back from every share the longest a
row took after its plan (:class:`StudyShares`), which the last row takes past its share.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aoizora.errors import WorkloadError

__all__ = [
    "DEFAULT_MINUTES",
    "FLAG",
    "MIN_SEARCH_S",
    "ROUNDS_FOR_BASELINES",
    "StudyShares",
    "TimeBound",
    "compiles_within",
    "say_search_stop",
    "search_deadline",
    "time_bound",
]

B = TypeVar("B")


class SearchStop(Protocol):
    """What ended a placement search (:class:`~aoizora.rank.jobs.SearchSummary`)."""

    @property
    def stopped_by(self) -> str | None: ...


DEFAULT_MINUTES = 15.0
FLAG = "--max-minutes"
ROUNDS_FOR_BASELINES = 1.5  # rounds of compiles the time left must hold to compile baselines
MIN_SEARCH_S = 20.0  # the search's least time, however late it starts


@dataclass(frozen=True)
class TimeBound:
    """A deadline on :func:`time.monotonic`'s clock: ``seconds`` long, ending ``ends_at``
    (``minutes`` is what the user asked for, the whole study's in a what-if)."""

    minutes: float
    seconds: float
    ends_at: float

    def left(self) -> float:
        """Seconds to the deadline (negative past it)."""
        return self.ends_at - time.monotonic()

    def share(self, slices_left: int, *, reserve_s: float = 0.0) -> TimeBound:
        """The next slice's part of a study's bound: the time left, less ``reserve_s``
        kept for the work after the last plan, over the slices left."""
        seconds = max(0.0, self.left() - reserve_s) / max(1, slices_left)
        return TimeBound(self.minutes, seconds, time.monotonic() + seconds)

    def search_seconds(self, asked: float | None) -> float:
        """The placement search's deadline: the time left (at least :data:`MIN_SEARCH_S`),
        or ``asked`` (``--search-seconds``) when that is sooner."""
        left = max(MIN_SEARCH_S, self.left())
        return left if asked is None else min(asked, left)

    def describe(self) -> str:
        """``the time bound (15 min, --max-minutes)``, with the slice's share if a part."""
        part = "" if self.seconds >= self.minutes * 60 else f"; {self.seconds:.0f} s this slice"
        return f"the time bound ({self.minutes:g} min, {FLAG}{part})"


class StudyShares:
    """The slices' shares of a what-if's ``bound`` (``None``: no bound), in the order they
    are planned: the time left over the slices left, less the longest a slice's row has
    taken after its plan so far (its winner's link utilisation, a full replay: 8-20 s on
    512 chips), which the last slice's row will take past its share: the study ends
    within its bound. A slice that ends early leaves its rest to the next."""

    def __init__(self, bound: TimeBound | None, slices: int) -> None:
        self.bound = bound
        self.slices_left = slices
        self.after_plan_s = 0.0  # the longest a row took after its plan
        self._ended: float | None = None

    def next(self) -> TimeBound | None:
        """The share of the slice whose plan starts now."""
        now = time.monotonic()
        if self._ended is not None:
            self.after_plan_s = max(self.after_plan_s, now - self._ended)
        self.slices_left -= 1
        if self.bound is None:
            return None
        return self.bound.share(self.slices_left + 1, reserve_s=self.after_plan_s)

    def plan_ended(self) -> None:
        self._ended = time.monotonic()


def time_bound(minutes: float | None, *, default: float = DEFAULT_MINUTES) -> TimeBound | None:
    """The bound ``--max-minutes`` asks for from now (``None``: the default; 0: none).
    Raises :class:`WorkloadError` for a negative or non-finite number."""
    value = default if minutes is None else minutes
    if not math.isfinite(value) or value < 0:
        raise WorkloadError(
            f"{FLAG} {minutes}: must be a number of minutes, 0 or more (0: no time bound), "
            f"e.g. {FLAG} 30"
        )
    if value == 0:
        return None
    return TimeBound(value, value * 60.0, time.monotonic() + value * 60.0)


def compiles_within(
    bound: TimeBound | None,
    picks: Sequence[str],
    baselines: Sequence[B],
    *,
    names: Callable[[B], str],
    round_s: float,
    workers: int,
    where: str,
    say: Callable[[str], None],
) -> tuple[list[str], list[B]]:
    """Which of Stage 1's ``picks`` (candidate ids) and ``baselines`` to compile within
    ``bound``; a line to ``say`` names what was left out and the flag.

    ``round_s`` is what a round of ``workers`` compiles is expected to take (Stage 1's
    time on the slice). With :data:`ROUNDS_FOR_BASELINES` rounds left everything is
    compiled; otherwise no baseline, and at most one round of picks (at least one)."""
    left = math.inf if bound is None else bound.left()
    if bound is None or left >= ROUNDS_FOR_BASELINES * round_s:
        return list(picks), list(baselines)
    kept = list(picks[: max(1, workers)])
    dropped = [*picks[len(kept) :], *(names(b) for b in baselines)]
    if dropped:
        say(
            f"{bound.describe()}: {max(0.0, left):.0f} s left on {where} after Stage 1 "
            f"({round_s:.0f} s) holds less than {ROUNDS_FOR_BASELINES:g} rounds of compiles "
            f"as long: left out {', '.join(dropped)}; {FLAG} raises it"
        )
    return kept, []


def search_deadline(bound: TimeBound | None, asked: float | None) -> float | None:
    """The placement search's deadline in seconds: ``asked`` (``--search-seconds``) or the
    time left in ``bound`` (at least :data:`MIN_SEARCH_S`), whichever is sooner."""
    return asked if bound is None else bound.search_seconds(asked)


def say_search_stop(
    bound: TimeBound | None,
    asked: float | None,
    search: SearchStop | None,
    where: str,
    say: Callable[[str], None],
) -> None:
    """Say, in one line, that the time bound's deadline (not ``--search-seconds``)
    stopped the placement search; nothing otherwise."""
    if bound is None or search is None or search.stopped_by != "deadline":
        return
    if asked is not None and asked <= max(MIN_SEARCH_S, bound.seconds):
        return  # --search-seconds came first (or as soon)
    say(
        f"{bound.describe()} stopped the placement search on {where}: its best placement, "
        f"bound and gap are the plan's; {FLAG} raises it"
    )
