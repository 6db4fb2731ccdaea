"""FLOPs and HBM bytes per chip of the Stage-1 compute ops that need more than a formula line.

A ``dot_general`` costs ``2 * prod(factor sizes)`` divided over its shards and
is counted where :mod:`aoizora.stage1.dag` meets it. Here:

* :func:`conv_flops` -- a ``stablehlo.convolution``, from its result and kernel;
* :func:`kernel_cost` -- an opaque kernel (``custom_call``, e.g. Pallas): its
  ``CostEstimate`` when it has one, else the attention count for kernels whose
  name says attention.

>>> from aoizora.stage1.shardy import TensorType
>>> conv_flops(TensorType((1, 8, 8, 16), 4), TensorType((3, 3, 4, 16), 4), output_feature_dim=3)
73728.0
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

from aoizora.stage1.shardy import Op, TensorType

__all__ = ["attention_operands", "conv_flops", "kernel_cost"]

# Kernels whose FLOPs we infer from (q, k, v) operand shapes when they carry no CostEstimate.
_ATTENTION_KERNEL = re.compile(r"attention|mha|mqa|gqa|flash|splash", re.IGNORECASE)


def conv_flops(out: TensorType, kernel: TensorType, *, output_feature_dim: int) -> float:
    """2 x output elements x (kernel elements / output features), global.

    Each output element is a dot product over the kernel window and the
    input features of its group; the kernel holds exactly that many weights
    per output feature (StableHLO convolution semantics).
    """
    d = output_feature_dim
    out_features = kernel.shape[d] if 0 <= d < len(kernel.shape) else 1
    return 2.0 * out.num_elements * kernel.num_elements / max(1, out_features)


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
    lead = math.prod(q.shape[:-2])
    s_q, d = q.shape[-2], q.shape[-1]
    s_kv, d_v = k.shape[-2], v.shape[-1]
    return 2.0 * lead * s_q * s_kv * (d + d_v), float(io)
