"""How well Stage 1's Q1 order tracks Stage 2's Q2: recall and rank correlation.

Runs ``run_plan(..., exhaustive=True)`` -- every Stage-1-feasible candidate is
compiled for the TPU target and every placement simulated -- with Stage 1 alone
deciding what it hands over: the top-K by Q1, no best-of-each-attention-kind rule
(``--per-attention-kind`` turns it on) and no baseline counted as found. Prints

* the number of candidates compiled (and failed / infeasible),
* the exhaustive Q2 winner, its rank in Q1's order, and whether Stage 1's top-1
  and the kept set contain it,
* Spearman's rho between Q1 and each candidate's best Q2,
* every candidate's Q1 (compute + communication) and best Q2, sorted by Q2,
* the wall time.

Compile results live in ``--cache-dir`` (default ``~/.cache/aoizora``), keyed by
the lowered program, so a rerun only re-lowers and re-runs Stage 1 (whose cache
entries are keyed by the Stage-1 source, so a change to ``aoizora/stage1`` is
always re-scored):

    python benchmarks/stage1_recall.py                       # wan2.1-1.3b 480p 81f, v5e:2x2
    python benchmarks/stage1_recall.py --model wan2.1-14b --slice v5e:4x4 --resolution 720p
    python benchmarks/stage1_recall.py --json out.json       # also write the rows as JSON
    python benchmarks/stage1_recall.py --slice v5e:2x4 \
        --workload benchmarks.user_transformer:transformer_workload   # a model that is not Wan
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from aoizora.planner import PlanOutcome, run_plan
from aoizora.report.summary import candidate_rows
from aoizora.workloads.base import Workload
from aoizora.workloads.factory import load_workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

__all__ = ["main", "rows"]


def rows(outcome: PlanOutcome) -> list[dict[str, Any]]:
    """One row per compiled candidate that Stage 1 scored, sorted by best Q2 then id."""
    feasible = (*outcome.stage1.kept, *outcome.stage1.dropped_weak)
    ests = {e.candidate_id: e for e in feasible}
    q1_rank = {e.candidate_id: i + 1 for i, e in enumerate(feasible)}
    picks = set(outcome.stage1_picks)
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
                "stage1_kept": s.candidate.id in picks,
            }
        )
    out.sort(key=lambda r: (r["q2_best_s"], r["candidate_id"]))
    return out


def _print(outcome: PlanOutcome, table: list[dict[str, Any]], label: str, wall_s: float) -> None:
    check = outcome.exhaustive
    assert check is not None  # exhaustive=True always fills it
    print(label)
    print(
        f"compiled {len(outcome.scored)} candidates "
        f"({len(outcome.failed)} failed or infeasible, "
        f"{len(outcome.stage1.dropped_infeasible)} over HBM in Stage 1, "
        f"{len(outcome.stage1_failed)} Stage-1 failures)"
    )
    rho = check.spearman_q1_q2
    print(f"exhaustive winner: {check.winner} (Q1 rank {check.winner_q1_rank})")
    print(f"Stage-1 kept: {', '.join(outcome.stage1_picks)}")
    print(f"top-1 recall: {int(check.top1_hit)}   kept-set recall: {int(check.kept_hit)}")
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
            + ("  *" if r["stage1_kept"] else "")
        )
    print(f"wall time {wall_s:.1f} s  (timings: {dict(outcome.timings_s)})")


def _workload(args: argparse.Namespace) -> tuple[Workload, str]:
    """The Wan model of ``--model``, or the factory ``--workload MODULE:FUNCTION`` returns."""
    if args.workload:  # FILE.py:FACTORY or package.module:FACTORY, as `aoizora plan --workload`
        workload: Workload = load_workload(args.workload)
        return workload, workload.name
    clip = parse_resolution(args.resolution, frames=args.frames)
    return wan_workload(args.model, clip), f"{args.model} {args.resolution} {args.frames}f"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-1.3b")
    parser.add_argument("--slice", default="v5e:2x2")
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument(
        "--workload",
        default=None,
        metavar="MODULE:FUNCTION",
        help="plan the workload this factory returns instead of a Wan model",
    )
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument(
        "--per-attention-kind",
        action="store_true",
        help="also hand over the best-Q1 candidate of every attention kind (off: Stage 1 alone)",
    )
    parser.add_argument(
        "--cache-dir",
        default=str(Path.home() / ".cache" / "aoizora"),
        help="compile and Stage-1 caches kept across runs (default ~/.cache/aoizora)",
    )
    parser.add_argument("--json", default=None, help="also write the summary and rows here")
    parser.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = parser.parse_args(argv)

    workload, name = _workload(args)
    slice_ = load_slice(args.slice)
    t0 = time.perf_counter()
    outcome = run_plan(
        workload,
        slice_,
        top_k=args.top_k,
        per_attention_kind=args.per_attention_kind,
        exhaustive=True,
        cache_dir=args.cache_dir,
        progress=(lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if args.verbose else None,
    )
    wall_s = time.perf_counter() - t0
    table = rows(outcome)
    label = (
        f"{name} on {args.slice}, K={args.top_k}"
        f"{' + best of each attention kind' if args.per_attention_kind else ''} "
        f"({outcome.num_legal} legal candidates)"
    )
    _print(outcome, table, label, wall_s)
    if args.json:
        check = outcome.exhaustive
        assert check is not None
        summary = {
            "case": label,
            "exhaustive": check.to_json_dict(),
            "num_compared": check.num_compared,
            "kept": list(outcome.stage1_picks),
            "wall_s": wall_s,
            "rows": table,
            "candidates": candidate_rows(outcome),
        }
        Path(args.json).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
