"""``aoizora measure PLAN.json``: time the plan's steps and collectives on TPUs, as rows.

    aoizora measure plan.json --out rows.csv [--top N] [--no-baselines] [--repeats R]
                    [--warmup W] [--collectives [--sizes 1MiB,16MiB] [--kinds all-gather]]
                    [--no-steps] [--backend tpu|cpu] [--distributed] [--restart] [--json]

Times the plan's winner, its first N runners-up and its baselines (each compiled on the
plan's mesh in its planned device order, with random weights; one denoising step,
timed until the result is ready), and with ``--collectives`` the five collectives over
each mesh axis and axis pair the plan uses across a size sweep. Every row goes into
``--out`` (docs/validation.md format, with provenance) as soon as it is measured; run
the same command again after an interruption and the rows already there are kept.
``aoizora validate rows.csv`` and ``aoizora calibrate rows.csv --generation G`` take
the file as it is. Without TPU devices the command refuses, unless ``--backend cpu``
asks for a dry run on host CPU devices (rows marked cpu, refused by validate).
Multi-host slices: run the same command on every host with ``--distributed``
(docs/measure.md). Exit code 0: all measured; 1: some target failed (the others are in
the file); 2: bad input; 130: interrupted (the rows so far are in the file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aoizora.commands.args import progress_printer
from aoizora.errors import MeasureError

if TYPE_CHECKING:  # types only: bad arguments are refused before jax starts
    from aoizora.measure.run import MeasureReport

__all__ = ["parse_sizes", "register", "run"]

_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6}
_SIZE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$")
_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "measure",
        help="time a plan's steps and collectives on TPUs, as rows validate and calibrate read",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", metavar="PLAN.json", help="plan file written by aoizora plan")
    p.add_argument("--out", default="measurements.csv", help="rows file (default %(default)s)")
    p.add_argument("--top", type=int, default=2, help="runners-up to time (default %(default)s)")
    p.add_argument("--no-baselines", action="store_true", help="do not time the baselines")
    p.add_argument("--no-steps", action="store_true", help="time no step (with --collectives)")
    p.add_argument("--collectives", action="store_true", help="also time the collectives")
    p.add_argument(
        "--sizes",
        default="1MiB,4MiB,16MiB,64MiB",
        help="collective buffer sizes per device, e.g. 64KiB,1MiB (default %(default)s)",
    )
    p.add_argument(
        "--kinds",
        default="all",
        help="collectives to time, comma separated: all-gather, all-reduce, reduce-scatter, "
        "all-to-all, collective-permute (default: all five)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs (default %(default)s)")
    p.add_argument(
        "--backend",
        choices=("tpu", "cpu"),
        default="tpu",
        help="tpu (default): the plan's TPU slice; cpu: a dry run on host CPU devices",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="multi-host slice: call jax.distributed.initialize() first (run on every host)",
    )
    p.add_argument("--restart", action="store_true", help="replace --out instead of resuming it")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print what was measured as JSON")
    p.set_defaults(func=run)


def parse_sizes(text: str) -> tuple[int, ...]:
    """Byte sizes from ``"1MiB,64KiB,4096"`` (B, KiB, MiB, GiB, KB, MB).

    >>> parse_sizes("1MiB, 64KiB,4096")
    (1048576, 65536, 4096)
    """
    out = []
    for part in text.split(","):
        m = _SIZE.match(part)
        if m is None or m.group(2) not in _UNITS or int(m.group(1)) < 1:
            raise MeasureError(
                f"--sizes {text!r}: {part.strip()!r} is not a size; give positive sizes with "
                f"a unit of {list(_UNITS)[1:]} or none (bytes), e.g. --sizes 1MiB,16MiB"
            )
        out.append(int(m.group(1)) * _UNITS[m.group(2)])
    return tuple(out)


def _check_counts(args: argparse.Namespace) -> None:
    for name, value, least in (("--top", args.top, 0), ("--warmup", args.warmup, 0)):
        if value < least:
            raise MeasureError(f"{name} {value}: must be {least} or more, e.g. {name} 2")
    if args.repeats < 1:
        raise MeasureError(f"--repeats {args.repeats}: must be 1 or more, e.g. --repeats 10")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C: the device work in flight finishes, rows are kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_backend(args: argparse.Namespace) -> None:
    """Before JAX creates its devices: host CPU devices for a dry run (as many as the plan
    has, unless XLA_FLAGS says), or the distributed system of a multi-host slice."""
    import jax

    from aoizora.plan import load_plan

    plan = load_plan(args.plan)
    if args.backend == "cpu":
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            count = f"--xla_force_host_platform_device_count={plan.num_devices}"
            os.environ["XLA_FLAGS"] = f"{flags} {count}".strip()
        jax.config.update("jax_platforms", "cpu")
    if args.distributed:
        jax.distributed.initialize()  # Cloud TPU: coordinator and process ids detected


def _render(report: MeasureReport) -> str:
    lines = [f"{'row':<44} {'measured':>12} {'spread':>10} {'predicted':>12}  what"]
    for what, row, predicted in report.measured:
        spread = "-" if row.spread_s is None else f"{row.spread_s:.4g}"
        pred = "-" if predicted is None else f"{predicted:.4g}"
        lines.append(f"{row.row_id:<44} {row.measured_s:>12.4g} {spread:>10} {pred:>12}  {what}")
    lines.append(
        f"{len(report.measured)} rows measured into {report.out} (seconds; predicted = the "
        f"plan's simulated step), {len(report.kept)} already there, {len(report.failed)} failed"
    )
    lines.extend(f"FAILED {what}: {why}" for what, why in report.failed)
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    _check_counts(args)
    sizes = parse_sizes(args.sizes)
    _start_backend(args)
    from aoizora.measure.run import MeasureOptions, run_measure
    from aoizora.studies.validation.format import COLLECTIVE_KINDS

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    kinds = COLLECTIVE_KINDS if kinds == ("all",) else kinds  # unknown ones: refused by name

    options = MeasureOptions(
        top=args.top, baselines=not args.no_baselines, steps=not args.no_steps,
        collectives=args.collectives, sizes_bytes=sizes, kinds=kinds, warmup=args.warmup,
        repeats=args.repeats, restart=args.restart,
    )  # fmt: skip
    progress = progress_printer(quiet=args.quiet)
    try:
        with _sigterm_interrupts():
            report = run_measure(
                args.plan, args.out, backend=args.backend, options=options, progress=progress
            )
    except KeyboardInterrupt:
        print(
            f"aoizora measure: interrupted; the rows measured so far are in {args.out}; run the "
            "same command again to measure the rest",
            file=sys.stderr,
        )
        return _INTERRUPTED
    if args.json:
        sys.stdout.write(json.dumps(report.to_json_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_render(report))
    return 1 if report.failed else 0
