"""``aoizora calibrate FILE --generation GEN``: fit link numbers (or, with ``--steps``,
attention-kernel efficiencies) to measurements.

Fits the generation's one-way link bandwidth, per-hop latency and per-collective
launch overheads to the file's collective rows on that generation's slices
(least squares on the simulator's linear form, see aoizora/studies/calibration.py and
docs/validation.md), prints the residual of every row and writes a calibrated
topology file beside the shipped one -- by default
``topologies/calibrated/<gen>.<tag>.toml``. The shipped ``topologies/<gen>.toml``
is never written.

    aoizora calibrate validation/measurements.csv --generation v5e --tag scalingbook

With ``--steps`` it fits the generation's attention-kernel efficiencies (the compute
model, sim/compute.py) to the file's gated step rows instead: each step row is
compiled for its slice (cached under --cache-dir) and replayed
(aoizora/studies/calibration_steps.py).

    aoizora calibrate validation/measurements.csv --generation tpu7x --steps --dry-run

With ``--compute`` FILE is a kernels file of ``aoizora measure --kernels`` and the
generation's whole ``[compute]`` table is fitted to it and to profiled steps
(``--profiles DIR`` of ``aoizora measure --profile``; ``--rows`` picks the ones to fit,
the rest only test): HBM efficiency, kernel overhead, splash attention, matmul
efficiency and the on-chip rates (aoizora/studies/compute_fit.py, docs/validation.md).

    aoizora calibrate validation/v5e/kernels.json --generation v5e --compute \
        --profiles validation/v5e/profiles --rows m-24893bf72f-winner,... --dry-run
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from aoizora.commands.args import add_cache_argument
from aoizora.errors import AoizoraError
from aoizora.studies.calibration import (
    OVERHEAD_MODES,
    WEIGHT_MODES,
    CalibrationFit,
    calibrate,
    cited_rows,
    default_output_path,
    file_sha256,
    write_calibrated_topology,
)
from aoizora.studies.calibration_steps import StepFit, calibrate_steps, write_calibrated_steps
from aoizora.studies.compute_fit import (
    fit_compute,
    load_profiled_steps,
    read_kernels,
    write_calibrated_compute,
)
from aoizora.studies.validation import check_tpu_rows, read_measurements
from sim.chips import load_chip
from sim.errors import SimError

__all__ = ["format_fit", "format_step_fit", "register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` subcommand (see :mod:`aoizora.cli`)."""
    p = subparsers.add_parser(
        "calibrate",
        help="fit link bandwidth, hop latency and collective overheads to measurements",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="measurement CSV (docs/validation.md)")
    p.add_argument("--generation", required=True, help="chip generation to fit, e.g. v5e")
    p.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="calibrated topology file (default topologies/calibrated/<gen>.<tag>.toml)",
    )
    p.add_argument(
        "--tag", default=None, help="name part of the default output (default: FILE's stem)"
    )
    p.add_argument(
        "--overhead",
        choices=OVERHEAD_MODES,
        default="per-kind",
        help="constant launch cost per collective kind, one shared, or none (default per-kind)",
    )
    p.add_argument(
        "--fix-latency", action="store_true", help="keep the shipped per-hop latency; fit the rest"
    )
    p.add_argument(
        "--fix-bandwidth", action="store_true", help="keep the shipped link bandwidth; fit the rest"
    )
    p.add_argument(
        "--weights",
        choices=WEIGHT_MODES,
        default="relative",
        help="residual per row relative to the measurement, or to its stated spread "
        "(unreported: 10%%); default relative",
    )
    p.add_argument(
        "--refine",
        action="store_true",
        help="then minimise the simulator's own residuals (scipy least_squares; slower)",
    )
    p.add_argument(
        "--steps",
        action="store_true",
        help="fit attention-kernel efficiencies to the step rows (compiles each sharding)",
    )
    add_cache_argument(p)  # --steps compiles each step row's sharding, as validate does
    p.add_argument(
        "--compute",
        action="store_true",
        help="FILE is a kernels file (aoizora measure --kernels): fit the [compute] table",
    )
    p.add_argument("--profiles", default=None, metavar="DIR", help="with --compute: profiled steps")
    p.add_argument(
        "--rows",
        default=None,
        metavar="ID,ID",
        help="with --compute: the profiled rows to fit (default: all in --profiles)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing calibrated file")
    p.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.set_defaults(func=run)


def format_fit(fit: CalibrationFit) -> str:
    """Fitted numbers next to the shipped ones, then every row's residual."""
    lines = [
        f"generation {fit.generation}: {len(fit.residuals)} collective rows, method {fit.method}",
        f"  link_bandwidth_bytes_per_s  {fit.link_bandwidth_bytes_per_s:.6g}"
        f"  (shipped {fit.shipped_link_bandwidth_bytes_per_s:.6g}"
        f"{'' if 'inv_bandwidth' in fit.fitted else ', kept'})",
        f"  hop_latency_s               {fit.hop_latency_s:.6g}"
        f"  (shipped {fit.shipped_hop_latency_s:.6g}"
        f"{'' if 'hop_latency' in fit.fitted else ', kept'})",
    ]
    for kind, value in fit.overhead_s:
        lines.append(f"  overhead_s[{kind}]{' ' * max(1, 17 - len(kind))}{value:.6g}")
        lines.append(f"    determined by {cited_rows(fit, kind)}")
    if fit.skipped:
        lines.append(f"  skipped {len(fit.skipped)} rows (step rows or other generations)")
    lines.append("")
    lines.append(f"{'row':<28} {'measured_s':>12} {'fitted_s':>12} {'residual_s':>12} {'rel%':>7}")
    for r in fit.residuals:
        lines.append(
            f"{r.row_id:<28} {r.measured_s:>12.4g} {r.fitted_s:>12.4g} {r.residual_s:>+12.3g} "
            f"{100 * r.residual_s / r.measured_s:>+7.1f}"
        )
    lines.append(f"rms residual {fit.rms_residual_s:.4g} s, MAPE {fit.mape_percent:.2f}%")
    return "\n".join(lines)


def _fit_json(fit: CalibrationFit, out: Path | None) -> dict[str, Any]:
    return {
        "generation": fit.generation,
        "method": fit.method,
        "fitted": list(fit.fitted),
        "link_bandwidth_bytes_per_s": fit.link_bandwidth_bytes_per_s,
        "hop_latency_s": fit.hop_latency_s,
        "overhead_s": dict(fit.overhead_s),
        "overhead_determined_by": {k: dict(rows) for k, rows in fit.determined_by},
        "weights": fit.weights,
        "shipped_link_bandwidth_bytes_per_s": fit.shipped_link_bandwidth_bytes_per_s,
        "shipped_hop_latency_s": fit.shipped_hop_latency_s,
        "rms_residual_s": fit.rms_residual_s,
        "mape_percent": fit.mape_percent,
        "skipped": list(fit.skipped),
        "residuals": [
            {
                "row_id": r.row_id,
                "measured_s": r.measured_s,
                "fitted_s": r.fitted_s,
                "residual_s": r.residual_s,
            }
            for r in fit.residuals
        ],
        "written": None if out is None else str(out),
    }


def format_step_fit(fit: StepFit) -> str:
    """Fitted efficiencies next to the shipped ones, the rows behind them, every residual."""
    shipped = dict(fit.shipped)
    lines = [f"generation {fit.generation}: attention-kernel efficiencies from step rows"]
    for kernel, eta in fit.efficiencies:
        lines.append(f"  {kernel:<16} {eta:.4g}  (shipped {shipped.get(kernel, float('nan')):.4g})")
        lines.append(f"    determined by {fit.cited_rows(kernel)}")
    for what, why in fit.skipped:
        lines.append(f"  skipped {what}: {why}")
    lines += ["", f"{'row':<28} {'kernel':<14} {'measured_s':>11} {'fitted_s':>11} {'err%':>7}"]
    for r in fit.residuals:
        lines.append(
            f"{r.row_id:<28} {r.kernel:<14} {r.measured_s:>11.4g} {r.fitted_s:>11.4g} "
            f"{r.error_percent:>+7.1f}"
        )
    lines.append(f"MAPE {fit.mape_percent:.2f}% over {len(fit.residuals)} step rows")
    return "\n".join(lines)


def _step_json(fit: StepFit, out: Path | None) -> dict[str, Any]:
    return {
        "generation": fit.generation,
        "efficiencies": dict(fit.efficiencies),
        "shipped": dict(fit.shipped),
        "determined_by": {k: fit.cited_rows(k) for k, _ in fit.efficiencies},
        "skipped": [{"what": w, "why": y} for w, y in fit.skipped],
        "mape_percent": fit.mape_percent,
        "residuals": [
            {
                "row_id": r.row_id,
                "kernel": r.kernel,
                "measured_s": r.measured_s,
                "fitted_s": r.fitted_s,
                "share": r.share,
            }
            for r in fit.residuals
        ],
        "written": None if out is None else str(out),
    }


def _out_path(args: argparse.Namespace) -> Path:
    tag = (
        args.tag if args.tag is not None else re.sub(r"[^A-Za-z0-9_\-]", "-", Path(args.file).stem)
    )
    return Path(args.out) if args.out else default_output_path(args.generation, tag)


def _run_steps(args: argparse.Namespace) -> int:
    rows = read_measurements(args.file)
    check_tpu_rows(rows, name=args.file)  # a dry run's CPU rows say nothing about a slice
    fit = calibrate_steps(
        rows,
        generation=args.generation,
        cache_dir=args.cache_dir,
        source_name=str(args.file),
        source_sha256=file_sha256(args.file),
    )
    out = None if args.dry_run else write_calibrated_steps(fit, _out_path(args), force=args.force)
    if args.json:
        sys.stdout.write(json.dumps(_step_json(fit, out), indent=2) + "\n")
    else:
        sys.stdout.write(format_step_fit(fit) + "\n")
        if out is not None:
            sys.stdout.write(f"wrote {out}\n")
    return 0


def _run_compute(args: argparse.Namespace) -> int:
    if not args.profiles:
        raise AoizoraError(
            "--compute needs --profiles DIR: the profiled steps the matmul and on-chip rates "
            "are fitted to (aoizora measure --profile writes them), e.g. validation/v5e/profiles"
        )
    rows = None if args.rows is None else [r.strip() for r in args.rows.split(",") if r.strip()]
    provenance, kernels = read_kernels(args.file)
    steps = load_profiled_steps(args.profiles, rows=rows)
    fit = fit_compute(load_chip(args.generation), kernels, steps, provenance=provenance,
                      kernels_file=str(args.file))  # fmt: skip
    out = None
    if not args.dry_run:
        out = write_calibrated_compute(fit, args.generation, _out_path(args), force=args.force)
    if args.json:
        values = [{"key": v.key, "value": v.value, "source": v.source} for v in fit.values]
        data = {"values": values, "out": None if out is None else str(out)}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        for v in fit.values:
            sys.stdout.write(f"{v.key:<45} {v.value:.6g}\n")
        if out is not None:
            sys.stdout.write(f"wrote {out}\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Fit, print, and write the calibrated topology file (unless --dry-run)."""
    if args.compute:
        return _run_compute(args)
    if args.steps:
        return _run_steps(args)
    rows = read_measurements(args.file)
    check_tpu_rows(rows, name=args.file)  # a dry run's CPU rows say nothing about a slice
    try:
        fit = calibrate(
            rows,
            generation=args.generation,
            fit_bandwidth=not args.fix_bandwidth,
            fit_latency=not args.fix_latency,
            overhead=args.overhead,
            weights=args.weights,
            refine=args.refine,
            source_name=str(args.file),
            source_sha256=file_sha256(args.file),
        )
    except (AoizoraError, SimError) as exc:  # the fit's error, and the file it fitted
        raise type(exc)(f"{args.file}: {exc}") from None
    out: Path | None = None
    if not args.dry_run:
        out = write_calibrated_topology(fit, _out_path(args), force=args.force)
    if args.json:
        sys.stdout.write(json.dumps(_fit_json(fit, out), indent=2) + "\n")
    else:
        sys.stdout.write(format_fit(fit) + "\n")
        if out is not None:
            sys.stdout.write(f"wrote {out}\n")
    return 0
