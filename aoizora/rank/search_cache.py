"""The placement search, remembered: a finished search is read back, a stopped one resumed.

:func:`cached_search` wraps :func:`~aoizora.rank.search.search_placements`
with the planner's ``search/`` cache (:func:`aoizora.cache.search_key`: every
job's program digest, mesh, placement tree and given orders, the slice and
the search's switches, its work budget included; the deadline is stored beside the
report, not in the key).

* A *complete* report (nothing left open: the optimum is proven) is returned
  whatever the deadline asked for; so is one that stopped within the gap asked
  for, and one its work budget stopped (the same budget stops the same search
  at the same node: the report is the search's answer, however long it took).
* One a deadline stopped is returned when the deadline asked for is at most the
  one it ran under: a search given no more time would stop no further.
* Otherwise the search runs and its report replaces the entry. This is how a
  stopped search resumes: its exact replays are in the ``q2/`` cache
  (:class:`~aoizora.rank.evaluate.BatchEvaluator`), so the re-run reaches the
  point where the last one stopped in the time of its bounding alone, and a
  longer deadline (or none) takes it further.

A report read back says so (``cached=True``); its ``seconds`` and
``nodes_bounded`` are those of the search that produced it.
:func:`report_to_json` / :func:`report_from_json` are its JSON form (an
infinite bound is ``null``: JSON has no Infinity).

    >>> from aoizora.rank.search import JobReport, Leaf, Scored, SearchReport
    >>> best = Scored(Leaf(0, "default order", (0, 1, 2, 3), (0, 0, 0, 0)), 0.25)
    >>> job = JobReport((best,), num_placements=3, simulated=1, repeats=0,
    ...                 proven_worse=2, bound_s=math.inf)
    >>> report = SearchReport((job,), 0, best, 0.25, seconds=0.1, nodes_bounded=4)
    >>> report_to_json(report)["jobs"][0]["bound_s"] is None
    True
    >>> report_from_json(report_to_json(report)) == report
    True
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aoizora.cache import JsonCache, search_key
from aoizora.errors import PlacementError
from aoizora.rank.search import (
    Job,
    JobReport,
    Leaf,
    Scored,
    SearchBudget,
    SearchReport,
    search_placements,
)

__all__ = ["cached_search", "job_identity", "report_from_json", "report_to_json"]

Progress = Callable[[str], None]
BOUNDS_VERSION = 5  # bump when aoizora.rank's node bounds change (job_identity)


def _float_to_json(x: float) -> float | None:
    """``inf`` (no open placement) as ``null``; every other value as it is."""
    return None if math.isinf(x) and x > 0 else x


def _float_from_json(x: object) -> float:
    if x is None:
        return math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"not a number: {x!r}")
    return float(x)


def _scored_to_json(s: Scored) -> dict[str, Any]:
    leaf = s.leaf
    return {
        "job": leaf.job,
        "label": leaf.label,
        "physical_ids": list(leaf.physical_ids),
        "complexity": list(leaf.complexity),
        "q2_s": _float_to_json(s.q2_s),
        "num_raw": s.num_raw,
        "aliases": list(s.aliases),
    }


def _scored_from_json(d: Mapping[str, Any]) -> Scored:
    complexity = tuple(int(c) for c in d["complexity"])
    if len(complexity) != 4:
        raise ValueError(f"complexity {complexity} must have 4 entries")
    leaf = Leaf(
        job=int(d["job"]),
        label=str(d["label"]),
        physical_ids=tuple(int(i) for i in d["physical_ids"]),
        complexity=(complexity[0], complexity[1], complexity[2], complexity[3]),
    )
    aliases = tuple(str(a) for a in d["aliases"])
    return Scored(leaf, _float_from_json(d["q2_s"]), int(d["num_raw"]), aliases)


def report_to_json(report: SearchReport) -> dict[str, Any]:
    """Every field of ``report`` as JSON values (``cached`` is not stored: a report
    read back is cached by definition)."""
    return {
        "jobs": [
            {
                "scored": [_scored_to_json(s) for s in j.scored],
                "num_placements": j.num_placements,
                "simulated": j.simulated,
                "repeats": j.repeats,
                "proven_worse": j.proven_worse,
                "bound_s": _float_to_json(j.bound_s),
            }
            for j in report.jobs
        ],
        "winner_job": report.winner_job,
        "winner": _scored_to_json(report.winner),
        "bound_s": _float_to_json(report.bound_s),
        "seconds": report.seconds,
        "nodes_bounded": report.nodes_bounded,
        "work": report.work,
        "stopped_by": report.stopped_by,
    }


def report_from_json(data: Mapping[str, Any], *, cached: bool = False) -> SearchReport:
    """The report :func:`report_to_json` wrote. Raises ``KeyError``, ``TypeError`` or
    ``ValueError`` on anything else."""
    jobs = tuple(
        JobReport(
            scored=tuple(_scored_from_json(s) for s in j["scored"]),
            num_placements=int(j["num_placements"]),
            simulated=int(j["simulated"]),
            repeats=int(j["repeats"]),
            proven_worse=int(j["proven_worse"]),
            bound_s=_float_from_json(j["bound_s"]),
        )
        for j in data["jobs"]
    )
    winner_job = int(data["winner_job"])
    if not 0 <= winner_job < len(jobs):
        raise ValueError(f"winner_job {winner_job} is not one of the {len(jobs)} jobs")
    stopped_by = data["stopped_by"]
    if stopped_by not in (None, "budget", "deadline", "gap"):
        raise ValueError(f"stopped_by {stopped_by!r} is not budget, deadline, gap or null")
    return SearchReport(
        jobs=jobs,
        winner_job=winner_job,
        winner=_scored_from_json(data["winner"]),
        bound_s=_float_from_json(data["bound_s"]),
        seconds=_float_from_json(data["seconds"]),
        nodes_bounded=int(data["nodes_bounded"]),
        cached=cached,
        work=int(data["work"]),
        stopped_by=stopped_by,
    )


def job_identity(job: Job, *, program_digest: str) -> str:
    """What decides a job's part of a search: its program (``program_digest``, e.g. the
    sha256 of its compiled HLO text), name, mesh, placement tree and given orders."""
    space = job.space
    return json.dumps(
        {
            "program": program_digest,
            "name": job.name,
            "slice": [space.slice.name, list(space.slice.shape), list(space.slice.wraparound)],
            "mesh_shape": list(space.shape),
            "mesh_axis_names": list(space.names),
            "axis_order": list(space.axis_order),
            "directions": space.directions,
            "extra_orders": [[label, list(o.physical_ids)] for label, o in job.extra_orders],
            "forced": list(job.forced),
            "tree": job.tree,
            # The node bounds decide which nodes a budget reaches: a search under older,
            # looser bounds is not this search (2: sub-axis-set bounds, issue 28).
            "bounds": BOUNDS_VERSION,
        },
        sort_keys=True,
    )


def _reusable(
    entry: Mapping[str, Any],
    report: SearchReport,
    deadline_s: float | None,
    gap_tolerance: float,
) -> bool:
    """A complete report always; one stopped within ``gap_tolerance`` of its best (it
    answers the request: no placement left open beats it by more); one its budget
    stopped (the key holds the budget); one a deadline stopped for a deadline no
    longer than its own."""
    if report.complete or report.gap <= gap_tolerance or report.stopped_by == "budget":
        return True
    searched = entry.get("deadline_s")
    return deadline_s is not None and searched is not None and deadline_s <= float(searched)


def _read(cache: JsonCache, key: str) -> tuple[dict[str, Any], SearchReport] | None:
    entry = cache.get(key)
    if entry is None:
        return None
    try:
        return entry, report_from_json(entry["report"], cached=True)
    except (KeyError, TypeError, ValueError):
        return None  # another layout: search again and overwrite it


def _hit_line(report: SearchReport, deadline_s: object) -> str:
    jobs = report.jobs
    total = sum(j.num_placements for j in jobs)
    simulated = sum(j.simulated for j in jobs)
    worse = sum(j.proven_worse for j in jobs)
    open_ = sum(j.open for j in jobs)
    ran = "to the end" if report.complete else f"stopped at a {report.gap:.2%} gap"
    if report.stopped_by == "budget":
        ran += f" (work budget, {report.work:,} work)"
    elif not report.complete and isinstance(deadline_s, (int, float)):
        ran += f" (deadline {deadline_s} s)"
    return (
        f"[search] from the cache (a {report.seconds:.1f} s search, {ran}): {simulated} "
        f"simulated, {worse} proven worse, {open_} open of {total} placements; best "
        f"{report.winner.q2_s * 1e3:.2f} ms, bound {report.bound_s * 1e3:.2f} ms, "
        f"gap {report.gap * 100:.2f}%"
    )


def cached_search(
    jobs: Sequence[Job],
    evaluate: Callable[[Sequence[Leaf]], Sequence[float]],
    *,
    cache: JsonCache | None,
    programs: Sequence[str],
    batch_size: int = 8,
    per_job: bool = False,
    deadline_s: float | None = None,
    gap_tolerance: float = 0.0,
    budget: SearchBudget | None = None,
    probes: int = 64,
    algorithm: str | Mapping[str, str] | None = None,
    progress: Progress | None = None,
    progress_every_s: float = 10.0,
) -> SearchReport:
    """:func:`~aoizora.rank.search.search_placements`, read from ``cache`` when it may be.

    ``programs[i]`` is a digest of job ``i``'s program (the search sees only its
    collective graph); ``cache=None`` only searches. A complete cached report is returned whatever
    ``deadline_s``; so is one whose gap is at most ``gap_tolerance``; a
    deadline-stopped one when ``deadline_s`` is given and at most the deadline it
    ran under. Otherwise the search runs -- resuming a stopped one, since
    ``evaluate`` reads its replays from the Q2 cache -- and its report is stored
    with ``deadline_s``. ``progress`` gets one line on a hit.
    """
    if len(programs) != len(jobs):
        raise PlacementError(
            f"cached_search got {len(programs)} program digests for {len(jobs)} jobs; "
            "pass one a job, e.g. the sha256 of its compiled HLO text"
        )
    if not jobs:  # search_placements says what is wrong
        return search_placements(jobs, evaluate, batch_size=batch_size)
    if cache is None:  # nothing to read or store
        return search_placements(
            jobs, evaluate, batch_size=batch_size, per_job=per_job, deadline_s=deadline_s,
            gap_tolerance=gap_tolerance, budget=budget, probes=probes, algorithm=algorithm,
            progress=progress, progress_every_s=progress_every_s,
        )  # fmt: skip
    key = search_key(
        jobs=[job_identity(j, program_digest=d) for j, d in zip(jobs, programs, strict=True)],
        slice_=jobs[0].space.slice, per_job=per_job, batch_size=batch_size, algorithm=algorithm,
        probes=probes, budget=None if budget is None else budget.work,
    )  # fmt: skip
    got = _read(cache, key)
    if got is not None and _reusable(got[0], got[1], deadline_s, gap_tolerance):
        if progress is not None:
            progress(_hit_line(got[1], got[0].get("deadline_s")))
        return got[1]
    report = search_placements(
        jobs, evaluate, batch_size=batch_size, per_job=per_job, deadline_s=deadline_s,
        gap_tolerance=gap_tolerance, budget=budget, probes=probes, algorithm=algorithm,
        progress=progress, progress_every_s=progress_every_s,
    )  # fmt: skip
    cache.put(key, {"deadline_s": deadline_s, "report": report_to_json(report)})
    return report
