"""Relayouts in VMEM by the tile rows of their source and result: what each class runs at.

Every copy or transpose of the profiled v5e programs (``validation/v5e/**/profiles``) that
moves only on-chip bytes (no HBM operand or result): its bytes as the compute model counts
them (``Work.onchip_copy_bytes``, the arrays' tiled footprints) over its measured time less
its fixed cost as a kernel in VMEM (``ComputeModel.overhead_s``), grouped by the tile rows
of its source and of its result (2, 4, 8 ...; 0 for an array without a 2D tile).

On the profiles of 6 December 2026 the copies between 8-row tiles ran at 2.0e12 wherever
they were (1.96e12 over the five fit rows, 36 ops; 1.99e12 over the other steps and DiTs,
124; 2.19e12 over the decoders, 789: less the 0.71 us of a kernel reading HBM, as priced
then), and the rest at 0.7-1.3e12 (out of 2-row tiles 0.73e12 in the steps, into 1-, 2- or
4-row tiles 0.9-1.2e12 in the decoders) but for the decoders' 2-to-8-row copies (6.3e12 over
294 ops: tiny arrays whose tiled footprint is mostly padding). One fitted rate,
``onchip_copy_bandwidth_bytes_per_s`` = 1.363e12, priced all of them then, and the DiTs' one
on-chip transpose of their input (``bf16[b,S,D]`` from ``{2,1,0}`` to ``{1,2,0}``, 8-row
tiles both sides, 1.8-2.6e12) 34-99 % over. Since 7 December 2026 the model has the two
rates (topologies/v5e.toml: ``onchip_full_tile_copy_bandwidth_bytes_per_s`` 1.886e12 and
``onchip_copy_bandwidth_bytes_per_s`` 0.928e12, fitted on the five fit rows by
``aoizora calibrate --compute``), and this script prints what each class ran at against
them (docs/simulator.md, "Kernels in VMEM and relayouts").

    python benchmarks/onchip_relayouts.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from sim.compute import ComputeModel, compute_model_of
from sim.topology import load_chip

ROOT = Path(__file__).resolve().parents[1] / "validation" / "v5e"
# The rows topologies/v5e.toml's [compute] was fitted to (its sources name them).
FIT_ROWS = ("m-24893bf72f", "m-d0700e072f", "m-db692be5fe", "m-80c6028188", "m-bd44dfa8c7")
_RELAYOUTS = ("copy", "transpose")


def _relayouts(ops_file: Path, model: ComputeModel) -> list[tuple[str, float, float]]:
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
        source = comp.by_name[instr.operands[0]].shape
        kind = f"{source.tile_rows}->{instr.shape.tile_rows} rows"
        seconds = op.per_step_s - model.overhead_s(work) * op.count_per_step
        out.append((kind, work.onchip_copy_bytes * op.count_per_step, seconds))
    return out


def main() -> int:
    model = compute_model_of(load_chip("v5e"))
    files = sorted(ROOT.glob("**/profiles/*.ops.json.gz"))
    rows = {f: _relayouts(f, model) for f in files}
    p = model.params
    print(f"priced: between 8-row tiles {p.onchip_full_tile_copy_bandwidth_bytes_per_s:.3g} B/s, "
          f"the others {p.onchip_copy_bandwidth_bytes_per_s:.3g} B/s")  # fmt: skip
    fit = [f for f in files if f.name[:12] in FIT_ROWS]
    decoders = [f for f in files if "-vae" in f.name]
    others = [f for f in files if f not in fit and f not in decoders]
    for label, chosen in (
        ("the 5 fit rows", fit),
        ("other steps, DiTs", others),
        ("the decoders", decoders),
    ):
        for kind in sorted({k for f in chosen for k, _, _ in rows[f]}):
            ops = [(b, s) for f in chosen for k, b, s in rows[f] if k == kind and s > 0]
            if not ops or sum(b for b, _ in ops) < 1e8:
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
