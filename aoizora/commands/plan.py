"""``aoizora plan``: the best (sharding, placement) for a Wan model, clip and slice.

    aoizora plan --model wan2.1-1.3b --slice v5e:2x4 --resolution 480p --frames 81
                 [--top-k K] [--out plan.json] [--exhaustive] [--json] [--report DIR]

Progress goes to stderr, the summary table to stdout, the plan to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CACHE_DIR",
    "add_cache_argument",
    "add_search_arguments",
    "add_workload_arguments",
    "check_search_arguments",
    "progress_printer",
    "register",
    "run",
]

DEFAULT_CACHE_DIR = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
    "aoizora",
)


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--resolution``, ``--frames``: the Wan workload a planning command plans."""
    from aoizora.workloads.wan import WAN_CONFIGS

    p.add_argument("--model", required=True, choices=sorted(WAN_CONFIGS), help="Wan 2.1 config")
    p.add_argument("--resolution", default="480p", help="480p, 720p or WIDTHxHEIGHT (pixels)")
    p.add_argument("--frames", type=int, default=81, help="clip frames, 4k+1 (default 81)")


def add_cache_argument(p: argparse.ArgumentParser) -> None:
    """``--cache-dir``: the planner's cache (Stage-1 estimates, compile results, Q2 times)."""
    p.add_argument(
        "--cache-dir",
        default=os.environ.get("AOIZORA_CACHE_DIR", DEFAULT_CACHE_DIR),
        help=(
            "cache of Stage-1 estimates, compile results and simulated step times "
            "(default $AOIZORA_CACHE_DIR or %(default)s)"
        ),
    )


def add_search_arguments(p: argparse.ArgumentParser, *, top_k_default: int) -> None:
    """``--top-k``, ``--max-placements``, ``--cache-dir``, ``--quiet``: how the planner searches."""
    p.add_argument(
        "--top-k",
        type=int,
        default=top_k_default,
        help="candidates Stage 1 keeps (default %(default)s)",
    )
    p.add_argument(
        "--max-placements",
        type=int,
        default=None,
        help="rank at most this many placements per sharding (simplest first; default all)",
    )
    add_cache_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def check_search_arguments(args: argparse.Namespace) -> None:
    """Reject a non-positive ``--top-k`` or ``--max-placements`` (:class:`WorkloadError`)."""
    from aoizora.errors import WorkloadError

    if args.top_k < 1:
        raise WorkloadError(f"--top-k {args.top_k}: must be a positive integer, e.g. --top-k 3")
    if args.max_placements is not None and args.max_placements < 1:
        raise WorkloadError(
            f"--max-placements {args.max_placements}: must be a positive integer, e.g. 32"
        )


def progress_printer(*, quiet: bool) -> Callable[[str], None]:
    """The planner's ``progress`` callback: one line on stderr each, nothing when ``quiet``."""

    def progress(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return progress


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="pick the best (sharding, placement) for a model, clip and slice",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_workload_arguments(p)
    p.add_argument("--slice", required=True, dest="slice_name", help="TPU slice, e.g. v5e:2x4")
    add_search_arguments(p, top_k_default=3)
    p.add_argument("--out", default="plan.json", help="plan file to write (default plan.json)")
    p.add_argument(
        "--exhaustive",
        action="store_true",
        help="compile every candidate and report Stage 1's recall and Spearman rho",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        help="also write a link heatmap, Perfetto traces and a ranking plot into DIR",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aoizora.planner import outcome_summary, run_plan
    from aoizora.report import render_report
    from aoizora.workload import wan_workload
    from aoizora.workloads.wan import parse_resolution
    from sim.topology import load_slice

    check_search_arguments(args)
    slice_ = load_slice(args.slice_name)
    clip = parse_resolution(args.resolution, frames=args.frames)
    workload = wan_workload(args.model, clip)
    progress = progress_printer(quiet=args.quiet)
    outcome = run_plan(
        workload,
        slice_,
        top_k=args.top_k,
        exhaustive=args.exhaustive,
        cache_dir=args.cache_dir,
        max_placements=args.max_placements,
        progress=progress,
    )
    plan = outcome.plan(model=args.model, clip=clip)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plan.save(out)
    if args.report:
        from aoizora.plan_report import write_report_dir

        for path in write_report_dir(outcome, Path(args.report)):
            progress(f"wrote {path}")
    if args.json:
        summary = outcome_summary(outcome)
        summary["plan_file"] = str(out)
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_report(outcome))
        print(f"plan written to {out}")
    return 0
