"""``aoizora serve``: which slice, how many replicas and at what cost per clip meet a p99.

    aoizora serve --model wan2.1-14b --resolution 720p --slices v5e:4x4,v6e:2x4,tpu7x:2x2x1 \\
        --rate 2/min --slo-p99 900 [--replicas 1-8] [--batch] [--prices FILE] [--seed 0]
    aoizora serve --trace requests.csv --slices v6e:2x4 --slo-p99 900 [--model M ...]

Every slice's plans (the denoising step and the VAE decoder, cached as any plan) give
the time a replica takes per clip; a SimPy simulation of Poisson arrivals (or the
trace) queued for R replicas gives latency percentiles with 95 % confidence intervals
over independent replications, throughput, utilisation, queue length and the cost per
clip (prices per chip-hour: aoizora/serving/prices.toml, or --prices FILE). The table
marks the cheapest option whose p99 (the upper end of its interval) meets --slo-p99;
``--json`` gives ``options`` and ``cheapest``. A rate no tried replica count can serve
(utilisation >= 1) is an error naming the replicas each slice needs. Exit code 0 when
an option meets the objective, 1 when none does. docs/serving.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from aoizora.commands.args import (
    add_compute_arguments,
    add_search_arguments,
    check_search_arguments,
    check_slices,
    fan_out_options,
    progress_printer,
    select_attention_kernel,
    use_topology_dir,
)
from aoizora.commands.clip_args import add_clip_arguments, check_clip_arguments
from aoizora.errors import ServingError
from aoizora.workloads.wan_config import WAN_CONFIGS

__all__ = ["parse_replicas", "register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="size a deployment: slices x replicas against a rate and a p99 (simulated)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", choices=sorted(WAN_CONFIGS), help="the Wan model served")
    p.add_argument("--resolution", default=None, help="480p, 720p or WIDTHxHEIGHT (default 480p)")
    p.add_argument("--frames", type=int, default=None, help="clip frames, 4k+1 (model default)")
    p.add_argument("--slices", required=True, help="comma-separated slices, e.g. v5e:4x4,v6e:2x4")
    p.add_argument("--rate", help="Poisson arrival rate: 2/min, 0.5/s or 30/h")
    p.add_argument("--slo-p99", type=float, required=True, metavar="SECONDS",
                   help="the p99 latency objective, seconds from arrival to the clip")  # fmt: skip
    p.add_argument("--trace", metavar="FILE", help="replay a CSV trace instead of --rate "
                   "(arrival_s, model, resolution, frames, steps)")  # fmt: skip
    p.add_argument("--batch", action="store_true",
                   help="let a replica denoise two waiting requests of one kind together "
                   "where a batch-of-two plan is faster per clip")  # fmt: skip
    p.add_argument("--prices", metavar="FILE", help="chip-hour prices overriding the shipped "
                   "table (TOML: [v6e] usd_per_chip_hour = 2.7)")  # fmt: skip
    p.add_argument("--replicas", metavar="MIN-MAX", help="replica counts to try, e.g. 1-8 "
                   "(default: fewest stable up to the first meeting the objective)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="random seed of the arrivals (default 0)")
    p.add_argument("--replications", type=int, default=10,
                   help="independent replications per option (default %(default)s)")  # fmt: skip
    p.add_argument("--requests", type=int, default=2000,
                   help="measured requests per replication (default %(default)s)")  # fmt: skip
    p.add_argument("--plot", metavar="FILE", help="also write the latency CDFs (PNG)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_search_arguments(p, top_k_default=2)
    add_compute_arguments(p)
    add_clip_arguments(p, switch=None)
    p.set_defaults(func=run)


def parse_replicas(text: str | None) -> tuple[int, int] | None:
    """``MIN-MAX`` (or one count) as a range of replica counts.

    >>> parse_replicas("2-6"), parse_replicas("3"), parse_replicas(None)
    ((2, 6), (3, 3), None)
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    lo, hi = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, 0)
    if m is None or not 1 <= lo <= hi or hi > 256:
        raise ServingError(
            f"--replicas {text!r}: give MIN-MAX with 1 <= MIN <= MAX <= 256, e.g. 1-8 (or one "
            "count, e.g. 4)"
        )
    return lo, hi


def _check(args: argparse.Namespace) -> None:
    if (args.rate is None) == (args.trace is None):
        raise ServingError("give --rate (Poisson arrivals, e.g. 2/min) or --trace FILE, not both")
    if args.trace is None and args.model is None:
        raise ServingError("--rate needs --model, e.g. --model wan2.1-14b --resolution 720p")
    if not args.slo_p99 > 0:
        raise ServingError(f"--slo-p99 {args.slo_p99}: must be positive seconds, e.g. 900")
    for name, value, least in (("--replications", args.replications, 1),
                               ("--requests", args.requests, 10)):  # fmt: skip
        if value < least:
            raise ServingError(f"{name} {value}: must be at least {least}, e.g. {least * 10}")


def run(args: argparse.Namespace) -> int:
    from sim.topology import parse_slice_spec

    check_search_arguments(args)
    check_clip_arguments(args)
    _check(args)
    from aoizora.commands.serve_run import load_of, prices_of, serve

    settings_range = parse_replicas(args.replicas)
    prices = prices_of(args)
    load = load_of(args)  # the rate, the trace and its models are checked before jax starts
    specs = [s.strip() for s in args.slices.split(",") if s.strip()]
    if not specs:
        raise ServingError(f"--slices {args.slices!r} names no slice; e.g. v5e:4x4,v6e:2x4")
    use_topology_dir(args)
    slices = select_attention_kernel(args, [parse_slice_spec(s) for s in specs])
    for s in slices:
        prices.price(s.chip.generation)  # a slice without a price fails now
    check_slices(slices)
    say = progress_printer(quiet=args.quiet)
    report, text, data = serve(args, slices, load, prices, settings_range,
                               progress=say, plan_options=fan_out_options(args))  # fmt: skip
    if args.plot:
        from aoizora.serving.plots import write_cdf_plot

        say(f"wrote {write_cdf_plot(report, args.slo_p99, args.plot)}")
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        sys.stdout.write(text)
    return 0 if report.cheapest is not None else 1
