"""Relayouts out of 2-row tiles: how the chip ran them against their price.

Every copy or reshape in the profiled v5e programs (``validation/v5e/**/profiles``) whose
operand is a bf16 array tiled ``T(2,128)`` (two rows of a tile) and whose result is tiled
in rows of 8 or more: its measured time per step, the compute model's price, and the
error, then the totals. On the profiles of December 2026 (320 such ops) every one that
takes a millisecond or more a step (59) ran 16-72 % slower than priced -- the Wan steps'
``copy.65/66``, TI2V-5B's ``copy.76/77/97/98``, the VAEs' up-sampling reshapes; 472 ms
measured against 328 ms priced in all -- and no single HBM rate fits them (0.36-0.66 of
the peak): a lead for the copy and "other" categories of ``aoizora explain``. Since then the
up-sampling's reshapes are priced at the rates measured for them (``sim/tile_gather.py``):
on the 512 such ops of 6 December 2026, 660 ms measured and 560 ms priced, the copies left.
Since 7 December 2026 the bf16 copies into 8-row tiles in HBM stream at their own fitted
efficiency (``hbm_retile_copy_efficiency`` 0.596): 695 ms priced, the Wan steps' 1.3B
``copy.65/66`` -2 to -4 % (-29 to -30 % before), the ops of 1 ms or more -72 to +10 %.

    python benchmarks/small_tile_relayouts.py            # every profile under validation/v5e
    python benchmarks/small_tile_relayouts.py DIR ...    # the profiles in these folders
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from sim.compute import compute_model_of
from sim.topology import load_chip

ROOT = Path(__file__).resolve().parents[1] / "validation" / "v5e"
_RELAYOUTS = ("copy", "reshape", "transpose")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", type=Path, help="folders of *.ops.json.gz + HLO")
    args = p.parse_args()
    folders = args.folders or sorted(ROOT.glob("**/profiles")) + [ROOT / "profiles"]
    model = compute_model_of(load_chip("v5e"))
    found = 0
    measured_s = priced_s = 0.0
    slow: list[float] = []  # errors of the ops of a millisecond or more a step
    head = ("program", "op", "shape", "chip ms", "priced ms", "error")
    print(f"{head[0]:24s} {head[1]:20s} {head[2]:28s} {head[3]:>9s} {head[4]:>9s} {head[5]:>7s}")
    for ops_file in sorted({f for d in folders for f in Path(d).glob("*.ops.json.gz")}):
        hlo = parse_module(read_text_file(str(ops_file).replace(".ops.json.gz", ".hlo.txt.gz")))
        profile = load_profile(ops_file, module=hlo.name)
        costs = CostModel(hlo)
        where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
        for op in profile.ops:
            comp, instr = where.get(op.name, (None, None))
            if comp is None or instr is None or instr.opcode not in _RELAYOUTS:
                continue
            source = comp.by_name[instr.operands[0]].shape
            if source.element_type != "bf16" or source.tile_rows != 2 or instr.shape.tile_rows < 8:
                continue
            priced = model.time_s(costs.instruction(comp, instr)) * op.count_per_step
            found += 1
            measured_s += op.per_step_s
            priced_s += priced
            if op.per_step_s >= 1e-3:
                slow.append(priced / op.per_step_s - 1)
            print(
                f"{ops_file.name[:24]:24s} {op.name:20s} {str(source.dims)[:28]:28s} "
                f"{op.per_step_s * 1e3:9.2f} {priced * 1e3:9.2f} "
                f"{(priced / op.per_step_s - 1) * 100:+6.1f}%"
            )
    print(
        f"{found} relayouts out of 2-row bf16 tiles: {measured_s * 1e3:.1f} ms measured, "
        f"{priced_s * 1e3:.1f} ms priced; the {len(slow)} of 1 ms or more a step "
        f"{min(slow, default=0) * 100:+.0f} to {max(slow, default=0) * 100:+.0f} %"
    )
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
