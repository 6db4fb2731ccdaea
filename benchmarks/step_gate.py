"""The whole step gate: every public step row of validation/measurements.csv, predicted.

CI runs the collective rows and one step group (tests/aoizora/test_validation.py); this
script runs every row -- each step row's sharding is compiled for its TPU slice (cached
under --cache-dir) and replayed with the calibrated compute model -- and prints the
README's gate, each step group's MAPE and measured-order agreement, the compile and
prediction time and the machine's load.

    python benchmarks/step_gate.py                 # the shipped set, the README's gate
    python benchmarks/step_gate.py --file F.csv    # another measurement file
    python benchmarks/step_gate.py --loo           # + leave-one-out: each gated step row
                                                   #   predicted with its kernel's efficiency
                                                   #   fitted to the other rows of that kernel
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]

from aoizora.commands.args import DEFAULT_CACHE_DIR
from aoizora.studies.calibration_steps import step_rows
from aoizora.studies.validation import (
    Measurement,
    Thresholds,
    default_predictors,
    gate,
    predict_step,
    read_measurements,
    row_slice,
    validate,
)
from sim.compute import ComputeParams

ROOT = Path(__file__).resolve().parents[1]
# The README's gate (validation/README.md).
GATE = Thresholds(
    min_spearman=0.9,
    min_top1=1.0,
    max_mape_percent=35.0,
    max_step_mape_percent=15.0,
    min_step_order=1.0,
)


def _leave_one_out(rows: list[Measurement], cache_dir: str) -> list[tuple[str, float]]:
    """(row id, error %) of each gated step row predicted with its kernel's efficiency
    fitted (as aoizora calibrate --steps fits it) to the other gated rows of that kernel."""
    out: list[tuple[str, float]] = []
    for generation in sorted({row_slice(r).chip.generation for r in rows if r.step}):
        use, _ = step_rows(rows, generation)
        for held, kernel in use:
            others = [r for r, k in use if k == kernel and r is not held]
            if not others:
                continue
            base = row_slice(held).chip.compute

            def loss(
                eta: float,
                others: list[Measurement] = others,
                kernel: str = kernel,
                base: ComputeParams = base,
            ) -> float:
                params = base.with_efficiencies({kernel: eta})
                return sum(
                    (predict_step(r, cache_dir=cache_dir, compute=params) / r.measured_s - 1) ** 2
                    for r in others
                )

            eta = minimize_scalar(loss, bounds=(0.05, 2.0), method="bounded").x
            got = predict_step(
                held, cache_dir=cache_dir, compute=base.with_efficiencies({kernel: eta})
            )
            out.append((held.row_id, 100 * (got / held.measured_s - 1)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--file", default=str(ROOT / "validation" / "measurements.csv"))
    p.add_argument("--cache-dir", default=os.environ.get("AOIZORA_CACHE_DIR", DEFAULT_CACHE_DIR))
    p.add_argument("--loo", action="store_true", help="also leave each gated step row out")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    rows = read_measurements(args.file)
    report = validate(rows, predictors=default_predictors(cache_dir=args.cache_dir))
    wall = time.perf_counter() - t0
    failures = gate(report, GATE)
    print(f"{'group':<48} {'n':>3} {'MAPE%':>7} {'order':>6} {'top1':>5}")
    for g in report.groups:
        if g.kind != "step":
            continue
        agree, total = g.order_pairs
        print(
            f"{g.workload + ' ' + g.slice_label:<48} {g.n:>3} {g.mape_percent:>7.2f} "
            f"{agree:>3}/{total:<2} {'yes' if g.top1 else 'no':>5}"
        )
        for r in g.rows:
            print(
                f"    {r.row_id:<28} predicted {r.predicted_s:8.4f} s  measured "
                f"{r.measured_s:8.4f} s  {r.error_percent:+6.1f}%  {r.status or 'gated'}"
            )
    step_rows = [r for g in report.groups if g.kind == "step" for r in g.rows if r.gated]
    worst = max(abs(r.error_percent) for r in step_rows)
    mape = sum(abs(r.error_percent) for r in step_rows) / len(step_rows)
    print(
        f"step rows: {len(step_rows)} gated, MAPE {mape:.2f}%, worst {worst:.1f}%; "
        f"gate {'passed' if not failures else 'FAILED'}"
    )
    for f in failures:
        print(f"  {f}")
    loo: list[tuple[str, float]] = []
    if args.loo:
        loo = _leave_one_out(list(rows), args.cache_dir)
        for row_id, err in loo:
            print(f"  leave-one-out {row_id:<28} {err:+6.1f}%")
        print(
            f"leave-one-out: {len(loo)} rows, MAPE {sum(abs(e) for _, e in loo) / len(loo):.2f}%, "
            f"worst {max(abs(e) for _, e in loo):.1f}%"
        )
    summary = {
        "wall_s": wall,
        "step_mape_percent": mape,
        "step_worst_percent": worst,
        "passed": not failures,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(summary, indent=2))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
