"""The work per chip of an opaque kernel (``custom_call``, e.g. Pallas) and of a matmul
or convolution, as :class:`sim.compute.Work` for the compute model Q1 and Q2 share.

:func:`kernel_work`: for a kernel whose name says attention, one
:class:`sim.compute.Attention` of its (q, k, v) operands -- the shape the replay of
the compiled step prices (:func:`aoizora.replay.opaque_work`); else the kernel's
``CostEstimate`` when it has one. :func:`op_matmul`: a ``dot_general`` or
``convolution`` from its local shapes as a :class:`sim.compute.Matmul`, counted as
the replay counts the compiled kernels (:func:`op_flops` is its FLOPs).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence

from aoizora.stage1.shardy import Op, TensorType
from sim.compute import Attention, Matmul, Work
from sim.costs import ConvDim, conv_matmul

__all__ = ["attention_operands", "kernel_work", "op_flops", "op_matmul"]

# Kernels whose FLOPs we infer from (q, k, v) operand shapes when they carry no CostEstimate.
_ATTENTION_KERNEL = re.compile(r"attention|mha|mqa|gqa|flash|splash", re.IGNORECASE)


def attention_operands(
    operand_types: Sequence[TensorType],
) -> tuple[TensorType, TensorType, TensorType] | None:
    """The first (q, k, v) among the operands, in order, whose shapes fit attention.

    q ``[..., S_q, D]``, k ``[..., S_kv, D]``, v ``[..., S_kv, D_v]`` with equal
    leading dims. Shapes, not positions, decide: a splash kernel also takes
    block-mask tables of rank 3 (int8 for small grids, int32 for large ones such
    as Wan 14B at 720p), which must not be mistaken for q and k.

    >>> mask, q = TensorType((1, 19, 74), 4), TensorType((5, 9456, 128), 2)
    >>> kv = TensorType((5, 75648, 128), 2)
    >>> [t.shape for t in attention_operands([mask, mask, q, kv, kv])]
    [(5, 9456, 128), (5, 75648, 128), (5, 75648, 128)]
    """
    tensors = [t for t in operand_types if len(t.shape) >= 3 and t.element_bytes >= 2]
    for q, k, v in itertools.combinations(tensors, 3):
        if (
            q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and q.shape[-1] == k.shape[-1]
            and k.shape[-2] == v.shape[-2]
        ):
            return q, k, v
    return None


def kernel_work(op: Op, *, operand_types: Sequence[TensorType], io_bytes: int) -> tuple[Work, bool]:
    """(work per chip of one kernel call, whether its FLOPs are known).

    ``operand_types`` are the types of ``op.operands``; ``io_bytes`` its operand
    and result bytes per chip (its HBM traffic unless a CostEstimate says more). An
    attention kernel (name matches splash/flash/mha...) with (q, k, v) operands
    ``[..., S_q, D]``, ``[..., S_kv, D]``, ``[..., S_kv, D_v]`` is one
    :class:`~sim.compute.Attention` per leading (batch x head) index: ``Q.K^T``
    and ``P.V``, the standard count (FlashAttention paper, Dao et al. 2022, sec.
    3.1), no mask sparsity (Wan's self-attention is full). Otherwise a Pallas
    ``CostEstimate`` gives FLOPs of unknown shape (priced as vector work). Neither:
    only the bytes, and the FLOPs are unknown.
    """
    io = float(io_bytes)
    qkv = attention_operands(operand_types)
    if qkv is not None and _ATTENTION_KERNEL.search(op.kernel_name or op.call_target):
        q, k, v = qkv
        att = Attention(math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1])
        return Work(attention=(att,), hbm_bytes=max(io, op.cost_estimate_bytes or 0.0)), True
    if op.cost_estimate_flops is not None:
        nbytes = op.cost_estimate_bytes or io
        return Work(other_flops=op.cost_estimate_flops, hbm_bytes=nbytes), True
    return Work(hbm_bytes=io), False


def op_matmul(op: Op, *, local_shape: Callable[[int], tuple[int, ...]]) -> Matmul | None:
    """A matmul or convolution on one chip, from local shapes (None for other ops).

    ``local_shape(v)`` is value ``v``'s shape on one chip. A ``dot_general`` is
    ``batch`` products ``(M x K) @ (K x N)``; a convolution one ``(batch x i) @
    (i x o)`` per valid tap, sliding positions as rows (:func:`sim.costs.conv_matmul`).
    """
    if op.name == "stablehlo.dot_general":
        lhs, rhs = local_shape(op.operands[0]), local_shape(op.operands[1])
        lc, rc = op.contracting_dims, op.rhs_contracting_dims
        lb, rb = op.lhs_batch_dims, op.rhs_batch_dims
        return Matmul(
            math.prod(lhs[d] for d in lb),
            math.prod(v for d, v in enumerate(lhs) if d not in lc and d not in lb),
            math.prod(lhs[d] for d in lc),
            math.prod(v for d, v in enumerate(rhs) if d not in rc and d not in rb),
        )
    if op.name == "stablehlo.convolution" and op.convolution is not None:
        c = op.convolution
        lhs = local_shape(op.operands[0])
        kernel = local_shape(op.operands[1])
        out = local_shape(op.results[0])
        dims = [
            ConvDim(
                lhs[i], out[o], kernel[k], stride=c.strides[d],
                padding_low=c.padding_low[d], lhs_dilation=c.lhs_dilation[d],
                rhs_dilation=c.rhs_dilation[d],
            )
            for d, (i, k, o) in enumerate(c.spatial)
        ]  # fmt: skip
        return conv_matmul(
            batch=lhs[c.input_batch],
            input_features=kernel[c.kernel_input_feature],
            output_features=kernel[c.kernel_output_feature],
            dims=dims,
        )
    return None


def op_flops(op: Op, *, local_shape: Callable[[int], tuple[int, ...]]) -> float:
    """FLOPs per chip of a matmul or convolution (0 for other ops), from local shapes."""
    mm = op_matmul(op, local_shape=local_shape)
    return 0.0 if mm is None else mm.flops
