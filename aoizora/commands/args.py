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
    "progress_printer",
]

DEFAULT_CACHE_DIR = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
    "aoizora",
)


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--resolution``, ``--frames``: the Wan workload a planning command plans."""
    p.add_argument(
        "--model", required=True, choices=sorted(WAN_CONFIGS), help="Wan 2.1 / 2.2 config"
    )
    p.add_argument(
        "--resolution",
        default="480p",
        help="480p, 720p (the model's: 1280x704 for wan2.2-ti2v-5b) or WIDTHxHEIGHT (pixels)",
    )
    p.add_argument(
        "--frames",
        type=int,
        default=None,
        help="clip frames, 4k+1 (default: the model's, 81; 121 for wan2.2-ti2v-5b)",
    )


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
