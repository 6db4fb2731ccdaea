"""The trip count of an HLO ``while`` loop.

``known_trip_count`` from the loop's backend_config when present; otherwise
derived from the condition ``compare(induction, constant)`` (possibly inside a
fusion), the induction variable's initial value in the init tuple and its
constant increment in the body. TPU-compiled HLO keeps no ``known_trip_count``
(docs/facts.md, Compiled-HLO collectives), so the derivation is the common path
there.

Example:
    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... %cond (s: (s32[])) -> pred[] {
    ...   %s = (s32[]) parameter(0)
    ...   %i = s32[] get-tuple-element(%s), index=0
    ...   %n = s32[] constant(12)
    ...   ROOT %lt = pred[] compare(%i, %n), direction=LT
    ... }
    ... %body (s: (s32[])) -> (s32[]) {
    ...   %s = (s32[]) parameter(0)
    ...   %i = s32[] get-tuple-element(%s), index=0
    ...   %k = s32[] constant(3)
    ...   %j = s32[] add(%i, %k)
    ...   ROOT %t = (s32[]) tuple(%j)
    ... }
    ... ENTRY %e () -> (s32[]) {
    ...   %z = s32[] constant(0)
    ...   %init = (s32[]) tuple(%z)
    ...   ROOT %w = (s32[]) while(%init), condition=%cond, body=%body
    ... }''')
    >>> entry = m.computations[m.entry_name]
    >>> trip_count(m, entry, entry.by_name["w"])
    (4, 'derived')
"""

from __future__ import annotations

import math
import re

from aoizora.hlo.text import Computation, HloModule, Instruction

__all__ = ["trip_count"]

_KNOWN_TRIP_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_PASS_THROUGH = frozenset({"copy", "bitcast", "convert", "reshape"})
_FLIP = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


def _scalar_constant(instr: Instruction) -> int | None:
    if instr.opcode != "constant" or instr.literal is None or instr.shape.dims:
        return None
    text = instr.literal.strip()
    try:
        return int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            return None
        return int(value) if value.is_integer() else None


def _resolve(comp: Computation, name: str, module: HloModule) -> tuple[str, int] | None:
    """``('const', v)``, ``('index', k)`` for gte(k) of parameter 0, else None."""
    for _ in range(64):
        instr = comp.by_name[name]
        value = _scalar_constant(instr)
        if value is not None:
            return ("const", value)
        if instr.opcode == "get-tuple-element" and instr.operands:
            src = comp.by_name[instr.operands[0]]
            if src.opcode == "parameter":
                return ("index", int(instr.attrs.get("index", "-1")))
            return None
        if instr.opcode == "parameter" and not instr.shape.is_tuple:
            return ("param", int((instr.literal or "-1").strip()))
        if instr.opcode in _PASS_THROUGH and instr.operands:
            name = instr.operands[0]
            continue
        return None
    return None


def _compare_of(
    comp: Computation, module: HloModule
) -> tuple[str, tuple[str, int] | None, tuple[str, int] | None] | None:
    root = comp.root
    if root.opcode == "compare" and len(root.operands) == 2:
        lhs = _resolve(comp, root.operands[0], module)
        rhs = _resolve(comp, root.operands[1], module)
        return root.attrs.get("direction", ""), lhs, rhs
    if root.opcode == "fusion":
        inner = module.computations[root.called()[0]]
        found = _compare_of(inner, module)
        if found is None:
            return None
        direction, lhs, rhs = found

        def outer(value: tuple[str, int] | None) -> tuple[str, int] | None:
            if value is not None and value[0] == "param":
                return _resolve(comp, root.operands[int(value[1])], module)
            return value

        return direction, outer(lhs), outer(rhs)
    return None


def _init_value(parent: Computation, init_name: str, index: int) -> int | None:
    tup = parent.by_name[init_name]
    while tup.opcode in _PASS_THROUGH and tup.operands:
        tup = parent.by_name[tup.operands[0]]
    if tup.opcode != "tuple" or index >= len(tup.operands):
        return None
    name = tup.operands[index]
    for _ in range(64):
        instr = parent.by_name[name]
        value = _scalar_constant(instr)
        if value is not None:
            return value
        if instr.opcode in _PASS_THROUGH and instr.operands:
            name = instr.operands[0]
            continue
        return None
    return None


def _step_value(body: Computation, index: int, module: HloModule) -> int | None:
    root = body.root
    if root.opcode != "tuple" or index >= len(root.operands):
        return None
    update = body.by_name[root.operands[index]]
    while update.opcode in _PASS_THROUGH and update.operands:
        update = body.by_name[update.operands[0]]
    if update.opcode not in ("add", "subtract") or len(update.operands) != 2:
        return None
    a = _resolve(body, update.operands[0], module)
    c = _resolve(body, update.operands[1], module)
    if update.opcode == "add" and c == ("index", index) and a and a[0] == "const":
        a, c = c, a
    if a != ("index", index) or not c or c[0] != "const":
        return None
    return c[1] if update.opcode == "add" else -c[1]


def trip_count(
    module: HloModule, parent: Computation, instr: Instruction
) -> tuple[int | None, str]:
    """``(trip count, source)`` of ``while`` ``instr`` run from ``parent``.

    ``source`` is ``"known_trip_count"``, ``"derived"`` or ``"unknown"`` (then
    the count is None).
    """
    m = _KNOWN_TRIP_RE.search(instr.attrs.get("backend_config", ""))
    if m is not None:
        return int(m.group(1)), "known_trip_count"
    cond = module.computations[instr.attrs.get("condition", "").strip().lstrip("%")]
    body = module.computations[instr.attrs.get("body", "").strip().lstrip("%")]
    found = _compare_of(cond, module)
    if found is None or not instr.operands:
        return None, "unknown"
    direction, lhs, rhs = found
    if lhs is not None and lhs[0] == "const" and rhs is not None:
        lhs, rhs, direction = rhs, lhs, _FLIP.get(direction, direction)
    if lhs is None or rhs is None or lhs[0] != "index" or rhs[0] != "const":
        return None, "unknown"
    index, bound = int(lhs[1]), int(rhs[1])
    init = _init_value(parent, instr.operands[0], index)
    step = _step_value(body, index, module)
    if init is None or step is None or step == 0:
        return None, "unknown"
    if direction in ("LT", "LE") and step > 0:
        span = bound - init + (1 if direction == "LE" else 0)
        return max(0, math.ceil(span / step)), "derived"
    if direction in ("GT", "GE") and step < 0:
        span = init - bound + (1 if direction == "GE" else 0)
        return max(0, math.ceil(span / -step)), "derived"
    if direction == "NE" and (bound - init) % step == 0 and (bound - init) // step >= 0:
        return (bound - init) // step, "derived"
    return None, "unknown"
