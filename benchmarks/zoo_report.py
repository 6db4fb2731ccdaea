"""The program zoo's report: the compute model's error per family, on the fit half and on the
held-out half (validation/README.md, section 20).

    python benchmarks/zoo_report.py                 # device level and the timed call
    python benchmarks/zoo_report.py --validate V.json   # and the plans' figures

Each program as the chip ran it (its HLO, ``validation/v5e/zoo/programs``) priced op by op
against its profile: "device" is the priced device time against the profile's, "timed" the
priced time plus the generation's ``program_launch_s`` against the timed call (the median of
5). ``--validate`` reads ``aoizora validate validation/v5e/zoo/rows.csv --json`` (every
program compiled by the pinned libtpu and replayed, the plan's figure) and reports it the
same way. About a minute; no compile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aoizora.studies.zoo import FamilyError, explain_row, family_report, halves, read_rows
from sim.topology import load_slice

ZOO = Path(__file__).resolve().parents[1] / "validation" / "v5e" / "zoo"


def _line(half: str, how: str, f: FamilyError) -> str:
    return (f"{half:<5} {how:<8} {f.family:<8} {f.count:>4} {f.mape * 100:>7.2f} % "
            f"{f.worst * 100:>+8.1f} %")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", default=None, help="aoizora validate --json of rows.csv")
    args = parser.parse_args()
    chip = load_slice("v5e:1x1").chip
    rows = read_rows(ZOO / "rows.jsonl")
    fit, held = halves(rows)
    plans: dict[str, float] = {}
    if args.validate:
        report = json.loads(Path(args.validate).read_text())
        plans = {r["row_id"][2:]: float(r["predicted_s"])
                 for g in report["groups"] for r in g["rows"]}  # fmt: skip
    print(f"{'half':<5} {'figure':<8} {'family':<8} {'n':>4} {'MAPE':>9} {'worst':>10}")
    for half, part in (("fit", fit), ("held", held)):
        device, timed = {}, {}
        for r in part:
            e = explain_row(r, ZOO / "programs", chip)
            device[r.id] = e.predicted_s / e.step_s * r.measured_s
            timed[r.id] = e.predicted_s + chip.compute.program_launch_s
        figures = [("device", device), ("timed", timed)]
        planned = {r.id: plans[r.id] for r in part if r.id in plans}
        if planned:  # a validation of some rows (e.g. the held-out half's) reports those
            figures.append(("plan", planned))
        for how, predicted in figures:
            for f in family_report(part, predicted):
                print(_line(half, how, f))


if __name__ == "__main__":
    main()
