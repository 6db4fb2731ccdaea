"""The serving simulator against queueing theory's closed forms, within the confidence
interval of independent replications; and what a run is a function of."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from aoizora.errors import ServingError
from aoizora.serving.requests import Request, RequestKind, poisson_arrivals
from aoizora.serving.simulator import simulate
from aoizora.serving.stats import Estimate, RunStats, estimate, run_stats
from aoizora.serving.theory import (
    erlang_c,
    md1_mean_wait_s,
    mmc_mean_wait_s,
    replicas_needed,
    utilisation,
)
from aoizora.workloads.clip import Clip

KIND = RequestKind("wan2.1-14b", Clip(1280, 720, 81), 50)
REPS = 12
COUNT = 4000
WARMUP = 400


def _replicate(
    rate_per_s: float,
    servers: int,
    service: Callable[[np.random.Generator], Callable[[Sequence[Request]], float]],
    seed: int,
) -> list[RunStats]:
    out = []
    for rep in range(REPS):
        reqs = poisson_arrivals(
            rate_per_s=rate_per_s, count=COUNT, kind=KIND, rng=np.random.default_rng([seed, rep])
        )
        run = simulate(
            reqs, replicas=servers, service=service(np.random.default_rng([seed, rep, 1]))
        )
        out.append(run_stats(run, warmup=WARMUP))
    return out


def _ci(runs: list[RunStats], name: str) -> Estimate:
    # 99 %: with a dozen checks at 95 % one would miss by chance one time in two.
    return estimate([getattr(r, name) for r in runs], level=0.99)


def _deterministic(seconds: float) -> Callable[[np.random.Generator], Callable[..., float]]:
    return lambda _rng: lambda _batch: seconds


def _exponential(mean_s: float) -> Callable[[np.random.Generator], Callable[..., float]]:
    return lambda rng: lambda _batch: float(rng.exponential(mean_s))


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_is_pollaczek_khinchine(rho: float) -> None:
    """One replica, deterministic service (a clip of 300 s), Poisson arrivals."""
    service_s = 300.0
    rate = rho / service_s
    runs = _replicate(rate, 1, _deterministic(service_s), seed=11)
    wait = _ci(runs, "mean_wait_s")
    assert wait.contains(md1_mean_wait_s(rate_per_s=rate, service_s=service_s)), wait
    assert _ci(runs, "utilisation").contains(rho)
    # Latency = wait + service exactly, so the median sits one service above the waits.
    assert min(r.p50_s for r in runs) >= service_s
    # The CI is informative: a model off by 10 % would be outside it.
    assert not wait.contains(1.1 * md1_mean_wait_s(rate_per_s=rate, service_s=service_s))


@pytest.mark.parametrize(("servers", "rho"), [(2, 0.6), (4, 0.85)])
def test_mmc_wait_probability_and_mean_wait_are_erlang_c(servers: int, rho: float) -> None:
    """c replicas, exponential service: P(wait) = C(c, a) and W_q = C / (c mu - lambda)."""
    mean_s = 200.0
    rate = rho * servers / mean_s
    runs = _replicate(rate, servers, _exponential(mean_s), seed=23)
    p_wait = _ci(runs, "wait_probability")
    assert p_wait.contains(erlang_c(servers=servers, offered=rate * mean_s)), p_wait
    w_q = mmc_mean_wait_s(rate_per_s=rate, service_s=mean_s, servers=servers)
    assert _ci(runs, "mean_wait_s").contains(w_q)
    util = _ci(runs, "utilisation")
    assert util.contains(utilisation(rate_per_s=rate, service_s=mean_s, servers=servers))
    # The time-average queue (measured along the clock) is Little's L_q = lambda W_q.
    assert _ci(runs, "mean_queue_length").contains(rate * w_q)


def test_throughput_is_the_arrival_rate_when_stable() -> None:
    rate = 0.9 / 100.0
    runs = _replicate(rate, 1, _deterministic(100.0), seed=5)
    assert _ci(runs, "throughput_per_h").contains(rate * 3600)


def test_same_seed_same_run_and_replications_are_independent() -> None:
    def one(seed: int, rep: int) -> tuple[float, ...]:
        reqs = poisson_arrivals(rate_per_s=0.01, count=500, kind=KIND,
                                rng=np.random.default_rng([seed, rep]))  # fmt: skip
        run = simulate(reqs, replicas=2, service=lambda b: 150.0)
        return tuple(s.finish_s for s in run.served)

    assert one(3, 0) == one(3, 0)
    assert one(3, 0) != one(3, 1) and one(3, 0) != one(4, 0)


def test_batching_takes_only_waiting_requests_of_the_same_kind() -> None:
    other = RequestKind("wan2.1-14b", Clip(832, 480, 81), 50)
    reqs = (Request(0, 0.0, KIND), Request(1, 1.0, other), Request(2, 2.0, KIND),
            Request(3, 3.0, KIND))  # fmt: skip
    run = simulate(reqs, replicas=1, service=lambda b: 10.0 * len(b), batch_size=2)
    served = {s.request.id: s for s in run.served}
    assert served[0].batch == 1 and served[0].finish_s == 10.0
    # At 10 s request 1 (other kind) is oldest; it goes alone, then 2 and 3 together.
    assert served[1].start_s == 10.0 and served[1].batch == 1
    assert served[2].start_s == served[3].start_s == 20.0 and served[2].batch == 2
    # batch_of can forbid it: then strictly one at a time, first come first served.
    run = simulate(reqs, replicas=1, service=lambda b: 10.0 * len(b), batch_size=2,
                   batch_of=lambda kind: False)  # fmt: skip
    assert [s.batch for s in run.served] == [1, 1, 1, 1]
    assert [s.start_s for s in run.served] == [0.0, 10.0, 20.0, 30.0]


def test_replicas_needed_and_bad_input() -> None:
    assert replicas_needed(rate_per_s=2 / 60, service_s=412.0) == 14  # 13.7 busy on average
    assert utilisation(rate_per_s=2 / 60, service_s=412.0, servers=13) > 1
    with pytest.raises(ServingError, match=r"utilisation 1\.200 >= 1"):
        md1_mean_wait_s(rate_per_s=1.2, service_s=1.0)
    with pytest.raises(ServingError, match="replicas 0"):
        simulate((Request(0, 0.0, KIND),), replicas=0, service=lambda b: 1.0)
    with pytest.raises(ServingError, match="arrival order"):
        simulate((Request(0, 5.0, KIND), Request(1, 1.0, KIND)), replicas=1,
                 service=lambda b: 1.0)  # fmt: skip
