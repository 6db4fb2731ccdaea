"""Predict every row of the validation set with the simulator and print a CSV.

    python validation/predict.py                      # validation/measurements.csv
    python validation/predict.py FILE --out preds.csv [--cache-dir DIR]

Columns: row_id, kind, slice, workload, measured_s, spread_s, predicted_s,
error_percent. Collective rows are replayed with the simulator; step rows are
compiled for their slice and replayed (compile results kept in the planner's
cache, ``--cache-dir``). The gate over the same predictions is
`aoizora validate FILE`.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from aoizora.commands.plan import add_cache_argument
from aoizora.studies.validation import default_predictors, read_measurements

__all__ = ["main"]

_DEFAULT = Path(__file__).resolve().parent / "measurements.csv"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(_DEFAULT), help="measurement CSV")
    parser.add_argument("--out", default=None, help="write the CSV here instead of stdout")
    add_cache_argument(parser)
    args = parser.parse_args(argv)
    predictors = default_predictors(cache_dir=args.cache_dir)
    rows = read_measurements(args.file)
    out = open(args.out, "w", newline="", encoding="utf-8") if args.out else sys.stdout
    try:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            [
                "row_id",
                "kind",
                "slice",
                "workload",
                "measured_s",
                "spread_s",
                "predicted_s",
                "error_percent",
            ]
        )
        for row in rows:
            predictor = predictors.get(row.kind)
            if predictor is None:
                print(f"skipped {row.row_id}: no {row.kind!r} predictor", file=sys.stderr)
                continue
            predicted = predictor(row)
            writer.writerow(
                [
                    row.row_id,
                    row.kind,
                    row.slice_label,
                    row.workload,
                    repr(row.measured_s),
                    "" if row.spread_s is None else repr(row.spread_s),
                    f"{predicted:.6g}",
                    f"{100 * (predicted - row.measured_s) / row.measured_s:+.2f}",
                ]
            )
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
