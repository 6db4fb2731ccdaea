"""A model of your own for ``aoizora plan --workload examples/tiny_block.py:make``.

A pre-norm transformer block (self-attention + MLP) in plain JAX: no sharding code,
nothing AoiZora-specific in the step. ``make()`` describes it to the planner: the
abstract arguments, a logical name for every dimension, and rule sets that map those
names onto mesh axes named however you like (here ``dp``, ``sp`` and ``tp``).
Sizes are small so that planning (real TPU compiles included) takes under a minute;
``make_small()`` is the same block at CI sizes (the tests plan it).

    aoizora plan --workload examples/tiny_block.py:make --slice v5e:2x4 --out plan.json
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from aoizora import Rules, user_workload


def block(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """One pre-norm transformer block on ``x`` of shape (batch, length, embed)."""
    h = x * jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-6)
    h = h.astype(x.dtype)
    q, k, v = (jnp.einsum("ble,ehd->blhd", h, params[w]) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / q.shape[-1] ** 0.5
    attn = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1).astype(x.dtype), v)
    x = x + jnp.einsum("blhd,hde->ble", attn, params["wo"])
    return x + jax.nn.gelu(x @ params["w_in"]) @ params["w_out"]


def make():
    """The workload: a batch of 2 sequences of 1024 tokens, 8 heads of 64, MLP 2048."""
    return block_workload(batch=2, length=1024, embed=512, heads=8, head_dim=64, mlp=2048)


def make_small():
    """The same block at CI sizes: compiles in about a second."""
    return block_workload(batch=2, length=128, embed=128, heads=4, head_dim=32, mlp=256)


def block_workload(*, batch: int, length: int, embed: int, heads: int, head_dim: int, mlp: int):
    """Abstract args, a logical name for every dimension, and the rule sets to choose from."""
    bf16 = jnp.bfloat16
    params = {
        "wq": jax.ShapeDtypeStruct((embed, heads, head_dim), bf16),
        "wk": jax.ShapeDtypeStruct((embed, heads, head_dim), bf16),
        "wv": jax.ShapeDtypeStruct((embed, heads, head_dim), bf16),
        "wo": jax.ShapeDtypeStruct((heads, head_dim, embed), bf16),
        "w_in": jax.ShapeDtypeStruct((embed, mlp), bf16),
        "w_out": jax.ShapeDtypeStruct((mlp, embed), bf16),
    }
    param_axes = {
        "wq": ("embed", "heads", None),
        "wk": ("embed", "heads", None),
        "wv": ("embed", "heads", None),
        "wo": ("heads", None, "embed"),
        "w_in": ("embed", "mlp"),
        "w_out": ("mlp", "embed"),
    }
    x = jax.ShapeDtypeStruct((batch, length, embed), bf16)
    activations = ("batch", "length", "embed")
    return user_workload(
        "tiny-block",
        block,
        (params, x),
        (param_axes, activations),
        out_logical_axes=activations,
        rule_sets=(
            # The first rule set is the "default deployment" baseline's.
            Rules.of("dp_tp", [("batch", "dp"), ("heads", "tp"), ("mlp", "tp")]),
            Rules.of("dp_sp", [("batch", "dp"), ("length", "sp")]),
            Rules.of("fsdp_tp", [("batch", "dp"), ("embed", "dp"), ("heads", "tp"), ("mlp", "tp")]),
        ),
    )
