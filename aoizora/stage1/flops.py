"""FLOPs and HBM bytes per chip of an opaque kernel (``custom_call``, e.g. Pallas), and
the FLOPs of a matmul or convolution.

:func:`kernel_cost`: the kernel's ``CostEstimate`` when it has one, else, for a
kernel whose name says attention, :func:`sim.costs.attention_flops` of its
(q, k, v) operands -- the same count the replay of the compiled step uses.
:func:`op_flops`: a ``dot_general`` or ``convolution`` from its local shapes
(:func:`sim.costs.matmul_flops`, :func:`sim.costs.conv_flops`, as the replay counts
the compiled kernels).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence

from aoizora.stage1.shardy import Op, TensorType
from sim.costs import attention_flops, conv_flops, matmul_flops, window_positions

__all__ = ["attention_operands", "kernel_cost", "op_flops"]

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


def kernel_cost(
    op: Op, *, operand_types: Sequence[TensorType], io_bytes: int
) -> tuple[float | None, float]:
    """(FLOPs, HBM bytes) per chip of one kernel call.

    ``operand_types`` are the types of ``op.operands``; ``io_bytes`` its
    operand and result bytes per chip (the HBM bytes when nothing better is
    known). A Pallas ``CostEstimate`` wins. Otherwise an attention kernel (name
    matches splash/flash/mha...) with (q, k, v) operands ``[..., S_q, D]``,
    ``[..., S_kv, D]``, ``[..., S_kv, D_v]`` costs ``2*S_q*S_kv*D`` for
    Q.K^T plus ``2*S_q*S_kv*D_v`` for P.V per leading (batch x head) index
    -- the standard count (FlashAttention paper, Dao et al. 2022, sec. 3.1);
    no mask sparsity is assumed (Wan's self-attention is full). FLOPs are None
    when neither applies.
    """
    io = io_bytes
    if op.cost_estimate_flops is not None:
        return op.cost_estimate_flops, op.cost_estimate_bytes or float(io)
    if not _ATTENTION_KERNEL.search(op.kernel_name or op.call_target):
        return None, float(io)
    qkv = attention_operands(operand_types)
    if qkv is None:
        return None, float(io)
    q, k, v = qkv
    flops = attention_flops(
        lead=math.prod(q.shape[:-2]), q_length=q.shape[-2], kv_length=k.shape[-2],
        head_dim=q.shape[-1], value_dim=v.shape[-1],
    )  # fmt: skip
    return flops, float(io)


def op_flops(op: Op, *, local_shape: Callable[[int], tuple[int, ...]]) -> float:
    """FLOPs per chip of a matmul or convolution (0 for other ops), from local shapes.

    ``local_shape(v)`` is value ``v``'s shape on one chip.
    """
    if op.name == "stablehlo.dot_general":
        lhs = local_shape(op.operands[0])
        k = math.prod(lhs[d] for d in op.contracting_dims)
        return matmul_flops(math.prod(local_shape(op.results[0])), k)
    if op.name == "stablehlo.convolution" and op.convolution is not None:
        c = op.convolution
        lhs = local_shape(op.operands[0])
        kernel = local_shape(op.operands[1])
        out = local_shape(op.results[0])
        positions = [
            window_positions(
                lhs[i], out[o], kernel[k], stride=c.strides[d],
                padding_low=c.padding_low[d], lhs_dilation=c.lhs_dilation[d],
                rhs_dilation=c.rhs_dilation[d],
            )
            for d, (i, k, o) in enumerate(c.spatial)
        ]  # fmt: skip
        return conv_flops(
            batch=lhs[c.input_batch],
            input_features=kernel[c.kernel_input_feature],
            output_features=kernel[c.kernel_output_feature],
            positions=positions,
        )
    return 0.0
