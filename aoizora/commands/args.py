"""The arguments every planning command shares: the workload, the search, the cache, progress."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from aoizora.errors import WorkloadError
from aoizora.workloads.wan import WAN_CONFIGS

__all__ = [
    "DEFAULT_CACHE_DIR",
    "add_cache_argument",
    "add_search_arguments",
    "add_workload_arguments",
    "check_search_arguments",
    "fan_out_options",
    "progress_printer",
]

DEFAULT_CACHE_DIR = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
    "aoizora",
)


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--resolution``, ``--frames``: the Wan workload a planning command plans."""
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
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes for compiles and exact replays (default: the machine's cores; 1: serial)",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="fan out on a Ray cluster at ADDRESS (bare --ray: start one on this machine; "
        "needs the extra aoizora[ray])",
    )
    p.add_argument(
        "--search-seconds",
        type=float,
        default=None,
        help="stop the placement search after this long and report its bound and gap "
        "(default: search until the best placement is proven)",
    )


def check_search_arguments(args: argparse.Namespace) -> None:
    """Reject a non-positive ``--top-k``, ``--max-placements``, ``--workers`` or
    ``--search-seconds`` (:class:`WorkloadError`)."""
    if args.top_k < 1:
        raise WorkloadError(f"--top-k {args.top_k}: must be a positive integer, e.g. --top-k 3")
    if args.max_placements is not None and args.max_placements < 1:
        raise WorkloadError(
            f"--max-placements {args.max_placements}: must be a positive integer, e.g. 32"
        )
    if args.workers is not None and args.workers < 1:
        raise WorkloadError(
            f"--workers {args.workers}: must be a positive integer, e.g. --workers 2 (1: serial)"
        )
    if args.search_seconds is not None and not args.search_seconds > 0:
        raise WorkloadError(
            f"--search-seconds {args.search_seconds}: must be a positive number of seconds, "
            "e.g. --search-seconds 120"
        )


def fan_out_options(args: argparse.Namespace) -> dict[str, object]:
    """``workers``, ``ray`` and ``search_seconds`` for :func:`aoizora.planner.run_plan`."""
    return {"workers": args.workers, "ray": args.ray, "search_seconds": args.search_seconds}


def progress_printer(*, quiet: bool) -> Callable[[str], None]:
    """The planner's ``progress`` callback: one line on stderr each, nothing when ``quiet``."""

    def progress(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return progress
