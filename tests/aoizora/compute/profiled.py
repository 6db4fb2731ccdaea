"""The profiled fusions of a saved program (``*.ops.json.gz`` beside its ``*.hlo.txt.gz``)
with a whole-row reduce-window: what the row-window tests price against the chip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import OpTime, load_profile, read_text_file
from aoizora.hlo.text import Instruction, parse_module
from sim.compute import Work

__all__ = ["window_fusions"]


def window_fusions(ops: Path) -> Iterator[tuple[Instruction, OpTime, Work]]:
    """(instruction, its profiled time, its work) of every top-level fusion of ``ops``'s
    program that ran and holds a whole-row window; a program whose text names no window
    emitter is skipped unparsed (most of the repository's)."""
    text = read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz"))
    if "reduce-window" not in text:
        return
    hlo = parse_module(text)
    costs = CostModel(hlo)
    where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
    for op in load_profile(ops, module=hlo.name).ops:
        comp, instr = where.get(op.name, (None, None))
        if comp is None or instr is None or instr.opcode != "fusion" or op.count_per_step <= 0:
            continue
        work = costs.instruction(comp, instr)
        if work.row_windows:
            yield instr, op, work
