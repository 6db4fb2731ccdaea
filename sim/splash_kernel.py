"""jax's Pallas splash kernel as a model of its structure: the VMEM a tile needs, the time
it takes, on any generation.

The forward kernel (``splash_attention_kernel.py``, ``_splash_attention_forward``) runs a
grid of (head, q block, kv block) steps. A step waits for its kv block's DMA (k and v,
``block_kv`` rows, and the kv segment ids), then runs ``block_kv / block_kv_compute``
*bodies* -- unrolled (``fori_loop(..., unroll=True)``) -- each a ``(block_q x
block_kv_compute)`` product ``q.k^T`` in f32, its row max, ``exp``, row sum, the running
max / sum / output rescale and the ``p.v`` product; a q block starts by zeroing its f32
scratch and ends by normalising and writing its output block. So, per call of ``lead``
heads over lengths ``Sq x Skv`` at tile ``(bq, bkv, bkvc)``::

    t = lead * ceil(Sq/bq) * (ceil(Skv/bkv) * step + q_block_s + q_row_s * bq)
    step = step_s + max(bkv/bkvc * body(bq, bkvc), kv DMA of bkv rows / HBM bandwidth)
    body(bq, bkvc) = 2 * bq * bkvc * (d + dv) / (peak FLOP/s * efficiency(bq, bkvc))

the body's MXU efficiency measured per body shape on a chip (:attr:`SplashKernel.body`,
interpolated between measured shapes in log2 of the blocks, held at the nearest edge
beyond them). Its VMEM: the blocks the pipeline keeps (q, o and the f32 scratch of
``bq`` rows; k, v and segment ids of ``bkv`` rows) and the body's f32 score tiles::

    vmem = buffers * (bq * q_row_bytes + bkv * kv_row_bytes) + score_copies * bq * bkvc * 4
           + block_score_copies * bq * bkv * 4 + fixed_vmem_bytes

(the unrolled bodies of a step keep f32 values of the whole ``bq x bkv`` block alive
together: the last term)

``buffers``, ``score_copies`` and ``fixed_vmem_bytes`` fitted to the smallest scoped VMEM
limit libtpu compiles each tile under (``aoizora calibrate --splash-kernel``). A tile
compiles under a limit when its VMEM fits in it; a plan raises the compiler's limit
(``--xla_tpu_scoped_vmem_limit_kib``) to the smallest step of :data:`LIMIT_STEP_BYTES`
that holds the tile, up to the core's VMEM (:meth:`SplashKernel.limit_bytes`).

>>> k = SplashKernel(vmem_bytes=128 << 20, default_scoped_vmem_bytes=16 << 20,
...     body=((512, 512, 0.9),), step_s=3e-7, q_block_s=0.0, q_row_s=0.0,
...     buffers=1.0, score_copies=2.0, block_score_copies=0.0, fixed_vmem_bytes=0.0,
...     source="example")
>>> k.vmem_needed_bytes((512, 512, 512), 128, 128) / 2**20
3.515625
>>> k.limit_bytes((512, 512, 512), 128, 128) >> 20, k.limit_bytes((512, 8192, 4096), 128, 128) >> 20
(16, 32)
>>> round(k.call_s(12, 4096, 4096, 128, 128, (512, 512, 512), 1.97e14, 8.2e11) * 1e6, 1)
811.8
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import TopologyError

__all__ = ["LIMIT_STEP_BYTES", "SplashKernel", "Tile", "kv_row_bytes", "parse_splash_kernel",
           "q_row_bytes"]  # fmt: skip

Tile = tuple[int, int, int]
# A raised scoped VMEM limit is a multiple of this (what a plan sets, in whole 16 MiB).
LIMIT_STEP_BYTES = 16 << 20
_LANES = 128  # the f32 running max / sum scratch and q segment ids are 128 lanes wide
_SUBLANES = 8  # kv segment ids are (8, block_kv) int32
_BF16, _F32, _I32 = 2, 4, 4


def _lanes(width: int) -> int:
    """``width`` rounded up to whole 128-lane vregs."""
    return -(-width // _LANES) * _LANES


def q_row_bytes(head_dim: int, value_dim: int) -> int:
    """VMEM per q row of a block: q (bf16), the f32 output scratch and the bf16 output,
    the f32 running max and sum and the int32 q segment ids (128 lanes each).

    >>> q_row_bytes(128, 128)
    2560
    """
    return head_dim * _BF16 + value_dim * (_F32 + _BF16) + 3 * _LANES * _F32


def kv_row_bytes(head_dim: int, value_dim: int) -> int:
    """VMEM per kv row of a block: k and v (bf16) and the int32 kv segment ids (8 sublanes).

    >>> kv_row_bytes(128, 128)
    544
    """
    return (head_dim + value_dim) * _BF16 + _SUBLANES * _I32


@dataclass(frozen=True)
class SplashKernel:
    """The splash kernel's model on one generation: its core's VMEM and the compiler's
    default scoped share of it, the measured body efficiencies
    ``(block_q, block_kv_compute, efficiency)``, the fixed costs of a grid step and a q
    block (and per q row), and the VMEM fit."""

    vmem_bytes: int
    default_scoped_vmem_bytes: int
    body: tuple[tuple[int, int, float], ...]
    step_s: float
    q_block_s: float
    q_row_s: float
    buffers: float
    score_copies: float
    block_score_copies: float
    fixed_vmem_bytes: float
    source: str
    # What a tile saves inside a whole step over what it saves alone (fitted on measured
    # step pairs; 1.0: the kernel's saving as it is).
    step_gain: float = 1.0
    # A call over heads narrower than 128 lanes against its price with them padded to 128
    # (the MXU's and a vreg's width): fitted on the program zoo's fit half (1.0: padded).
    narrow_head_factor: float = 1.0

    def narrow_factor(self, head_dim: int, value_dim: int) -> float:
        """:attr:`narrow_head_factor` for heads under 128 lanes, else 1."""
        return self.narrow_head_factor if min(head_dim, value_dim) < _LANES else 1.0

    # -- time -------------------------------------------------------------------------
    @functools.cached_property
    def _grid(self) -> tuple[tuple[float, ...], tuple[float, ...], dict[tuple[int, int], float]]:
        qs = tuple(sorted({math.log2(b[0]) for b in self.body}))
        cs = tuple(sorted({math.log2(b[1]) for b in self.body}))
        return qs, cs, {(b[0], b[1]): b[2] for b in self.body}

    def efficiency(self, block_q: int, block_kv_compute: int) -> float:
        """The body's MXU efficiency at ``(block_q, block_kv_compute)``: measured, or
        interpolated in log2 between the measured shapes around it (a missing corner
        takes the mean of those present), the nearest edge beyond them."""
        qs, cs, table = self._grid
        if (block_q, block_kv_compute) in table:
            return table[(block_q, block_kv_compute)]
        x = _bracket(qs, math.log2(block_q))
        y = _bracket(cs, math.log2(block_kv_compute))
        total = weight = 0.0
        for qa, wq in x:
            for ca, wc in y:
                value = table.get((round(2**qa), round(2**ca)))
                if value is not None and wq * wc > 0:
                    total, weight = total + wq * wc * value, weight + wq * wc
        if weight == 0.0:  # no measured corner: the nearest measured body
            key = min(table, key=lambda b: (_distance(b, block_q, block_kv_compute), b))
            return table[key]
        return total / weight

    def call_s(
        self, lead: float, q_length: int, kv_length: int, head_dim: int, value_dim: int,
        tile: Tile, peak_flops_per_s: float, hbm_bandwidth_bytes_per_s: float,
    ) -> float:  # fmt: skip
        """One call's seconds at ``tile`` (its lengths padded to the blocks) on a device of
        ``peak_flops_per_s`` and ``hbm_bandwidth_bytes_per_s``."""
        bq, bkv, bkvc = tile
        # A head narrower than a vreg's 128 lanes fills only part of each: the body's two
        # products take as long as at 128 (and longer: narrow_head_factor, which a call's
        # price takes, sim.compute.ComputeModel.attention_s)
        flops = 2.0 * bq * bkvc * (_lanes(head_dim) + _lanes(value_dim))
        body_s = flops / (peak_flops_per_s * self.efficiency(bq, bkvc))
        bodies = bkv // bkvc * body_s
        dma_s = bkv * kv_row_bytes(head_dim, value_dim) / hbm_bandwidth_bytes_per_s
        step = self.step_s + max(bodies, dma_s)
        q_blocks = lead * math.ceil(q_length / bq)
        return q_blocks * (math.ceil(kv_length / bkv) * step + self.q_block_s + self.q_row_s * bq)

    # -- VMEM ---------------------------------------------------------------------------
    def vmem_needed_bytes(self, tile: Tile, head_dim: int, value_dim: int) -> float:
        """The scoped VMEM ``tile`` needs (module docstring)."""
        bq, bkv, bkvc = tile
        rows = bq * q_row_bytes(head_dim, value_dim) + bkv * kv_row_bytes(head_dim, value_dim)
        scores = self.score_copies * bq * bkvc + self.block_score_copies * bq * bkv
        return self.buffers * rows + scores * _F32 + self.fixed_vmem_bytes

    def fits(self, tile: Tile, head_dim: int, value_dim: int, limit_bytes: int) -> bool:
        """Whether ``tile`` compiles under a scoped VMEM limit of ``limit_bytes``."""
        return self.vmem_needed_bytes(tile, head_dim, value_dim) <= limit_bytes

    def limit_bytes(self, tile: Tile, head_dim: int, value_dim: int) -> int | None:
        """The scoped VMEM limit a plan compiles ``tile`` with: the compiler's default when
        the tile fits in it, else the smallest multiple of :data:`LIMIT_STEP_BYTES` that
        holds it; None when even the core's whole VMEM does not."""
        need = self.vmem_needed_bytes(tile, head_dim, value_dim)
        if need <= self.default_scoped_vmem_bytes:
            return self.default_scoped_vmem_bytes
        limit = math.ceil(need / LIMIT_STEP_BYTES) * LIMIT_STEP_BYTES
        return limit if limit <= self.vmem_bytes else None


def _distance(body: tuple[int, int], block_q: int, block_kv_compute: int) -> float:
    return abs(math.log2(body[0] / block_q)) + abs(math.log2(body[1] / block_kv_compute))


def _bracket(axis: tuple[float, ...], x: float) -> tuple[tuple[float, float], ...]:
    """The measured points around ``x`` on ``axis`` with their linear weights."""
    if x <= axis[0]:
        return ((axis[0], 1.0),)
    if x >= axis[-1]:
        return ((axis[-1], 1.0),)
    i = bisect.bisect_right(axis, x)
    lo, hi = axis[i - 1], axis[i]
    w = (x - lo) / (hi - lo)
    return ((lo, 1.0 - w), (hi, w))


_NUMBERS = ("step_s", "q_block_s", "q_row_s", "buffers", "score_copies", "block_score_copies",
            "fixed_vmem_bytes")  # fmt: skip
_EXAMPLE = (
    'vmem_bytes = { value = 134217728, source = "..." }, default_scoped_vmem_bytes = '
    '{ value = 16777216, source = "..." }, body = [[512, 512, 0.95]], step_s = 3.8e-07, '
    "q_block_s = 0.0, q_row_s = 0.0, buffers = 1.0, score_copies = 2.0, "
    'fixed_vmem_bytes = 0.0, source = "..."'
)


_OPTIONAL = frozenset({"step_gain", "narrow_head_factor"})


def parse_splash_kernel(
    table: Any, path: Path, sources: list[tuple[str, str]]
) -> SplashKernel | None:
    """``[compute.splash_kernel]`` of ``path`` (None when absent). The core's VMEM and the
    compiler's default scoped limit are inline tables with their sources; the fitted terms
    share the table's ``source``."""
    if table is None:
        return None
    keys = {"vmem_bytes", "default_scoped_vmem_bytes", "body", "source", *_NUMBERS}
    if not isinstance(table, dict) or not keys <= set(table) <= keys | _OPTIONAL:
        raise TopologyError(f"{path}: [compute.splash_kernel] must hold {_EXAMPLE}")
    chip: dict[str, int] = {}
    for key in ("vmem_bytes", "default_scoped_vmem_bytes"):
        entry = table[key]
        value = entry.get("value") if isinstance(entry, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise TopologyError(
                f"{path}: [compute.splash_kernel] {key} = {entry!r} must be an inline table "
                f"with a positive integer value (bytes) and its source, e.g. {_EXAMPLE}"
            )
        chip[key] = value
        sources.append((f"compute.splash_kernel.{key}", str(entry.get("source", ""))))
    if chip["default_scoped_vmem_bytes"] > chip["vmem_bytes"]:
        raise TopologyError(
            f"{path}: [compute.splash_kernel] default_scoped_vmem_bytes "
            f"{chip['default_scoped_vmem_bytes']} exceeds the core's vmem_bytes "
            f"{chip['vmem_bytes']}"
        )
    numbers = {key: _number(table[key], key, path) for key in (*_NUMBERS, *sorted(_OPTIONAL))
               if key in table}  # fmt: skip
    body = tuple(
        _body(row, path) for row in (table["body"] if isinstance(table["body"], list) else [None])
    )
    sources.append(("compute.splash_kernel", str(table["source"])))
    return SplashKernel(
        chip["vmem_bytes"], chip["default_scoped_vmem_bytes"], body, numbers["step_s"],
        numbers["q_block_s"], numbers["q_row_s"], numbers["buffers"], numbers["score_copies"],
        numbers["block_score_copies"], numbers["fixed_vmem_bytes"], str(table["source"]),
        numbers.get("step_gain", 1.0), numbers.get("narrow_head_factor", 1.0),
    )  # fmt: skip


def _number(value: Any, key: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise TopologyError(
            f"{path}: [compute.splash_kernel] {key} = {value!r} must be a number >= 0, "
            f"e.g. {_EXAMPLE}"
        )
    return float(value)


def _body(row: Any, path: Path) -> tuple[int, int, float]:
    ok = isinstance(row, list) and len(row) == 3
    ints = ok and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in row[:2])
    eff = ok and isinstance(row[2], int | float) and 0 < row[2] <= 1.5
    if not (ints and eff):
        raise TopologyError(
            f"{path}: [compute.splash_kernel] body entry {row!r} must be [block_q, "
            "block_kv_compute, efficiency in (0, 1.5]], e.g. [512, 512, 0.95]"
        )
    return int(row[0]), int(row[1]), float(row[2])
