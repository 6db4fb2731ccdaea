"""A DiT block for ``aoizora plan --workload examples/dit_block.py:make_h64_s4096``.

A diffusion-transformer block in plain JAX: adaLN modulation from a conditioning vector
(shift, scale and gate for the attention and the MLP, as in DiT's ``adaLN-Zero``),
self-attention written with einsums and a float32 ``jax.nn.softmax`` (XLA attention:
no Pallas, no splash kernel, every score matrix materialised), and a gelu MLP. Nothing in
the step is sharding code or AoiZora-specific; ``dit_workload`` describes it to the
planner with logical names and the same rule sets as ``examples/tiny_block.py``.

One factory per configuration (``--workload FILE.py:FACTORY`` calls it with no
arguments), sized for one TPU v5e chip (16 GB HBM), bf16 weights and activations:

=================  =====  ======  =====  =====  ========  ====
factory            batch  length  embed  heads  head_dim  mlp
=================  =====  ======  =====  =====  ========  ====
make_h64_s4096       2     4096   1024    16       64     4096
make_h64_s8192       1     8192   1024    16       64     4096
make_h128_s2048      2     2048   1536    12      128     6144
make_h128_s4096      2     4096   1536    12      128     6144
make_h128_s8192      1     8192   1024     8      128     4096
make_h128_s6144      1     6144   1024     8      128     4096
make_h64_s6144       1     6144   1024    16       64     4096
make_h128_s5120      1     5120   1024     8      128     4096
make_h64_s2048       4     2048   1024    16       64     4096
make_h128_s1024      8     1024   2048    16      128     8192
make_h128_s3072      2     3072   1536    12      128     6144
make_h128_s4608      1     4608   1024     8      128     4096
make_h64_s5120       1     5120   1024    16       64     4096
make_h64_s7168       1     7168   1024    16       64     4096
make_h64_s256       32      256   1024    16       64     4096
make_h64_s1024       8     1024   1024    16       64     4096
make_h128_s1024_b4   4     1024   1536    12      128     6144
make_h128_s2560      2     2560   1536    12      128     6144
make_h64_s3584       2     3584   1024    16       64     4096
make_h128_s1536      4     1536   1536    12      128     6144
make_h64_s3072       2     3072   1024    16       64     4096
make_h128_s7168      1     7168   1024     8      128     4096
make_h128_s9216      1     9216   1024     8      128     4096
make_h64_s6656       1     6656   1024    16       64     4096
make_h128_s2304      2     2304   1536    12      128     6144
make_h64_s1536       4     1536   1024    16       64     4096
make_small           2      128    128     4       32      512
=================  =====  ======  =====  =====  ========  ====

    aoizora plan --workload examples/dit_block.py:make_h64_s4096 --slice v5e:1x1 --out plan.json
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from aoizora import Rules, user_workload

if TYPE_CHECKING:
    from aoizora.workloads.base import Workload


def modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """adaLN: a float32 layer norm of ``x`` (no affine), scaled and shifted per sample."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, -1, keepdims=True)
    h = (x32 - mean) * jax.lax.rsqrt(jnp.var(x32, -1, keepdims=True) + 1e-6)
    return (h * (1.0 + scale[:, None, :]) + shift[:, None, :]).astype(x.dtype)


def attention(params: dict[str, jax.Array], h: jax.Array) -> jax.Array:
    """Multi-head self-attention in XLA: einsums and a float32 softmax over all keys."""
    q, k, v = (jnp.einsum("ble,ehd->blhd", h, params[w]) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / q.shape[-1] ** 0.5
    probs = jax.nn.softmax(scores, -1).astype(h.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
    return jnp.einsum("blhd,hde->ble", out, params["wo"])


def dit_block(params: dict[str, jax.Array], x: jax.Array, c: jax.Array) -> jax.Array:
    """One DiT block on tokens ``x`` (batch, length, embed) conditioned on ``c`` (batch, embed).

    ``c`` (the timestep and class embedding, say) gives six vectors per sample through one
    linear layer on ``silu(c)``: shift, scale and gate of the attention, then of the MLP.
    """
    mod = jnp.einsum("be,ekf->bkf", jax.nn.silu(c), params["w_mod"]).astype(jnp.float32)
    shift1, scale1, gate1, shift2, scale2, gate2 = (mod[:, i] for i in range(6))
    attn = attention(params, modulate(x, shift1, scale1))
    x = x + (gate1[:, None, :] * attn.astype(jnp.float32)).astype(x.dtype)
    h = modulate(x, shift2, scale2)
    mlp = jax.nn.gelu(h @ params["w_in"]) @ params["w_out"]
    return x + (gate2[:, None, :] * mlp.astype(jnp.float32)).astype(x.dtype)


def make_h64_s4096() -> Workload:
    """Head dim 64: 2 sequences of 4096 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=2, length=4096, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h64_s8192() -> Workload:
    """Head dim 64: 1 sequence of 8192 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=8192, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s2048() -> Workload:
    """Head dim 128: 2 sequences of 2048 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=2, length=2048, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s4096() -> Workload:
    """Head dim 128: 2 sequences of 4096 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=2, length=4096, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s8192() -> Workload:
    """Head dim 128: 1 sequence of 8192 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=8192, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h128_s6144() -> Workload:
    """Head dim 128: 1 sequence of 6144 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=6144, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h64_s6144() -> Workload:
    """Head dim 64: 1 sequence of 6144 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=6144, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s5120() -> Workload:
    """Head dim 128: 1 sequence of 5120 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=5120, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h64_s2048() -> Workload:
    """Head dim 64: 4 sequences of 2048 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=4, length=2048, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s1024() -> Workload:
    """Head dim 128: 8 sequences of 1024 tokens, 16 heads of 128, embed 2048, MLP 8192."""
    return dit_workload(batch=8, length=1024, embed=2048, heads=16, head_dim=128, mlp=8192)


def make_h128_s3072() -> Workload:
    """Head dim 128: 2 sequences of 3072 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=2, length=3072, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s4608() -> Workload:
    """Head dim 128: 1 sequence of 4608 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=4608, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h64_s5120() -> Workload:
    """Head dim 64: 1 sequence of 5120 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=5120, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h64_s7168() -> Workload:
    """Head dim 64: 1 sequence of 7168 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=7168, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h64_s256() -> Workload:
    """Head dim 64: 32 sequences of 256 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=32, length=256, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h64_s1024() -> Workload:
    """Head dim 64: 8 sequences of 1024 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=8, length=1024, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s1024_b4() -> Workload:
    """Head dim 128: 4 sequences of 1024 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=4, length=1024, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h128_s2560() -> Workload:
    """Head dim 128: 2 sequences of 2560 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=2, length=2560, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h64_s3584() -> Workload:
    """Head dim 64: 2 sequences of 3584 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=2, length=3584, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s1536() -> Workload:
    """Head dim 128: 4 sequences of 1536 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=4, length=1536, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h64_s3072() -> Workload:
    """Head dim 64: 2 sequences of 3072 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=2, length=3072, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s7168() -> Workload:
    """Head dim 128: 1 sequence of 7168 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=7168, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h128_s9216() -> Workload:
    """Head dim 128: 1 sequence of 9216 tokens, 8 heads of 128, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=9216, embed=1024, heads=8, head_dim=128, mlp=4096)


def make_h64_s6656() -> Workload:
    """Head dim 64: 1 sequence of 6656 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=1, length=6656, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_h128_s2304() -> Workload:
    """Head dim 128: 2 sequences of 2304 tokens, 12 heads of 128, embed 1536, MLP 6144."""
    return dit_workload(batch=2, length=2304, embed=1536, heads=12, head_dim=128, mlp=6144)


def make_h64_s1536() -> Workload:
    """Head dim 64: 4 sequences of 1536 tokens, 16 heads of 64, embed 1024, MLP 4096."""
    return dit_workload(batch=4, length=1536, embed=1024, heads=16, head_dim=64, mlp=4096)


def make_small() -> Workload:
    """The same block at CI sizes: compiles in about a second."""
    return dit_workload(batch=2, length=128, embed=128, heads=4, head_dim=32, mlp=512)


def dit_workload(
    *, batch: int, length: int, embed: int, heads: int, head_dim: int, mlp: int
) -> Workload:
    """Abstract args, a logical name for every dimension, and the rule sets to choose from."""
    bf16 = jnp.bfloat16
    shapes = {
        "wq": ((embed, heads, head_dim), ("embed", "heads", None)),
        "wk": ((embed, heads, head_dim), ("embed", "heads", None)),
        "wv": ((embed, heads, head_dim), ("embed", "heads", None)),
        "wo": ((heads, head_dim, embed), ("heads", None, "embed")),
        "w_in": ((embed, mlp), ("embed", "mlp")),
        "w_out": ((mlp, embed), ("mlp", "embed")),
        # the modulation's output features stay whole: they scale every token's embedding
        "w_mod": ((embed, 6, embed), ("embed", None, None)),
    }
    params = {name: jax.ShapeDtypeStruct(shape, bf16) for name, (shape, _) in shapes.items()}
    param_axes = {name: axes for name, (_, axes) in shapes.items()}
    x = jax.ShapeDtypeStruct((batch, length, embed), bf16)
    c = jax.ShapeDtypeStruct((batch, embed), bf16)
    activations = ("batch", "length", "embed")
    return user_workload(
        f"dit-block-b{batch}-s{length}-e{embed}-h{heads}x{head_dim}",
        dit_block,
        (params, x, c),
        (param_axes, activations, ("batch", None)),
        out_logical_axes=activations,
        rule_sets=(
            # The first rule set is the "default deployment" baseline's.
            Rules.of("dp_tp", [("batch", "dp"), ("heads", "tp"), ("mlp", "tp")]),
            Rules.of("dp_sp", [("batch", "dp"), ("length", "sp")]),
            Rules.of("fsdp_tp", [("batch", "dp"), ("embed", "dp"), ("heads", "tp"), ("mlp", "tp")]),
        ),
    )
