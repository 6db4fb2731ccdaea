"""The splash tile a candidate runs fastest with, chosen by Stage 1.

A splash call's tile changes its time and nothing else in the step (no byte moves
elsewhere, no collective changes), and one tile serves every call of a program
(maxdiffusion's ``flash_block_sizes``): so the best tile of a candidate is the one that
minimises the sum, over its splash calls, of the compute model's price of each call at
that tile (:meth:`sim.compute.ComputeModel.attention_s`, the chip's measured tiles,
:mod:`sim.splash_tiles`), each call's blocks fitted to its lengths as the program fits
them (:func:`aoizora.workloads.splash.call_blocks`). Stage 1 moves the candidate's
Q1 by the tile's gain; Stage 2 compiles the candidate with the tile and prices it from
the compiled kernel.

Only tiles whose blocks are multiples of 512 are planned: Stage 1 reads calls whose
lengths are padded to the 512 tile, and a length rounded up to 512 then to a multiple
of 512 is the length rounded up to that multiple -- the padding the tile really adds.
(The 256 tiles are the slowest the chip measured at every shape.) A tile that the
chip could not compile, or that holds one that could not, is never proposed
(:meth:`sim.splash_tiles.SplashTiles.plannable`).

>>> from sim.chips import load_chip
>>> from sim.compute import Attention, compute_model_of
>>> model = compute_model_of(load_chip("v5e"))
>>> calls = ((24, 32768, 32768, 128, 128, 30.0),)  # 1.3B 832x480x81, one chip, CFG
>>> best_tile(calls, model)[0], tile_limit_kib(calls, model, (512, 16384, 512))
((512, 16384, 512), 49152)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from aoizora.workloads.splash import call_blocks
from sim.compute import Attention, ComputeModel
from sim.splash_kernel import SplashKernel
from sim.splash_tiles import BASE_TILE

__all__ = ["MAX_KV_BLOCK", "PLANNED_BLOCK_MULTIPLE", "SplashCall", "best_tile", "kernel_tiles",
           "plannable",
           "tile_call", "tile_gain_s", "tile_limit_bytes", "tile_limit_kib"]  # fmt: skip

# One splash call shape of a program and how often a step runs it: (lead, q length,
# kv length, head dim, value dim, executions per step), lengths as Stage 1 reads them.
SplashCall = tuple[int, int, int, int, int, float]

PLANNED_BLOCK_MULTIPLE = 512
# The longest kv block a plan tries: beyond it a 32,760-token call gains nothing more on the
# chip (validation/v5e/splash_sweep: 16,384 ran as 8,192) and padding grows.
MAX_KV_BLOCK = 16384


def tile_call(call: Attention, tile: tuple[int, int, int], kernel: str) -> Attention:
    """``call`` at ``tile``: its blocks fitted to its lengths, its lengths padded to them.

    >>> tile_call(Attention(12, 9728, 512, 128, 128), (512, 2048, 512), "splash").tile
    (512, 512, 512)
    """
    bq, bkv, bkvc = call_blocks(tile, call.q_length, call.kv_length)
    return replace(
        call, q_length=math.ceil(call.q_length / bq) * bq,
        kv_length=math.ceil(call.kv_length / bkv) * bkv,
        block_q=bq, block_kv=bkv, block_kv_compute=bkvc, kernel=kernel,
    )  # fmt: skip


def _total_s(calls: Sequence[SplashCall], model: ComputeModel, tile: tuple[int, int, int]) -> float:
    kernel = model.params.tiled_kernel or "splash"
    return sum(
        n * model.attention_s(tile_call(Attention(lead, sq, skv, d, dv), tile, kernel))
        for lead, sq, skv, d, dv, n in calls
    )


def tile_gain_s(
    calls: Sequence[SplashCall], model: ComputeModel, tile: tuple[int, int, int]
) -> float:
    """The step's seconds at ``tile`` over the 512 tile's (< 0: faster)."""
    if not calls or tuple(tile) == BASE_TILE:
        return 0.0
    return _total_s(calls, model, tile) - _total_s(calls, model, BASE_TILE)


def plannable(tile: tuple[int, int, int]) -> bool:
    """Whether a program may run ``tile``'s blocks where the kernel's model prices them:
    blocks multiples of 512 and a power of two of compute blocks in the kv block (kv
    blocks of 6 or 12 bodies ran 3-5 % slower than their work on the chip), the kv block
    at most :data:`MAX_KV_BLOCK`.

    >>> plannable((512, 8192, 512)), plannable((512, 3072, 512)), plannable((256, 256, 256))
    (True, False, False)
    """
    _, bkv, bkvc = tile
    ratio = bkv // bkvc
    return (all(b % PLANNED_BLOCK_MULTIPLE == 0 for b in tile) and bkv % bkvc == 0
            and ratio & (ratio - 1) == 0 and bkv <= MAX_KV_BLOCK)  # fmt: skip


def kernel_tiles(kernel: SplashKernel) -> tuple[tuple[int, int, int], ...]:
    """The tiles a plan may run where the generation has the kernel's model: every body
    shape ``(block_q, block_kv_compute)`` measured on a chip whose blocks are multiples of
    512, with kv blocks of 1, 2, 4, ... of its bodies up to :data:`MAX_KV_BLOCK` (kv blocks
    that are not a power of two of the body ran 3-5 % slower than their work on the chip:
    validation/README.md, section 19). In a fixed order.

    >>> from sim.chips import load_chip
    >>> k = load_chip("v5e").compute.splash_kernel
    >>> (512, 8192, 512) in kernel_tiles(k), (512, 3072, 512) in kernel_tiles(k)
    (True, False)
    """
    out = []
    for bq, bkvc, _ in sorted(kernel.body):
        if bq % PLANNED_BLOCK_MULTIPLE or bkvc % PLANNED_BLOCK_MULTIPLE:
            continue
        bkv = bkvc
        while bkv <= MAX_KV_BLOCK:
            out.append((bq, bkv, bkvc))
            bkv *= 2
    return tuple(out)


def tile_limit_bytes(
    calls: Sequence[SplashCall], kernel: SplashKernel, tile: tuple[int, int, int]
) -> int | None:
    """The scoped VMEM limit ``calls`` need at ``tile``: the largest any call needs at the
    blocks the program fits to it (:func:`aoizora.workloads.splash.call_blocks`), None when
    one needs more than the core's VMEM."""
    limits = [kernel.limit_bytes(call_blocks(tile, sq, skv), d, dv)
              for _, sq, skv, d, dv, _ in calls]  # fmt: skip
    if not limits or any(v is None for v in limits):
        return None
    return max(v for v in limits if v is not None)


def tile_limit_kib(
    calls: Sequence[SplashCall], model: ComputeModel, tile: tuple[int, int, int] | None
) -> int | None:
    """The ``scoped_vmem_kib`` a candidate runs ``tile`` with: None when the compiler's
    default holds it (or the generation has no kernel model), else the raised limit."""
    kernel = model.params.splash_kernel
    if kernel is None or tile is None or not calls:
        return None
    limit = tile_limit_bytes(calls, kernel, tile)
    if limit is None or limit <= kernel.default_scoped_vmem_bytes:
        return None
    return limit // 1024


def _runs_as_modelled(
    calls: Sequence[SplashCall], kernel: SplashKernel, tile: tuple[int, int, int]
) -> bool:
    """Whether every call runs ``tile`` as blocks the model was measured on: plannable
    blocks whose body shape the chip timed -- or, for a call too short for the tile to
    change it, the blocks the 512 tile gives it too (a clamped kv block whose compute block
    no longer divides it would run one untimed body as wide as the sequence)."""
    bodies = {(bq, bkvc) for bq, bkvc, _ in kernel.body}
    for _, sq, skv, *_ in calls:
        blocks = call_blocks(tile, sq, skv)
        if blocks == call_blocks(BASE_TILE, sq, skv):
            continue
        if not plannable(blocks) or (blocks[0], blocks[2]) not in bodies:
            return False
    return True


def best_tile(
    calls: Sequence[SplashCall], model: ComputeModel
) -> tuple[tuple[int, int, int] | None, float]:
    """(the best tile, its seconds over the 512 tile's: <= 0) for ``calls``; (None, 0.0)
    when the 512 tile is best, there is no call, or the chip measured no tiles. With the
    kernel's model (:mod:`sim.splash_kernel`) every tile of :func:`kernel_tiles` whose
    VMEM the core holds competes, a raised limit costing nothing; the measured table's
    plannable tiles otherwise. Ties go to the lower limit, then the smaller tile."""
    if not calls:
        return None, 0.0
    kernel = model.params.splash_kernel
    if kernel is not None:  # every call runs plannable, measured blocks the core holds
        options: list[tuple[int, int, int]] = [
            t
            for t in kernel_tiles(kernel)
            if tile_limit_bytes(calls, kernel, t) is not None
            and _runs_as_modelled(calls, kernel, t)
        ]
    elif model.params.splash_tiles is not None:
        options = [t for t in model.params.splash_tiles.plannable()
                   if all(b % PLANNED_BLOCK_MULTIPLE == 0 for b in t)]  # fmt: skip
    else:
        return None, 0.0
    timed = sorted(
        (tile_gain_s(calls, model, t), tile_limit_kib(calls, model, t) or 0, t)
        for t in options if t != BASE_TILE
    )  # fmt: skip
    if not timed or timed[0][0] >= 0.0:
        return None, 0.0
    return timed[0][2], timed[0][0]
