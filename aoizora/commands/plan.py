"""``aoizora plan``: the best (sharding, placement) for a model and slice.

    aoizora plan --model wan2.1-1.3b --slice v5e:2x4 --resolution 480p --frames 81
                 [--top-k K] [--per-attention-kind] [--out plan.json] [--exhaustive]
                 [--json] [--report DIR] [--emit maxdiffusion DIR]
    aoizora plan --workload my_model.py:make --slice v5e:2x4 [...]

``--json`` prints the summary with ``candidates`` (one object per legal candidate:
``id``, ``q1_s``, ``stage1_kept``, ``compiled``, ``best_q2_s``, ``placements``) and,
with ``--exhaustive``, ``exhaustive`` (``winner``, ``winner_q1_rank``,
``spearman_q1_q2``, ``top1_hit``, ``kept_hit``).

A Wan model (``--model``) is planned as a whole clip unless ``--no-clip``: the model's
VAE decoder is planned on the same slice too, and the table and ``--json`` report
``clip_s`` = ``text_encoder_s`` + ``denoise_s`` + ``vae_decode_s`` (top-level keys; also
``steps``, ``text_encoder`` and ``vae``, the VAE's plan); the plan file records them and
the VAE's plan (docs/serving.md, Clip latency).

``--workload FILE.py:FACTORY`` (or ``package.module:FACTORY``) plans a model of
your own: ``FACTORY()`` returns ``aoizora.user_workload(...)`` (docs/workload.md).
A slice libtpu cannot describe fails before any work. Progress goes to stderr, the
summary table to stdout, the plan to ``--out``. ``--emit maxdiffusion DIR`` also writes
the plan as maxdiffusion config overrides and a device-order hook (``aoizora export``,
docs/export.md); a winner maxdiffusion cannot express is refused in one line naming the
fastest ranked plan it can express (exit code 2, the plan file still written).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoizora.commands.args import (
    add_compute_arguments,
    add_search_arguments,
    add_time_argument,
    add_workload_arguments,
    check_search_arguments,
    check_slices,
    command_time_bound,
    fan_out_options,
    progress_printer,
    resume_from_cache,
    select_attention_kernel,
    use_libtpu,
    use_topology_dir,
    workload_from_args,
)
from aoizora.commands.clip_args import add_clip_arguments, check_clip_arguments, clip_options
from aoizora.commands.export import EMIT_TARGETS, add_config_argument
from aoizora.errors import DoesNotFit, ExportError, WorkloadError
from aoizora.software import warn_version_drift
from sim.splash_tiles import tile_problem

if TYPE_CHECKING:  # types only: the parser is built before jax starts
    from aoizora.plan import Plan
    from aoizora.planner import PlanOutcome

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="pick the best (sharding, placement) for a model, clip and slice",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_workload_arguments(p)
    p.add_argument("--slice", required=True, dest="slice_name", help="TPU slice, e.g. v5e:2x4")
    add_search_arguments(p, top_k_default=2)
    add_time_argument(p, what="the plan of the step")
    add_compute_arguments(p)
    p.add_argument(
        "--per-attention-kind",
        action="store_true",
        help="Stage 1 also hands over the best-Q1 candidate of every attention kind its "
        "top-K lacks (a wider safety net; off by default)",
    )
    p.add_argument(
        "--splash-blocks",
        default="auto",
        metavar="auto|Q,KV,KVC",
        help="the splash kernel's tiles (block_q, block_kv, block_kv_compute): 'auto' (the "
        "default) plans them per candidate from the chip's measured tiles; e.g. 512,512,512 "
        "runs maxdiffusion's defaults",
    )
    p.add_argument("--out", default="plan.json", help="plan file to write (default plan.json)")
    p.add_argument(
        "--exhaustive",
        action="store_true",
        help="compile every candidate and report Stage 1's recall and Spearman rho",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        help="also write a link heatmap, Perfetto traces and a ranking plot into DIR",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of a table")
    p.add_argument(
        "--emit",
        nargs=2,
        metavar=("STACK", "DIR"),
        help="also write the plan for a serving stack (maxdiffusion) into DIR (docs/export.md)",
    )
    add_config_argument(p)
    add_clip_arguments(p, switch="--no-clip")
    p.set_defaults(func=run)


def parse_splash_blocks(text: str) -> tuple[int, int, int] | None:
    """``--splash-blocks``: None for 'auto', else the three blocks (checked).

    >>> parse_splash_blocks("auto"), parse_splash_blocks("512,2048,512")
    (None, (512, 2048, 512))
    """
    if text.strip().lower() == "auto":
        return None
    try:
        blocks = tuple(int(b) for b in text.split(","))
    except ValueError:
        blocks = ()
    problem = tile_problem(blocks)
    if problem:
        raise WorkloadError(f"--splash-blocks {text!r}: 'auto', or {problem}")
    return blocks  # type: ignore[return-value]


def run(args: argparse.Namespace) -> int:
    from sim.topology import load_slice

    check_search_arguments(args)
    bound = command_time_bound(args)  # from now: jax's start counts too
    splash_blocks = parse_splash_blocks(args.splash_blocks)
    resume_from_cache(args.cache_dir)
    check_clip_arguments(args)
    if args.emit is not None and args.emit[0] not in EMIT_TARGETS:
        raise ExportError(
            f"--emit {args.emit[0]!r}: AoiZora emits {list(EMIT_TARGETS)}, e.g. "
            "--emit maxdiffusion out/"
        )
    use_topology_dir(args)
    use_libtpu(args)  # before jax starts: every compile (and worker) uses it
    (slice_,) = select_attention_kernel(args, [load_slice(args.slice_name)])
    check_slices([slice_])  # before the workload is built: a bad slice fails in milliseconds
    # Only now import the planner (and jax): bad input above is refused before jax starts.
    from aoizora.plan import WorkloadSource
    from aoizora.planner import run_plan
    from aoizora.report.summary import outcome_summary, render_report

    progress = progress_printer(quiet=args.quiet)
    workload = workload_from_args(args, progress)
    # Said once the input is known good (bad input is refused in one line, before it).
    warn_version_drift("plan")  # the plan's HLO is compiled by this jax/libtpu
    outcome = run_plan(
        workload,
        slice_,
        top_k=args.top_k,
        per_attention_kind=args.per_attention_kind,
        exhaustive=args.exhaustive,
        cache_dir=args.cache_dir,
        max_placements=args.max_placements,
        progress=progress,
        splash_blocks=splash_blocks,
        time_bound=bound,
        **fan_out_options(args),  # type: ignore[arg-type]
    )
    clip = None
    if args.model is not None and not args.no_clip:
        from aoizora.request.clip_plan import plan_clip

        progress(f"== whole clip: planning the VAE decode of {workload.name} on {slice_.name}")
        try:
            clip = plan_clip(
                outcome, cache_dir=args.cache_dir, max_placements=args.max_placements,
                progress=progress, **fan_out_options(args), **clip_options(args),  # type: ignore[arg-type]
            )  # fmt: skip
        except DoesNotFit as exc:  # the step fits: keep its plan, say what the VAE needs
            where = f"; {exc.fits}" if exc.fits else ""
            print(f"aoizora plan: warning: the clip is left out: {exc}{where}; the plan "
                  "holds the step alone (as --no-clip)", file=sys.stderr)  # fmt: skip
    plan = outcome.plan() if clip is None else clip.plan()
    if args.workload is not None:  # aoizora measure rebuilds it from here
        plan = dataclasses.replace(
            plan, source=WorkloadSource(args.workload, workload.program_fingerprint)
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plan.save(out)
    if args.report:
        from aoizora.report.directory import write_report_dir

        for path in write_report_dir(outcome, Path(args.report)):
            progress(f"wrote {path}")
    if args.json:
        summary = outcome_summary(outcome) | ({} if clip is None else clip.to_json())
        summary["plan_file"] = str(out)
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_report(outcome))
        if clip is not None:
            from aoizora.report.clip import render_clip

            sys.stdout.write(render_clip(clip))
        print(f"plan written to {out}")
    if args.emit is not None:
        _emit(outcome, plan, Path(args.emit[1]), args.maxdiffusion_config, progress)
    return 0


def _emit(
    outcome: PlanOutcome,
    plan: Plan,
    directory: Path,
    config_file: str | None,
    progress: Callable[[str], None],
) -> None:
    from aoizora.export.directory import export_maxdiffusion
    from aoizora.export.nearest import outcome_alternatives

    paths = export_maxdiffusion(
        plan,
        directory,
        alternatives=outcome_alternatives(outcome),
        among="among the shardings ranked",
        config_file=config_file,
    )
    for path in paths:
        progress(f"wrote {path}")
