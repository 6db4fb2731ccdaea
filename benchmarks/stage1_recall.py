"""How well Stage 1's Q1 order tracks Stage 2's Q2: recall and rank correlation.

Runs ``run_plan(..., exhaustive=True)`` -- every Stage-1-feasible candidate is
compiled for the TPU target and every placement simulated -- and prints:

* the number of candidates compiled (and failed / infeasible),
* Stage 1's top-1 and top-K recall against the exhaustive Q2 winner,
* Spearman's rho between Q1 and the best Q2 of each candidate,
* every candidate's Q1 (compute + communication) and best Q2, sorted by Q2,
* the wall time.

The compile results live in ``--cache-dir`` (default ``~/.cache/aoizora``), keyed
by the lowered program, so after the first run a rerun only re-lowers and
re-runs Stage 1 (whose own cache entries are keyed by the Stage-1 source, so a
change to ``aoizora/stage1`` is always re-scored):

    python benchmarks/stage1_recall.py                       # wan2.1-1.3b 480p 81f, v5e:2x2
    python benchmarks/stage1_recall.py --model wan-tiny --slice v5e:2x4 \\
        --resolution 256x256 --frames 5
    python benchmarks/stage1_recall.py --json out.json       # also write the rows as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from aoizora.planner import PlanOutcome, run_plan
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

__all__ = ["main", "rows"]


def rows(outcome: PlanOutcome) -> list[dict[str, Any]]:
    """One row per compiled candidate that Stage 1 scored, sorted by best Q2 then id."""
    ests = {e.candidate_id: e for e in (*outcome.stage1.kept, *outcome.stage1.dropped_weak)}
    kept = outcome.stage1.kept_ids
    order = sorted(ests.values(), key=lambda e: (e.q1_s, e.candidate_id))
    q1_rank = {e.candidate_id: i + 1 for i, e in enumerate(order)}
    out = []
    for s in outcome.scored:
        e = ests.get(s.candidate.id)
        if e is None:
            continue
        out.append(
            {
                "candidate_id": s.candidate.id,
                "q1_s": e.q1_s,
                "q1_compute_s": e.compute_s,
                "q1_comm_s": e.comm_s,
                "q1_rank": q1_rank[s.candidate.id],
                "q2_best_s": s.best.q2_s,
                "q2_best_placement": s.best.placement_id,
                "in_top_k": s.candidate.id in kept,
            }
        )
    out.sort(key=lambda r: (r["q2_best_s"], r["candidate_id"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-1.3b")
    parser.add_argument("--slice", default="v5e:2x2")
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument(
        "--cache-dir",
        default=str(Path.home() / ".cache" / "aoizora"),
        help="compile and Stage-1 caches kept across runs (default ~/.cache/aoizora)",
    )
    parser.add_argument("--json", default=None, help="also write the summary and rows here")
    parser.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = parser.parse_args(argv)

    clip = parse_resolution(args.resolution, frames=args.frames)
    workload = wan_workload(args.model, clip)
    slice_ = load_slice(args.slice)
    t0 = time.perf_counter()
    outcome = run_plan(
        workload,
        slice_,
        top_k=args.top_k,
        exhaustive=True,
        cache_dir=args.cache_dir,
        progress=(lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if args.verbose else None,
    )
    wall_s = time.perf_counter() - t0
    check = outcome.exhaustive
    assert check is not None  # exhaustive=True always fills it
    table = rows(outcome)
    label = (
        f"{args.model} {args.resolution} {args.frames}f on {args.slice}, K={args.top_k} "
        f"({outcome.num_legal} legal candidates)"
    )
    print(label)
    print(
        f"compiled {len(outcome.scored)} candidates "
        f"({len(outcome.failed)} failed or infeasible, "
        f"{len(outcome.stage1.dropped_infeasible)} over HBM in Stage 1, "
        f"{len(outcome.stage1_failed)} Stage-1 failures)"
    )
    rho = check.spearman_q1_q2
    print(f"exhaustive winner: {check.best_candidate_id}")
    print(f"Stage-1 kept: {', '.join(outcome.stage1.kept_ids)}")
    print(f"top-1 recall: {int(check.top1_hit)}   top-{args.top_k} recall: {int(check.topk_hit)}")
    print(
        f"Spearman rho(Q1, best Q2) over {check.num_compared}: "
        + ("n/a" if rho is None else f"{rho:.3f}")
    )
    print(
        f"{'rank':>4} {'candidate':<48} {'Q2 ms':>9} {'Q1 ms':>9} {'Q1 cmp':>8} "
        f"{'Q1 comm':>8} {'Q1 rank':>7}"
    )
    for i, r in enumerate(table, start=1):
        print(
            f"{i:>4} {r['candidate_id']:<48} {r['q2_best_s'] * 1e3:9.2f} {r['q1_s'] * 1e3:9.2f} "
            f"{r['q1_compute_s'] * 1e3:8.2f} {r['q1_comm_s'] * 1e3:8.2f} {r['q1_rank']:>7}"
            + ("  *" if r["in_top_k"] else "")
        )
    print(f"wall time {wall_s:.1f} s  (timings: {dict(outcome.timings_s)})")
    if args.json:
        summary = {
            "case": label,
            "winner": check.best_candidate_id,
            "kept": list(outcome.stage1.kept_ids),
            "top1_hit": check.top1_hit,
            "topk_hit": check.topk_hit,
            "spearman_q1_q2": rho,
            "num_compared": check.num_compared,
            "wall_s": wall_s,
            "rows": table,
        }
        Path(args.json).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
