"""Wall time of ``aoizora plan``: cold, warm, and against ``--exhaustive``.

Default case (the planner issue's target): Wan2.1-14B, 720p, 81 frames on
v5e:4x4. Targets on the 2-core CI machine: cold <= 60 s, warm <= 5 s, and >= 10x
faster than exhaustive with the same top-1.

    python benchmarks/plan_bench.py                       # the default case
    python benchmarks/plan_bench.py --model wan2.1-1.3b --slice v5e:2x2 --resolution 480p
    python benchmarks/plan_bench.py --no-exhaustive       # skip the (long) exhaustive run

Cold = a fresh, empty cache directory; warm = the same directory again;
exhaustive = every Stage-1-feasible candidate compiled and every placement
simulated, also from an empty cache. Prints one line per figure and a JSON
summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from aoizora.planner import PlanOutcome, run_plan
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice


def _run(args: argparse.Namespace, cache: Path, *, exhaustive: bool) -> tuple[float, PlanOutcome]:
    clip = parse_resolution(args.resolution, frames=args.frames)
    t0 = time.perf_counter()
    outcome = run_plan(
        wan_workload(args.model, clip),
        load_slice(args.slice),
        top_k=args.top_k,
        exhaustive=exhaustive,
        cache_dir=str(cache),
        progress=(lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if args.verbose else None,
    )
    return time.perf_counter() - t0, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-14b")
    parser.add_argument("--slice", default="v5e:4x4")
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--no-exhaustive", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = parser.parse_args()

    label = f"{args.model} {args.resolution} {args.frames}f on {args.slice}, K={args.top_k}"
    with tempfile.TemporaryDirectory(prefix="aoizora-bench-") as tmp:
        cache = Path(tmp)
        cold_s, cold = _run(args, cache, exhaustive=False)
        print(f"cold plan   {cold_s:8.1f} s  ({label})", flush=True)
        warm_s, warm = _run(args, cache, exhaustive=False)
        print(f"warm plan   {warm_s:8.1f} s", flush=True)
        clip = parse_resolution(args.resolution, frames=args.frames)
        same = (
            cold.plan(model=args.model, clip=clip).to_json()
            == warm.plan(model=args.model, clip=clip).to_json()
        )
        print(f"warm plan byte-identical to cold: {same}")
        summary: dict[str, object] = {
            "case": label,
            "cold_s": cold_s,
            "warm_s": warm_s,
            "timings_cold_s": dict(cold.timings_s),
            "winner": cold.winner.candidate.id,
            "winner_placement": cold.winner_placement.placement_id,
            "winner_q2_s": cold.winner_q2_s,
            "compiled": len(cold.scored) + len(cold.failed),
        }
        if not args.no_exhaustive:
            with tempfile.TemporaryDirectory(prefix="aoizora-bench-ex-") as ex_tmp:
                ex_s, ex = _run(args, Path(ex_tmp), exhaustive=True)
            assert ex.exhaustive is not None
            same_top1 = (
                ex.winner.candidate.id == cold.winner.candidate.id
                and ex.winner_placement.order == cold.winner_placement.order
            )
            print(
                f"exhaustive  {ex_s:8.1f} s  ({len(ex.scored) + len(ex.failed)} compiled); "
                f"cold/exhaustive speedup {ex_s / cold_s:.1f}x; same top-1: {same_top1}; "
                f"Stage-1 top-1 recall {int(ex.exhaustive.top1_hit)}, top-K recall "
                f"{int(ex.exhaustive.topk_hit)}, Spearman rho(Q1, Q2) "
                f"{ex.exhaustive.spearman_q1_q2}"
            )
            summary.update(
                exhaustive_s=ex_s,
                exhaustive_compiled=len(ex.scored) + len(ex.failed),
                exhaustive_winner=ex.winner.candidate.id,
                same_top1=same_top1,
                top1_recall=ex.exhaustive.top1_hit,
                topk_recall=ex.exhaustive.topk_hit,
                spearman_q1_q2=ex.exhaustive.spearman_q1_q2,
            )
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
