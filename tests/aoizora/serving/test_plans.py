"""What a slice's replicas take per request kind, from the planner's answers (a stand-in
planner here: the real one is exercised by tests/aoizora/test_clip_cli.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from aoizora.errors import PlanError
from aoizora.request.text_encoder import host_text_encoder
from aoizora.serving.plans import plan_kinds, slice_service
from aoizora.serving.requests import Request, RequestKind
from aoizora.workloads.base import Workload
from aoizora.workloads.clip import Clip
from sim.topology import Slice, load_slice

CLIP = Clip(64, 64, 9)
KIND = RequestKind("wan-tiny", CLIP, 50)


class FakePlanner:
    """Answers run_plan with set step times per workload name; records what it was asked."""

    def __init__(self, times: dict[str, float], refuse: tuple[str, ...] = ()) -> None:
        self.times, self.refuse = times, refuse
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, workload: Workload, slice_: Slice, **options: Any) -> Any:
        self.asked.append((workload.name, options))
        if workload.name in self.refuse:
            raise PlanError(f"{workload.name} does not fit in HBM")
        winner = SimpleNamespace(candidate=SimpleNamespace(id=f"{workload.name}-winner"))
        return SimpleNamespace(workload=workload, slice_=slice_, winner=winner,
                               winner_q2_s=self.times[workload.name])  # fmt: skip


class FakeRanker:
    """Answers rank_vae with a set decode time; records what it was asked."""

    def __init__(self, decode_s: float) -> None:
        self.decode_s = decode_s
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, workload: Workload, slice_: Slice, **options: Any) -> Any:
        self.asked.append((workload.name, options))
        winner = SimpleNamespace(candidate=SimpleNamespace(id=f"{workload.name}-winner"))
        return SimpleNamespace(workload=workload, slice_=slice_, winner=winner,
                               decode_s=self.decode_s)  # fmt: skip


def test_a_pair_is_planned_and_batched_where_it_is_faster_per_clip() -> None:
    s = load_slice("v5e:2x2")
    fake = FakePlanner({"wan-tiny@64x64x9": 0.5, "wan-tiny@64x64x9x2": 0.8})
    vae = FakeRanker(2.0)
    got = plan_kinds([KIND, KIND], s, text_encoder=host_text_encoder(1.0), batch=True,
                     plan=fake, rank=vae, cache_dir="/c", top_k=3)  # fmt: skip
    asked = [name for name, _ in fake.asked]
    assert asked == ["wan-tiny@64x64x9", "wan-tiny@64x64x9x2"]
    # The planner's options reach every plan and the VAE's ranking; the step's top-K
    # is not the VAE's, which is not compiled unless asked.
    assert [name for name, _ in vae.asked] == ["vae-tiny@64x64x9"]
    assert all(o["cache_dir"] == "/c" for _, o in [*fake.asked, *vae.asked])
    assert [o["top_k"] for _, o in fake.asked] == [3, 3]
    assert vae.asked[0][1]["compile"] is False and "top_k" not in vae.asked[0][1]
    service, summary = slice_service(s, got)
    one = service.of(KIND)
    assert one.clip_s(50) == pytest.approx(1.0 + 50 * 0.5 + 2.0)
    pair = service.seconds([Request(0, 0.0, KIND), Request(1, 0.0, KIND)])
    assert pair == pytest.approx(2 * (1.0 + 2.0) + 50 * 0.8) and pair / 2 < one.clip_s(50)
    assert service.batches(KIND)
    (kind,) = summary["kinds"]
    assert kind["batch2_step_s"] == 0.8 and kind["vae_plan"] == "vae-tiny@64x64x9-winner"
    assert kind["clip_s"] == pytest.approx(kind["text_encoder_s"] + kind["denoise_s"]
                                           + kind["vae_decode_s"])  # fmt: skip


def test_no_pair_where_it_does_not_fit_or_is_slower() -> None:
    s = load_slice("v5e:2x2")
    times = {"wan-tiny@64x64x9": 0.5, "wan-tiny@64x64x9x2": 1.2}
    te, vae = host_text_encoder(1.0), FakeRanker(2.0)
    refused = FakePlanner(times, refuse=("wan-tiny@64x64x9x2",))
    service, _ = slice_service(s, plan_kinds([KIND], s, text_encoder=te, batch=True,
                                             plan=refused, rank=vae))  # fmt: skip
    assert service.of(KIND).batch_step_s is None and not service.batches(KIND)
    slower = FakePlanner(times)  # two clips' step takes more than two single steps
    service, _ = slice_service(s, plan_kinds([KIND], s, text_encoder=te, batch=True,
                                             plan=slower, rank=vae))  # fmt: skip
    assert service.of(KIND).batch_step_s == 1.2 and not service.batches(KIND)
