"""``aoizora serve`` after its arguments are checked: the load, the prices, the plans of
every slice, the sizing and its table and JSON (:mod:`aoizora.commands.serve` parses)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aoizora.errors import ServingError
from aoizora.request.text_encoder import host_text_encoder
from aoizora.serving.prices import PriceTable, load_prices
from aoizora.serving.rates import format_rate, parse_rate
from aoizora.serving.requests import RequestKind, read_trace, trace_rate_per_s
from aoizora.serving.sizing import Load, SizingReport, SizingSettings
from aoizora.workloads.wan_config import WAN_CONFIGS, model_clip
from sim.topology import Slice

__all__ = ["load_of", "prices_of", "serve"]


def _kind_of(default_steps: int | None) -> Callable[[str, str, int | None, int | None],
                                                    RequestKind]:  # fmt: skip
    def kind_of(model: str, resolution: str, frames: int | None, steps: int | None) -> RequestKind:
        clip = model_clip(model, resolution, frames=frames)  # unknown models fail here
        n = steps or default_steps or WAN_CONFIGS[model].sample_steps
        if n < 1:
            raise ServingError(f"steps {n}: must be a positive number of steps, e.g. 50")
        return RequestKind(model, clip, n)

    return kind_of


def load_of(args: argparse.Namespace) -> Load:
    """Poisson at ``--rate`` of ``--model`` clips, or the requests of ``--trace``."""
    kind_of = _kind_of(args.steps)
    if args.trace is not None:
        trace = read_trace(args.trace, kind_of=kind_of, default_model=args.model,
                           default_resolution=args.resolution)  # fmt: skip
        return Load(rate_per_s=trace_rate_per_s(trace), trace=trace)
    kind = kind_of(args.model, args.resolution or "480p", args.frames, None)
    return Load(rate_per_s=parse_rate(args.rate), kind=kind)


def prices_of(args: argparse.Namespace) -> PriceTable:
    return load_prices(args.prices)


def _unservable(report: SizingReport) -> None:
    """Refuse a rate every tried replica count leaves unstable, naming what each slice needs."""
    if any(o.stats is not None for o in report.options):
        return
    worst: dict[str, Any] = {}
    for o in report.options:
        worst[o.slice_spec] = o  # the largest count tried, last
    needs = "; ".join(f"{o.slice_spec}: {o.note} (utilisation {o.utilisation:.2f} with "
                      f"{o.replicas})" for o in worst.values())  # fmt: skip
    raise ServingError(
        f"the rate {format_rate(report.rate_per_s)} cannot be served with the replica counts "
        f"tried: {needs}; raise --replicas or lower --rate"
    )


def serve(
    args: argparse.Namespace,
    slices: Sequence[Slice],
    load: Load,
    prices: PriceTable,
    replicas: tuple[int, int] | None,
    *,
    progress: Callable[[str], None],
    plan_options: Mapping[str, Any],
) -> tuple[SizingReport, str, dict[str, Any]]:
    """Plan every slice, size the deployment; the report, its table and its JSON."""
    from aoizora.serving.plans import plan_kinds, slice_service
    from aoizora.serving.report import render_sizing, sizing_json
    from aoizora.serving.sizing import size_deployment

    kinds = [r.kind for r in load.trace] if load.trace else [load.kind]
    te = host_text_encoder(args.text_encoder_s)
    services, plans = [], {}
    for s in slices:
        got = plan_kinds(
            [k for k in kinds if k is not None], s, text_encoder=te, vae_chunk=args.vae_chunk,
            vae_compile=args.vae_compile, batch=args.batch, progress=progress,
            cache_dir=args.cache_dir, top_k=args.top_k, max_placements=args.max_placements,
            **plan_options,
        )  # fmt: skip
        service, summary = slice_service(s, got)
        services.append(service)
        plans[s.spec] = summary
    settings = SizingSettings(
        slo_p99_s=args.slo_p99, replicas=replicas, replications=args.replications,
        requests=args.requests, warmup=max(1, args.requests // 10), seed=args.seed,
        batch=args.batch,
    )  # fmt: skip
    report = size_deployment(services, load, settings, prices, progress=progress)
    _unservable(report)
    what = load.kind.label if load.kind is not None else f"trace {args.trace}"
    return report, render_sizing(report, settings, what), sizing_json(report, settings, prices,
                                                                      plans)  # fmt: skip
