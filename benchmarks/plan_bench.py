"""Honest figures for ``aoizora plan`` and ``aoizora whatif``, ratios from one run.

Default case: Wan2.1-14B, 720p, 81 frames on v5e:4x4. Targets on this 2-core
machine: a cold ``aoizora plan`` with the whole clip (the default) <= 1.5x the same
plan with ``--no-clip``, and that plan <= 1.5x its winner's own compile (issue 35);
ranking <= 10 ms per (sharding, placement); warm <= 5 s; peak memory <= 8 GiB.

    python benchmarks/plan_bench.py                        # cold clip-off and clip-on
                                                           #   plans, both ratios; warm
    python benchmarks/plan_bench.py --workers 1            # serial
    python benchmarks/plan_bench.py --whatif               # + cold/warm what-if on
                                                           #   v5e:8x8,v5e:16x16,v6e:16x16+wrap
    python benchmarks/plan_bench.py --no-plan --whatif --verbose
        # the what-if alone, with the command line's search defaults (no search flags)
    python benchmarks/plan_bench.py --exhaustive           # + the --exhaustive plan
    python benchmarks/plan_bench.py --no-plan --search-cache DIR --search-slices v5e:8x8,v5e:16x16
        # the placement search alone (serial, no Q2 cache) over every sharding compiled
        # for those slices in the cache directory DIR of an earlier `aoizora plan`:
        # gap, CPU ms per (sharding, placement) pair, CPU s per replayed placement

Cold = ``aoizora plan`` as a user types it (a process of its own: Python's start-up
and imports counted) with a fresh, empty cache directory, once with ``--no-clip`` and
once with the clip, one after the other; the winner's own compile is the clip-off
plan's (``timings_s.winner_compile``: the seconds libtpu took for that sharding in
that run, beside the other compiles). Warm = the clip-off plan's directory again, in
this process (so without Python's start-up and imports; a finished placement search
and one a deadline stopped are both read from the ``search/`` cache). Every
line says what it measured; the JSON summary at the end has the raw numbers,
the machine's load average and the peak resident memory of this process and
its children (the worker pool).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aoizora.cache import JsonCache
from aoizora.commands.args import fan_out_options
from aoizora.hlo.graph import graph_from_text
from aoizora.planner import PlanOutcome, run_plan
from aoizora.rank.evaluate import BatchEvaluator, Program
from aoizora.rank.jobs import mesh_job
from aoizora.rank.search import search_placements
from aoizora.report.summary import outcome_summary
from aoizora.studies.whatif import run_whatif
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice, parse_slice_spec


def _progress(args: argparse.Namespace) -> Any:
    return (lambda m: print(f"  {m}", file=sys.stderr, flush=True)) if args.verbose else None


def _plan(args: argparse.Namespace, cache: Path, *, exhaustive: bool) -> tuple[float, PlanOutcome]:
    clip = parse_resolution(args.resolution, frames=args.frames)
    t0 = time.perf_counter()
    outcome = run_plan(
        wan_workload(args.model, clip),
        load_slice(args.slice),
        top_k=args.top_k,
        exhaustive=exhaustive,
        cache_dir=str(cache),
        progress=_progress(args),
        **_search_options(args),
    )
    return time.perf_counter() - t0, outcome


def _search_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the command line would pass with the same flags (its defaults without them)."""
    return fan_out_options(args)


def _peak_gib() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return {"self_gib": own, "largest_child_gib": kids}


def _cold_cli(args: argparse.Namespace, cache: Path, *, clip: bool) -> tuple[float, dict[str, Any]]:
    """One cold ``aoizora plan`` in a process of its own: its wall seconds and ``--json``."""
    argv = [sys.executable, "-m", "aoizora", "plan", "--model", args.model, "--slice",
            args.slice, "--resolution", args.resolution, "--frames", str(args.frames),
            "--top-k", str(args.top_k), "--cache-dir", str(cache), "--json", "--quiet",
            "--out", str(cache / "plan.json"), *([] if clip else ["--no-clip"]),
            *([] if args.workers is None else ["--workers", str(args.workers)])]  # fmt: skip
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    data = json.loads(proc.stdout)
    data["bench"] = {"wall_s": wall, "load_before": load0, "load_after": os.getloadavg()[0]}
    return wall, data


def _cold_lines(off: dict[str, Any], on: dict[str, Any], label: str) -> dict[str, Any]:
    """Print both cold plans and the two ratios; return them for the JSON summary."""
    t, b_off, b_on = off["timings_s"], off["bench"], on["bench"]
    wall_off, wall_on = b_off["wall_s"], b_on["wall_s"]
    over_compile, clip_ratio = wall_off / t["winner_compile"], wall_on / wall_off
    print(f"cold plan --no-clip {wall_off:8.1f} s wall ({label}; load {b_off['load_before']:.1f}"
          f" -> {b_off['load_after']:.1f})")  # fmt: skip
    print(
        f"  stage1 {t['stage1']:.1f} s, compile {t['compile']:.1f} s, rank {t['rank']:.1f} s; "
        f"winner's own compile {t['winner_compile']:.1f} s"
    )
    search, pairs = off["search"], off["search"]["placements"]
    print(
        f"  ranking: {pairs} (sharding, placement) pairs in {t['rank']:.2f} s = "
        f"{t['rank'] / pairs * 1e3:.2f} ms per pair; {search['simulated']} replayed, "
        f"{search['repeats']} repeats, {search['proven_worse']} proven worse, {search['open']} "
        f"open; gap {search['gap']:.2%} ({search['fan_out']})"
    )
    vae = on["vae"]
    print(f"cold plan, clip on  {wall_on:8.1f} s wall (load {b_on['load_before']:.1f} -> "
          f"{b_on['load_after']:.1f}); VAE {vae['winner']['candidate']} "
          f"{vae['winner']['decode_s'] * 1e3:.2f} ms ({vae['source']}) in "
          f"{vae['timings_s']['total']:.1f} s, compiled {vae['compiled']}")  # fmt: skip
    same = on["winner"] == off["winner"]
    print(f"  the same step winner with and without the clip: {same}")
    print(f"cold clip-on / clip-off wall        {clip_ratio:.2f} (target <= 1.5)")
    print(f"cold clip-off wall / winner compile {over_compile:.2f} (target <= 1.5)")
    return {
        "cold_clip_off": off, "cold_clip_on": on, "clip_on_over_clip_off": clip_ratio,
        "clip_off_over_winner_compile": over_compile, "same_step_winner": same,
        "ms_per_pair": t["rank"] / pairs * 1e3,
    }  # fmt: skip


def _plan_figures(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    label = f"{args.model} {args.resolution} {args.frames}f on {args.slice}, K={args.top_k}"
    with (
        tempfile.TemporaryDirectory(prefix="aoizora-bench-") as tmp,
        tempfile.TemporaryDirectory(prefix="aoizora-bench-clip-") as tmp_clip,
    ):
        _, off = _cold_cli(args, Path(tmp), clip=False)
        _, on = _cold_cli(args, Path(tmp_clip), clip=True)
        summary.update(case=label, **_cold_lines(off, on, label))
        warm_s, warm = _plan(args, Path(tmp), exhaustive=False)
        clip = parse_resolution(args.resolution, frames=args.frames)
        written = json.loads((Path(tmp) / "plan.json").read_text(encoding="utf-8"))
        again = json.loads(warm.plan(model=args.model, clip=clip).to_json())
        differ = sorted(k for k in {*again, *written} if again.get(k) != written.get(k))
        print(f"warm plan   {warm_s:8.1f} s; the cold plan file again: {not differ} {differ}")
        summary.update(warm_s=warm_s, warm_identical=not differ, warm_differs_in=differ,
                       warm=outcome_summary(warm))  # fmt: skip
        if args.exhaustive:
            with tempfile.TemporaryDirectory(prefix="aoizora-bench-ex-") as ex_tmp:
                ex_s, ex = _plan(args, Path(ex_tmp), exhaustive=True)
            assert ex.exhaustive is not None
            print(
                f"exhaustive  {ex_s:8.1f} s ({len(ex.scored) + len(ex.failed)} compiled); "
                f"same winner: {ex.winner.candidate.id == warm.winner.candidate.id}; "
                f"Spearman rho(Q1, Q2) {ex.exhaustive.spearman_q1_q2}"
            )
            summary.update(exhaustive_s=ex_s, exhaustive_winner=ex.winner.candidate.id)


def _whatif_figures(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    slices = [parse_slice_spec(s) for s in args.whatif_slices.split(",")]
    workload = wan_workload(args.model, parse_resolution(args.resolution, frames=args.frames))
    options = _search_options(args)
    with tempfile.TemporaryDirectory(prefix="aoizora-bench-whatif-") as tmp:
        runs = []
        answers = []  # each run's rows without plan_s: warm must repeat cold's answer
        for kind in ("cold", "warm"):
            t0 = time.perf_counter()
            rows = run_whatif(
                workload, slices, top_k=1, cache_dir=tmp, progress=_progress(args),
                plan_options=options,
            )  # fmt: skip
            runs.append(time.perf_counter() - t0)
            print(f"{kind} whatif {runs[-1]:8.1f} s ({args.whatif_slices})")
            for r in rows:
                gap = "n/a" if r.search_gap is None else f"{r.search_gap:.2%}"
                bound = "n/a" if r.search_bound_s is None else f"{r.search_bound_s * 1e3:.2f} ms"
                step = "n/a" if r.step_s is None else f"{r.step_s * 1e3:.2f} ms"
                print(
                    f"  {r.spec}: winner {r.winner} {r.placement}, {step}, bound {bound}, "
                    f"gap {gap}, plan {r.plan_s or 0:.1f} s, error {r.error}"
                )
            answers.append(
                [{k: v for k, v in r.to_json_dict().items() if k != "plan_s"} for r in rows]
            )
        same = answers[0] == answers[1]
        print(f"warm whatif rows equal the cold ones (plan_s aside): {same}")
        summary.update(
            whatif_cold_s=runs[0], whatif_warm_s=runs[1], whatif_warm_identical=same,
            whatif_rows=[r.to_json_dict() for r in rows],
        )  # fmt: skip


def _compiled_programs(cache_dir: Path, slice_name: str) -> list[dict[str, Any]]:
    """Every successful compile for ``slice_name`` in the cache (sorted by candidate id)."""
    cache = JsonCache(cache_dir / "compiled", compress=True)
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((cache_dir / "compiled").glob("*/*.json.gz")):
        value = cache.get(path.name.removesuffix(".json.gz"))
        if value and value.get("ok") and value.get("slice_name") == slice_name:
            found.setdefault(value["candidate_id"], value)
    return [found[k] for k in sorted(found)]


def _search_figures(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    rows = []
    for spec in args.search_slices.split(","):
        slice_ = parse_slice_spec(spec)
        compiled = _compiled_programs(Path(args.search_cache), slice_.name)
        if not compiled:
            print(f"search {spec}: no compiled program for {slice_.name} in {args.search_cache}")
            continue
        jobs, programs = [], []
        for c in compiled:
            mesh = [part for part in c["candidate_id"].split("/")[0].split(".")]
            names = tuple(m.rstrip("0123456789") for m in mesh)
            shape = tuple(int(m[len(n) :]) for m, n in zip(mesh, names, strict=True))
            graph = graph_from_text(c["hlo_text"])
            jobs.append(mesh_job(c["candidate_id"], graph, slice_, mesh_shape=shape,
                                 mesh_axis_names=names))  # fmt: skip
            programs.append(Program(c["hlo_text"], graph, shape))
        evaluator = BatchEvaluator(programs, slice_)
        load0 = os.getloadavg()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        options = _search_options(args)
        report = search_placements(
            jobs,
            evaluator,
            deadline_s=options["search_seconds"],
            gap_tolerance=options["search_gap"],
            budget=options["search_budget"],
            progress=_progress(args),
        )
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        pairs = sum(j.num_placements for j in report.jobs)
        row = {
            "slice": spec, "programs": len(jobs), "pairs": pairs, "replayed": evaluator.replayed,
            "proven_worse": sum(j.proven_worse for j in report.jobs),
            "open": sum(j.open for j in report.jobs), "gap": report.gap,
            "winner_q2_s": report.winner.q2_s, "bound_s": report.bound_s, "cpu_s": cpu,
            "wall_s": wall, "cpu_ms_per_pair": cpu / pairs * 1e3,
            "cpu_s_per_replayed": cpu / max(evaluator.replayed, 1),
            "load_average": [load0, os.getloadavg()],
        }  # fmt: skip
        rows.append(row)
        print(
            f"search {spec}: {len(jobs)} shardings, {pairs} pairs; {row['replayed']} replayed, "
            f"{row['proven_worse']} proven worse, {row['open']} open; gap {report.gap:.2%}; "
            f"CPU {cpu:.1f} s (wall {wall:.1f} s) = {row['cpu_ms_per_pair']:.2f} ms per pair, "
            f"{row['cpu_s_per_replayed']:.2f} s per replayed placement; load {load0[0]:.1f}"
        )
    summary["search"] = rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-14b")
    parser.add_argument("--slice", default="v5e:4x4")
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--workers", type=int, default=None, help="default: the machine's cores")
    parser.add_argument("--exhaustive", action="store_true", help="also time --exhaustive")
    parser.add_argument("--whatif", action="store_true", help="also time the what-if study")
    parser.add_argument("--whatif-slices", default="v5e:8x8,v5e:16x16,v6e:16x16+wrap")
    parser.add_argument("--search-seconds", type=float, default=None)
    parser.add_argument(
        "--search-gap", type=float, default=None, help="as aoizora plan's (default 0.001)"
    )
    parser.add_argument(
        "--search-budget", default=None, help="as aoizora plan's (default 500000000)"
    )
    parser.add_argument("--no-plan", action="store_true", help="skip the plan figures")
    parser.add_argument(
        "--search-cache", help="time the placement search over the compiles cached in this dir"
    )
    parser.add_argument("--search-slices", default="v5e:8x8,v5e:16x16")
    parser.add_argument("--verbose", action="store_true", help="progress lines on stderr")
    args = parser.parse_args()
    args.ray = None  # fan_out_options reads it: the benchmark runs the local pool
    summary: dict[str, Any] = {"load_average_start": os.getloadavg()}
    if not args.no_plan:
        _plan_figures(args, summary)
    if args.whatif:
        _whatif_figures(args, summary)
    if args.search_cache:
        _search_figures(args, summary)
    summary["peak_memory"] = _peak_gib()
    summary["load_average_end"] = os.getloadavg()
    print(f"peak memory: {summary['peak_memory']}; load average {summary['load_average_end']}")
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
