"""``aoizora export``: a plan file as a serving stack takes it.

    aoizora export plan.json --to maxdiffusion DIR [--maxdiffusion-config FILE]

writes ``maxdiffusion.yml`` (config overrides), ``maxdiffusion.args`` (the same as
``key=value`` arguments), ``mesh.py`` (the planned device order, plain jax) and
``README.md`` (the command, the prediction, how to measure) into DIR. A plan maxdiffusion
cannot express is refused in one line naming the nearest plan it can, among the plan's
baselines (exit code 2). ``aoizora plan ... --emit maxdiffusion DIR`` does the same for the
plan it makes, the nearest taken from every sharding it ranked. docs/export.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["EMIT_TARGETS", "add_config_argument", "register", "run"]

EMIT_TARGETS: tuple[str, ...] = ("maxdiffusion",)


def add_config_argument(p: argparse.ArgumentParser) -> None:
    """``--maxdiffusion-config``: which maxdiffusion Wan config the overrides are for."""
    from aoizora.export.maxdiffusion_table import CONFIGS

    p.add_argument(
        "--maxdiffusion-config",
        choices=sorted(CONFIGS),
        default=None,
        help="maxdiffusion config to override (default: the model's, e.g. base_wan_14b.yml "
        "for wan2.1-14b; needed for models maxdiffusion ships no config for)",
    )


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a plan as maxdiffusion config overrides plus a device-order hook",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("plan", help="plan file written by `aoizora plan`")
    p.add_argument(
        "--to",
        nargs=2,
        required=True,
        metavar=("STACK", "DIR"),
        help=f"serving stack ({', '.join(EMIT_TARGETS)}) and the directory to write",
    )
    add_config_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aoizora.errors import ExportError
    from aoizora.export.directory import export_maxdiffusion
    from aoizora.export.nearest import plan_alternatives
    from aoizora.plan import load_plan

    stack, directory = args.to
    if stack not in EMIT_TARGETS:
        raise ExportError(
            f"--to {stack!r}: AoiZora exports to {list(EMIT_TARGETS)}, e.g. --to maxdiffusion out/"
        )
    plan = load_plan(args.plan)
    paths = export_maxdiffusion(
        plan,
        Path(directory),
        alternatives=plan_alternatives(plan),
        among="among the plan file's baselines",
        config_file=args.maxdiffusion_config,
    )
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    print(f"maxdiffusion export of {plan.candidate_id} written to {directory}")
    return 0
