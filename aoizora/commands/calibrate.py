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

With ``--tiles`` FILE is a splash tile sweep (``aoizora measure --kernels tile``) and the
``[compute.splash_tiles]`` table is printed (``--step-rows ROWS`` also fits its
``step_gain`` to steps measured at a tile and at 512; aoizora/studies/tile_fit.py,
tile_steps.py); with ``--conv-relayout`` FILE holds measured VAE decodes and
``conv_relayout_passes`` is printed (aoizora/studies/vae_fit.py). Both print, never write:
the shipped topology file is edited by hand.

    aoizora calibrate validation/v5e/tiles.json --generation v5e --tiles \
        --step-rows validation/v5e/tiles/rows-a.csv
    aoizora calibrate validation/v5e/vae/rows.csv --generation v5e --conv-relayout \
        --rows m-40a99d5f22-vae,m-58178b83de-vae,m-acb5109a39-vae
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

from aoizora.commands.args import add_cache_argument
from aoizora.commands.calibrate_kernel import run_splash_kernel
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
from aoizora.studies.tile_fit import TileFit, fit_tiles, held_out, read_tile_cases
from aoizora.studies.tile_steps import fit_step_gain, step_pairs
from aoizora.studies.vae_fit import decode_cases, fit_passes
from aoizora.studies.validation import check_tpu_rows, read_measurements
from sim.chips import load_chip
from sim.compute import compute_model_of
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
    _add_table_arguments(p)
    p.add_argument("--profiles", default=None, metavar="DIR", help="with --compute: profiled steps")
    p.add_argument(
        "--rows",
        default=None,
        metavar="ID,ID",
        help="with --compute: the profiled rows to fit (default: all in --profiles); with "
        "--conv-relayout: the decode rows to fit (default: all; the rest only test)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing calibrated file")
    p.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")
    p.set_defaults(func=run)


def _add_table_arguments(p: argparse.ArgumentParser) -> None:
    """``--tiles``, ``--conv-relayout``, ``--step-rows``: the kernel tables fitted to chip rows."""
    p.add_argument(
        "--splash-kernel",
        action="store_true",
        help="FILE is a splash tile sweep: fit the splash kernel's model "
        "([compute.splash_kernel]) on the fit half, report both halves",
    )
    p.add_argument(
        "--more-tiles",
        action="append",
        metavar="FILE",
        help="with --splash-kernel: another tile sweep to fit on (repeatable)",
    )
    p.add_argument(
        "--vmem",
        metavar="FILE",
        default=None,
        help="with --splash-kernel: vmem.py's compile brackets, to fit the VMEM terms",
    )
    p.add_argument(
        "--tiles",
        action="store_true",
        help="FILE is a splash tile sweep (aoizora measure --kernels tile): print the "
        "[compute.splash_tiles] table and the held-out check of each shape",
    )
    p.add_argument(
        "--conv-relayout",
        action="store_true",
        help="FILE holds measured VAE decodes (rows of kind vae): fit conv_relayout_passes, the "
        "relayouts XLA adds around convolutions that Stage 1 prices (--rows: the fit rows)",
    )
    p.add_argument(
        "--step-rows",
        default=None,
        metavar="ROWS.csv",
        help="with --tiles: step rows measured at a planned tile and at 512 (aoizora measure "
        "of a plan with tiles): also fit step_gain, what a tile saves in a step over alone",
    )


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


def _run_tiles(args: argparse.Namespace) -> int:
    """The tile table for the generation's topology file, printed (never written: the
    shipped file is edited by hand), then each shape left out of the fit in turn."""
    provenance, cases = read_tile_cases(args.file)
    source = (
        f"splash tiles of a {provenance.get('device_kind', '?')} chip (jax "
        f"{provenance.get('jax', '?')}, libtpu {provenance.get('libtpu', '?')}; "
        f"{provenance.get('date', '?')}; "
        f"{provenance.get('command', 'aoizora measure --kernels tile')}"
        f"): seconds per grid step and per q block, fitted by 'aoizora calibrate {args.file} "
        f"--generation {args.generation} --tiles'; failed: CompileTimeScopedVmemOom at every shape"
    )
    fit = fit_tiles(cases, source=source)
    rows = held_out(cases)
    if args.step_rows:
        fit = _with_step_gain(fit, args)
    if args.json:
        data = {"toml": fit.toml(), "held_out": [dataclasses.asdict(r) for r in rows]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return 0
    sys.stdout.write(fit.toml() + "\n# each shape left out of the fit:\n")
    for r in rows:
        sys.stdout.write(
            f"# heads {r.shape[0]} q {r.shape[1]} kv {r.shape[2]}: picks {r.picked} "
            f"(best measured {r.best}, {100 * (r.picked_over_best - 1):+.1f} %), gain over 512 "
            f"predicted {100 * r.predicted_gain:.1f} % measured {100 * r.measured_gain:.1f} %, "
            f"MAPE {100 * r.mape:.1f} %\n"
        )
    return 0


def _with_step_gain(fit: TileFit, args: argparse.Namespace) -> TileFit:
    """``fit`` with ``step_gain`` fitted on ``--step-rows`` (printed pair by pair)."""
    chip = load_chip(args.generation)
    model = compute_model_of(chip)
    table = dataclasses.replace(fit.tiles, step_gain=1.0)
    model = dataclasses.replace(model, params=dataclasses.replace(model.params, splash_tiles=table))
    pairs = step_pairs(read_measurements(args.step_rows))
    gain, predicted = fit_step_gain(pairs, model)
    for pair, p in predicted:
        sys.stdout.write(
            f"# {pair.name}: {pair.tile} measured gain {100 * pair.measured_gain:.1f} %, the "
            f"sweep's {100 * p:.1f} % (x {gain:.3f}: {100 * gain * p:.1f} %)\n"
        )
    source = (
        f"{fit.tiles.source}; step_gain fitted by the same command with --step-rows "
        f"{args.step_rows} ({len(pairs)} step pairs measured at a tile and at 512)"
    )
    tiles = dataclasses.replace(fit.tiles, step_gain=round(gain, 3), source=source)
    return dataclasses.replace(fit, tiles=tiles)


def _run_conv_relayout(args: argparse.Namespace) -> int:
    """conv_relayout_passes on the fit rows, then every decode's Stage 1 error with it."""
    cases = decode_cases(read_measurements(args.file), load_chip(args.generation))
    chosen = None if args.rows is None else {r.strip() for r in args.rows.split(",") if r.strip()}
    fit = [c for c in cases if chosen is None or c.row_id in chosen]
    if not fit:
        raise AoizoraError(f"--rows {args.rows!r} names no vae row of {args.file}")
    passes = fit_passes(fit)
    for c in cases:
        role = "fit " if c in fit else "test"
        before, after = c.stage1_s / c.measured_s - 1, c.predicted_s(passes) / c.measured_s - 1
        sys.stdout.write(f"{role} {c.row_id:<22} measured {c.measured_s:.3f} s  Stage 1 "
                         f"{100 * before:+.1f} % -> {100 * after:+.1f} %\n")  # fmt: skip
    sys.stdout.write(f"conv_relayout_passes = {passes:.4g}  # fitted on {len(fit)} decodes\n")
    return 0


def run(args: argparse.Namespace) -> int:
    """Fit, print, and write the calibrated topology file (unless --dry-run)."""
    if args.conv_relayout:
        return _run_conv_relayout(args)
    if args.splash_kernel:
        return run_splash_kernel(args)
    if args.tiles:
        return _run_tiles(args)
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
