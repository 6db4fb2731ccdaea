"""The up-sampling's row-doubling reshape on a chip: four rates, and what they do to explain.

A Wan decoder's nearest 2x up-sampling compiles (libtpu, TPU v5e) to a broadcast into
``bf16[b,h,2,w,c]`` tiled ``T(2,128)`` and a reshape to ``bf16[b,2h,w,c]`` in ``T(8,128)``
tiles: each output tile gathered from four 2-row tiles in HBM. The compute model prices that
reshape as an HBM stream (0.82 of the peak); ``validation/v5e/upsample`` holds the reshape
measured alone on a chip at 22 shapes (``measure.py`` there), and its rate takes one of four
values: by whether the minor dimension ``c`` is a multiple of 512 and whether the source
holds more than about 117 MB. This prints each case, the four rates (the median of each
group) and where the size splits them, then re-prices every profiled decode's reshapes of
that kind in ``validation/v5e/**/profiles`` at those rates (rates fitted on the experiment,
checked on the decodes) and shows their ``other`` category and the decode before and after.

    python benchmarks/upsample_reshapes.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.shapes import Shape
from aoizora.hlo.text import HloModule, parse_module
from aoizora.studies.explain import explain, op_prices
from sim.compute import compute_model_of
from sim.topology import load_chip

V5E = Path(__file__).resolve().parents[1] / "validation" / "v5e"


def _rows(shape: Shape) -> int:
    return shape.tiling[1][1] if len(shape.tiling) > 1 else 0


def _doubling(module: HloModule, costs: CostModel) -> dict[str, tuple[Shape, float]]:
    """Reshapes out of 2-row bf16 tiles into 8-row ones with HBM traffic: name ->
    (source shape, HBM bytes as the model counts them)."""
    out = {}
    for comp in module.computations.values():
        for instr in comp.instructions:
            if instr.opcode != "reshape":
                continue
            source = comp.by_name[instr.operands[0]].shape
            if source.element_type != "bf16" or _rows(source) != 2 or _rows(instr.shape) < 8:
                continue
            hbm = costs.instruction(comp, instr).hbm_bytes
            if hbm > 0:
                out[instr.name] = (source, hbm)
    return out


def _group(source: Shape, split_bytes: float) -> tuple[bool, bool]:
    return source.dims[-1] % 512 == 0, source.size_bytes > split_bytes


def _experiment() -> list[tuple[str, Shape, float, float, float]]:
    """(case, source, HBM bytes, measured s, priced s) of each measured reshape."""
    model = compute_model_of(load_chip("v5e"))
    out = []
    for ops in sorted((V5E / "upsample").glob("*.ops.json.gz")):
        hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
        profile = load_profile(ops, module=hlo.name)
        costs = CostModel(hlo)
        found = _doubling(hlo, costs)
        where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
        for op in profile.ops:
            if op.name in found:
                source, hbm = found[op.name]
                comp, instr = where[op.name]
                priced = model.time_s(costs.instruction(comp, instr))
                out.append((ops.name[: -len(".ops.json.gz")], source, hbm, op.per_step_s, priced))
    return out


def _rates(cases: list[tuple[str, Shape, float, float, float]]) -> tuple[float, dict]:
    """The size that splits the groups (between the largest slow and the smallest fast
    source of the same alignment) and each group's median rate (HBM bytes a second)."""
    speed = {c[0]: c[2] / c[3] for c in cases}
    fast = [c[1].size_bytes for c in cases if speed[c[0]] > 1.2 * min(
        speed[d[0]] for d in cases if d[1].dims[-1] % 512 == c[1].dims[-1] % 512)]  # fmt: skip
    slow = [c[1].size_bytes for c in cases if c[1].size_bytes < min(fast)]
    split = (max(slow) + min(fast)) / 2
    groups: dict[tuple[bool, bool], list[float]] = {}
    for case in cases:
        groups.setdefault(_group(case[1], split), []).append(speed[case[0]])
    return split, {g: statistics.median(v) for g, v in groups.items()}


def main() -> int:
    cases = _experiment()
    if not cases:
        return 1
    split, rates = _rates(cases)
    for name, source, hbm, measured, priced in cases:
        aligned, large = _group(source, split)
        print(
            f"{name:24s} {str(source.dims):22s} {source.size_bytes / 1e6:6.1f} MB "
            f"{measured * 1e3:7.3f} ms {hbm / measured / 1e9:5.0f} GB/s priced "
            f"{(priced / measured - 1) * 100:+4.0f}%  c%512={'0' if aligned else 'x'} "
            f"{'large' if large else 'small'}"
        )
    print(f"split at {split / 1e6:.1f} MB; rates (GB/s, HBM bytes read and written):")
    for (aligned, large), rate in sorted(rates.items()):
        print(f"  c % 512 {'== 0' if aligned else '!= 0'}, {'large' if large else 'small'}: "
              f"{rate / 1e9:.0f}")  # fmt: skip
    _decodes(split, rates)
    return 0


def _decodes(split: float, rates: dict) -> None:
    chip = load_chip("v5e")
    print("profiled decode: its 'other' category and the decode, priced now -> at these rates")
    for ops in sorted(V5E.glob("**/profiles/*-vae.ops.json.gz")):
        hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
        e = explain(load_profile(ops, module=hlo.name), hlo, op_prices(hlo, chip))
        found = _doubling(hlo, CostModel(hlo))
        measured = sum(r.measured_s for r in e.rows if r.category == "other")
        before = sum(r.predicted_s or 0.0 for r in e.rows if r.category == "other")
        moved = 0.0
        for r in e.rows:
            if r.name in found:
                source, hbm = found[r.name]
                now = r.predicted_s or 0.0
                moved += max(now, hbm / rates[_group(source, split)] * r.count_per_step) - now
        step = e.device_ops_s
        print(
            f"{ops.name[:16]} other {(before / measured - 1) * 100:+5.1f}% -> "
            f"{((before + moved) / measured - 1) * 100:+5.1f}%   decode "
            f"{(e.predicted_s / step - 1) * 100:+5.2f}% -> "
            f"{((e.predicted_s + moved) / step - 1) * 100:+5.2f}%"
        )


if __name__ == "__main__":
    sys.exit(main())
