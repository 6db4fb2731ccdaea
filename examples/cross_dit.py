"""A text-conditioned DiT for ``aoizora plan --workload examples/cross_dit.py:make_h64_s4096``.

Another family than ``examples/dit_block.py``, as a user might bring: two blocks, each
with RMS norms that carry a learned scale (no adaLN), RMS-normed queries and keys,
self-attention through ``jax.nn.dot_product_attention(implementation="xla")`` (XLA
attention: no Pallas kernel), cross-attention from the video tokens to 512 text tokens
written with einsums, and a SwiGLU MLP (``silu(x W1) * (x W3)`` then ``W2``). Nothing in
the step is sharding code or AoiZora-specific.

One factory per configuration (``--workload FILE.py:FACTORY`` calls it with no
arguments), sized for one TPU v5e chip, bf16 weights and activations:

=================  =====  ======  =====  =====  ========  ====
factory            batch  length  embed  heads  head_dim  mlp
=================  =====  ======  =====  =====  ========  ====
make_h64_s4096       2     4096   1024    16       64     2816
make_h64_s6144       1     6144   1024    16       64     2816
make_h128_s3072      2     3072   1536    12      128     4096
make_h128_s8192      1     8192   1024     8      128     2816
make_small           2      128    128     4       32      384
=================  =====  ======  =====  =====  ========  ====

    aoizora plan --workload examples/cross_dit.py:make_h64_s4096 --slice v5e:1x1 --out plan.json
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from aoizora import Rules, user_workload

if TYPE_CHECKING:
    from aoizora.workloads.base import Workload

TEXT_TOKENS = 512
BLOCKS = 2


def rms(x: jax.Array, scale: jax.Array) -> jax.Array:
    """RMS norm over the last axis in float32, times a learned scale."""
    x32 = x.astype(jnp.float32)
    h = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), -1, keepdims=True) + 1e-6)
    return (h * scale.astype(jnp.float32)).astype(x.dtype)


def self_attention(p: dict[str, jax.Array], h: jax.Array) -> jax.Array:
    """Self-attention with RMS-normed queries and keys, XLA's dot-product attention."""
    q, k, v = (jnp.einsum("ble,ehd->blhd", h, p[w]) for w in ("wq", "wk", "wv"))
    q, k = rms(q, p["q_norm"]), rms(k, p["k_norm"])
    out = jax.nn.dot_product_attention(q, k, v, implementation="xla")
    return jnp.einsum("blhd,hde->ble", out, p["wo"])


def cross_attention(p: dict[str, jax.Array], h: jax.Array, text: jax.Array) -> jax.Array:
    """The video tokens attend to the text tokens: einsums and a float32 softmax."""
    q = jnp.einsum("ble,ehd->blhd", h, p["cq"])
    k, v = (jnp.einsum("bte,ehd->bthd", text, p[w]) for w in ("ck", "cv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / q.shape[-1] ** 0.5
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1).astype(h.dtype), v)
    return jnp.einsum("blhd,hde->ble", out, p["co"])


def block(p: dict[str, jax.Array], x: jax.Array, text: jax.Array) -> jax.Array:
    """One block: self-attention, cross-attention, SwiGLU MLP, each pre-normed, residual."""
    x = x + self_attention(p, rms(x, p["norm1"]))
    x = x + cross_attention(p, rms(x, p["norm2"]), text)
    h = rms(x, p["norm3"])
    return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]


def cross_dit(params: list[dict[str, jax.Array]], x: jax.Array, text: jax.Array) -> jax.Array:
    """The blocks in turn on video tokens ``x`` (batch, length, embed) and ``text``."""
    for p in params:
        x = block(p, x, text)
    return x


def make_h64_s4096() -> Workload:
    """Head dim 64: 2 sequences of 4096 tokens, 16 heads of 64, embed 1024."""
    return cross_dit_workload(batch=2, length=4096, embed=1024, heads=16, head_dim=64, mlp=2816)


def make_h64_s6144() -> Workload:
    """Head dim 64: 1 sequence of 6144 tokens, 16 heads of 64, embed 1024."""
    return cross_dit_workload(batch=1, length=6144, embed=1024, heads=16, head_dim=64, mlp=2816)


def make_h128_s3072() -> Workload:
    """Head dim 128: 2 sequences of 3072 tokens, 12 heads of 128, embed 1536."""
    return cross_dit_workload(batch=2, length=3072, embed=1536, heads=12, head_dim=128, mlp=4096)


def make_h128_s8192() -> Workload:
    """Head dim 128: 1 sequence of 8192 tokens, 8 heads of 128, embed 1024."""
    return cross_dit_workload(batch=1, length=8192, embed=1024, heads=8, head_dim=128, mlp=2816)


def make_small() -> Workload:
    """The same model at CI sizes: compiles in a few seconds."""
    return cross_dit_workload(batch=2, length=128, embed=128, heads=4, head_dim=32, mlp=384)


def cross_dit_workload(
    *, batch: int, length: int, embed: int, heads: int, head_dim: int, mlp: int
) -> Workload:
    """Abstract args, a logical name for every dimension, and the rule sets to choose from."""
    bf16 = jnp.bfloat16
    shapes = {
        **{w: ((embed, heads, head_dim), ("embed", "heads", None)) for w in ("wq", "wk", "wv")},
        **{w: ((embed, heads, head_dim), ("embed", "heads", None)) for w in ("cq", "ck", "cv")},
        "wo": ((heads, head_dim, embed), ("heads", None, "embed")),
        "co": ((heads, head_dim, embed), ("heads", None, "embed")),
        "q_norm": ((head_dim,), (None,)),
        "k_norm": ((head_dim,), (None,)),
        **{n: ((embed,), ("embed",)) for n in ("norm1", "norm2", "norm3")},
        "w1": ((embed, mlp), ("embed", "mlp")),
        "w3": ((embed, mlp), ("embed", "mlp")),
        "w2": ((mlp, embed), ("mlp", "embed")),
    }
    one = {name: jax.ShapeDtypeStruct(shape, bf16) for name, (shape, _) in shapes.items()}
    one_axes = {name: axes for name, (_, axes) in shapes.items()}
    x = jax.ShapeDtypeStruct((batch, length, embed), bf16)
    text = jax.ShapeDtypeStruct((batch, TEXT_TOKENS, embed), bf16)
    activations = ("batch", "length", "embed")
    return user_workload(
        f"cross-dit-b{batch}-s{length}-e{embed}-h{heads}x{head_dim}",
        cross_dit,
        ([one] * BLOCKS, x, text),
        ([one_axes] * BLOCKS, activations, ("batch", None, "embed")),
        out_logical_axes=activations,
        rule_sets=(
            # The first rule set is the "default deployment" baseline's.
            Rules.of("dp_tp", [("batch", "dp"), ("heads", "tp"), ("mlp", "tp")]),
            Rules.of("dp_sp", [("batch", "dp"), ("length", "sp")]),
        ),
    )
