"""What a compiled matmul kernel has fused into it: the element-wise ops in its loop and
whether its convolution slides a window (docs/simulator.md, "Bare and fused matmuls").

A matmul kernel with nothing fused but dtype conversions runs at the bare kernels' rate;
each element-wise op fused into its loop slows it (``sim.compute.ComputeModel.mxu_s``); a
convolution with spatial taps runs its own emitters and keeps the steps' one fused rate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from aoizora.hlo.text import Instruction
from sim.compute import Matmul

__all__ = ["fused_ops", "has_spatial_taps"]


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
