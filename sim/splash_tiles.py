"""A generation's measured splash tiles: which compile, and how fast each runs.

jax's Pallas splash kernel runs one grid step per (q block, kv block) pair and, inside
a step, ``block_kv / block_kv_compute`` softmax updates; each q block starts and ends
with its accumulators (``splash_attention_kernel.py``, ``BlockSizes``). The blocks decide
how often the kernel pays a step's fixed cost (a kv block's DMA and its loop), how wide
its MXU products are and how much of the core's scoped VMEM the blocks, their double
buffers and the f32 scores take. No closed form gives the last two, so a tile's cost is
measured on the chip (``aoizora measure --kernels tile``) and kept as seconds per grid
step of that tile and seconds per q block of its ``block_q``:

    t(call, tile) = grid steps * step_s[tile] + q blocks * q_block_s[block_q]

fitted by ``aoizora calibrate --tiles`` (aoizora/studies/tile_fit.py). The compute model
prices a call at a tile as its price at the 512 tile (fitted on whole steps,
sim/compute.py) less ``step_gain`` times the share the sweep says the tile saves,
``1 - t(call, tile) / t(call, 512)``: the sweep says which tile is faster and by how much
alone, whole steps at both tiles how much of that a step sees (``step_gain``, fitted on
measured step pairs).

``[compute.splash_tiles]`` of a topology file::

    [compute.splash_tiles]
    kernel = "splash"
    step_gain = 1.2  # optional: a tile saves this much more inside a step than alone
    compiled = [[512, 512, 512, 1.07e-06], [512, 2048, 512, 3.23e-06]]  # bq, bkv, bkvc, step_s
    q_block = [[512, 0.0], [1024, 6.5e-07]]  # block_q, q_block_s
    failed = [[2048, 2048, 2048]]  # CompileTimeScopedVmemOom on the chip
    source = "..."

A tile not measured is not planned: :meth:`SplashTiles.plannable` lists the compiled
tiles that no failed tile fits inside (a tile at least as big in every block as one
that ran out of VMEM would too). A generation without the table plans the 512 tile.

>>> t = SplashTiles("splash", ((512, 512, 512, 1e-6), (512, 2048, 512, 3e-6)),
...                 ((512, 0.0),), ((2048, 2048, 2048),), "measured")
>>> t.scale(12, 4096, 4096, (512, 2048, 512)), t.scale(12, 4096, 4096, (256, 256, 256))
(0.75, 1.0)
>>> t.fits_vmem((4096, 2048, 2048)), t.plannable()
(False, ((512, 512, 512), (512, 2048, 512)))
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import TopologyError

__all__ = ["BASE_TILE", "LANES", "SplashTiles", "parse_splash_tiles", "tile_problem"]

Tile = tuple[int, int, int]
# The tile a kernel's efficiency is fitted at (maxdiffusion's 512 blocks).
BASE_TILE: Tile = (512, 512, 512)
LANES = 128  # a TPU vector register's lanes: every splash block is a multiple of them


def tile_problem(tile: tuple[object, ...]) -> str:
    """What is wrong with ``tile`` as splash blocks, "" when nothing: three positive
    multiples of the 128 lanes, the compute block dividing the kv block (jax's
    ``BlockSizes`` rule).

    >>> tile_problem((512, 2048, 512)), tile_problem((512, 1024, 768))
    ('', 'block_kv_compute 768 must divide block_kv 1024, e.g. (512, 1024, 512)')
    """
    ints = all(isinstance(b, int) and not isinstance(b, bool) for b in tile)
    if len(tile) != 3 or not ints or any(b < LANES or b % LANES for b in tile):  # type: ignore[operator]
        return (f"give three integers (block_q, block_kv, block_kv_compute), each a "
                f"positive multiple of {LANES}, e.g. {BASE_TILE}")  # fmt: skip
    bq, bkv, bkvc = tile
    if bkv % bkvc:  # type: ignore[operator]
        half = bkv // 2 if bkv >= 2 * LANES else bkv  # type: ignore[operator]
        return f"block_kv_compute {bkvc} must divide block_kv {bkv}, e.g. {(bq, bkv, half)}"
    return ""


@dataclass(frozen=True)
class SplashTiles:
    """Measured tiles of one attention kernel: ``(block_q, block_kv, block_kv_compute,
    seconds per grid step)`` that compiled, ``(block_q, seconds per q block)``, the
    tiles that did not compile, and their source."""

    kernel: str
    compiled: tuple[tuple[int, int, int, float], ...]
    q_block: tuple[tuple[int, float], ...]
    failed: tuple[Tile, ...]
    source: str
    # What a tile saves inside a step over what it saves alone (fitted on measured steps;
    # 1.0: the sweep's saving as it is).
    step_gain: float = 1.0

    def kernel_s(self, lead: float, q_length: int, kv_length: int, tile: Tile) -> float | None:
        """The sweep's time of a call at ``tile`` (lengths padded to its blocks); None
        for a tile not measured."""
        bq, bkv, _ = tile
        step = self._step_s.get(tuple(tile))  # type: ignore[arg-type]
        if step is None:
            return None
        q_blocks = lead * math.ceil(q_length / bq)
        return q_blocks * math.ceil(kv_length / bkv) * step + q_blocks * self._q_block_s.get(
            bq, 0.0
        )

    @functools.cached_property
    def _step_s(self) -> dict[Tile, float]:
        return {(a, b, c): s for a, b, c, s in self.compiled}

    @functools.cached_property
    def _q_block_s(self) -> dict[int, float]:
        return dict(self.q_block)

    def scale(self, lead: float, q_length: int, kv_length: int, tile: Tile) -> float:
        """A call's price at ``tile`` over its price at 512: ``1 - step_gain * (1 - t(call,
        tile) / t(call, 512))`` at these lengths (1.0 when either is unmeasured, or the tile
        is the 512 one)."""
        if tuple(tile) == BASE_TILE:
            return 1.0
        t = self.kernel_s(lead, q_length, kv_length, tile)
        base = self.kernel_s(lead, q_length, kv_length, BASE_TILE)
        return 1.0 if t is None or not base else 1.0 - self.step_gain * (1.0 - t / base)

    def fits_vmem(self, tile: Tile) -> bool:
        """False when the tile is at least as big, block by block, as a tile that failed
        to compile: its blocks need at least that tile's VMEM."""
        return not any(all(a >= b for a, b in zip(tile, bad, strict=True)) for bad in self.failed)

    def plannable(self) -> tuple[Tile, ...]:
        """The tiles a plan may pick: measured to compile and within the VMEM rule."""
        return tuple((bq, bkv, bkvc) for bq, bkv, bkvc, _ in self.compiled
                     if self.fits_vmem((bq, bkv, bkvc)))  # fmt: skip


_ENTRIES = {
    "compiled": (3, "block_q, block_kv, block_kv_compute, step_s", "[512, 2048, 512, 3.2e-06]"),
    "q_block": (1, "block_q, q_block_s", "[1024, 6.5e-07]"),
    "failed": (3, "block_q, block_kv, block_kv_compute", "[2048, 2048, 2048]"),
}


def _entry(value: Any, where: str, path: Path) -> tuple[Any, ...]:
    """One row of ``where``: its block sizes (positive integers), then a time (>= 0)."""
    n_ints, fields, example = _ENTRIES[where]
    n = n_ints + (where != "failed")
    ok = isinstance(value, list) and len(value) == n
    ints = ok and all(
        isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in value[:n_ints]
    )
    time_ok = n == n_ints or (ok and isinstance(value[-1], int | float) and value[-1] >= 0)
    if not ints or not time_ok:
        raise TopologyError(
            f"{path}: [compute.splash_tiles] {where} entry {value!r} must be [{fields}], "
            f"e.g. {example}"
        )
    return tuple(value[:n_ints]) + ((float(value[-1]),) if n > n_ints else ())


def parse_splash_tiles(
    table: Any, kernels: tuple[str, ...], path: Path, sources: list[tuple[str, str]]
) -> SplashTiles | None:
    """``[compute.splash_tiles]`` of ``path`` (None when absent); ``kernels`` are the
    attention kernels with an efficiency, one of which the table must name."""
    if table is None:
        return None
    keys = {"kernel", "compiled", "q_block", "failed", "source"}
    if not isinstance(table, dict) or not keys <= set(table) <= keys | {"step_gain"}:
        raise TopologyError(
            f"{path}: [compute.splash_tiles] must hold {', '.join(sorted(keys))} (and, "
            "optionally, step_gain), e.g. "
            'kernel = "splash", compiled = [[512, 512, 512, 1e-06]], q_block = [[512, 0.0]], '
            'failed = [], source = "..."'
        )
    if table["kernel"] not in kernels:
        raise TopologyError(
            f"{path}: [compute.splash_tiles] kernel = {table['kernel']!r} has no attention "
            f"efficiency (known: {', '.join(kernels)})"
        )
    rows = {key: tuple(_entry(v, key, path) for v in table[key]) for key in _ENTRIES}
    if BASE_TILE not in {r[:3] for r in rows["compiled"]}:
        raise TopologyError(
            f"{path}: [compute.splash_tiles] compiled must measure the 512 tile "
            f"{list(BASE_TILE)}: every tile is priced relative to it"
        )
    sources.append(("compute.splash_tiles", str(table["source"])))
    gain = table.get("step_gain", 1.0)
    if isinstance(gain, bool) or not isinstance(gain, int | float) or not 0 < gain < 4:
        raise TopologyError(
            f"{path}: [compute.splash_tiles] step_gain = {gain!r} must be a number in (0, 4), "
            "what a tile saves in a step over what it saves alone, e.g. 1.2"
        )
    return SplashTiles(
        str(table["kernel"]), rows["compiled"], rows["q_block"], rows["failed"],
        str(table["source"]), float(gain),
    )  # fmt: skip
