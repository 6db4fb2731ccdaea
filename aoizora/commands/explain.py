"""``aoizora explain TRACE HLO --slice SLICE``: a profiled step, op by op, beside its prediction.

    aoizora explain rows.profiles/m-1234567890-winner.xplane.pb \\
                    rows.profiles/m-1234567890-winner.hlo.txt --slice v5e:1x1
                    [--top 15] [--json] [--picture explain.png] [--topology-dir DIR]

Reads a device profile (``*.xplane.pb``, written by ``aoizora measure --profile`` or by
``jax.profiler.trace``) and the compiled HLO text of the program it ran, prices every
instruction with the slice's compute model (as a plan's step is priced) and prints, per
category (matmul, attention, element-wise/reduce, copy/transpose, pad, async,
collectives) and for the ``--top`` ops by measured time, the measured and the predicted
time per step with the model's FLOPs and HBM bytes. No TPU is needed: a saved trace is
read with jaxlib's reader. ``--json`` prints ``module``, ``device``, ``step_s`` (the
measured step), ``device_ops_s`` (the sum of the device's ops), ``predicted_s``,
``categories`` and ``ops`` (docs/measure.md, "Op by op").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from aoizora.commands.args import add_compute_arguments, select_attention_kernel, use_topology_dir
from aoizora.errors import MeasureError
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from aoizora.studies.explain import Explanation, explain, op_prices
from sim.topology import Slice, load_slice

__all__ = ["explain_files", "register", "render_explanation", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain",
        help="a profiled step op by op: measured on the device beside the compute model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "trace",
        metavar="TRACE.xplane.pb",
        help="device profile of the step (also .xplane.pb.gz, or a saved op table .ops.json[.gz])",
    )
    p.add_argument(
        "hlo", metavar="HLO.txt", help="compiled HLO text of the program that ran (.gz too)"
    )
    p.add_argument(
        "--slice", required=True, metavar="SLICE", help="the slice it ran on, e.g. v5e:1x1"
    )
    p.add_argument(
        "--module", default=None, help="HLO module name in the trace (default: the HLO's)"
    )
    p.add_argument("--top", type=int, default=15, help="ops to list (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--picture", default=None, metavar="PNG", help="also draw it to this PNG")
    add_compute_arguments(p)
    p.set_defaults(func=run)


def explain_files(trace: str | Path, hlo: str | Path, slice_: Slice, *,
                  module: str | None = None) -> Explanation:  # fmt: skip
    """:func:`aoizora.studies.explain.explain` of a saved trace and HLO text on ``slice_``."""
    hlo_module = parse_module(read_text_file(hlo))
    profile = load_profile(trace, module=module or hlo_module.name)
    return explain(profile, hlo_module, op_prices(hlo_module, slice_.chip))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def render_explanation(e: Explanation, *, top: int = 15) -> str:
    """The category table, the ``top`` ops by measured time, and the totals."""
    lines = [f"{'category':<20} {'ops':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>8}"]
    for c in e.categories():
        err = f"{c.error_percent:+.1f}%" if abs(c.error_percent) < 1e6 else "-"
        lines.append(f"{c.category:<20} {c.ops:>5} {_ms(c.measured_s):>12} "
                     f"{_ms(c.predicted_s):>13} {err:>8}")  # fmt: skip
    ops_err = 100.0 * (e.device_ops_s - e.step_s) / e.step_s if e.step_s > 0 else 0.0
    pred_err = 100.0 * (e.predicted_s - e.step_s) / e.step_s if e.step_s > 0 else 0.0
    lines.append(
        f"step {_ms(e.step_s)} ms measured on {e.device or 'the device'}; device ops sum to "
        f"{_ms(e.device_ops_s)} ms ({ops_err:+.1f}%); predicted {_ms(e.predicted_s)} ms "
        f"({pred_err:+.1f}%)"
    )
    if top > 0:
        lines.append("")
        lines.append(f"{'op':<44} {'category':<18} {'x/step':>6} {'measured ms':>12} "
                     f"{'predicted ms':>13} {'GFLOP':>9} {'HBM MB':>9}")  # fmt: skip
        for r in sorted(e.rows, key=lambda r: (-r.measured_s, r.name))[:top]:
            lines.append(f"{r.name[:44]:<44} {r.category:<18} {r.count_per_step:>6.0f} "
                         f"{_ms(r.measured_s):>12} {_ms(r.predicted_s):>13} "
                         f"{r.flops / 1e9:>9.1f} {r.hbm_bytes / 1e6:>9.1f}")  # fmt: skip
    if e.unmatched:
        lines.append(f"{len(e.unmatched)} ops of the trace are not in the HLO (another program's "
                     f"text?): {', '.join(e.unmatched[:5])}")  # fmt: skip
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise MeasureError(f"--top {args.top}: give the number of ops to list, e.g. --top 15")
    use_topology_dir(args)
    slice_ = select_attention_kernel(args, [load_slice(args.slice)])[0]
    e = explain_files(args.trace, args.hlo, slice_, module=args.module)
    if args.picture:
        from aoizora.report.pictures.explain import plot_explanation  # matplotlib: only here

        plot_explanation(e, args.picture, title=f"{Path(args.trace).name} on {args.slice}")
    if args.json:
        sys.stdout.write(json.dumps(e.to_json_dict(top=args.top), indent=2) + "\n")
    else:
        sys.stdout.write(render_explanation(e, top=args.top))
    return 0
