"""A stacked DiT with rotary positions: ``aoizora plan --workload examples/rope_dit.py:FACTORY``.

A third family beside ``examples/dit_block.py`` and ``examples/cross_dit.py``, written as
many model codebases write it: the layers' weights stacked on a leading axis and run with
``jax.lax.scan`` (a loop in the compiled program, one layer's weights sliced per
iteration), one fused QKV projection, rotary position embeddings on queries and keys
(computed in float32 from the token index), a float32 layer norm with a learned scale and
bias, self-attention written with einsums and a float32 ``jax.nn.softmax`` (XLA attention:
no Pallas kernel), and a tanh-approximated gelu MLP. Nothing in the step is sharding code or
AoiZora-specific.

One factory per configuration (``--workload FILE.py:FACTORY`` calls it with no
arguments), sized for one TPU v5e chip, bf16 weights and activations, four layers:

=================  =====  ======  =====  =====  ========  ====
factory            batch  length  embed  heads  head_dim  mlp
=================  =====  ======  =====  =====  ========  ====
make_h64_s2048       2     2048   1024    16       64     4096
make_h64_s4096       1     4096   1024    16       64     4096
make_h128_s1024      4     1024   1536    12      128     6144
make_h128_s3072      1     3072   1536    12      128     6144
make_h128_s6144      1     6144   1024     8      128     4096
make_h64_s1536       4     1536   1024    16       64     4096
make_h128_s2560      2     2560   1536    12      128     6144
make_h64_s3584       2     3584   1024    16       64     4096
make_h128_s1792      2     1792   1536    12      128     6144
make_h64_s2816       2     2816   1024    16       64     4096
make_h128_s4608      1     4608   1024     8      128     4096
make_small           2      128    128     4       32      512
=================  =====  ======  =====  =====  ========  ====

    aoizora plan --workload examples/rope_dit.py:make_h64_s2048 --slice v5e:1x1 --out plan.json
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from aoizora import Rules, user_workload

if TYPE_CHECKING:
    from aoizora.workloads.base import Workload

LAYERS = 4
ROPE_BASE = 10000.0


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """Layer norm over the last axis in float32, with a learned scale and bias."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, -1, keepdims=True)
    h = (x32 - mean) * jax.lax.rsqrt(jnp.var(x32, -1, keepdims=True) + 1e-6)
    return (h * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def rope(x: jax.Array) -> jax.Array:
    """Rotary embeddings on ``x`` (batch, length, heads, head_dim): each pair of the head's
    halves rotated by the token's index times its frequency, in float32."""
    length, half = x.shape[1], x.shape[-1] // 2
    freq = ROPE_BASE ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = jnp.arange(length, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x32 = x.astype(jnp.float32)
    a, b = x32[..., :half], x32[..., half:]
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1).astype(x.dtype)


def layer(x: jax.Array, p: dict[str, jax.Array]) -> tuple[jax.Array, None]:
    """One pre-norm layer: rotary self-attention, then the gelu MLP, each residual."""
    h = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    qkv = jnp.einsum("ble,ethd->tblhd", h, p["wqkv"])
    q, k, v = rope(qkv[0]), rope(qkv[1]), qkv[2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / q.shape[-1] ** 0.5
    probs = jax.nn.softmax(scores, -1).astype(x.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
    x = x + jnp.einsum("blhd,hde->ble", out, p["wo"])
    h = layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    return x + jax.nn.gelu(h @ p["w_in"], approximate=True) @ p["w_out"], None


def rope_dit(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """The stacked layers in turn (``jax.lax.scan``) on tokens ``x`` (batch, length, embed)."""
    out, _ = jax.lax.scan(layer, x, params)
    return out


def make_h64_s2048() -> Workload:
    """Head dim 64: 2 sequences of 2048 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return rope_workload(batch=2, length=2048, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h64_s4096() -> Workload:
    """Head dim 64: 1 sequence of 4096 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return rope_workload(batch=1, length=4096, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s1024() -> Workload:
    """Head dim 128: 4 sequences of 1024 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return rope_workload(batch=4, length=1024, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s3072() -> Workload:
    """Head dim 128: 1 sequence of 3072 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return rope_workload(batch=1, length=3072, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s6144() -> Workload:
    """Head dim 128: 1 sequence of 6144 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return rope_workload(batch=1, length=6144, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h64_s1536() -> Workload:
    """Head dim 64: 4 sequences of 1536 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return rope_workload(batch=4, length=1536, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s2560() -> Workload:
    """Head dim 128: 2 sequences of 2560 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return rope_workload(batch=2, length=2560, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h64_s3584() -> Workload:
    """Head dim 64: 2 sequences of 3584 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return rope_workload(batch=2, length=3584, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s1792() -> Workload:
    """Head dim 128: 2 sequences of 1792 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return rope_workload(batch=2, length=1792, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h64_s2816() -> Workload:
    """Head dim 64: 2 sequences of 2816 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return rope_workload(batch=2, length=2816, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s4608() -> Workload:
    """Head dim 128: 1 sequence of 4608 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return rope_workload(batch=1, length=4608, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_small() -> Workload:
    """The same model at CI sizes: compiles in about a second."""
    return rope_workload(batch=2, length=128, embed=128, heads=4, head_dim=32, mlp=512)


def rope_workload(
    *, batch: int, length: int, embed: int, heads: int, head_dim: int, mlp: int
) -> Workload:
    """Abstract args, a logical name for every dimension, and the rule sets to choose from."""
    bf16 = jnp.bfloat16
    shapes = {
        "wqkv": ((LAYERS, embed, 3, heads, head_dim), ("layers", "embed", None, "heads", None)),
        "wo": ((LAYERS, heads, head_dim, embed), ("layers", "heads", None, "embed")),
        "w_in": ((LAYERS, embed, mlp), ("layers", "embed", "mlp")),
        "w_out": ((LAYERS, mlp, embed), ("layers", "mlp", "embed")),
        "ln1_scale": ((LAYERS, embed), ("layers", None)),
        "ln1_bias": ((LAYERS, embed), ("layers", None)),
        "ln2_scale": ((LAYERS, embed), ("layers", None)),
        "ln2_bias": ((LAYERS, embed), ("layers", None)),
    }
    params = {name: jax.ShapeDtypeStruct(shape, bf16) for name, (shape, _) in shapes.items()}
    param_axes = {name: axes for name, (_, axes) in shapes.items()}
    x = jax.ShapeDtypeStruct((batch, length, embed), bf16)
    activations = ("batch", "length", "embed")
    return user_workload(
        f"rope-dit-l{LAYERS}-b{batch}-s{length}-e{embed}-h{heads}x{head_dim}",
        rope_dit,
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
