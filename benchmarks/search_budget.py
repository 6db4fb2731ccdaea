"""What a placement search's work budget buys, and what it costs, on this machine.

Runs the placement search over every sharding compiled for each slice in a cache
directory (an earlier ``aoizora plan`` / ``whatif`` with ``--cache-dir DIR``),
serially and without the Q2 cache, with no budget but a cap, and prints after each
batch of replays the work spent (:class:`aoizora.rank.search.SearchBudget`'s units),
the nodes bounded, the replays, the CPU and wall seconds so far and the gap proved.
The rows at the budgets in ``--marks`` are what a search with that budget reports
(the search is the same up to there; it stops within one batch of the mark).

    python benchmarks/search_budget.py --cache DIR --slices v5e:8x8,v5e:16x16
    python benchmarks/search_budget.py --cache DIR --slices v5e:16x16 --cap-work 2e9

The default budget (docs/placements.md, "The work budget") is chosen from these
figures: the CPU seconds it costs at most, and the gap it reaches.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from aoizora.hlo.graph import graph_from_text
from aoizora.rank.evaluate import BatchEvaluator, Program
from aoizora.rank.jobs import mesh_job
from aoizora.rank.search import (
    DEFAULT_SEARCH_BUDGET,
    SearchBudget,
    program_size,
    search_placements,
)
from sim.topology import parse_slice_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_bench import _compiled_programs  # noqa: E402  (the same cache reader)

_LINE = re.compile(
    r"(?P<nodes>\d+) nodes bounded, (?P<work>[\d,]+) work.*?: (?P<sim>\d+) simulated.*"
    r"best (?P<best>[\d.]+) ms, bound (?P<bound>[\d.]+) ms, gap (?P<gap>[\d.]+)%"
)


def _programs(cache: Path, spec: str) -> tuple[list[Any], list[Program]]:
    slice_ = parse_slice_spec(spec)
    jobs, programs = [], []
    for c in _compiled_programs(cache, slice_.name):
        mesh = c["candidate_id"].split("/")[0].split(".")
        names = tuple(m.rstrip("0123456789") for m in mesh)
        shape = tuple(int(m[len(n) :]) for m, n in zip(mesh, names, strict=True))
        graph = graph_from_text(c["hlo_text"])
        jobs.append(
            mesh_job(c["candidate_id"], graph, slice_, mesh_shape=shape, mesh_axis_names=names)
        )
        programs.append(Program(c["hlo_text"], graph, shape))
    return jobs, programs


def _trajectory(spec: str, cache: Path, cap_work: int) -> list[dict[str, Any]]:
    jobs, programs = _programs(cache, spec)
    if not jobs:
        print(f"{spec}: no compiled program for it in {cache}")
        return []
    sizes = [program_size(j.graph) for j in jobs]
    print(f"{spec}: {len(jobs)} shardings, program sizes {sizes} transfers")
    evaluator = BatchEvaluator(programs, jobs[0].space.slice)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    rows: list[dict[str, Any]] = []

    def note(line: str) -> None:
        m = _LINE.search(line)
        if m is None:
            return
        rows.append(
            {
                "work": int(m["work"].replace(",", "")), "nodes": int(m["nodes"]),
                "simulated": int(m["sim"]), "gap": float(m["gap"]) / 100,
                "best_ms": float(m["best"]), "bound_ms": float(m["bound"]),
                "cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - wall0,
            }
        )  # fmt: skip

    search_placements(
        jobs, evaluator, budget=SearchBudget(work=cap_work), progress=note, progress_every_s=0.0
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", required=True, help="a plan cache directory with compiles")
    parser.add_argument("--slices", default="v5e:8x8,v5e:16x16,v6e:16x16+wrap")
    parser.add_argument("--cap-work", type=float, default=4 * DEFAULT_SEARCH_BUDGET.work)
    parser.add_argument("--marks", default="1e7,3e7,1e8,2e8,5e8,1e9,2e9")
    args = parser.parse_args()
    marks = [int(float(m)) for m in args.marks.split(",")]
    summary: dict[str, Any] = {"load_average_start": os.getloadavg(), "slices": {}}
    for spec in args.slices.split(","):
        rows = _trajectory(spec, Path(args.cache), int(args.cap_work))
        summary["slices"][spec] = rows
        for mark in marks:
            hit = next((r for r in rows if r["work"] >= mark), rows[-1] if rows else None)
            if hit is None:
                continue
            print(
                f"  budget {mark:>13,}: stops at {hit['work']:>13,} work, {hit['nodes']:>6} "
                f"nodes, {hit['simulated']:>4} replayed; CPU {hit['cpu_s']:7.1f} s, wall "
                f"{hit['wall_s']:7.1f} s; best {hit['best_ms']:.2f} ms, gap {hit['gap']:.2%}"
            )
    summary["load_average_end"] = os.getloadavg()
    print(f"load average {summary['load_average_start']} -> {summary['load_average_end']}")
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
