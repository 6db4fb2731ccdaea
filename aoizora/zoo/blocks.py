"""The layers the zoo's programs are built from, written as model codebases write them.

Plain JAX, no sharding code: norms (layer, RMS, group), rotary positions, attention in XLA
(einsums, a softmax in float32 or bfloat16, optionally causal and grouped) or by the splash
kernel, gated and plain MLPs, and convolutions in 1, 2 or 3 spatial dimensions. Every
function takes and returns bfloat16 activations; what runs in float32 says so.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from aoizora.workloads.splash import splash_attention

__all__ = [
    "ACTIVATIONS",
    "attend",
    "conv",
    "group_norm",
    "layer_norm",
    "rms_norm",
    "rope",
    "upsample",
]

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}


def layer_norm(x: jax.Array, *, f32: bool = True) -> jax.Array:
    """Layer norm over the last axis without an affine part, in float32 when ``f32``."""
    h = x.astype(jnp.float32) if f32 else x
    mean = jnp.mean(h, -1, keepdims=True)
    h = (h - mean) * jax.lax.rsqrt(jnp.var(h, -1, keepdims=True) + 1e-6)
    return h.astype(x.dtype)


def rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    """RMS norm over the last axis in float32, with a learned scale."""
    h = x.astype(jnp.float32)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6)
    return (h * scale.astype(jnp.float32)).astype(x.dtype)


def group_norm(x: jax.Array, groups: int) -> jax.Array:
    """Group norm over the channels (last axis) and every spatial axis, in float32."""
    shape = x.shape
    h = x.astype(jnp.float32).reshape(shape[0], -1, groups, shape[-1] // groups)
    mean = jnp.mean(h, (1, 3), keepdims=True)
    h = (h - mean) * jax.lax.rsqrt(jnp.var(h, (1, 3), keepdims=True) + 1e-6)
    return h.reshape(shape).astype(x.dtype)


def rope(x: jax.Array) -> jax.Array:
    """Rotary positions on ``x`` (batch, length, heads, head_dim), in float32."""
    length, half = x.shape[1], x.shape[-1] // 2
    freq = 10000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = jnp.arange(length, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x32 = x.astype(jnp.float32)
    a, b = x32[..., :half], x32[..., half:]
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1).astype(x.dtype)


def _xla(q: jax.Array, k: jax.Array, v: jax.Array, *, softmax: str, causal: bool) -> jax.Array:
    """Einsum attention over every key: (b, l, h, d) queries against (b, l, g, d) keys and
    values, ``h`` a multiple of ``g`` (grouped queries share a key head)."""
    b, length, heads, d = q.shape
    groups = k.shape[2]
    q = q.reshape(b, length, groups, heads // groups, d)
    scores = jnp.einsum("bqgrd,bkgd->bgrqk", q, k)
    kind = jnp.float32 if softmax == "f32" else jnp.bfloat16
    scores = scores.astype(kind) / jnp.asarray(d**0.5, kind)
    if causal:
        keep = jnp.arange(length)[:, None] >= jnp.arange(length)[None, :]
        scores = jnp.where(keep, scores, jnp.asarray(-1e9, kind))
    probs = jax.nn.softmax(scores, -1).astype(q.dtype)
    out = jnp.einsum("bgrqk,bkgd->bqgrd", probs, v)
    return out.reshape(b, length, heads, d)


def attend(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    kind: str,
    softmax: str = "f32",
    causal: bool = False,
    blocks: tuple[int, int, int] = (512, 512, 512),
) -> jax.Array:
    """Self-attention of (batch, length, heads, head_dim) tensors by ``kind``: ``"xla"``
    (einsums, the softmax in ``softmax``'s dtype), ``"dpa"`` (``jax.nn.dot_product_attention``
    with XLA's implementation) or ``"splash"`` (the Pallas kernel at ``blocks``)."""
    if kind == "dpa":
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="xla")
    if kind == "splash":
        qt, kt, vt = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        out, _ = splash_attention(
            qt, kt, vt, None, scale=q.shape[-1] ** -0.5, with_lse=False, block_sizes=blocks
        )
        return out.transpose(0, 2, 1, 3)
    return _xla(q, k, v, softmax=softmax, causal=causal)


def conv(x: jax.Array, w: jax.Array, *, stride: int = 1) -> jax.Array:
    """A 'SAME' convolution of channels-last ``x`` (batch, *spatial, c) by ``w``
    (*window, c, c_out) at ``stride`` along every spatial axis."""
    spatial = x.ndim - 2
    letters = "DHW"[-spatial:] if spatial <= 3 else ""
    spec = (f"N{letters}C", f"{letters}IO", f"N{letters}C")
    return jax.lax.conv_general_dilated(
        x, w, (stride,) * spatial, "SAME", dimension_numbers=spec
    ).astype(x.dtype)


def upsample(x: jax.Array) -> jax.Array:
    """Nearest 2x up-sampling along every spatial axis of channels-last ``x``."""
    for axis in range(1, x.ndim - 1):
        x = jnp.repeat(x, 2, axis=axis)
    return x
