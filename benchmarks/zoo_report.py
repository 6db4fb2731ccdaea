"""The program zoo's report: the compute model's error per family, on the fit half and on the
held-out half of each draw (validation/README.md, section 20).

    python benchmarks/zoo_report.py                 # device level and the timed call
    python benchmarks/zoo_report.py --validate V.json   # and the plans' figures

Each program as the chip ran it (its HLO, ``validation/v5e/zoo/programs``) priced op by op
against its profile: "device" is the priced device time against the profile's, "timed" the
priced time plus the generation's ``program_launch_s`` against the timed call (the median of
5). ``--validate`` reads ``aoizora validate validation/v5e/zoo/rows.csv --json`` (every
program compiled by the pinned libtpu and replayed, the plan's figure) and reports it the
same way. The first draw (p000-p234, ``validation/v5e/zoo``) and the second (p235-p394,
``validation/v5e/zoo/draw2``, timed after the first's rules were chosen) and the third (the
next 80 convolutional programs, p396-p807, ``validation/v5e/zoo/draw3``, timed before any rule
for convolutions was chosen on them) and the fourth (p808-p967, every family, timed after
every rule above and before any was chosen on it, ``validation/v5e/zoo/draw4``) and the
fifth (p968-p1047, timed after the lane transpose and sublane reduce rules were chosen,
``validation/v5e/zoo/draw5``) and the sixth (p1048-p1127, timed after the bare and fused
matmul rates were chosen, ``validation/v5e/zoo/draw6``) and the seventh (p1128-p1207, timed
after the compiler's cycle estimate was chosen for convolutions with a window of their own,
``validation/v5e/zoo/draw7``) and the eighth (p1208-p1287, timed after the same,
``validation/v5e/zoo/draw8``) are each split once by the same
seed; "held" of "all" is
every draw's held-out half together. About two minutes; no compile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aoizora.studies.zoo import FamilyError, ZooRow, explain_row, family_report, halves, read_rows
from sim.chips import Chip
from sim.topology import load_slice

ZOO = Path(__file__).resolve().parents[1] / "validation" / "v5e" / "zoo"


def _line(draw: str, half: str, how: str, f: FamilyError) -> str:
    return (f"{draw:<7} {half:<5} {how:<8} {f.family:<8} {f.count:>4} {f.mape * 100:>7.2f} % "
            f"{f.worst * 100:>+8.1f} %")  # fmt: skip


def _figures(part: list[ZooRow], programs: Path, chip: Chip) -> dict[str, dict[str, float]]:
    """Each row's device-level and timed-call figure (module docstring)."""
    device, timed = {}, {}
    for r in part:
        e = explain_row(r, programs, chip)
        device[r.id] = e.predicted_s / e.step_s * r.measured_s
        timed[r.id] = e.predicted_s + chip.compute.program_launch_s
    return {"device": device, "timed": timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", default=None, help="aoizora validate --json of rows.csv")
    args = parser.parse_args()
    chip = load_slice("v5e:1x1").chip
    plans: dict[str, float] = {}
    if args.validate:
        report = json.loads(Path(args.validate).read_text())
        plans = {r["row_id"][2:]: float(r["predicted_s"])
                 for g in report["groups"] for r in g["rows"]}  # fmt: skip
    print(f"{'draw':<7} {'half':<5} {'figure':<8} {'family':<8} {'n':>4} {'MAPE':>9} {'worst':>10}")
    held_all: list[ZooRow] = []
    held_figures: dict[str, dict[str, float]] = {"device": {}, "timed": {}}
    draws = (("first", ZOO), ("second", ZOO / "draw2"), ("third", ZOO / "draw3"),
             ("fourth", ZOO / "draw4"), ("fifth", ZOO / "draw5"),
             ("sixth", ZOO / "draw6"), ("seventh", ZOO / "draw7"),
             ("eighth", ZOO / "draw8"))  # fmt: skip
    for draw, folder in draws:
        fit, held = halves(read_rows(folder / "rows.jsonl"))
        for half, part in (("fit", fit), ("held", held)):
            figures = _figures(part, folder / "programs", chip)
            planned = {r.id: plans[r.id] for r in part if r.id in plans}
            if planned:  # a validation of some rows (e.g. the held-out half's) reports those
                figures["plan"] = planned
            for how, predicted in figures.items():
                for f in family_report(part, predicted):
                    print(_line(draw, half, how, f))
            if half == "held":
                held_all += part
                for how in held_figures:
                    held_figures[how].update(figures[how])
    for how, predicted in held_figures.items():
        for f in family_report(held_all, predicted):
            print(_line("all", "held", how, f))


if __name__ == "__main__":
    main()
