"""How long a jitted call takes beyond its device time on this chip.

One call timed to ``jax.block_until_ready`` (as ``aoizora measure`` times a step) against
the same call issued back to back with one wait at the end: the difference is the host's
launch and wait of one call (``program_launch_s`` in topologies/v5e.toml).

    python validation/v5e/launch.py launch.json     # on a TPU VM, jax installed

validation/v5e/launch.json holds two runs (2026-12-06): the first stopped at the 512 MB
output, 40 of which were in flight at once (out of HBM); pipelined outputs are now capped
at 2 GiB in flight, and the second run is complete.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

IN_FLIGHT_BYTES = 2 << 30


def single_s(f: Callable[..., Any], args: Sequence[Any], n: int) -> tuple[float, float]:
    """(median, least) seconds of ``n`` calls, each timed to its outputs' readiness."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(np.min(times))


def pipelined_s(f: Callable[..., Any], args: Sequence[Any], n: int) -> float:
    """Seconds a call of ``n`` issued back to back with one wait (best of 3)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready([f(*args) for _ in range(n)])
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def case(
    name: str, f: Callable[..., Any], args: Sequence[Any], *, n: int = 40, out_bytes: int = 0
) -> dict[str, Any]:
    jax.block_until_ready(f(*args))  # compile, then one warm call
    jax.block_until_ready(f(*args))
    median, least = single_s(f, args, n)
    piped = pipelined_s(f, args, max(2, min(n, IN_FLIGHT_BYTES // max(out_bytes, 1))))
    row = {
        "case": name,
        "single_median_s": median,
        "single_min_s": least,
        "pipelined_s": piped,
        "extra_s": median - piped,
    }
    print(json.dumps(row), flush=True)
    return row


def chain(kernels: int) -> Callable[..., Any]:
    """A program of ``kernels`` small kernels that XLA cannot fuse into one."""

    def f(x: jax.Array) -> jax.Array:
        for _ in range(kernels):
            x = jax.lax.optimization_barrier(jnp.sin(x) * 1.0001)
        return x

    return jax.jit(f)


def main(out: str) -> None:
    rows = []
    small = jnp.ones((256,), jnp.float32)
    for k in (1, 8, 32, 128):
        xs = [small + i for i in range(k)]
        rows.append(case(f"args{k}", jax.jit(lambda *a: sum(a)), xs))
    for mb in (0, 16, 128, 512):
        n = max(256, mb * 2**20 // 4)
        fill = jax.jit(lambda x, n=n: jnp.broadcast_to(x[:1], (n,)) + 1.0)
        rows.append(case(f"out{mb}MB", fill, [small], out_bytes=4 * n))
    for k in (1, 10, 100, 1000):
        rows.append(case(f"kernels{k}", chain(k), [small], n=20))
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
