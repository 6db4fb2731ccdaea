"""A deliberately small reader of collectives in TPU-compiled HLO text (test oracle only).

The real HLO parser lives in ``aoizora/hlo``; this one handles just what the
Stage-1 tests compile: sync and ``*-start`` collectives, the three replica-group
forms (explicit, iota, mesh axes; docs/facts.md, Compiled-HLO collectives) and
``while`` bodies with a trip count given by the test. Bytes follow the convention
of ``aoizora.stage1.dag``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

__all__ = ["HloCollective", "hlo_collectives", "while_bodies", "bytes_by_axes"]

_DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
}
_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_INSTR = re.compile(
    r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(?P<type>\(.*?\)|\S+)\s+(?P<kind>"
    + "|".join(_KINDS)
    + r")(?P<start>-start)?\((?P<rest>.*)$"
)
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
# Computation headers start in column 0; instructions are indented.
_COMP = re.compile(r"^(?:ENTRY\s+)?%(\S+)\s.*\{\s*$")


class HloCollective:
    def __init__(
        self,
        kind: str,
        axes: tuple[str, ...],
        nbytes: int,
        computation: str,
        group_size: int = 0,
    ) -> None:
        # group_size: devices per replica group; for a permute, its number of pairs
        self.group_size = group_size
        self.kind = kind
        self.axes = axes
        self.nbytes = nbytes
        self.computation = computation

    def __repr__(self) -> str:
        return f"HloCollective({self.kind}, {self.axes}, {self.nbytes}, {self.computation})"


def _arrays(t: str) -> list[int]:
    out = []
    for dtype, dims in _ARRAY.findall(t):
        if dtype in _DTYPE_BYTES:
            n = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
            out.append(n * _DTYPE_BYTES[dtype])
    return out


def _groups(rest: str, num_devices: int) -> list[list[int]]:
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if m:
        g, s = int(m.group(1)), int(m.group(2))
        dims = [int(x) for x in m.group(3).split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if m.group(4):
            ids = ids.transpose([int(x) for x in m.group(4).split(",")])
        return ids.reshape(g, s).tolist()
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", rest)
    if m:
        axes = re.findall(r"'(\w+)'=(\d+)", m.group(1))
        names = [a for a, _ in axes]
        sizes = [int(s) for _, s in axes]
        chosen = re.findall(r"'(\w+)'", m.group(2))
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        keep = [i for i, n in enumerate(names) if n not in chosen]
        vary = [i for i, n in enumerate(names) if n in chosen]
        t = ids.transpose(keep + vary)
        return t.reshape(-1, math.prod(sizes[i] for i in vary)).tolist()
    m = re.search(r"replica_groups=\{(.*?)\}\s*(?:,|$)", rest)
    if m and m.group(1).strip():
        return [
            [int(x) for x in g.split(",") if x] for g in re.findall(r"\{([\d,]*)\}", m.group(0))
        ]
    m = re.search(r"source_target_pairs=\{(.*?)\}\s*(?:,|$)", rest)
    if m:
        return [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)\}", m.group(0))]
    return [list(range(num_devices))]


def _axes(groups: Sequence[Sequence[int]], mesh_axes: Sequence[tuple[str, int]]) -> tuple[str, ...]:
    sizes = [s for _, s in mesh_axes]
    out = set()
    for g in groups:
        coords = [np.unravel_index(d, sizes) for d in g]
        for i, (name, _) in enumerate(mesh_axes):
            if len({int(c[i]) for c in coords}) > 1:
                out.add(name)
    return tuple(n for n, _ in mesh_axes if n in out)


def hlo_collectives(text: str, mesh_axes: Sequence[tuple[str, int]]) -> list[HloCollective]:
    """Every collective of ``text`` with its mesh axes (logical ids) and bytes per device."""
    n = math.prod(s for _, s in mesh_axes)
    out = []
    comp = ""
    seen: set[tuple[str, int]] = set()
    for line in text.splitlines():
        cm = _COMP.match(line)
        if cm:
            comp = cm.group(1)
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        kind, rest = m.group("kind"), m.group("rest")
        channel = re.search(r"channel_id=(\d+)", rest)
        if channel and "fus" in comp:
            # An async collective fusion repeats the same collective (same channel)
            # in its start, overlap and done computations; it runs once
            # (docs/facts.md, Compiled-HLO collectives).
            # Outside fusions channels are not unique (shard_map's all share 1).
            key = (kind, int(channel.group(1)))
            if key in seen:
                continue
            seen.add(key)
        arrays = _arrays(m.group("type"))
        groups = _groups(rest, n)
        if kind == "collective-permute":
            groups = [list(p) for p in groups if p[0] != p[1]]
            nbytes = arrays[0]
        elif kind == "all-gather":
            nbytes = arrays[-1] if m.group("start") else arrays[0]
        elif kind == "reduce-scatter":
            nbytes = arrays[0] * len(groups[0])
        elif kind == "all-reduce":
            nbytes = sum(arrays)  # a tuple all-reduce reduces every operand
        else:
            nbytes = arrays[0]
        size = len(groups) if kind == "collective-permute" else len(groups[0]) if groups else 0
        out.append(HloCollective(kind, _axes(groups, mesh_axes), nbytes, comp, size))
    return out


def while_bodies(text: str) -> set[str]:
    """Names of every ``while`` body and of every computation they call (fusions, ...)."""
    calls: dict[str, set[str]] = {}
    comp = ""
    for line in text.splitlines():
        cm = _COMP.match(line)
        if cm:
            comp = cm.group(1)
            continue
        refs = re.findall(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)", line)
        calls.setdefault(comp, set()).update(refs)
    todo = re.findall(r"\bwhile\(.*?body=%([\w.\-]+)", text)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(sorted(calls.get(name, ())))
    return seen


def bytes_by_axes(
    items: Sequence[tuple[str, tuple[str, ...], float]],
) -> dict[tuple[str, tuple[str, ...]], float]:
    """Sum (kind, axes, bytes) triples by (kind, axes)."""
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for kind, axes, b in items:
        out[(kind, axes)] = out.get((kind, axes), 0.0) + b
    return dict(sorted(out.items()))
