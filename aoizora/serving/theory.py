"""Closed forms of queueing theory the serving simulator is held to (tests) and sizes with.

* utilisation ``rho = lambda * E[S] / c`` (``c`` servers, arrival rate ``lambda``); a
  queue is stable only when ``rho < 1``;
* M/D/1 mean wait in queue, Pollaczek-Khinchine with a deterministic service ``S``:
  ``W_q = rho * S / (2 (1 - rho))`` (Kleinrock, *Queueing Systems* vol. 1, 1975, eq.
  5.73 with ``E[S^2] = S^2``);
* M/M/c: the probability an arrival waits, Erlang C with offered load ``a = lambda / mu``,
  ``C(c, a) = (a^c / c!) (c / (c - a)) / (sum_{k<c} a^k / k! + (a^c / c!) (c / (c - a)))``,
  and the mean wait ``W_q = C(c, a) / (c mu - lambda)`` (Kleinrock, eqs. 3.40-3.43).

    >>> round(md1_mean_wait_s(rate_per_s=0.5, service_s=1.0), 3)   # rho = 0.5
    0.5
    >>> round(erlang_c(servers=2, offered=1.0), 4)                  # M/M/2 at rho = 0.5
    0.3333
    >>> replicas_needed(rate_per_s=1 / 60, service_s=300.0)          # 5 busy on average
    6
"""

from __future__ import annotations

import math

from aoizora.errors import ServingError

__all__ = [
    "erlang_c",
    "md1_mean_wait_s",
    "mmc_mean_wait_s",
    "replicas_needed",
    "utilisation",
]


def utilisation(*, rate_per_s: float, service_s: float, servers: int) -> float:
    """``rate x mean service time / servers``: the busy fraction of each server."""
    return rate_per_s * service_s / servers


def replicas_needed(*, rate_per_s: float, service_s: float) -> int:
    """The fewest servers with utilisation below 1 (the queue stays finite)."""
    return math.floor(rate_per_s * service_s) + 1


def _stable(rho: float) -> None:
    if not rho < 1:
        raise ServingError(f"utilisation {rho:.3f} >= 1: the queue grows without bound")


def md1_mean_wait_s(*, rate_per_s: float, service_s: float) -> float:
    """M/D/1 mean time in queue (Pollaczek-Khinchine)."""
    rho = utilisation(rate_per_s=rate_per_s, service_s=service_s, servers=1)
    _stable(rho)
    return rho * service_s / (2 * (1 - rho))


def erlang_c(*, servers: int, offered: float) -> float:
    """Probability that an arrival to M/M/``servers`` with offered load ``offered``
    (= lambda / mu, in Erlangs) waits. Summed in a running term, no factorials."""
    _stable(offered / servers)
    term, total = 1.0, 1.0  # a^k / k! for k = 0
    for k in range(1, servers):
        term *= offered / k
        total += term
    last = term * offered / servers * (servers / (servers - offered))  # a^c / c! * c/(c-a)
    return last / (total + last)


def mmc_mean_wait_s(*, rate_per_s: float, service_s: float, servers: int) -> float:
    """M/M/c mean time in queue: ``C(c, a) / (c mu - lambda)``."""
    mu = 1.0 / service_s
    c = erlang_c(servers=servers, offered=rate_per_s / mu)
    return c / (servers * mu - rate_per_s)
