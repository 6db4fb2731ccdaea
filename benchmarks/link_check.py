"""Link utilisation of a plan's winner against an independent per-link byte sum.

Plans a workload (the demo's by default: Wan2.1-1.3B 480p 81 frames on v5e:2x4; the
cache makes a second run quick), replays the winner and compares, link by link, the
bytes behind the what-if utilisation (:func:`aoizora.replay.step_link_totals`: every
region's simulated link records times its runs per step) with
:func:`aoizora.replay.collective_link_bytes` (every compiled collective's flow bytes x
its runs per step x the links its route crosses). Prints the largest relative
difference, the peak and mean utilisation (busy time over the step) and the entry
region's share of the bytes (what the old figure read).

    python benchmarks/link_check.py
    python benchmarks/link_check.py --model wan2.1-14b --slice v5e:4x4 --resolution 720p
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from aoizora.commands.args import DEFAULT_CACHE_DIR
from aoizora.hlo.graph import graph_from_text
from aoizora.planner import run_plan
from aoizora.replay import collective_link_bytes, replay, step_link_totals
from aoizora.studies.whatif import step_utilisation
from aoizora.workloads.wan import model_clip, wan_workload
from sim.topology import load_slice


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="wan2.1-1.3b")
    p.add_argument("--slice", default="v5e:2x4")
    p.add_argument("--resolution", default="480p")
    p.add_argument("--cache-dir", default=os.environ.get("AOIZORA_CACHE_DIR", DEFAULT_CACHE_DIR))
    args = p.parse_args(argv)
    slice_ = load_slice(args.slice)
    t0 = time.perf_counter()
    outcome = run_plan(
        wan_workload(args.model, model_clip(args.model, args.resolution)),
        slice_,
        cache_dir=args.cache_dir,
    )
    graph = graph_from_text(outcome.winner.compile.hlo_text)
    order = outcome.winner_placement.order
    result = replay(graph, slice_, order)
    totals = {(t.src, t.dst): t for t in step_link_totals(result, graph)}
    expected = collective_link_bytes(graph, slice_, order)
    worst = max(abs(totals[k].bytes_carried / v - 1) for k, v in expected.items() if v > 0)
    stray = sum(t.bytes_carried for k, t in totals.items() if k not in expected)
    peak, mean = step_utilisation(result, graph)
    entry = sum(rec.bytes_carried for rec in result.sim.links)
    total = sum(t.bytes_carried for t in totals.values())
    print(f"winner {outcome.winner.candidate.id} @ {outcome.winner_placement.placement_id}")
    print(f"step {result.step_time_s * 1e3:.2f} ms (simulated); {len(expected)} links carry bytes")
    print(f"largest per-link difference from the independent sum: {100 * worst:.4f}%")
    print(f"bytes on links the collectives never route over: {stray:.0f}")
    print(f"utilisation: peak {100 * peak:.2f}%, mean {100 * mean:.2f}% (busy time over the step)")
    print(f"entry region alone: {100 * entry / total:.2f}% of the step's link bytes")
    print(
        json.dumps(
            {
                "worst_relative_difference": worst,
                "peak_link_utilisation": peak,
                "mean_link_utilisation": mean,
                "step_s": result.step_time_s,
                "wall_s": time.perf_counter() - t0,
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )
    return 0 if worst <= 0.01 and stray == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
