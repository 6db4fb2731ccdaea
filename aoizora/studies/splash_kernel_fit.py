"""The splash kernel's model (:mod:`sim.splash_kernel`) fitted to tile sweeps, and judged
on the half it was not fitted on.

The measured cases (``aoizora measure --kernels tile`` and
``validation/v5e/splash_sweep/measure.py``: a shape, a tile, the kernel's own seconds or
its scoped-VMEM error) are split once by :data:`SPLIT_SEED` (:func:`split`): every
distinct (heads, lengths, tile) goes to the fit half or the held-out half, whatever file
it came from, so a tile measured twice stays on one side. :func:`fit_time` fits, on the
fit half only, the fixed cost of a grid step, of a q block and of a q row, and the MXU
efficiency of every body shape ``(block_q, block_kv_compute)`` the fit half holds:
weighted least squares on the relative error (numpy's ``lstsq``) of

    t = lead * ceil(Sq/bq) * (ceil(Skv/bkv) * (step_s + bkv/bkvc * body) + q_block_s
        + q_row_s * bq),   body = 2 * bq * bkvc * (d + dv) / (peak * efficiency)

with the shared terms held at or above 0 (a negative one is set to 0 and the rest
refitted). A body shape only the held-out half has is priced as the model prices any
unmeasured body: interpolated between the fitted ones. :func:`report` gives both halves'
errors and, per held-out shape, whether the model's best tile is the best measured one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from aoizora.stage1.tiles import plannable
from aoizora.studies.tile_fit import TileCase
from sim.splash_kernel import SplashKernel, Tile

__all__ = ["SPLIT_SEED", "KernelReport", "fit_time", "report", "split"]

# The seed of the one split of the measured tiles into a fit half and a held-out half.
SPLIT_SEED = 55
_D = 128  # Wan's head and value dims: every swept kernel's


def _key(case: TileCase) -> tuple[int, int, int, Tile]:
    return case.heads, case.q_length, case.kv_length, case.tile


def split(
    cases: Sequence[TileCase], *, seed: int = SPLIT_SEED
) -> tuple[tuple[TileCase, ...], tuple[TileCase, ...]]:
    """(fit half, held-out half): the distinct (heads, lengths, tile) keys shuffled by
    ``seed``, every other one held out; a case goes where its key went.

    >>> a = TileCase(12, 4096, 4096, (512, 512, 512), 1e-3)
    >>> b = TileCase(12, 4096, 4096, (512, 1024, 512), 9e-4)
    >>> fit, held = split([a, b, a])
    >>> len(fit) + len(held), {len(fit), len(held)} == {1, 2}
    (3, True)
    """
    keys = sorted({_key(c) for c in cases})
    random.Random(seed).shuffle(keys)
    held = set(keys[1::2])
    return (tuple(c for c in cases if _key(c) not in held),
            tuple(c for c in cases if _key(c) in held))  # fmt: skip


def _row(case: TileCase, bodies: list[tuple[int, int]], peak: float) -> list[float]:
    bq, bkv, bkvc = case.tile
    q_blocks = case.heads * math.ceil(case.q_length / bq)
    steps = q_blocks * math.ceil(case.kv_length / bkv)
    at_peak = steps * (bkv // bkvc) * 2.0 * bq * bkvc * 2 * _D / peak
    return [steps, q_blocks, q_blocks * bq] + [at_peak if (bq, bkvc) == b else 0.0 for b in bodies]


def fit_time(
    cases: Sequence[TileCase], base: SplashKernel, *, peak_flops_per_s: float
) -> SplashKernel:
    """``base`` with its time terms fitted to ``cases``' timed kernels (module docstring);
    its VMEM terms and chip values are kept."""
    timed = [c for c in cases if not c.error and math.isfinite(c.kernel_s)]
    bodies = sorted({(c.tile[0], c.tile[2]) for c in timed})
    x = np.array([_row(c, bodies, peak_flops_per_s) for c in timed])
    y = np.array([c.kernel_s for c in timed])
    w = 1.0 / y
    free = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        sol, *_ = np.linalg.lstsq(x[:, free] * w[:, None], y * w, rcond=None)
        coef[free] = sol
        negative = [i for i in free[:3] if coef[i] < 0]
        if not negative:
            break
        free = [i for i in free if i not in negative]
    body = tuple((bq, bkvc, round(1.0 / float(v), 4)) for (bq, bkvc), v
                 in zip(bodies, coef[3:], strict=True) if v > 0)  # fmt: skip
    return replace(
        base, body=body, step_s=float(f"{coef[0]:.4e}"), q_block_s=float(f"{coef[1]:.4e}"),
        q_row_s=float(f"{coef[2]:.4e}"),
    )  # fmt: skip


@dataclass(frozen=True)
class KernelReport:
    """The model on a set of cases: each timed case's relative error, and per shape the
    model's best tile, the best measured one and how much slower the model's runs."""

    errors: tuple[tuple[TileCase, float], ...]
    picks: tuple[tuple[tuple[int, int, int], Tile, Tile, float], ...]

    @property
    def mape(self) -> float:
        return float(np.mean([abs(e) for _, e in self.errors])) if self.errors else math.nan

    @property
    def worst(self) -> float:
        return max((abs(e) for _, e in self.errors), default=math.nan)


def report(
    cases: Sequence[TileCase], kernel: SplashKernel, *, peak_flops_per_s: float,
    hbm_bandwidth_bytes_per_s: float,
) -> KernelReport:  # fmt: skip
    """:class:`KernelReport` of ``kernel`` on ``cases``: the errors of every timed case,
    the picks among the :func:`plannable` tiles of each shape."""

    def model_s(c: TileCase) -> float:
        return kernel.call_s(c.heads, c.q_length, c.kv_length, _D, _D, c.tile,
                             peak_flops_per_s, hbm_bandwidth_bytes_per_s)  # fmt: skip

    timed = [c for c in cases if not c.error and math.isfinite(c.kernel_s)]
    errors = tuple((c, model_s(c) / c.kernel_s - 1.0) for c in timed)
    picks = []
    for shape in sorted({c.shape for c in timed}):
        mine = [c for c in timed if c.shape == shape and plannable(c.tile)]
        if not mine:
            continue
        best = min(mine, key=lambda c: (c.kernel_s, c.tile))
        chosen = min(mine, key=lambda c: (model_s(c), c.tile))
        picks.append((shape, chosen.tile, best.tile, chosen.kernel_s / best.kernel_s - 1.0))
    return KernelReport(errors, tuple(picks))
