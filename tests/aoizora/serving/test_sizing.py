"""The sizing question on hand-made slices (no planner): replica counts, the objective,
the cheapest option, unstable rates, batching, the JSON names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from aoizora.serving.prices import load_prices
from aoizora.serving.report import render_sizing, sizing_json
from aoizora.serving.requests import RequestKind
from aoizora.serving.service import KindService, SliceService
from aoizora.serving.sizing import Load, SizingSettings, size_deployment
from aoizora.serving.theory import replicas_needed
from aoizora.workloads.clip import Clip

CLIP = Clip(1280, 720, 81)
KIND = RequestKind("wan2.1-14b", CLIP, 50)


def _slice(spec: str, gen: str, chips: int, step_s: float, batch_step_s: float | None = None
           ) -> SliceService:  # fmt: skip
    ks = KindService(text_encoder_s=20.0, step_s=step_s, vae_decode_s=2.0,
                     batch_step_s=batch_step_s)  # fmt: skip
    return SliceService(spec, chips, gen, {("wan2.1-14b", CLIP): ks})


FAST = _slice("v6e:2x4", "v6e", 8, 4.0)  # 222 s a clip
SLOW = _slice("v5e:4x4", "v5e", 16, 6.0)  # 322 s a clip
RATE = 1 / 60
QUICK = {"replications": 4, "requests": 600, "warmup": 60, "seed": 1}


def test_counts_run_from_the_fewest_stable_to_the_first_meeting_the_objective() -> None:
    st = SizingSettings(slo_p99_s=400.0, **QUICK)
    report = size_deployment([FAST], Load(RATE, KIND), st, load_prices())
    counts = [o.replicas for o in report.options]
    need = replicas_needed(rate_per_s=RATE, service_s=222.0)
    assert need == 4 and counts[0] == need and counts == list(range(need, need + len(counts)))
    assert [o.meets_slo for o in report.options] == [False] * (len(counts) - 1) + [True]
    # More replicas: less utilisation, no longer p99, higher price per hour.
    p99 = [o.mean("p99_s") for o in report.options]
    assert all(b <= a for a, b in zip(p99, p99[1:], strict=False))
    assert report.options[0].utilisation == pytest.approx(RATE * 222.0 / 4, rel=0.05)
    # Meeting the objective means the whole p99 interval is within it.
    last = report.options[-1]
    assert last.stats is not None and last.stats["p99_s"].interval[1] <= 400.0
    assert report.cheapest is last


def test_the_cheapest_option_is_the_lowest_cost_per_clip_meeting_the_objective() -> None:
    prices = load_prices()
    st = SizingSettings(slo_p99_s=600.0, replicas=(5, 8), **QUICK)
    report = size_deployment([FAST, SLOW], Load(RATE, KIND), st, prices)
    meeting = [o for o in report.options if o.meets_slo]
    assert report.cheapest is not None and meeting
    assert report.cheapest.cost_per_clip == min(o.cost_per_clip for o in meeting)
    # A clip costs the replicas' hourly price over the clips an hour: about the rate's.
    c = report.cheapest
    per_h = prices.slice_usd_per_hour(c.slice_spec.split(":")[0], c.num_chips) * c.replicas
    assert c.cost_per_clip == pytest.approx(per_h / (RATE * 3600), rel=0.1)
    data = sizing_json(report, st, prices, {"v6e:2x4": {"generation": "v6e"},
                                            "v5e:4x4": {"generation": "v5e"}})  # fmt: skip
    keys = {"slice", "replicas", "p50_s", "p95_s", "p99_s", "throughput_per_h",
            "utilisation", "cost_per_clip", "meets_slo"}  # fmt: skip
    assert all(keys <= set(o) for o in data["options"]) and data["cheapest"] in data["options"]
    assert "<- cheapest" in render_sizing(report, st, KIND.label)


def test_unstable_counts_say_how_many_replicas_the_rate_needs() -> None:
    st = SizingSettings(slo_p99_s=900.0, replicas=(1, 5), **QUICK)
    report = size_deployment([FAST], Load(RATE, KIND), st, load_prices())
    unstable = [o for o in report.options if o.stats is None]
    assert [o.replicas for o in unstable] == [1, 2, 3]
    assert all("needs at least 4 replicas" in o.note and o.utilisation >= 1 for o in unstable)
    assert not any(o.meets_slo for o in unstable)
    assert "unstable" in render_sizing(report, st, KIND.label)


def test_an_objective_below_one_clip_cannot_be_met() -> None:
    st = SizingSettings(slo_p99_s=100.0, **QUICK)
    report = size_deployment([FAST], Load(RATE, KIND), st, load_prices())
    assert report.cheapest is None and len(report.options) == 1
    assert any("one clip alone takes 222.0 s" in n for n in report.notes)


def test_batching_where_two_clips_are_faster_per_clip() -> None:
    batched = _slice("v6e:2x4", "v6e", 8, 4.0, batch_step_s=6.0)  # 2 clips: 344 s, 172 s each
    assert batched.batches(KIND) and not _slice("v6e:2x4", "v6e", 8, 4.0, 8.5).batches(KIND)
    rate = 1.3 / 60  # 4.8 busy replicas one at a time, 3.7 in pairs
    on = SizingSettings(slo_p99_s=2000.0, replicas=(4, 4), batch=True, **QUICK)
    off = SizingSettings(slo_p99_s=2000.0, replicas=(4, 4), batch=False, **QUICK)
    with_batches = size_deployment([batched], Load(rate, KIND), on, load_prices())
    alone = size_deployment([batched], Load(rate, KIND), off, load_prices())
    # Four replicas cannot keep up one clip at a time but can in pairs.
    assert alone.options[0].stats is None and "needs at least 5" in alone.options[0].note
    o = with_batches.options[0]
    assert o.stats is not None and o.utilisation < 1 and math.isfinite(o.mean("p99_s") or 0)
    assert o.mean("throughput_per_h") == pytest.approx(rate * 3600, rel=0.1)


def test_a_trace_is_replayed_once(tmp_path: Path) -> None:
    from aoizora.serving.requests import Request

    trace = tuple(Request(i, 120.0 * i, KIND) for i in range(50))
    st = SizingSettings(slo_p99_s=300.0, replicas=(2, 2), **QUICK)
    report = size_deployment([FAST], Load(1 / 120, trace=trace), st, load_prices())
    o = report.options[0]
    assert o.stats is not None and o.stats["p99_s"].half_width is None
    # Nobody waits: the two replicas alternate, each free again before its next request.
    assert o.mean("p50_s") == pytest.approx(222.0) and o.mean("wait_probability") == 0
