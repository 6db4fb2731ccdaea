"""A small decoder-style transformer as a user workload: Stage 1 on a model that is not Wan.

Eight pre-norm layers (``jax.lax.scan`` over stacked weights) of multi-head
self-attention written in plain JAX (no Pallas kernel, so Shardy sees and
reshards the whole attention) and a GELU MLP; bf16 weights and activations.
Six rule sets cover the usual ways to split it: data parallel, FSDP (weights and
batch over ``fsdp``), Megatron tensor parallel (heads and MLP over ``tensor``),
sequence parallel (tokens over ``context``, K/V gathered by the partitioner), and
FSDP or sequence parallel combined with tensor parallel.

    >>> wl = transformer_workload()
    >>> wl.name, [r.name for r in wl.rule_sets]
    ('transformer-8x1024', ['dp', 'fsdp', 'tp', 'sp', 'fsdp_tp', 'sp_tp'])

Used by ``benchmarks/stage1_recall.py --workload benchmarks.user_transformer:transformer_workload``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from aoizora.workloads.base import Workload, user_workload
from aoizora.workloads.rules import Rules

__all__ = ["transformer_workload"]

LAYERS, BATCH, TOKENS, DIM, HEADS, MLP = 8, 8, 2048, 1024, 8, 4096
HEAD_DIM = DIM // HEADS


def _layer_norm(x: jax.Array) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * jax.lax.rsqrt(var + 1e-6)).astype(x.dtype)


def _block(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    b, s, _ = x.shape
    y = _layer_norm(x)
    q, k, v = (
        (y @ p[n]).reshape(b, s, HEADS, HEAD_DIM).transpose(0, 2, 1, 3) for n in ("wq", "wk", "wv")
    )
    logits = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(HEAD_DIM).astype(q.dtype)
    attn = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)
    a = jnp.einsum("bhqk,bhkd->bhqd", attn, v).transpose(0, 2, 1, 3).reshape(b, s, DIM)
    x = x + a @ p["wo"]
    return x + jax.nn.gelu(_layer_norm(x) @ p["w1"]) @ p["w2"]


def _step(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return jax.lax.scan(lambda c, p: (_block(c, p), None), x, params)[0]


def transformer_workload() -> Workload:
    """The transformer above as a :class:`~aoizora.workloads.base.Workload`."""
    bf16 = jnp.bfloat16
    shapes: dict[str, tuple[tuple[int, ...], tuple[str | None, ...]]] = {
        "wq": ((LAYERS, DIM, DIM), ("layers", "embed", "heads")),
        "wk": ((LAYERS, DIM, DIM), ("layers", "embed", "heads")),
        "wv": ((LAYERS, DIM, DIM), ("layers", "embed", "heads")),
        "wo": ((LAYERS, DIM, DIM), ("layers", "heads", "embed")),
        "w1": ((LAYERS, DIM, MLP), ("layers", "embed", "mlp")),
        "w2": ((LAYERS, MLP, DIM), ("layers", "mlp", "embed")),
    }
    params: dict[str, Any] = {n: jax.ShapeDtypeStruct(s, bf16) for n, (s, _) in shapes.items()}
    param_axes = {n: axes for n, (_, axes) in shapes.items()}
    activations = ("batch", "length", "act_embed")
    rules = (
        Rules.of("dp", [("batch", "data")]),
        Rules.of("fsdp", [("batch", ("data", "fsdp")), ("embed", "fsdp")]),
        Rules.of("tp", [("batch", "data"), ("heads", "tensor"), ("mlp", "tensor")]),
        Rules.of("sp", [("batch", "data"), ("length", "context")]),
        Rules.of(
            "fsdp_tp",
            [
                ("batch", ("data", "fsdp")),
                ("embed", "fsdp"),
                ("heads", "tensor"),
                ("mlp", "tensor"),
            ],
        ),
        Rules.of(
            "sp_tp",
            [("batch", "data"), ("length", "context"), ("heads", "tensor"), ("mlp", "tensor")],
        ),  # fmt: skip
    )
    return user_workload(
        f"transformer-{LAYERS}x{DIM}",
        _step,
        (params, jax.ShapeDtypeStruct((BATCH, TOKENS, DIM), bf16)),
        (param_axes, activations),
        out_logical_axes=activations,
        rule_sets=rules,
    )
