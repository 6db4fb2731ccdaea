"""Synthetic compiled programs over a mesh, for the search and exact-shortcut tests.

:func:`mesh_program` writes HLO text (parsed by :func:`graph_from_text`, as the
planner reads compiled programs) whose collectives follow a mesh's axes: two
async all-gathers over different axes in flight together, an async all-gather
beside a collective-permute ring over the same axis (they share links), a
synchronous all-reduce, and an all-to-all, with matmuls in between that hide
some of it. Sizes are chosen so that transfers and compute are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import CollectiveGraph
from aoizora.measure.environment import Environment
from aoizora.plan import Provenance

__all__ = ["axis_groups", "mesh_program", "tpu_environment", "twin_permutes"]


def axis_groups(mesh_shape: Sequence[int], axis: int) -> list[list[int]]:
    """Logical ids grouped along ``axis`` (row-major mesh), in axis order."""
    n = math.prod(mesh_shape)
    stride = math.prod(mesh_shape[axis + 1 :])
    size = mesh_shape[axis]
    seen: set[int] = set()
    groups = []
    for d in range(n):
        if d in seen:
            continue
        base = d - ((d // stride) % size) * stride
        group = [base + k * stride for k in range(size)]
        seen.update(group)
        groups.append(group)
    return groups


def _groups_text(groups: list[list[int]]) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def mesh_program(
    mesh_shape: Sequence[int],
    *,
    scale: int = 1,
    same_axis: bool = True,
    halves: bool = False,
    twins: bool = False,
) -> CollectiveGraph:
    """A program whose collectives span ``mesh_shape``'s first and last non-trivial axes.

    ``same_axis=False`` drops the permute and the all-gather that overlap it on
    one axis, so that only placements putting both axes on shared links make
    collectives contend. ``halves=True`` adds two all-to-alls over *parts* of the
    first axis (its first and second halves; its even and odd positions), as a
    Ulysses all-to-all over 4 of a 64-way context axis is: neither is a whole fiber.
    ``twins=True`` starts an identical twin beside the permute (the K and V permutes of
    ring attention) and beside the first all-gather: each pair shares every link it uses.
    """
    axes = [a for a, s in enumerate(mesh_shape) if s > 1]
    first, last = axes[0], axes[-1]
    ga, gb = axis_groups(mesh_shape, first), axis_groups(mesh_shape, last)
    na, nb = len(ga[0]), len(gb[0])
    pairs = [(g[i], g[(i + 1) % len(g)]) for g in ga for i in range(len(g))]
    pairs_text = "{" + ",".join(f"{{{a},{b}}}" for a, b in pairs) + "}"
    e = 65536 * scale  # f32 elements per shard
    n = math.prod(mesh_shape)
    text = f"""HloModule m, is_scheduled=true, num_partitions={n}
ENTRY %main (p: f32[{e}], a: f32[256,256]) -> f32[256,256] {{
  %p = f32[{e}]{{0}} parameter(0)
  %a = f32[256,256]{{1,0}} parameter(1)
  %ag1 = (f32[{e}]{{0}}, f32[{e * na}]{{0}}) all-gather-start(%p), channel_id=1, \
replica_groups={_groups_text(ga)}, dimensions={{0}}, use_global_device_ids=true
  %ag2 = (f32[{e}]{{0}}, f32[{e * nb}]{{0}}) all-gather-start(%p), channel_id=2, \
replica_groups={_groups_text(gb)}, dimensions={{0}}, use_global_device_ids=true
  %d1 = f32[256,256]{{1,0}} dot(%a, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %ag1d = f32[{e * na}]{{0}} all-gather-done(%ag1)
  %cp = (f32[{e}]{{0}}, f32[{e}]{{0}}) collective-permute-start(%p), channel_id=3, \
source_target_pairs={pairs_text}
  %ag3 = (f32[{e}]{{0}}, f32[{e * na}]{{0}}) all-gather-start(%p), channel_id=4, \
replica_groups={_groups_text(ga)}, dimensions={{0}}, use_global_device_ids=true
  %ag2d = f32[{e * nb}]{{0}} all-gather-done(%ag2)
  %d2 = f32[256,256]{{1,0}} dot(%d1, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %cpd = f32[{e}]{{0}} collective-permute-done(%cp)
  %ag3d = f32[{e * na}]{{0}} all-gather-done(%ag3)
  %ar = f32[{e}]{{0}} all-reduce(%cpd), channel_id=5, replica_groups={_groups_text(gb)}, \
use_global_device_ids=true, to_apply=%add
  %a2a = f32[{e}]{{0}} all-to-all(%ar), channel_id=6, replica_groups={_groups_text(gb)}, \
dimensions={{0}}
  %d3 = f32[256,256]{{1,0}} dot(%d2, %a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT %t = (f32[256,256]{{1,0}}, f32[{e * na}]{{0}}, f32[{e}]{{0}}, f32[{e * na}]{{0}}) \
tuple(%d3, %ag1d, %a2a, %ag3d)
}}
%add (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}}
"""
    if halves and na >= 4:
        h = na // 2
        parts = [p for g in ga for p in (g[:h], g[h:])]
        strided = [p for g in ga for p in (g[0::2], g[1::2])]
        extra = f"""  %h1 = f32[{e}]{{0}} all-to-all(%a2a), channel_id=7, \
replica_groups={_groups_text(parts)}, dimensions={{0}}
  %h2 = f32[{e}]{{0}} all-to-all(%h1), channel_id=8, \
replica_groups={_groups_text(strided)}, dimensions={{0}}
"""
        text = text.replace("  %d3 = ", extra + "  %d3 = ", 1)
        text = text.replace("tuple(%d3, %ag1d, %a2a, %ag3d)", "tuple(%d3, %ag1d, %h2, %ag3d)")
    if not same_axis:
        lines = [
            line
            for line in text.split("\n")
            if not any(t in line for t in ("%cp ", "%cpd ", "%ag3 ", "%ag3d ", "source_target"))
        ]
        text = "\n".join(lines).replace("all-reduce(%cpd)", "all-reduce(%p)")
        text = text.replace("tuple(%d3, %ag1d, %a2a, %ag3d)", "tuple(%d3, %ag1d, %a2a, %ag1d)")
    if twins:
        lines = []
        for line in text.split("\n"):
            lines.append(line)
            for name, channel in (("%cp", 9), ("%ag1", 10)):
                if line.startswith(f"  {name} = "):  # a twin: same collective, own channel
                    twin = line.replace(f"  {name} = ", f"  {name}t = ", 1)
                    lines.append(twin.replace(", channel_id=", f", channel_id={channel}0", 1))
                if line.startswith(f"  {name}d = "):
                    lines.append(
                        line.replace(f"{name}d", f"{name}td").replace(f"({name})", f"({name}t)")
                    )
        text = "\n".join(lines)
    return graph_from_text(text)


def twin_permutes(mesh_shape: Sequence[int], *, scale: int = 1) -> CollectiveGraph:
    """Two identical collective-permutes (a ring along the first non-trivial axis) in
    flight together and nothing else: the K and V permutes of one ring-attention step.
    Where the ring's pairs share no link with each other, each link carries both twins'
    bytes and nothing more, so the replay takes exactly one hop's latency plus twice the
    bytes over the link."""
    first = next(a for a, size in enumerate(mesh_shape) if size > 1)
    pairs = [(g[i], g[(i + 1) % len(g)]) for g in axis_groups(mesh_shape, first)
             for i in range(len(g))]  # fmt: skip
    pairs_text = "{" + ",".join(f"{{{a},{b}}}" for a, b in pairs) + "}"
    e = 65536 * scale
    start = f"collective-permute-start(%p), source_target_pairs={pairs_text}"
    text = f"""HloModule m, is_scheduled=true, num_partitions={math.prod(mesh_shape)}
ENTRY %main (p: f32[{e}]) -> (f32[{e}], f32[{e}]) {{
  %p = f32[{e}]{{0}} parameter(0)
  %k = (f32[{e}]{{0}}, f32[{e}]{{0}}) {start}, channel_id=1
  %v = (f32[{e}]{{0}}, f32[{e}]{{0}}) {start}, channel_id=2
  %kd = f32[{e}]{{0}} collective-permute-done(%k)
  %vd = f32[{e}]{{0}} collective-permute-done(%v)
  ROOT %t = (f32[{e}]{{0}}, f32[{e}]{{0}}) tuple(%kd, %vd)
}}
"""
    return graph_from_text(text)


def tpu_environment(*, num_devices: int, plan_sha256: str, date: str = "2026-09-01") -> Environment:
    """The environment of a one-host TPU v5e run of ``plan.json``: rows built with it
    read as ``aoizora measure`` writes them on a chip."""
    return Environment(
        backend="tpu", device_kind="TPU v5 lite", num_devices=num_devices, num_hosts=1,
        versions=Provenance.current(), date=date, plan_file="plan.json", plan_sha256=plan_sha256,
    )  # fmt: skip
