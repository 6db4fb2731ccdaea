"""``aoizora hlo FILE.hlo --slice v5e:2x4``: the collectives of a compiled step, replayed.

Reads compiled HLO text (``compiled.as_text()``), lists every logical collective
(kind, replica groups, bytes per device, how many times it runs per step) and
simulates one step on the slice with the given device order.

    aoizora hlo step.hlo --slice v5e:2x4
    aoizora hlo step.hlo --slice v5e:2x4 --order 0,1,3,2,4,5,7,6 --json

``--order`` lists libtpu physical chip ids in logical-id order (logical id ``i``
runs on chip ``ORDER[i]``); the default is the identity. ``--json`` prints
``{"num_partitions": N, "collectives": [{"kind", "groups" | "pairs",
"bytes_per_device", "count"}, ...], "step_time_s": T}``: ``bytes_per_device`` is
the buffer the collective is defined by (all-gather: its output; all other
kinds: their input), ``count`` includes loop trip counts.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from aoizora.errors import HloParseError, PlacementError
from aoizora.hlo.graph import CollectiveGraph, graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import ReplayResult, replay
from sim.topology import load_slice

__all__ = ["format_table", "parse_order", "register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``hlo`` subcommand (see :mod:`aoizora.cli`)."""
    p = subparsers.add_parser(
        "hlo",
        help="list the collectives of compiled HLO and simulate one step on a slice",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE.hlo", help="compiled HLO text (compiled.as_text())")
    p.add_argument("--slice", required=True, metavar="SLICE", help="e.g. v5e:2x4")
    p.add_argument(
        "--order",
        default=None,
        metavar="ID,ID,...",
        help="physical (libtpu device) id of each logical id, e.g. 0,1,3,2 (default: identity)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def parse_order(text: str) -> tuple[int, ...]:
    """``"0,1,3,2"`` → ``(0, 1, 3, 2)``; raises :class:`PlacementError` on anything else.

    >>> parse_order("0, 1,3,2")
    (0, 1, 3, 2)
    """
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p.isdigit() for p in parts):
        raise PlacementError(
            f"--order {text!r} is not a comma-separated list of chip ids "
            f"(e.g. --order 0,1,3,2 on v5e:2x2)"
        )
    return tuple(int(p) for p in parts)


def _groups_text(graph: CollectiveGraph, index: int) -> str:
    c = graph.collectives[index]
    if c.pairs or c.kind in ("collective-permute", "send", "recv"):
        return f"{len(c.pairs)} pairs"
    sizes = sorted({len(g) for g in c.groups})
    size = "/".join(str(s) for s in sizes)
    return f"{len(c.groups)}x{size}"


def format_table(graph: CollectiveGraph, result: ReplayResult) -> str:
    """The human-readable listing: one row per logical collective, then totals."""
    lines = [
        f"{'#':>3}  {'kind':<20} {'groups':<10} {'form':<8} {'bytes/device':>13} "
        f"{'count':>5}  {'async':<5} {'time/exec us':>12} {'exposed us':>10}"
    ]
    for c, t in zip(graph.collectives, result.collectives, strict=True):
        kind = c.kind + (" (scatter)" if c.scatter else "")
        lines.append(
            f"{c.id:>3}  {kind:<20} {_groups_text(graph, c.id):<10} {c.group_form:<8} "
            f"{c.buffer_bytes:>13,} {c.count:>5}  {'yes' if c.is_async else 'no':<5} "
            f"{t.duration_s * 1e6:>12.2f} {t.exposed_s * 1e6:>10.2f}"
        )
    total_bytes = graph.total_collective_bytes()
    exposed = sum(t.total_exposed_s for t in result.collectives)
    lines.append("")
    lines.append(
        f"{len(graph.collectives)} collectives, {total_bytes:,} bytes per device per step, "
        f"{len(graph.opaques)} opaque kernels"
    )
    lines.append(
        f"compute {result.compute_s * 1e3:.3f} ms, exposed communication {exposed * 1e3:.3f} ms"
    )
    lines.append(f"simulated step time: {result.step_time_s * 1e3:.3f} ms")
    for warning in graph.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code (errors are raised for the CLI to report)."""
    try:
        with open(args.file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise HloParseError(f"cannot read {args.file!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise HloParseError(
            f"{args.file}:{line}: not UTF-8 text (byte {exc.start}); expected compiled HLO text "
            "as printed by compiled.as_text()"
        ) from None
    try:
        graph = graph_from_text(text)
    except HloParseError as exc:  # its message names the line; this names the file
        raise HloParseError(f"{args.file}: {exc}") from None
    slice_ = load_slice(args.slice)
    if args.order is None:
        order = DeviceOrder.identity(mesh_shape=(slice_.num_devices,), slice_=slice_)
    else:
        ids = parse_order(args.order)
        order = DeviceOrder.from_physical_ids(ids, mesh_shape=(slice_.num_devices,), slice_=slice_)
    result = replay(graph, slice_, order)
    if args.json:
        payload = graph.to_json_dict()
        payload["step_time_s"] = result.step_time_s
        print(json.dumps(payload))
    else:
        print(format_table(graph, result))
    return 0
