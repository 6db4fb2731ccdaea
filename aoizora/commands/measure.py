"""``aoizora measure PLAN.json``: time the plan's steps and collectives on TPUs, as rows.

    aoizora measure plan.json --out rows.csv [--top N] [--no-baselines] [--repeats R]
                    [--warmup W] [--collectives [--sizes 1MiB,16MiB] [--kinds all-gather]]
                    [--no-steps] [--backend tpu|cpu [--cpu-clip plan|WxHxF]] [--distributed]
                    [--restart] [--json] [--profile [--profile-steps N]]
    aoizora measure --kernels [KINDS] [--out kernels.json]

Times the plan's winner, its first N runners-up and its baselines (each compiled on the
plan's mesh in its planned device order, with random weights; one denoising step,
timed until the result is ready), and with ``--collectives`` the five collectives over
each mesh axis and axis pair the plan uses across a size sweep. Every row goes into
``--out`` (docs/validation.md format, with provenance) as soon as it is measured; run
the same command again after an interruption and the rows already there are kept.
``aoizora validate rows.csv`` and ``aoizora calibrate rows.csv --generation G`` take
the file as it is. Without TPU devices the command refuses, unless ``--backend cpu``
asks for a dry run on host CPU devices (rows marked cpu, refused by validate), which runs
the steps at a small clip (``--cpu-clip``, default 256x256x5; ``plan`` keeps the plan's).
Each step's compiled program is checked against the memory it would run in first (the
device's, or on ``--backend cpu`` the host's available memory): one that would not fit
is skipped, said in one line, and the others are measured.
Multi-host slices: run the same command on every host with ``--distributed``
(docs/measure.md). Exit code 0: all measured; 1: some target failed or was skipped (the
others are in the file); 2: bad input; 130: interrupted (the rows so far are in the file).

``--profile`` also profiles each step (``--profile-steps`` more executions under
``jax.profiler``) and saves, beside the rows (``rows.csv`` -> ``rows.profiles/``), the
trace, the compiled HLO text that ran and the step explained op by op (``<row
id>.explain.json``; ``aoizora explain`` reads the trace and HLO again anywhere).

``--kernels`` times the compute model's microbenchmarks on one device instead of a plan
(matmul, stream, transpose, reduce, attention, conv; docs/measure.md, "Kernels"): the
samples go to ``--out`` (default ``kernels.json``) with their provenance, written
after each kernel. ``aoizora calibrate kernels.json --generation G --compute --profiles
rows.profiles`` fits the ``[compute]`` table to them and to the profiled steps.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
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
from aoizora.workloads.clip import Clip

if TYPE_CHECKING:  # types only: bad arguments are refused before jax starts
    from aoizora.measure.run import MeasureReport

__all__ = ["parse_cpu_clip", "parse_sizes", "register", "run"]

_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6}
_SIZE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]*)\s*$")
_CLIP = re.compile(r"(\d+)x(\d+)x(\d+)")
_CPU_CLIP_EXAMPLE = "256x256x5"  # aoizora.measure.dry_run.DEFAULT_CPU_CLIP
_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "measure",
        help="time a plan's steps and collectives on TPUs, as rows validate and calibrate read",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "plan",
        metavar="PLAN.json",
        nargs="*",
        help="plan file(s) written by aoizora plan; several are measured one after the other "
        "into the same --out, in one process (the TPU is opened once)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="rows file (default measurements.csv; with --kernels: kernels.json)",
    )
    p.add_argument("--top", type=int, default=2, help="runners-up to time (default %(default)s)")
    p.add_argument("--no-baselines", action="store_true", help="do not time the baselines")
    p.add_argument("--no-steps", action="store_true", help="time no denoising step")
    p.add_argument("--no-vae", action="store_true", help="do not time the clip's VAE decode")
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
        "--cpu-clip",
        default=_CPU_CLIP_EXAMPLE,
        metavar="plan|WxHxF",
        help="with --backend cpu: the clip the dry run's steps run at, WIDTHxHEIGHTxFRAMES, or "
        "'plan' for the plan's own (default %(default)s; never larger than the plan's)",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="multi-host slice: call jax.distributed.initialize() first (run on every host)",
    )
    p.add_argument("--restart", action="store_true", help="replace --out instead of resuming it")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile each step and explain it op by op (saved beside --out)",
    )
    p.add_argument(
        "--profile-steps", type=int, default=1, help="steps to profile (default %(default)s)"
    )
    p.add_argument(
        "--kernels",
        nargs="?",
        const="all",
        default=None,
        metavar="KINDS",
        help="time the compute model's kernel microbenchmarks (all, or some of matmul, "
        "stream, transpose, reduce, attention, conv) instead of a plan",
    )
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


def parse_cpu_clip(text: str) -> Clip | None:
    """``--cpu-clip``: ``"plan"`` (None: the plan's own clip) or ``WIDTHxHEIGHTxFRAMES``.

    >>> parse_cpu_clip("256x256x5"), parse_cpu_clip("plan")
    (Clip(width=256, height=256, frames=5), None)
    """
    value = text.strip().lower()
    if value == "plan":
        return None
    m = _CLIP.fullmatch(value)
    if m is None or min(int(g) for g in m.groups()) < 1:
        raise MeasureError(
            f"--cpu-clip {text!r}: give 'plan' (the plan's own clip) or WIDTHxHEIGHTxFRAMES "
            f"in pixels and frames, e.g. --cpu-clip {_CPU_CLIP_EXAMPLE}"
        )
    return Clip(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def _check_counts(args: argparse.Namespace) -> None:
    for name, value, least in (("--top", args.top, 0), ("--warmup", args.warmup, 0)):
        if value < least:
            raise MeasureError(f"{name} {value}: must be {least} or more, e.g. {name} 2")
    if args.repeats < 1:
        raise MeasureError(f"--repeats {args.repeats}: must be 1 or more, e.g. --repeats 10")
    if args.profile_steps < 1:
        raise MeasureError(
            f"--profile-steps {args.profile_steps}: must be 1 or more, e.g. --profile-steps 2"
        )
    if args.kernels is None and not args.plan:
        raise MeasureError(
            "give the plan file to measure (aoizora measure plan.json), or --kernels to time "
            "the compute model's microbenchmarks"
        )


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

    if not args.plan:  # --kernels: one device
        if args.backend == "cpu":
            jax.config.update("jax_platforms", "cpu")
        return
    plans = [load_plan(p) for p in args.plan]
    plan = max(plans, key=lambda p: p.num_devices)
    if args.backend == "cpu":
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            count = f"--xla_force_host_platform_device_count={plan.num_devices}"
            os.environ["XLA_FLAGS"] = f"{flags} {count}".strip()
        jax.config.update("jax_platforms", "cpu")
    if args.distributed:
        jax.distributed.initialize()  # Cloud TPU: coordinator and process ids detected


def _warn_version_drift(plan_files: list[str]) -> None:
    """One line per distinct difference between this jax/jaxlib/libtpu and a plan's (the
    plan's prediction was made from the HLO its versions compiled); no plan: the pin."""
    from aoizora.plan import load_plan
    from aoizora.software import running_versions, version_drift, warn_version_drift

    if not plan_files:
        warn_version_drift("measure")
        return
    said: set[str] = set()
    for plan_file in plan_files:
        versions = load_plan(plan_file).provenance.versions()
        line = version_drift(running_versions(), versions, against="the plan was made with")
        if line is not None and line not in said:
            said.add(line)
            print(f"aoizora measure: warning: {plan_file}: {line}", file=sys.stderr)


def _render(report: MeasureReport) -> str:
    lines = [f"{'row':<44} {'measured':>12} {'spread':>10} {'predicted':>12}  what"]
    for what, row, predicted in report.measured:
        spread = "-" if row.spread_s is None else f"{row.spread_s:.4g}"
        pred = "-" if predicted is None else f"{predicted:.4g}"
        lines.append(f"{row.row_id:<44} {row.measured_s:>12.4g} {spread:>10} {pred:>12}  {what}")
    lines.append(
        f"{len(report.measured)} rows measured into {report.out} (seconds; predicted = the "
        f"plan's: a step simulated, a VAE decode as its plan says), {len(report.kept)} already "
        f"there, {len(report.failed)} failed"
        + (f", {len(report.skipped)} skipped (memory)" if report.skipped else "")
    )
    lines.extend(f"FAILED {what}: {why}" for what, why in report.failed)
    lines.extend(f"SKIPPED {what}: {why}" for what, why in report.skipped)
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    _check_counts(args)
    sizes = parse_sizes(args.sizes)
    cpu_clip = parse_cpu_clip(args.cpu_clip)  # refused before jax starts
    _start_backend(args)
    _warn_version_drift(args.plan)
    if args.kernels is not None:
        from aoizora.commands.measure_kernels import run_kernel_suite

        return run_kernel_suite(args)
    from aoizora.measure.run import MeasureOptions, run_measure
    from aoizora.studies.validation.format import COLLECTIVE_KINDS

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    kinds = COLLECTIVE_KINDS if kinds == ("all",) else kinds  # unknown ones: refused by name

    options = MeasureOptions(
        top=args.top, baselines=not args.no_baselines, steps=not args.no_steps,
        vae=not args.no_vae,
        collectives=args.collectives, sizes_bytes=sizes, kinds=kinds, warmup=args.warmup,
        repeats=args.repeats, restart=args.restart,
        profile_steps=args.profile_steps if args.profile else 0,
        cpu_clip=cpu_clip,
    )  # fmt: skip
    out = args.out or "measurements.csv"
    progress = progress_printer(quiet=args.quiet)
    reports = []
    try:
        with _sigterm_interrupts():
            for i, plan_file in enumerate(args.plan):
                # --restart starts the file afresh once, not for every plan
                these = options if i == 0 else dataclasses.replace(options, restart=False)
                reports.append(
                    run_measure(
                        plan_file, out, backend=args.backend, options=these, progress=progress
                    )
                )
    except KeyboardInterrupt:
        print(
            f"aoizora measure: interrupted; the rows measured so far are in {out}; run the "
            "same command again to measure the rest",
            file=sys.stderr,
        )
        return _INTERRUPTED
    explained = [_explain_profiles(r, progress) for r in reports]
    if args.json:
        data: Any = [
            r.to_json_dict() | {"explained": x} for r, x in zip(reports, explained, strict=True)
        ]
        data = data[0] if len(data) == 1 else data
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write("".join(_render(r) for r in reports))
    return 1 if any(r.failed or r.skipped for r in reports) else 0


def _explain_profiles(report: MeasureReport, progress: Any) -> list[dict[str, Any]]:
    """Each profiled step explained op by op: ``<row id>.explain.json`` beside its trace,
    the category table on stderr. An explanation that fails is said, the rows stand."""
    from aoizora.atomic import write_atomic
    from aoizora.commands.explain import explain_files, render_explanation
    from aoizora.plan import load_plan
    from sim.topology import load_slice

    if not report.profiles:
        return []
    slice_ = load_slice(load_plan(report.env.plan_file).slice_name)
    out = []
    for row, request in report.profiles:
        try:
            e = explain_files(request.trace, request.hlo, slice_)
        except Exception as exc:  # the rows and trace are saved; explain can run again
            progress(f"explain {row}: FAILED: {type(exc).__name__}: {exc}")
            continue
        target = request.trace.with_name(f"{row}.explain.json")
        write_atomic(target, json.dumps(e.to_json_dict(), indent=2) + "\n")
        progress(f"{row} op by op ({target}):\n{render_explanation(e, top=0)}")
        out.append({"row_id": row, "explain": str(target), "step_s": e.step_s,
                    "device_ops_s": e.device_ops_s, "predicted_s": e.predicted_s})  # fmt: skip
    return out
