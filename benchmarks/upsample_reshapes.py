"""The up-sampling's row-doubling reshape on a chip: four rates, and what they do to explain.

A Wan decoder's nearest 2x up-sampling compiles (libtpu, TPU v5e) to a broadcast into
``bf16[b,h,2,w,c]`` tiled ``T(2,128)`` and a reshape to ``bf16[b,2h,w,c]`` in ``T(8,128)``
tiles: each output tile gathered from four 2-row tiles (:mod:`sim.tile_gather`).
``validation/v5e/upsample`` holds that reshape measured alone on a chip at 22 shapes
(``measure.py`` there): its rate (HBM bytes read and written a second) takes one of four
values, by where its source lives (HBM, or VMEM where XLA keeps a source that fits) and
whether the source's minor dimension ``c`` is a multiple of 512. This prints each case as
the compute model classifies it (``Work.tile_gathers``), each group's median rate (what
``[compute.tile_gather]`` of topologies/v5e.toml holds), then re-prices every profiled
decode in ``validation/v5e/**/profiles`` (rates fitted on the experiment, checked on the
decodes) and shows its ``other`` category and the decode, with and without the table.

    python benchmarks/upsample_reshapes.py
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from aoizora.studies.explain import explain, op_prices
from sim.compute import compute_model_of
from sim.tile_gather import Gather
from sim.topology import Chip, load_chip

V5E = Path(__file__).resolve().parents[1] / "validation" / "v5e"


def _gathers(ops: Path, chip: Chip) -> list[tuple[str, Gather, float, float, float]]:
    """(op, its gather, measured s a step, priced s a step with the table, without it)."""
    hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
    profile = load_profile(ops, module=hlo.name)
    costs = CostModel(hlo)
    where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
    with_table = compute_model_of(chip)
    without = replace(with_table, params=replace(with_table.params, tile_gather=None))
    out = []
    for op in profile.ops:
        comp, instr = where.get(op.name, (None, None))
        if comp is None or instr is None:
            continue
        work = costs.instruction(comp, instr)
        for gather in work.tile_gathers:
            n = op.count_per_step
            out.append((op.name, gather, op.per_step_s, with_table.time_s(work) * n,
                        without.time_s(work) * n))  # fmt: skip
    return out


def main() -> int:
    chip = load_chip("v5e")
    rates: dict[tuple[bool, bool], list[float]] = {}
    for ops in sorted((V5E / "upsample").glob("*.ops.json.gz")):
        for _, (in_vmem, aligned, nbytes), measured, priced, before in _gathers(ops, chip):
            rates.setdefault((in_vmem, aligned), []).append(nbytes / measured)
            now, then = (priced / measured - 1) * 100, (before / measured - 1) * 100
            print(
                f"{ops.name[: -len('.ops.json.gz')]:24s} from {'VMEM' if in_vmem else 'HBM '} "
                f"c%512={'0' if aligned else 'x'} {nbytes / 1e6:6.1f} MB {measured * 1e3:7.3f} ms "
                f"{nbytes / measured / 1e9:5.0f} GB/s; priced {now:+4.0f}%, {then:+4.0f}% without"
            )
    if not rates:
        return 1
    print("median rates (GB/s, HBM bytes read and written):")
    for (in_vmem, aligned), found in sorted(rates.items()):
        print(f"  from {'VMEM' if in_vmem else 'HBM'}, c % 512 {'== 0' if aligned else '!= 0'}: "
              f"{statistics.median(found) / 1e9:.0f} over {len(found)}")  # fmt: skip
    _decodes(chip)
    return 0


def _decodes(chip: Chip) -> None:
    print("profiled decode: 'other' and the decode, priced without the table -> with it")
    for ops in sorted(V5E.glob("**/profiles/*-vae.ops.json.gz")):
        hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
        e = explain(load_profile(ops, module=hlo.name), hlo, op_prices(hlo, chip))
        moved = sum(p - b for _, _, _, p, b in _gathers(ops, chip))
        other = [r for r in e.rows if r.category == "other"]
        measured = sum(r.measured_s for r in other)
        after = sum(r.predicted_s or 0.0 for r in other)
        step = e.device_ops_s
        print(
            f"{ops.name[:16]} other {((after - moved) / measured - 1) * 100:+5.1f}% -> "
            f"{(after / measured - 1) * 100:+5.1f}%   decode "
            f"{((e.predicted_s - moved) / step - 1) * 100:+5.2f}% -> "
            f"{(e.predicted_s / step - 1) * 100:+5.2f}%"
        )


if __name__ == "__main__":
    sys.exit(main())
