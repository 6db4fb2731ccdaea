"""``aoizora plan --report DIR``: the pictures and traces of a finished plan.

Writes, for the winning (sharding, placement):

* ``link_heatmap.png`` -- bytes and busy fraction per directed ICI link for the
  region of the step that moves the most bytes (for a Wan step: one iteration of
  the layer loop, which runs ``count`` times per step; the title says which);
* ``trace.json`` -- a Chrome/Perfetto trace of that region's simulated timeline
  (a track per chip and per link; open it in ui.perfetto.dev);
* ``trace_step.json`` -- the same for the whole step's top level (loops appear as
  one compute block each);
* ``ranking.png`` -- Q2 of every placement of every compiled sharding, with the
  baselines as dashed lines;
* ``summary.json`` -- the numbers the report table shows.

Every number in them is simulated.
"""

from __future__ import annotations

import json
from pathlib import Path

from aoizora.atomic import write_atomic
from aoizora.hlo.graph import graph_from_text
from aoizora.planner import PlanOutcome
from aoizora.replay import replay
from aoizora.report.pictures.heatmap import link_loads, plot_link_heatmap
from aoizora.report.pictures.ranking import RankingEntry, plot_ranking
from aoizora.report.pictures.trace import chrome_trace, write_chrome_trace
from aoizora.report.summary import outcome_summary
from sim.records import SimResult

__all__ = ["busiest_region", "write_report_dir"]


def busiest_region(region_sims: tuple[SimResult, ...], counts: tuple[int, ...]) -> int:
    """Index of the region whose link bytes times its run count is largest (ties: first)."""
    best, best_bytes = 0, -1.0
    for i, (sim, count) in enumerate(zip(region_sims, counts, strict=True)):
        total = count * sum(link.bytes_carried for link in sim.links)
        if total > best_bytes:
            best, best_bytes = i, total
    return best


def write_report_dir(outcome: PlanOutcome, directory: Path) -> tuple[Path, ...]:
    """Write the report files into ``directory`` (created); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    slice_ = outcome.slice_
    graph = graph_from_text(outcome.winner.compile.hlo_text)
    run = replay(graph, slice_, outcome.winner_placement.order)
    counts = tuple(region.count for region in graph.regions)
    busiest = busiest_region(run.region_sims, counts)
    region = graph.regions[busiest]
    label = (
        f"{outcome.winner.candidate.id} @ {outcome.winner_placement.placement_id} on "
        f"{slice_.name} (simulated)"
    )
    written: list[Path] = []
    heat_title = (
        f"{label}\nregion {region.id} ({region.kind}, runs {region.count}x per step): "
        f"link load per run"
    )
    written.append(
        plot_link_heatmap(
            link_loads(run.region_sims[busiest]), directory / "link_heatmap.png", title=heat_title
        )
    )
    written.append(
        write_chrome_trace(
            chrome_trace(run.region_sims[busiest], slice_, name=f"{label}, region {region.id}"),
            directory / "trace.json",
        )
    )
    written.append(
        write_chrome_trace(
            chrome_trace(run.sim, slice_, name=f"{label}, whole step (top level)"),
            directory / "trace_step.json",
        )
    )
    entries = [
        RankingEntry(c.candidate.id, p.placement_id, p.q2_s)
        for c in outcome.scored
        for p in c.placements
    ]
    baselines = {b.name: b.q2_s for b in outcome.baselines if b.q2_s is not None}
    written.append(
        plot_ranking(
            entries,
            directory / "ranking.png",
            title=f"{outcome.workload.name} on {slice_.name}: Q2 per placement (simulated)",
            baselines=baselines,
        )
    )
    summary = directory / "summary.json"
    write_atomic(summary, json.dumps(outcome_summary(outcome), indent=2, sort_keys=True) + "\n")
    written.append(summary)
    return tuple(written)
