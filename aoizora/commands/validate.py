"""``aoizora validate FILE``: hold the simulator's predictions against TPU measurements.

Predicts every row of a measurement file (format: docs/validation.md), reports
per group of rows sharing a workload and a slice Spearman's rho, top-1
agreement and MAPE, and exits 1 when any is outside the thresholds given on the
command line -- a regression gate. Exit 0: within thresholds; exit 2: the file
is malformed or a row cannot be predicted.

Collective rows are replayed in the simulator; step rows are compiled for
their slice (AOT, libtpu) and replayed with their device order, like the
planner's Q2. Compile results are kept in the planner's cache (``--cache-dir``,
shared with ``aoizora plan``).

    aoizora validate validation/measurements.csv --min-spearman 0.9 --min-top1 1 --max-mape 35
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from typing import Any

from aoizora.commands.args import (
    add_cache_argument,
    add_compute_arguments,
    add_libtpu_argument,
    libtpu_file,
    resume_from_cache,
    use_libtpu,
    use_topology_dir,
)
from aoizora.errors import AoizoraError, ValidationError
from aoizora.interrupts import phase
from aoizora.software import package_version, warn_version_drift
from aoizora.studies.validation import (
    GroupReport,
    Thresholds,
    ValidationReport,
    check_tpu_rows,
    default_predictors,
    gate,
    read_measurements,
    validate,
)
from aoizora.studies.validation.compilers import (
    compiler_note,
    format_side_by_side,
    libtpu_of,
    side_by_side,
)
from aoizora.studies.validation.memory import validate_memory
from aoizora.studies.validation.step import predict_step_memory
from sim.errors import SimError

__all__ = ["register", "run", "format_report"]


def register(subparsers: Any) -> None:
    """Add the ``validate`` subcommand (see :mod:`aoizora.cli`)."""
    p = subparsers.add_parser(
        "validate",
        help="predict a measurement file and gate on rank correlation, top-1 and error",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="measurement CSV (docs/validation.md)")
    p.add_argument(
        "--min-spearman",
        type=float,
        default=None,
        metavar="X",
        help="fail when a group's Spearman rho is below X (groups where rho is undefined pass)",
    )
    p.add_argument(
        "--min-top1",
        type=float,
        default=None,
        metavar="X",
        help="fail when a group's top-1 agreement (1 or 0) is below X; 1 demands every group",
    )
    p.add_argument(
        "--max-mape",
        type=float,
        default=None,
        metavar="X",
        help="fail when a collective group's mean absolute percentage error exceeds X percent",
    )
    p.add_argument(
        "--max-step-mape",
        type=float,
        default=None,
        metavar="X",
        help="fail when a step group's MAPE (its gated rows) exceeds X percent",
    )
    p.add_argument(
        "--min-step-order",
        type=float,
        default=None,
        metavar="X",
        help="fail when fewer than X of a step group's decisive pairs (measurements apart by "
        "more than their spreads) are predicted in the measured order; 1 demands all",
    )
    p.add_argument(
        "--max-memory-mape",
        type=float,
        default=None,
        metavar="X",
        help="fail when the memory MAPE (step rows with peak_hbm_bytes, predicted by the "
        "compiled program's memory analysis) exceeds X percent",
    )
    add_libtpu_argument(p, what="the step rows")
    p.add_argument(
        "--also-libtpu",
        default=None,
        metavar="PATH",
        help="also predict every row with this libtpu (a second process) and print both "
        "predictions side by side",
    )
    add_cache_argument(p)  # step rows share the planner's compile results
    add_compute_arguments(p, kernel=False)  # rows name their kernel
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _fmt_rho(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _group_line(g: GroupReport, failed: bool) -> str:
    agree, total = g.order_pairs
    order = f"{agree}/{total}" if g.kind in ("step", "vae") else "-"
    return (
        f"{g.kind:<10} {g.workload:<36} {g.slice_label:<12} {g.n:>3} {_fmt_rho(g.spearman):>7} "
        f"{'yes' if g.top1 else 'no':>5} {order:>6} {g.mape_percent:>8.2f}  "
        f"{'FAIL' if failed else 'ok'}"
    )


def format_report(report: ValidationReport, failures: tuple[Any, ...]) -> str:
    """The human-readable report: one line per group, then every row, then the verdict."""
    failed_groups = {(f.workload, f.slice_label) for f in failures}
    lines = [
        f"{'kind':<10} {'workload':<36} {'slice':<12} {'n':>3} {'rho':>7} {'top1':>5} "
        f"{'order':>6} {'MAPE%':>8}  gate",
    ]
    for g in report.groups:
        lines.append(_group_line(g, (g.workload, g.slice_label) in failed_groups))
    lines.append("")
    lines.append(
        f"{'row':<28} {'predicted_s':>12} {'measured_s':>12} {'error%':>8}  in spread  status"
    )
    for g in report.groups:
        for r in g.rows:
            within = {None: "-", True: "yes", False: "no"}[r.within_spread]
            lines.append(
                f"{r.row_id:<28} {r.predicted_s:>12.4g} {r.measured_s:>12.4g} "
                f"{r.error_percent:>+8.1f}  {within:<9}  {r.status or 'gated'}"
            )
    lines.append("")
    lines.append(
        f"{report.num_rows} gated rows in {len(report.groups)} groups; overall MAPE "
        f"{report.overall_mape_percent:.2f}%, top-1 in {report.top1_rate:.0%} of groups"
    )
    if failures:
        lines.append(f"GATE FAILED ({len(failures)}):")
        lines.extend(f"  {f}" for f in failures)
    else:
        lines.append("gate passed")
    return "\n".join(lines)


def _other_compiler(args: argparse.Namespace) -> dict[str, Any]:
    """``aoizora validate FILE --json`` with ``--also-libtpu``'s library, in a child process
    (a process loads one libtpu)."""
    command = [sys.executable, "-m", "aoizora", "validate", args.file, "--json",
               "--libtpu", libtpu_file("--also-libtpu", args.also_libtpu)]  # fmt: skip
    if args.cache_dir:
        command += ["--cache-dir", args.cache_dir]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        return dict(json.loads(done.stdout))
    except json.JSONDecodeError:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ValidationError(
            f"--also-libtpu {args.also_libtpu}: the second validation failed (exit "
            f"{done.returncode}): {tail[0]}"
        ) from None


def run(args: argparse.Namespace) -> int:
    """Predict, report, and return 1 when the gate fails."""
    use_libtpu(args)  # before jax loads a TPU library: the whole process compiles with it
    use_topology_dir(args)
    resume_from_cache(args.cache_dir)
    rows = read_measurements(args.file)
    check_tpu_rows(rows, name=args.file)  # a dry run's CPU rows say nothing about a slice
    warn_version_drift("validate")  # the predictions compile with this jax/libtpu
    predicting = package_version("libtpu")
    note = compiler_note({r.row_id: libtpu_of(r.software) for r in rows}, predicting)
    if note is not None:
        print(f"aoizora validate: {note}", file=sys.stderr)
    with phase(f"the predictions of {args.file}"):
        try:
            report = validate(rows, predictors=default_predictors(cache_dir=args.cache_dir))
        except (AoizoraError, SimError) as exc:  # a row's error, and the file it is in
            raise type(exc)(f"{args.file}: {exc}") from None
    thresholds = Thresholds(
        min_spearman=args.min_spearman,
        min_top1=args.min_top1,
        max_mape_percent=args.max_mape,
        max_step_mape_percent=args.max_step_mape,
        min_step_order=args.min_step_order,
    )
    failures = gate(report, thresholds)
    memory = validate_memory(
        rows, predict=lambda r: predict_step_memory(r, cache_dir=args.cache_dir)
    )
    memory_failed = (
        args.max_memory_mape is not None
        and memory.mape_percent is not None
        and memory.mape_percent > args.max_memory_mape
    )
    other = _other_compiler(args) if args.also_libtpu else None
    pairs = side_by_side(report.to_json_dict(), other) if other is not None else []
    other_libtpu = str((other or {}).get("libtpu") or "?")
    if args.json:
        out = report.to_json_dict()
        out["libtpu"] = predicting
        out["compiler_note"] = note
        if other is not None:
            out["also"] = {"libtpu": other_libtpu,
                           "rows": [p.to_json_dict() for p in pairs]}  # fmt: skip
        out["memory"] = memory.to_json_dict()
        out["thresholds"] = dataclasses.asdict(thresholds)
        out["failures"] = rows_failed = [
            {
                "workload": f.workload,
                "slice": f.slice_label,
                "metric": f.metric,
                "value": f.value,
                "limit": f.limit,
            }
            for f in failures
        ]
        if memory_failed:
            rows_failed.append({"workload": "all step rows", "slice": "",
                                    "metric": "memory_mape_percent",
                                    "value": memory.mape_percent,
                                    "limit": args.max_memory_mape})  # fmt: skip
        out["passed"] = not failures and not memory_failed
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=False) + "\n")
    else:
        text = "\n".join([format_report(report, failures), *memory.lines()])
        if pairs:
            text += "\n\n" + format_side_by_side(pairs, str(predicting), other_libtpu)
        if memory_failed:
            text += f"\nmemory gate FAILED: MAPE above --max-memory-mape {args.max_memory_mape}"
        sys.stdout.write(text + "\n")
    return 1 if failures or memory_failed else 0
