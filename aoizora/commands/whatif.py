"""``aoizora whatif``: plan one workload on several (hypothetical) slices and compare.

    aoizora whatif --model wan2.1-1.3b --resolution 480p \
        --slices v5e:2x4,v5e:4x4,v5e:4x4+wrap,v6e:4x4,v5p:2x2x2 [--csv F] [--json]
    aoizora whatif --workload my_model.py:make --slices v5e:2x4,v6e:2x4

Every slice is checked with libtpu before any planning starts. ``--clip`` (a Wan model)
also plans each slice's VAE decoder and adds the whole clip's latency (``clip_s`` =
``text_encoder_s`` + ``denoise_s`` + ``vae_decode_s``, the names ``aoizora plan --json``
uses) to the table, the CSV and the JSON; off by default (it compiles the VAE too).

Every latency is simulated (the compiled step replayed in the ICI simulator).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Callable
from typing import Any

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
from aoizora.timebound import StudyShares, TimeBound

__all__ = ["register", "render_rows", "rows_to_csv", "run", "shares_of"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "whatif",
        help="compare the best plan across slice shapes and chip generations (simulated)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_workload_arguments(p)
    p.add_argument(
        "--slices",
        required=True,
        help="comma-separated slice specs NAME[+wrap[=FLAGS]], e.g. v5e:4x4,v5e:4x4+wrap,v6e:4x4",
    )
    add_search_arguments(p, top_k_default=1)
    add_time_argument(
        p, what="the whole study (each slice gets the time left over the slices left)"
    )
    add_compute_arguments(p)
    p.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_clip_arguments(p, switch="--clip")
    p.set_defaults(func=run)


def _fmt(value: float | None, scale: float = 1e3, unit: str = " ms") -> str:
    return "n/a" if value is None else f"{value * scale:.2f}{unit}"


def _speedup(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


# Baseline columns in table order: Wan's two, every other workload's default deployment,
# then logical search (aoizora.candidates.baselines); a table shows the ones its rows have.
_BASELINE_COLUMNS = (
    ("existing deployment", "vs existing"),
    ("maxdiffusion recipe", "vs recipe"),
    ("default deployment", "vs default"),
    ("logical search", "vs logical"),
)


def _chips(row: Any) -> str:
    """Chips, and the devices when a chip is several (tpu7x: ``4 (8 devices)``)."""
    if row.num_devices == row.num_chips:
        return str(row.num_chips)
    return f"{row.num_chips} ({row.num_devices} devices)"


def _baseline_names(rows: Any) -> list[str]:
    present = {name for r in rows for name, _ in r.baselines_s}
    names = [name for name, _ in _BASELINE_COLUMNS if name in present]
    # A table of failed rows only still shows the columns a Wan table has.
    return names or ["existing deployment", "maxdiffusion recipe", "logical search"]


_CLIP_COLUMNS = ("clip (sim)", "denoise", "VAE decode")


def _header(names: list[str], clip: bool) -> tuple[str, ...]:
    labels = dict(_BASELINE_COLUMNS)
    return (
        "slice",
        "chips",
        "best step (sim)",
        *(labels[n] for n in names),
        "bound (sim)",
        "gap",
        "peak link util",
        "mean link util",
        "HBM/device",
        *(_CLIP_COLUMNS if clip else ()),
        "winner",
    )


def _clip_cells(row: Any, clip: bool) -> tuple[str, ...]:
    if not clip:
        return ()
    lat = row.latency
    if lat is None:
        return ("",) * len(_CLIP_COLUMNS)
    return tuple(_fmt(v, 1, " s") for v in (lat.clip_s, lat.denoise_s, lat.vae_decode_s))


def _cells(row: Any, names: list[str], clip: bool) -> tuple[str, ...]:
    if row.error is not None:
        blank = ("",) * (len(names) + 5 + (len(_CLIP_COLUMNS) if clip else 0))
        return (row.spec, _chips(row), "failed", *blank, row.error[:80])
    bound = None if row.search_bound_s is None else min(row.search_bound_s, row.step_s or 0.0)
    return (
        row.spec,
        _chips(row),
        _fmt(row.step_s),
        *(_speedup(row.speedup_over(n)) for n in names),
        _fmt(bound),
        _fmt(row.search_gap, 100, " %"),
        _fmt(row.peak_link_utilisation, 100, " %"),
        _fmt(row.mean_link_utilisation, 100, " %"),
        "n/a" if getattr(row, "memory", None) is None else row.memory.cell(),
        *_clip_cells(row, clip),
        f"{row.winner} @ {row.placement}",
    )


def render_rows(rows: Any) -> str:
    """The comparison table, one line per slice, one speedup column per baseline, the
    placement search's proven bound and gap (no placement of the slice is faster than
    the bound; 0 % when the winner is proven best), and the clip's latency, denoising and
    VAE decode when the rows have them (``--clip``)."""
    names = _baseline_names(rows)
    clip = any(getattr(r, "latency", None) is not None for r in rows)
    header = _header(names, clip)
    cells = [header, *(_cells(r, names, clip) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [
        f"{r.spec}: the clip is left out: {note}"
        for r in rows
        if (note := getattr(r, "clip_left_out", None))
    ]
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.compute_model is not None:
            seen.setdefault(r.compute_model["generation"], r.compute_model)
    for gen, m in sorted(seen.items()):
        eff = m["attention_efficiency"][m["attention_kernel"]]
        lines.append(
            f"compute model ({gen}): attention kernel {m['attention_kernel']} at {eff:.3g} of "
            f"the padded MXU peak, MXU tile {m['mxu_tile']} ({m['parameter_file']})"
        )
    return "\n".join(lines) + "\n"


def rows_to_csv(rows: Any) -> str:
    """The rows as CSV (numbers in seconds and fractions, not formatted); the same columns
    for every workload (a baseline the workload does not have is empty)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "slice",
            "num_chips",
            "num_devices",
            "wraparound",
            "step_s",
            "existing_deployment_s",
            "maxdiffusion_recipe_s",
            "logical_search_s",
            "default_deployment_s",
            "peak_link_utilisation",
            "mean_link_utilisation",
            "winner",
            "placement",
            "plan_s",
            "error",
            "search_bound_s",
            "search_gap",
            "clip_s",
            "text_encoder_s",
            "denoise_s",
            "vae_decode_s",
            "hbm_bytes_per_chip",
        ]
    )
    for r in rows:
        base = dict(r.baselines_s)
        writer.writerow(
            [
                r.spec,
                r.num_chips,
                r.num_devices,
                "".join("1" if w else "0" for w in r.wraparound),
                r.step_s,
                base.get("existing deployment"),
                base.get("maxdiffusion recipe"),
                base.get("logical search"),
                base.get("default deployment"),
                r.peak_link_utilisation,
                r.mean_link_utilisation,
                r.winner,
                r.placement,
                r.plan_s,
                r.error,
                r.search_bound_s,
                r.search_gap,
                *(("",) * 4 if r.latency is None else (
                    r.latency.clip_s, r.latency.text_encoder_s, r.latency.denoise_s,
                    r.latency.vae_decode_s,
                )),
                "" if getattr(r, "memory", None) is None else r.memory.hbm_bytes_per_chip,
            ]
        )  # fmt: skip
    return out.getvalue()


def shares_of(bound: TimeBound | None, slices: int, plan: Callable[..., Any]) -> Callable[..., Any]:
    """``plan`` (:func:`aoizora.planner.run_plan`) with each slice's share of the study's
    time ``bound`` (:class:`aoizora.timebound.StudyShares`)."""
    shares = StudyShares(bound, slices)

    def within_share(*args: Any, **kwargs: Any) -> Any:
        try:
            return plan(*args, time_bound=shares.next(), **kwargs)
        finally:
            shares.plan_ended()

    return within_share


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aoizora.atomic import write_atomic
    from aoizora.errors import WorkloadError
    from sim.topology import parse_slice_spec

    specs = [s.strip() for s in args.slices.split(",") if s.strip()]
    if not specs:
        raise WorkloadError(f"--slices {args.slices!r} names no slice; e.g. v5e:2x4,v5e:4x4")
    check_search_arguments(args)
    bound = command_time_bound(args)  # the whole study's, from now
    resume_from_cache(args.cache_dir)
    check_clip_arguments(args)
    use_topology_dir(args)
    use_libtpu(args)  # before jax starts: every compile (and worker) uses it
    # bad specs fail before any work
    slices = select_attention_kernel(args, [parse_slice_spec(spec) for spec in specs])
    check_slices(slices)  # and so do slices libtpu cannot describe
    # Only now import the planner (and jax): bad input above is refused in milliseconds.
    from aoizora.planner import run_plan
    from aoizora.studies.whatif import run_whatif

    workload = workload_from_args(args, progress_printer(quiet=args.quiet))
    rows = run_whatif(
        workload,
        slices,
        top_k=args.top_k,
        max_placements=args.max_placements,
        cache_dir=args.cache_dir,
        progress=progress_printer(quiet=args.quiet),
        plan=shares_of(bound, len(slices), run_plan),
        plan_options=fan_out_options(args),
        clip=clip_options(args) if args.clip else None,
    )
    if args.csv:
        write_atomic(Path(args.csv), rows_to_csv(rows))
    if args.json:
        print(json.dumps([r.to_json_dict() for r in rows], indent=2, sort_keys=True))
    else:
        print(f"what-if: {workload.name}; every latency is simulated")
        sys.stdout.write(render_rows(rows))
    return 0 if any(r.error is None for r in rows) else 1
