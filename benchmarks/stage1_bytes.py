"""Stage 1's collective bytes against the compiled program's, per step and per kind.

For each chosen candidate the step is compiled for the TPU target (or read from
the compile cache, ``--cache-dir``, default ``~/.cache/aoizora``) and its
collectives read from the HLO (:mod:`aoizora.hlo`, each counted by its loop trip
count, kinds as the replay runs them: :func:`aoizora.replay.sim_kind`). Stage 1's
bytes come from the same candidate's prediction DAG. Prints one line per
candidate, then the median and worst relative error per collective kind and the
share of (candidate, kind) pairs within 10 % -- over every pair, and over the
pairs whose kind carries at least 1 % of the candidate's bytes -- and on how many
candidates Stage 1 predicts the compiled number of windowed-einsum loops.

    python benchmarks/stage1_bytes.py --model wan2.1-1.3b --slice v5e:2x4 --resolution 480p
    python benchmarks/stage1_bytes.py --model wan2.1-14b --slice v5e:4x4 --resolution 720p \\
        --per-kind 4 --json bytes.json

``--per-kind N`` takes, of each attention kind, the first N legal candidates that
Stage 1 finds within the chip's HBM; ``--all`` takes every legal candidate;
``--candidates ID,ID,...`` takes the named legal candidates (e.g. the ones whose
compiles a recall run already cached).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aoizora.cache import plan_caches
from aoizora.candidates.space import Candidate, enumerate_candidates
from aoizora.compile import compile_candidate, lower
from aoizora.hlo.graph import graph_from_text
from aoizora.replay import sim_kind
from aoizora.stage1 import estimate
from aoizora.workloads.base import Workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import Slice, load_slice

__all__ = ["bytes_by_kind", "main", "summarise"]


def bytes_by_kind(
    workload: Workload, candidate: Candidate, slice_: Slice, cache_dir: str | None
) -> dict[str, Any]:
    """``{"stage1": {kind: bytes}, "compiled": {kind: bytes}, "windowed": {side: loops}}``
    per step, or an error. ``windowed`` counts XLA's windowed-einsum loops: the compiled
    program's ``windowed_dot_general_body_ag`` while loops, Stage 1's windowed dots."""
    caches = plan_caches(cache_dir) if cache_dir else None
    result = compile_candidate(
        workload, candidate, slice_, cache=caches.compiled if caches else None
    )
    if not result.ok:
        return {"error": result.error or "compile failed"}
    compiled: dict[str, float] = {}
    for c in graph_from_text(result.hlo_text).collectives:
        compiled[sim_kind(c)] = compiled.get(sim_kind(c), 0.0) + c.buffer_bytes * c.count
    est = estimate(
        lower(workload, candidate, slice_),
        mesh_axis_sizes=candidate.mesh_sizes,
        chip=slice_.chip,
        candidate_id=candidate.id,
        slice_=slice_,
    )
    stage1: dict[str, float] = {}
    for n in est.nodes:
        if n.kind != "compute":
            stage1[n.collective] = stage1.get(n.collective, 0.0) + n.bytes_per_device * n.count
    loops = sum(
        1
        for line in result.hlo_text.splitlines()
        if " while(" in line and "windowed_dot_general_body_ag" in line
    )
    # Each windowed dot is a loop of two partial dots (aoizora.stage1.windowed).
    dots = sum(1 for n in est.nodes if n.kind == "compute" and n.reason.startswith("windowed"))
    return {
        "stage1": stage1, "compiled": compiled, "memory_bytes": est.memory_bytes_per_chip,
        "windowed": {"compiled": loops, "stage1": dots // 2},
    }  # fmt: skip


def _error(predicted: float, compiled: float) -> float:
    if compiled == 0:
        return 0.0 if predicted == 0 else float("inf")
    return (predicted - compiled) / compiled


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and worst |error| per kind, for the step and for all-gather +
    collective-permute together; shares of (candidate, kind) pairs within 10 %."""
    errors: dict[str, list[float]] = {}
    pairs = within = big = big_within = 0
    for r in rows:
        if "error" in r:
            continue
        total = sum(r["compiled"].values()) or 1.0
        for kind in sorted(set(r["stage1"]) | set(r["compiled"])):
            p, c = r["stage1"].get(kind, 0.0), r["compiled"].get(kind, 0.0)
            e = abs(_error(p, c))
            errors.setdefault(kind, []).append(e)
            pairs += 1
            within += e <= 0.10
            if max(p, c) >= 0.01 * total:
                big += 1
                big_within += e <= 0.10
    # The step's bytes, and all-gather + collective-permute together: XLA's windowed
    # einsum turns an all-gather that feeds a large dot into a loop of permutes of
    # the shard (the 14B steps), which moves the bytes between those two kinds.
    for r in rows:
        if "error" in r:
            continue
        merged = ("all-gather", "collective-permute")
        for label, kinds in (("step", None), ("all-gather+collective-permute", merged)):
            p = sum(v for k, v in r["stage1"].items() if kinds is None or k in kinds)
            c = sum(v for k, v in r["compiled"].items() if kinds is None or k in kinds)
            errors.setdefault(label, []).append(abs(_error(p, c)))
    per_kind = {
        k: {"pairs": len(v), "median": statistics.median(v), "worst": max(v)}
        for k, v in sorted(errors.items())
    }
    return {
        "per_kind": per_kind,
        "pairs": pairs,
        "within_10pct": within,
        "pairs_over_1pct": big,
        "within_10pct_over_1pct": big_within,
    }


def _choose(workload: Workload, slice_: Slice, per_kind: int | None) -> list[Candidate]:
    """Every legal candidate, or the first ``per_kind`` of each attention kind whose
    Stage-1 memory estimate fits the chip (an over-HBM compile has no program)."""
    legal = list(enumerate_candidates(workload, slice_.num_chips).legal)
    if per_kind is None:
        return legal
    chosen: list[Candidate] = []
    for kind in workload.attention_kinds:
        for cand in (c for c in legal if c.attention == kind):
            if len([c for c in chosen if c.attention == kind]) == per_kind:
                break
            est = estimate(
                lower(workload, cand, slice_),
                mesh_axis_sizes=cand.mesh_sizes,
                chip=slice_.chip,
                candidate_id=cand.id,
                slice_=slice_,
            )
            if est.memory_bytes_per_chip <= slice_.chip.hbm_bytes:
                chosen.append(cand)
    return chosen


def _named(workload: Workload, slice_: Slice, ids: Sequence[str]) -> list[Candidate]:
    """The legal candidates named by ``ids``, in that order; an unknown id is an error."""
    legal = {c.id: c for c in enumerate_candidates(workload, slice_.num_chips).legal}
    unknown = [i for i in ids if i not in legal]
    if unknown:
        example = next(iter(legal), "")
        raise SystemExit(
            f"--candidates names {unknown}, not legal candidates of {workload.name} on "
            f"{slice_.name}; legal ids look like {example!r} ({len(legal)} in all)"
        )
    return [legal[i] for i in ids]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-1.3b")
    parser.add_argument("--slice", default="v5e:2x4")
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--frames", type=int, default=81)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--per-kind", type=int, default=4, help="candidates per attention kind")
    group.add_argument("--all", action="store_true", help="every legal candidate")
    group.add_argument("--candidates", default=None, help="comma-separated legal candidate ids")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "aoizora"))
    parser.add_argument("--json", default=None, help="also write the rows and summary here")
    args = parser.parse_args(argv)

    workload = wan_workload(args.model, parse_resolution(args.resolution, frames=args.frames))
    slice_ = load_slice(args.slice)
    rows = []
    t0 = time.perf_counter()
    if args.candidates:
        chosen = _named(workload, slice_, args.candidates.split(","))
    else:
        chosen = _choose(workload, slice_, None if args.all else args.per_kind)
    for cand in chosen:
        row = {"candidate": cand.id, **bytes_by_kind(workload, cand, slice_, args.cache_dir)}
        rows.append(row)
        if "error" in row:
            print(f"{cand.id:52s} compile failed: {row['error'][:100]}", flush=True)
            continue
        cells = [
            f"{k} {row['stage1'].get(k, 0) / 1e6:.1f}/{row['compiled'].get(k, 0) / 1e6:.1f} MB "
            f"({_error(row['stage1'].get(k, 0), row['compiled'].get(k, 0)):+.1%})"
            for k in sorted(set(row["stage1"]) | set(row["compiled"]))
        ]
        w = row["windowed"]
        cells.append(f"windowed loops {w['stage1']}/{w['compiled']}")
        print(f"{cand.id:52s} " + "; ".join(cells), flush=True)
    summary = summarise(rows)
    print(f"\n{args.model} {args.resolution} on {args.slice}: {len(rows)} candidates, "
          f"Stage 1 / compiled bytes per step ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    for kind, s in summary["per_kind"].items():
        print(f"  {kind:30s} {s['pairs']:3d} pairs  median |err| {s['median']:6.1%}  "
              f"worst {s['worst']:8.1%}")  # fmt: skip
    print(
        f"  within 10 %: {summary['within_10pct']}/{summary['pairs']} pairs; "
        f"{summary['within_10pct_over_1pct']}/{summary['pairs_over_1pct']} of the pairs "
        f"whose kind carries >= 1 % of the bytes"
    )
    ok = [r for r in rows if "error" not in r]
    agree = sum(r["windowed"]["stage1"] == r["windowed"]["compiled"] for r in ok)
    print(f"  windowed-einsum loops: Stage 1 = compiled on {agree}/{len(ok)} candidates")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
