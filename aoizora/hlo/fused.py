"""What a compiled matmul kernel has fused into it: the element-wise ops in its loop and
whether its convolution slides a window (docs/simulator.md, "Bare and fused matmuls").

A matmul kernel with nothing fused but dtype conversions runs at the bare kernels' rate;
each element-wise op fused into its loop slows it (``sim.compute.ComputeModel.mxu_s``); a
convolution with spatial taps runs its own emitters and keeps the steps' one fused rate,
and one whose window is its own (not TPU's window standing for a batch) is priced with the
compiler's own cycle estimate beside ours (``compiler_cycles``; docs/simulator.md,
"Convolutions with a window of their own").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aoizora.hlo.text import Instruction
from sim.compute import Matmul

__all__ = ["compiler_cycles", "fused_ops", "has_spatial_taps", "has_own_window"]

_CYCLES_RE = re.compile(r'"estimated_cycles":"(\d+)"')
_NO_ESTIMATE = 2**63 - 1  # INT64_MAX: libtpu's cost model gave no estimate


def fused_ops(elements: Sequence[float], matmuls: Sequence[Matmul]) -> float:
    """The element-wise ops fused into a matmul kernel, per matmul (``Work.fused_vector_ops``):
    each op of ``elements`` counts one where it spans at least the largest matmul's smaller
    side (its ``m x k`` input or ``m x n`` output: a bias, an activation, a norm's
    modulation), less where it is smaller (a per-row scale); the sum over the matmuls (a
    kernel holding an MLP's two projections and the activation between them: each op sits
    in one matmul's loop).

    >>> mm = Matmul(1, 64, 128, 256)  # input 8,192 elements, output 16,384
    >>> fused_ops([8192.0, 16384.0, 64.0], [mm])  # two whole ops and a per-row one
    2.0078125
    >>> fused_ops([16384.0] * 4, [mm, Matmul(1, 64, 256, 128)])
    2.0
    """
    if not matmuls:
        return 0.0
    big = max(matmuls, key=lambda m: m.flops)
    side = big.batch * big.m * min(big.k, big.n)
    return sum(min(1.0, e / side) for e in elements) / len(matmuls)


def has_spatial_taps(conv: Instruction) -> bool:
    """Whether a convolution's window has a dimension of more than one tap (a 3x3 kernel;
    also the padded windows TPU uses for a batch of per-head products); a ``dot`` has none.

    >>> from aoizora.hlo.shapes import Shape
    >>> def conv(window: str) -> Instruction:
    ...     return Instruction("c", "convolution", Shape("f32", (8, 8)), (), {"window": window}, 1)
    >>> has_spatial_taps(conv("{size=1x1}")), has_spatial_taps(conv("{size=3x3 pad=1_1x1_1}"))
    (False, True)
    """
    sizes = re.search(r"size=([\dx]+)", conv.attrs.get("window", ""))
    return (
        conv.opcode == "convolution"
        and sizes is not None
        and set(sizes.group(1).split("x")) != {"1"}
    )


def has_own_window(conv: Instruction) -> bool:
    """Whether a convolution's spatial taps (:func:`has_spatial_taps`) are a window of its
    own over its input -- a 3x3 or 3x3x3 kernel sliding over an image or video, or a window
    as wide as its unpadded input (a contraction over a few heads, ``blhd,hde->ble``) --
    and not TPU's window standing for a batch: one over a dilated input (``lhs_dilate``), or
    one padded by its size less one on both sides in every dimension of more than one tap
    (the per-head products XLA writes as convolutions).

    >>> from aoizora.hlo.shapes import Shape
    >>> def conv(window: str) -> Instruction:
    ...     return Instruction("c", "convolution", Shape("f32", (8, 8)), (), {"window": window}, 1)
    >>> has_own_window(conv("{size=3x3 pad=1_1x1_1}")), has_own_window(conv("{size=1x1}"))
    (True, False)
    >>> has_own_window(conv("{size=16 pad=15_15 rhs_reversal=1}"))  # a batch of 16 products
    False
    >>> has_own_window(conv("{size=3x3 pad=1_1x1_1 lhs_dilate=2x2}"))
    False
    """
    if not has_spatial_taps(conv):
        return False
    window = conv.attrs.get("window", "")
    if "lhs_dilate" in window:
        return False
    found = re.search(r"size=([\dx]+)", window)
    sizes = [int(x) for x in found.group(1).split("x")] if found else []
    pads = re.search(r"pad=([\d_x-]+)", window)
    lows_highs = (
        [tuple(int(y) for y in p.split("_")) for p in pads.group(1).split("x")]
        if pads else [(0, 0)] * len(sizes)
    )  # fmt: skip
    batch_like = all(
        low == size - 1 and high == size - 1
        for size, (low, high) in zip(sizes, lows_highs, strict=True)
        if size > 1
    )
    return not batch_like


def compiler_cycles(backend_config: str) -> float:
    """The cycles libtpu's cost model estimates for one run of a compiled kernel (its
    backend config's ``estimated_cycles``), 0 where it gives none.

    >>> compiler_cycles('{"emitter":"EmitAllBatchInSublanes","estimated_cycles":"11085198"}')
    11085198.0
    >>> compiler_cycles('"estimated_cycles":"9223372036854775807"'), compiler_cycles("{}")
    (0.0, 0.0)
    """
    found = _CYCLES_RE.search(backend_config)
    if found is None or int(found.group(1)) >= _NO_ESTIMATE:
        return 0.0
    return float(found.group(1))
