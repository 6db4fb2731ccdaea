"""The arguments every planning command shares: the workload, the search, the cache, progress."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aoizora.errors import CompileError, WorkloadError
from aoizora.interrupts import set_resume_note
from aoizora.resources import DEFAULT_MEMORY_FRACTION
from aoizora.software import LIBTPU_PATH_VARIABLE
from aoizora.timebound import DEFAULT_MINUTES, FLAG, TimeBound, time_bound
from aoizora.workloads.wan_config import WAN_CONFIGS
from sim.topology import Slice

if TYPE_CHECKING:  # a type only: building the parser must not start jax (bad input fails fast)
    from aoizora.workloads.base import Workload

__all__ = [
    "DEFAULT_CACHE_DIR",
    "add_cache_argument",
    "add_libtpu_argument",
    "add_compute_arguments",
    "add_search_arguments",
    "add_time_argument",
    "add_workload_arguments",
    "check_search_arguments",
    "check_slices",
    "command_time_bound",
    "fan_out_options",
    "progress_printer",
    "libtpu_file",
    "resume_from_cache",
    "search_budget_work",
    "select_attention_kernel",
    "use_libtpu",
    "use_topology_dir",
    "workload_from_args",
]

# The planner's defaults (aoizora.rank.search.DEFAULT_SEARCH_BUDGET / DEFAULT_SEARCH_GAP,
# checked equal by tests/aoizora/test_search_budget.py), written out: importing the search
# (numpy, the placement code) would slow down every command's start and its refusals.
DEFAULT_BUDGET_WORK = 500_000_000
DEFAULT_GAP = 0.001

DEFAULT_CACHE_DIR = os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")),
    "aoizora",
)


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """What a planning command plans: ``--model`` (a Wan config, with ``--resolution`` and
    ``--frames``) or ``--workload FILE.py:FACTORY`` (a model of your own)."""
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", choices=sorted(WAN_CONFIGS), help="a Wan 2.1 / 2.2 config")
    which.add_argument(
        "--workload",
        metavar="FILE.py:FACTORY",
        help=(
            "a model of your own: FACTORY() returns aoizora.user_workload(...); "
            "package.module:FACTORY works too"
        ),
    )
    p.add_argument(
        "--resolution",
        default=None,
        help=(
            "with --model: 480p, 720p (the model's: 1280x704 for wan2.2-ti2v-5b) or "
            "WIDTHxHEIGHT (default 480p)"
        ),
    )
    p.add_argument(
        "--frames",
        type=int,
        default=None,
        help="with --model: clip frames, 4k+1 (default: the model's, 81; 121 for wan2.2-ti2v-5b)",
    )


def workload_from_args(
    args: argparse.Namespace, progress: Callable[[str], None] | None = None
) -> Workload:
    """The workload ``--model`` (Wan, at ``--resolution`` x ``--frames``) or ``--workload``
    names; ``--resolution``/``--frames`` with ``--workload`` are an error (the factory fixes
    its own shapes). ``progress`` gets one line saying what a ``--workload`` factory gave."""
    import jax

    from aoizora.workloads.factory import load_workload
    from aoizora.workloads.wan import model_clip, wan_workload

    if args.workload is not None:
        given = [f"--{n}" for n in ("resolution", "frames") if getattr(args, n) is not None]
        if given:
            raise WorkloadError(
                f"{' and '.join(given)} apply to --model (Wan) only; the factory of --workload "
                f"{args.workload!r} fixes its own shapes (drop {' and '.join(given)})"
            )
        workload = load_workload(args.workload)
        if progress is not None:
            arrays = len(jax.tree.leaves(workload.abstract_args))
            progress(
                f"workload {workload.name!r} from {args.workload}: {arrays} input arrays, mesh "
                f"axes {', '.join(workload.mesh_axis_names)}, rule sets "
                f"{', '.join(r.name for r in workload.rule_sets)}"
            )
        return workload
    resolution = "480p" if args.resolution is None else args.resolution
    # The model fixes what 720p means and the default frame count (wan_config.model_clip).
    return wan_workload(args.model, model_clip(args.model, resolution, frames=args.frames))


def check_slices(slices: Sequence[Slice]) -> None:
    """Fail before any work if libtpu cannot describe one of ``slices`` (and start libtpu,
    its start-up chatter filtered, before a user's factory could start it noisily)."""
    from aoizora.tpu import check_slice

    for slice_ in slices:  # libtpu's rule first: no slice waits for libtpu to start
        check_slice(slice_, describe=False)
    for slice_ in slices:
        check_slice(slice_)


def add_compute_arguments(p: argparse.ArgumentParser, *, kernel: bool = True) -> None:
    """``--topology-dir`` (calibrated chip files) and ``--attention-kernel``: which compute
    model prices the kernels (sim/compute.py, docs/simulator.md)."""
    p.add_argument(
        "--topology-dir",
        default=None,
        metavar="DIR",
        help="read a generation's numbers from DIR/<generation>.toml when DIR has one (e.g. "
        "written by aoizora calibrate --out DIR/tpu7x.toml), the shipped topologies/ otherwise",
    )
    if kernel:
        p.add_argument(
            "--attention-kernel",
            default=None,
            metavar="NAME",
            help="price attention at this kernel version's efficiency, a key of the "
            "generation's [compute.attention_efficiency] (e.g. tokamax-base2); default: the "
            "generation's own (the newest kernel with measured steps)",
        )


def use_topology_dir(args: argparse.Namespace) -> None:
    """Apply ``--topology-dir`` for this process and its workers (before any chip loads)."""
    if getattr(args, "topology_dir", None):
        if not os.path.isdir(args.topology_dir):
            raise WorkloadError(
                f"--topology-dir {args.topology_dir!r} is not a directory; give a folder of "
                "<generation>.toml files, e.g. one aoizora calibrate --out wrote into"
            )
        os.environ["AOIZORA_TOPOLOGIES_DIR"] = os.path.abspath(args.topology_dir)


def select_attention_kernel(args: argparse.Namespace, slices: Sequence[Slice]) -> list[Slice]:
    """``slices`` with ``--attention-kernel`` selected in their chips' compute model."""
    kernel = getattr(args, "attention_kernel", None)
    if kernel is None:
        return list(slices)
    return [
        s.with_chip(dataclasses.replace(s.chip, compute=s.chip.compute.with_kernel(kernel)))
        for s in slices
    ]


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


_LIBTPU_EXAMPLE = (
    "the runtime's own: python -c 'import libtpu; print(libtpu.__file__)' on the TPU host, "
    "that folder's libtpu.so (pip install --target DIR libtpu==VERSION gives DIR/libtpu/libtpu.so)"
)


def add_libtpu_argument(p: argparse.ArgumentParser, *, what: str) -> None:
    """``--libtpu PATH``: compile with this libtpu library instead of the installed one."""
    p.add_argument(
        "--libtpu",
        default=None,
        metavar="PATH",
        help=f"compile {what} with this libtpu library (a wheel's libtpu/libtpu.so, e.g. the "
        "runtime's own) instead of the installed one; plans, rows and caches record its version",
    )


def libtpu_file(flag: str, path: str) -> str:
    """``path`` resolved, or a :class:`CompileError` naming the flag when it is no file."""
    if not os.path.isfile(path):
        raise CompileError(f"{flag} {path}: no such file; give a libtpu library, e.g. "
                           f"{_LIBTPU_EXAMPLE}")  # fmt: skip
    return os.path.realpath(path)


def use_libtpu(args: argparse.Namespace) -> None:
    """Make ``--libtpu`` the library jax loads, in this process and the workers it starts
    (``$TPU_LIBRARY_PATH``, read when jax first loads a TPU library)."""
    if getattr(args, "libtpu", None):
        os.environ[LIBTPU_PATH_VARIABLE] = libtpu_file("--libtpu", args.libtpu)


def resume_from_cache(cache_dir: str) -> None:
    """Say on an interrupt that finished work is in ``cache_dir`` and a rerun resumes."""
    set_resume_note(f"finished work is cached in {cache_dir} and a rerun resumes from it")


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
    add_libtpu_argument(p, what="the programs")
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
        "--max-memory-gb",
        type=float,
        default=None,
        metavar="GB",
        help="the most memory the planner's processes may hold together; reaching it ends "
        "the run in one line naming the phase (exit code 3), before the kernel's OOM killer "
        f"would (default {round(DEFAULT_MEMORY_FRACTION * 100)}%% of the memory available at "
        "the start; "
        "0: no bound)",
    )
    p.add_argument(
        "--search-budget",
        default=None,
        metavar="WORK",
        help="stop the placement search after this much work and report its bound and gap; "
        "counted, not timed, so the answer is the same on a busy or an idle machine "
        f"(default {DEFAULT_BUDGET_WORK:,}: about two CPU minutes at most here; 'unlimited': "
        "none; docs/placements.md)",
    )
    p.add_argument(
        "--search-seconds",
        type=float,
        default=None,
        help="also stop the placement search after this many seconds of wall clock (off by "
        "default: where it stops then depends on the machine's load)",
    )
    p.add_argument(
        "--search-gap",
        type=float,
        default=None,
        metavar="FRACTION",
        help="stop the placement search once no placement left can be more than this "
        f"fraction faster than the best found (default {DEFAULT_GAP}: 0.1%%); 0 proves the "
        "best, with no work budget unless --search-budget is given",
    )


def add_time_argument(p: argparse.ArgumentParser, *, what: str) -> None:
    """``--max-minutes``: the time bound of ``what`` (:mod:`aoizora.timebound`)."""
    p.add_argument(
        FLAG,
        type=float,
        default=None,
        metavar="MIN",
        help=f"the most wall time {what} may take (default {DEFAULT_MINUTES:g}; none with "
        "--exhaustive or --search-gap 0; 0: none): compiles Stage 1's time says would not "
        "fit are left out, baselines first, and the placement search stops with its best "
        "placement, bound and gap; Stage 1, a round of compiles and the default orders' "
        "replays always run (docs/planner.md)",
    )


def command_time_bound(args: argparse.Namespace) -> TimeBound | None:
    """The bound ``--max-minutes`` asks for, from now; by default none when the command
    asks for everything (``--exhaustive``, ``--search-gap 0``)."""
    asks_all = bool(getattr(args, "exhaustive", False)) or args.search_gap == 0.0
    return time_bound(args.max_minutes, default=0.0 if asks_all else DEFAULT_MINUTES)


def check_search_arguments(args: argparse.Namespace) -> None:
    """Reject a non-positive ``--top-k``, ``--max-placements``, ``--workers`` or
    ``--search-seconds``, and a ``--search-gap`` outside [0, 1) (:class:`WorkloadError`)."""
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
    if args.search_gap is not None and not 0.0 <= args.search_gap < 1.0:
        raise WorkloadError(
            f"--search-gap {args.search_gap}: must be a fraction in [0, 1), e.g. "
            "--search-gap 0.001 (0.1%); 0 searches until the best placement is proven"
        )
    search_budget_work(args)  # a bad --search-budget fails here, before any work


def search_budget_work(args: argparse.Namespace) -> int | None:
    """The work budget ``--search-budget`` asks for (``None``: unlimited): the default,
    unless ``--search-gap 0`` asks for the best proven and no budget is given."""
    text = args.search_budget
    if text is None:
        return None if args.search_gap == 0.0 else DEFAULT_BUDGET_WORK
    if text.strip().lower() == "unlimited":
        return None
    digits = text.replace("_", "").replace(",", "").strip()
    try:
        work = int(digits)
    except ValueError:
        work = _scientific_count(digits)
    if work < 1:
        raise WorkloadError(
            f"--search-budget {text!r}: must be a positive number of work units or "
            f"'unlimited', e.g. --search-budget {DEFAULT_BUDGET_WORK} (the default)"
        )
    return work


def _scientific_count(text: str) -> int:
    """``5e8`` -> 500000000: a whole count written in scientific notation (as the docs
    quote the default); 0 for anything else (not a number, a fraction, inf, nan)."""
    try:
        value = float(text)
    except ValueError:
        return 0
    if not math.isfinite(value) or not value.is_integer():
        return 0
    return int(value)


def fan_out_options(args: argparse.Namespace) -> dict[str, object]:
    """``workers``, ``ray``, ``search_seconds``, ``search_gap`` and ``search_budget`` for
    :func:`aoizora.planner.run_plan`."""
    from aoizora.rank.search import SearchBudget  # needed only once the input is checked

    work = search_budget_work(args)
    return {
        "workers": args.workers,
        "ray": args.ray,
        "search_seconds": args.search_seconds,
        "search_gap": DEFAULT_GAP if args.search_gap is None else args.search_gap,
        "search_budget": None if work is None else SearchBudget(work=work),
    }


def progress_printer(*, quiet: bool) -> Callable[[str], None]:
    """The planner's ``progress`` callback: one line on stderr each, nothing when ``quiet``."""

    def progress(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return progress
