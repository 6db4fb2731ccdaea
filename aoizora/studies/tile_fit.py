"""The splash tile table of a generation, fitted to ``aoizora measure --kernels tile``.

A call's time at a tile is ``grid steps * step_s[tile] + q blocks * q_block_s[block_q]``
(:mod:`sim.splash_tiles`): one cost per grid step of each tile, one per q block of each
``block_q`` (held at or above 0: a block's set-up costs no negative time), least squares
on the relative error over every timed case (numpy's ``lstsq``). The kernel's time is
its own op in the profile; the pads and slices around it are priced as the step's other
ops. A tile that failed to compile at some shape with the chip's scoped-VMEM error goes
into ``failed``.

:func:`held_out` re-fits without each shape in turn and reports, for the left-out shape,
the tile the fit picks, the best measured tile and both gains over 512: the check that
the table plans tiles it never saw measured at that shape.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import MeasureError
from sim.splash_tiles import BASE_TILE, SplashTiles

__all__ = ["TileCase", "TileFit", "TileHeldOut", "fit_tiles", "held_out", "read_tile_cases"]

# What the chip's compiler says when a kernel's blocks do not fit its scoped VMEM.
_VMEM_ERRORS = ("CompileTimeScopedVmemOom", "scoped vmem", "Scoped allocation")


@dataclass(frozen=True)
class TileCase:
    """One measured (shape, tile): heads, lengths, the tile, the kernel's seconds (nan
    when it failed) and its error."""

    heads: int
    q_length: int
    kv_length: int
    tile: tuple[int, int, int]
    kernel_s: float
    error: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.heads, self.q_length, self.kv_length


def read_tile_cases(path: str | Path) -> tuple[dict[str, Any], tuple[TileCase, ...]]:
    """(provenance, cases) of a kernels file's ``tile`` kernels, failed ones included."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        cases = []
        for k in data["kernels"]:
            if k["kind"] != "tile":
                continue
            p, ops = k["params"], k.get("ops_s") or {}
            own = sum(float(v) for n, v in ops.items() if "splash" in n)
            cases.append(TileCase(
                int(p["heads"]), int(p["q_length"]), int(p["kv_length"]),
                (int(p["block_q"]), int(p["block_kv"]), int(p["block_kv_compute"])),
                math.nan if k.get("error") else own or float(k["median_s"]),
                str(k.get("error") or ""),
            ))  # fmt: skip
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise MeasureError(
            f"{path}: not a tile sweep of aoizora measure --kernels tile ({type(exc).__name__}: "
            f"{exc}); make one on a TPU with aoizora measure --kernels tile --out tiles.json"
        ) from exc
    if not any(c.error == "" for c in cases):
        raise MeasureError(f"{path}: no timed tile kernel; measure one with --kernels tile")
    return dict(data.get("provenance", {})), tuple(cases)


def _design(cases: list[TileCase], tiles: list[tuple[int, int, int]], bqs: list[int]) -> Any:
    x = np.zeros((len(cases), len(tiles) + len(bqs)))
    for i, c in enumerate(cases):
        bq, bkv, _ = c.tile
        q_blocks = c.heads * math.ceil(c.q_length / bq)
        x[i, tiles.index(c.tile)] = q_blocks * math.ceil(c.kv_length / bkv)
        if bq in bqs:
            x[i, len(tiles) + bqs.index(bq)] = q_blocks
    return x


def _table(cases: tuple[TileCase, ...], source: str) -> SplashTiles:
    timed = [c for c in cases if not c.error]
    tiles = sorted({c.tile for c in timed})
    bqs = sorted({c.tile[0] for c in timed})
    y = np.array([c.kernel_s for c in timed])
    while True:
        x = _design(timed, tiles, bqs) / y[:, None]
        coef = np.linalg.lstsq(x, np.ones(len(timed)), rcond=None)[0]
        negative = [b for b, v in zip(bqs, coef[len(tiles) :], strict=True) if v < 0]
        if not negative:
            break
        bqs = [b for b in bqs if b != negative[0]]  # that q block's cost held at 0
    q_block = dict(zip(bqs, coef[len(tiles) :], strict=True))
    failed = sorted({c.tile for c in cases if any(e in c.error for e in _VMEM_ERRORS)})
    return SplashTiles(
        "splash",
        tuple((*t, float(v)) for t, v in zip(tiles, coef, strict=False)),
        tuple((b, float(q_block.get(b, 0.0))) for b in sorted({t[0] for t in tiles})),
        tuple(failed), source,
    )  # fmt: skip


@dataclass(frozen=True)
class TileFit:
    """The fitted table and (case, predicted seconds) for every timed case."""

    tiles: SplashTiles
    predicted: tuple[tuple[TileCase, float], ...]

    def toml(self) -> str:
        """The ``[compute.splash_tiles]`` table for the generation's topology file."""
        t = self.tiles
        rows = ", ".join(f"[{a}, {b}, {c}, {s:.4g}]" for a, b, c, s in t.compiled)
        qb = ", ".join(f"[{a}, {s:.4g}]" for a, s in t.q_block)
        bad = ", ".join(f"[{a}, {b}, {c}]" for a, b, c in t.failed)
        gain = "" if t.step_gain == 1.0 else f"step_gain = {t.step_gain}\n"
        return (
            f'[compute.splash_tiles]\nkernel = "splash"\n{gain}compiled = [{rows}]\n'
            f"q_block = [{qb}]\nfailed = [{bad}]\nsource = {json.dumps(t.source)}\n"
        )


def _kernel_s(table: SplashTiles, case: TileCase) -> float:
    got = table.kernel_s(case.heads, case.q_length, case.kv_length, case.tile)
    return math.nan if got is None else got


def fit_tiles(cases: tuple[TileCase, ...], *, source: str) -> TileFit:
    """Fit the tile table to ``cases`` (see the module docstring)."""
    table = _table(cases, source)
    return TileFit(table, tuple((c, _kernel_s(table, c)) for c in cases if not c.error))


@dataclass(frozen=True)
class TileHeldOut:
    """One shape left out of the fit: the tile picked, the best measured, the gains."""

    shape: tuple[int, int, int]
    picked: tuple[int, int, int]
    best: tuple[int, int, int]
    picked_over_best: float
    predicted_gain: float
    measured_gain: float
    mape: float


def held_out(cases: tuple[TileCase, ...]) -> tuple[TileHeldOut, ...]:
    """Leave each shape out, fit on the rest, and judge the left-out shape's pick."""
    out = []
    for shape in sorted({c.shape for c in cases}):
        test = [c for c in cases if c.shape == shape and not c.error]
        table = fit_tiles(tuple(c for c in cases if c.shape != shape), source="").tiles
        plannable = set(table.plannable())
        pred = {c.tile: _kernel_s(table, c) for c in test if c.tile in plannable}
        meas = {c.tile: c.kernel_s for c in test}
        pick = min(pred, key=lambda t: (pred[t], t))
        best = min(meas, key=lambda t: (meas[t], t))
        errs = [abs(pred[t] / meas[t] - 1) for t in pred]
        out.append(TileHeldOut(
            shape, pick, best, meas[pick] / meas[best], 1 - pred[pick] / pred[BASE_TILE],
            1 - meas[pick] / meas[BASE_TILE], sum(errs) / len(errs),
        ))  # fmt: skip
    return tuple(out)
