"""The matrix work of one kernel: its matmuls (:class:`Matmul`) and fused attention calls
(:class:`Attention`), and the fraction of the MXU a matmul keeps busy
(:func:`mxu_utilisation`). ``sim.compute`` prices them (and re-exports all three).

A TPU MXU is a ``T x T`` weight-stationary systolic array (Jouppi et al., "In-Datacenter
Performance Analysis of a Tensor Processing Unit", ISCA 2017): the latched operand fills
``T`` rows with the contraction dimension and ``T`` columns with one free dimension, the
other operand streams through.

>>> Matmul(batch=1, m=4096, k=4096, n=4096).flops == 2 * 4096**3
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Attention", "Matmul", "mxu_utilisation"]


def _pad(n: float, tile: int) -> float:
    return math.ceil(n / tile) * tile if n > 0 else 0.0


def mxu_utilisation(*, m: float, k: float, n: float, tile: int) -> float:
    """The fraction of a ``tile x tile`` MXU a ``(m x k) @ (k x n)`` matmul keeps busy.

    The contraction ``k`` fills the rows; the better free dimension fills the columns:
    ``n`` with the weights ``(k x n)`` latched, or ``m`` with the other operand latched
    and the weights streamed through it -- which pays only if they stream at least half
    a tile of rows per latched tile (hiding the next tile's load). A convolution to 3 or
    12 output channels therefore runs at ``n / tile`` of the columns: on a v5e chip the
    Wan VAEs' last convolutions ran at 0.018 (3 channels, 96 deep) and 0.094 (12, 256
    deep) of the peak, while 96 output channels fill the columns as the positions do
    (validation/README.md, "v5e compute").

    >>> mxu_utilisation(m=9472, k=128, n=2048, tile=256)  # Q.K^T, head_dim 128
    0.5
    >>> mxu_utilisation(m=9472, k=2048, n=128, tile=256)  # P.V: latch P, stream V
    1.0
    >>> mxu_utilisation(m=1612800, k=96, n=3, tile=128)  # 96 channels -> RGB, per tap
    0.017578125
    >>> mxu_utilisation(m=100, k=100, n=100, tile=128), mxu_utilisation(m=8, k=8, n=8, tile=1)
    (0.6103515625, 1.0)
    """
    if tile <= 1 or min(m, k, n) <= 0:
        return 1.0
    rows = k / _pad(k, tile)
    cols = n / _pad(n, tile)
    if n >= tile / 2:
        cols = max(cols, m / _pad(m, tile))
    return rows * cols


@dataclass(frozen=True)
class Matmul:
    """``batch`` independent ``(m x k) @ (k x n)`` products (a convolution: one per tap).

    ``batch`` may be fractional: a windowed-einsum stage runs part of a dot.
    """

    batch: float
    m: int
    k: int
    n: int

    @property
    def flops(self) -> float:
        """``2 * batch * m * k * n`` (one multiply-add per term)."""
        return 2.0 * self.batch * self.m * self.k * self.n

    def padded_flops(self, tile: int) -> float:
        """The FLOPs the MXU spends on it, padding included (:func:`mxu_utilisation`)."""
        return self.flops / mxu_utilisation(m=self.m, k=self.k, n=self.n, tile=tile)


@dataclass(frozen=True)
class Attention:
    """One fused attention kernel call: ``lead`` (batch x heads) softmax(Q.K^T).V products.

    ``Q.K^T`` is ``(S_q x D) @ (D x S_kv)`` and ``P.V`` is ``(S_q x S_kv) @ (S_kv x D_v)``
    per leading index (FlashAttention, Dao et al. 2022, sec. 3.1; no mask sparsity).
    """

    lead: float
    q_length: int
    kv_length: int
    head_dim: int
    value_dim: int
    # The kernel's q and kv blocks (0: not known) and its family ("": not known), as
    # the compiled custom call says (aoizora.replay.opaque_work); they price its grid.
    block_q: int = 0
    block_kv: int = 0
    kernel: str = ""
    # The kv compute block (0: the kv block's): the step's softmax updates run this wide.
    block_kv_compute: int = 0

    @property
    def tile(self) -> tuple[int, int, int]:
        """(block_q, block_kv, block_kv_compute), the compute block defaulted."""
        return self.block_q, self.block_kv, self.block_kv_compute or self.block_kv

    def grid(self) -> tuple[float, float]:
        """(grid steps, q blocks) of a blocked kernel: ``lead * ceil(Sq/bq) * ceil(Skv/bkv)``
        (q block, kv block) pairs, ``lead * ceil(Sq/bq)`` q blocks; (0, 0) unblocked."""
        if self.block_q <= 0 or self.block_kv <= 0:
            return 0.0, 0.0
        q_blocks = self.lead * math.ceil(self.q_length / self.block_q)
        return q_blocks * math.ceil(self.kv_length / self.block_kv), q_blocks

    @property
    def matmuls(self) -> tuple[Matmul, Matmul]:
        s_q, s_kv = self.q_length, self.kv_length
        return (
            Matmul(self.lead, s_q, self.head_dim, s_kv),
            Matmul(self.lead, s_q, s_kv, self.value_dim),
        )

    @property
    def flops(self) -> float:
        return sum(mm.flops for mm in self.matmuls)

    def padded_flops(self, tile: int) -> float:
        return sum(mm.padded_flops(tile) for mm in self.matmuls)
