"""Relayouts in VMEM by the tile rows of their source: a lead for explain's copy category.

Every copy, transpose or reshape of the profiled v5e programs (``validation/v5e/**/profiles``)
that moves only on-chip bytes (no HBM operand or result): its bytes as the compute model
counts them (``Work.onchip_copy_bytes``, the arrays' tiled footprints) over its measured time
less the fixed cost of a kernel, grouped by the tile rows of its source: 2 (a bf16 array in
``T(2,128)`` tiles) or more. The compute model prices both at one fitted rate,
``onchip_copy_bandwidth_bytes_per_s`` (topologies/v5e.toml, 1.363e12), and the DiTs' one
on-chip transpose of their input (``bf16[b,S,D]`` from ``{2,1,0}`` to ``{1,2,0}``,
1.8-2.6e12) is priced 34-99 % over (their copy/transpose category +10 to +31 %).

On the profiles of 6 December 2026 the tile rows do not split the rates: over the five
rows that rate was fitted to, relayouts out of 2-row tiles ran at 0.73e12 and the others at
1.85e12 (two rates that would bring the DiTs' category to -4 to +15 %), but over all 76
programs the 2-row ones ran at 1.83e12 (399 ops, most of them the VAE decoders') and the
others at 1.56e12, single ops spreading over an order of magnitude. So no model uses it:
what sets an on-chip relayout's rate is still open.

    python benchmarks/onchip_relayouts.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from sim.compute import compute_model_of
from sim.topology import load_chip

ROOT = Path(__file__).resolve().parents[1] / "validation" / "v5e"
# The rows topologies/v5e.toml's [compute] was fitted to (its sources name them).
FIT_ROWS = ("m-24893bf72f", "m-d0700e072f", "m-db692be5fe", "m-80c6028188", "m-bd44dfa8c7")
_RELAYOUTS = ("copy", "transpose", "reshape")


def _relayouts(ops_file: Path, overhead_s: float) -> list[tuple[str, float, float]]:
    """(kind, on-chip bytes a step, seconds a step less the kernels' fixed cost) of each
    pure on-chip relayout of one profiled program."""
    hlo = parse_module(read_text_file(str(ops_file).replace(".ops.json.gz", ".hlo.txt.gz")))
    profile = load_profile(ops_file, module=hlo.name)
    costs = CostModel(hlo)
    where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
    out = []
    for op in profile.ops:
        comp, instr = where.get(op.name, (None, None))
        if comp is None or instr is None or instr.opcode not in _RELAYOUTS:
            continue
        work = costs.instruction(comp, instr)
        if work.onchip_copy_bytes <= 0 or work.hbm_bytes > 0:
            continue
        tiling = comp.by_name[instr.operands[0]].shape.tiling
        kind = "2-row tiles" if len(tiling) > 1 and tiling[1][1] == 2 else "8+ row tiles"
        seconds = op.per_step_s - overhead_s * op.count_per_step
        out.append((kind, work.onchip_copy_bytes * op.count_per_step, seconds))
    return out


def main() -> int:
    model = compute_model_of(load_chip("v5e"))
    overhead = model.params.kernel_overhead_s
    files = sorted(ROOT.glob("**/profiles/*.ops.json.gz"))
    rows = {f: _relayouts(f, overhead) for f in files}
    print(f"priced at onchip_copy_bandwidth_bytes_per_s = "
          f"{model.params.onchip_copy_bandwidth_bytes_per_s:.3g} B/s")  # fmt: skip
    for label, chosen in (
        ("the 5 fit rows", [f for f in files if f.name[:12] in FIT_ROWS]),
        (f"all {len(files)} programs", files),
    ):
        for kind in ("2-row tiles", "8+ row tiles"):
            ops = [(b, s) for f in chosen for k, b, s in rows[f] if k == kind and s > 0]
            if not ops:
                continue
            moved, seconds = sum(b for b, _ in ops), sum(s for _, s in ops)
            each = np.array([b / s for b, s in ops])
            lo, mid, hi = np.percentile(each, [10, 50, 90])
            print(
                f"{label:18s} {kind:13s} {len(ops):4d} ops {moved / 1e9:8.2f} GB "
                f"{seconds * 1e3:8.2f} ms: {moved / seconds:.3g} B/s "
                f"(ops 10/50/90 %: {lo:.3g} {mid:.3g} {hi:.3g})"
            )
    return 0 if any(rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
