"""The Wan 2.1 / 2.2 DiT denoising step in JAX, with logical axis names on every dimension.

Architecture from Wan-Video/Wan2.1 and Wan2.2 ``wan/modules/model.py`` and ``wan/configs``
(also diffusers ``transformer_wan.py``), written anew here:

* patch embedding: Conv3d with kernel = stride = patch (1, 2, 2), i.e. a linear map
  of each 16x1x2x2 latent patch to ``dim``;
* text embedding: Linear(4096 -> dim), GELU(tanh), Linear(dim -> dim) on 512 umT5 tokens;
* time embedding: sinusoid(256) -> Linear -> SiLU -> Linear, then SiLU -> Linear(dim -> 6 dim)
  gives the modulation shared by all blocks (each block adds its own (6, dim) bias);
* block: LayerNorm + shift/scale -> self-attention (q, k, v, o Linear with bias, RMSNorm
  over the full dim on q and k, 3D RoPE split (44, 42, 42) of head_dim) -> gated residual;
  LayerNorm(affine) -> cross-attention to the text tokens -> residual; LayerNorm +
  shift/scale -> FFN (GELU tanh) -> gated residual;
* head: LayerNorm + (2, dim) modulation -> Linear(dim -> 16*1*2*2) -> unpatchify.

Wan 2.2 (docs/facts.md, Wan 2.2): TI2V-5B has 48 latent channels (its VAE
compresses 4x16x16) and a timestep per token, so the time MLP runs on every token
and the modulation is per token (``(B, S, 6, dim)``; Wan2.2 ``model.py`` and
maxdiffusion's ``per_token_t`` path). A14B is two Wan-14B-shaped experts: its step
takes the active expert's weights first and the idle expert's second, unread but
resident in HBM (compiled with ``keep_unused``), so one program serves both.

The step runs both classifier-free-guidance passes as one batch of 2; layers go
through :func:`jax.lax.scan` over stacked weights; weights and activations are
bf16 (norms, RoPE and modulation math in f32, as Wan does under autocast); the
timestep is f32 (bf16 cannot hold timesteps up to 1000 to one step).

Model sizes, clip arithmetic, weight shapes, rule sets and analytic FLOPs are in
:mod:`aoizora.workloads.wan_config` (re-exported here).

    >>> clip = parse_resolution("480p")
    >>> clip, token_grid(clip), num_tokens(clip)
    (Clip(width=832, height=480, frames=81), (21, 30, 52), 32760)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from aoizora.errors import WorkloadError
from aoizora.workloads.attention import (
    Kernel,
    attention_kinds,
    sharded_attention,
    usp_degree,
)
from aoizora.workloads.base import BuildContext, Probe, Workload
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import LogicalAxes, Rules, logical_to_pspec, sharding_degree
from aoizora.workloads.wan_config import (
    CFG_BATCH,
    MESH_AXIS_NAMES,
    RESOLUTIONS,
    WAN_CONFIGS,
    WAN_RULE_SETS,
    WanConfig,
    WanFlops,
    check_wan_clip,
    latent_shape,
    model_clip,
    num_tokens,
    parse_resolution,
    token_grid,
    wan_flops,
    wan_param_axes,
    wan_param_shapes,
)

# The configuration names are re-exported: the CLI commands, docs and many
# callers import them from here beside wan_workload.

__all__ = [
    "WanConfig",
    "WAN_CONFIGS",
    "Clip",
    "check_wan_clip",
    "latent_shape",
    "model_clip",
    "token_grid",
    "num_tokens",
    "parse_resolution",
    "RESOLUTIONS",
    "WAN_RULE_SETS",
    "MESH_AXIS_NAMES",
    "WanFlops",
    "wan_flops",
    "wan_abstract_args",
    "wan_logical_axes",
    "wan_step",
    "padded_tokens",
    "wan_workload",
]


# Logical axes of activations inside the step.
_HIDDEN: LogicalAxes = ("activation_batch", "activation_length", "activation_embed")
_FFN: LogicalAxes = ("activation_batch", "activation_length", "activation_mlp")
_QKV: LogicalAxes = ("activation_batch", "activation_heads", "activation_length", "activation_kv")
_TEXT: LogicalAxes = ("activation_batch", "activation_text_length", "activation_embed")
_TEXT_KV: LogicalAxes = (
    "activation_batch",
    "activation_heads",
    "activation_text_length",
    "activation_kv",
)
# Per-token modulation of TI2V-5B: (B, S, 6, dim).
_MOD_TOKENS: LogicalAxes = (
    "activation_batch",
    "activation_length",
    "modulation",
    "activation_embed",
)
_LATENT: LogicalAxes = (
    "activation_batch",
    "latent_channels",
    "latent_frames",
    "latent_height",
    "latent_width",
)


def wan_abstract_args(cfg: WanConfig, clip: Clip, *, clips: int = 1) -> tuple[Any, ...]:
    """``(params, latents, timestep, text)`` as :class:`jax.ShapeDtypeStruct` pytrees.

    latents ``(2, C, F', H', W')`` bf16 (C = 16, or 48 for TI2V-5B), timestep ``(2,)``
    f32 (``(2, tokens)`` with a timestep per token), text ``(2, text_len, text_dim)``
    bf16 (umT5 output, both CFG prompts). A model with experts (A14B) takes the
    idle expert's weights second: ``(params, idle_params, latents, timestep, text)``.
    ``clips`` clips denoised together make the batch ``2 x clips``.
    """
    f, h, w = latent_shape(clip, cfg)
    batch = CFG_BATCH * clips
    if h % cfg.patch[1] or w % cfg.patch[2] or f % cfg.patch[0]:
        raise WorkloadError(f"latent {(f, h, w)} is not divisible by patch {cfg.patch}")
    params = wan_param_shapes(cfg, jnp.bfloat16)
    latents = jax.ShapeDtypeStruct((batch, cfg.in_channels, f, h, w), jnp.bfloat16)
    t_shape = (batch, num_tokens(clip, cfg)) if cfg.per_token_timestep else (batch,)
    timestep = jax.ShapeDtypeStruct(t_shape, jnp.float32)
    text = jax.ShapeDtypeStruct((batch, cfg.text_len, cfg.text_dim), jnp.bfloat16)
    experts = (params, params) if cfg.experts is not None else (params,)
    return (*experts, latents, timestep, text)


def wan_logical_axes(cfg: WanConfig) -> tuple[tuple[Any, ...], LogicalAxes]:
    """Logical axes of :func:`wan_abstract_args` and of the result."""
    # A per-token timestep stays whole on every device (2 x tokens floats).
    t_axes = ("activation_batch", "timestep_tokens") if cfg.per_token_timestep else ()
    experts = (wan_param_axes(cfg),) * (2 if cfg.experts is not None else 1)
    args = (
        *experts,
        _LATENT,
        t_axes or ("activation_batch",),
        ("activation_batch", "activation_text_length", "activation_text_embed"),
    )
    return args, _LATENT


# ---------------------------------------------------------------------------------------
# The step.


def padded_tokens(num_tokens: int, seq_degree: int) -> int:
    """Tokens after padding the sequence to a multiple of its sharding degree.

    >>> padded_tokens(32760, 16)
    32768
    """
    return -(-num_tokens // seq_degree) * seq_degree


def _layer_norm(x: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    return (x32 - mean) * jax.lax.rsqrt(var + eps)


def _rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
    return (y * weight.astype(jnp.float32)).astype(x.dtype)


def _rope_angles(cfg: WanConfig, grid: tuple[int, int, int], seq_len: int) -> jax.Array:
    """3D RoPE angles ``(seq_len, head_dim/2)``: frequencies split (22, 21, 21) for 128.

    Wan ``rope_params``: theta 10000, per axis ``pos / 10000**(2i/d_axis)``; head_dim
    split as ``d - 4(d//6), 2(d//6), 2(d//6)`` = (44, 42, 42) channels. Built from
    iotas so no large constant lands in the HLO.
    """
    half = cfg.head_dim // 2
    parts = (half - 2 * (half // 3), half // 3, half // 3)
    _, gh, gw = grid
    t = jnp.arange(seq_len, dtype=jnp.int32)
    pos = ((t // (gh * gw)), (t // gw) % gh, t % gw)
    angles = []
    for p, n in zip(pos, parts, strict=True):
        d_axis = 2 * n
        inv = 1.0 / (10000.0 ** (jnp.arange(0, d_axis, 2, dtype=jnp.float32) / d_axis))
        angles.append(p.astype(jnp.float32)[:, None] * inv[None, :])
    return jnp.concatenate(angles, axis=-1)


def _apply_rope(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotate adjacent channel pairs of ``(B, S, H, D)`` by ``angles (S, D/2)``."""
    b, s, h, d = x.shape
    xr = x.astype(jnp.float32).reshape(b, s, h, d // 2, 2)
    cos = jnp.cos(angles)[None, :, None, :]
    sin = jnp.sin(angles)[None, :, None, :]
    re_, im = xr[..., 0], xr[..., 1]
    out = jnp.stack([re_ * cos - im * sin, re_ * sin + im * cos], axis=-1)
    return out.reshape(b, s, h, d).astype(x.dtype)


def _sinusoid(t: jax.Array, dim: int) -> jax.Array:
    """Wan ``sinusoidal_embedding_1d``: [cos, sin] of t * 10000**(-i/half)."""
    half = dim // 2
    freqs = jnp.power(10000.0, -jnp.arange(half, dtype=jnp.float32) / half)
    arg = t.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)


@dataclass(frozen=True)
class _Shard:
    """Sharding-constraint helper bound to one BuildContext."""

    ctx: BuildContext
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.ctx.mesh.axis_names))

    def spec(self, axes: LogicalAxes) -> PartitionSpec:
        return logical_to_pspec(axes, self.ctx.rules, self.names, self.ctx.mesh_sizes)

    def __call__(self, x: jax.Array, axes: LogicalAxes) -> jax.Array:
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.ctx.mesh, self.spec(axes)))


def _linear(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.einsum("...i,io->...o", x, w) + b


@dataclass(frozen=True)
class _Step:
    """What the pieces of one candidate's step share."""

    cfg: WanConfig
    ctx: BuildContext
    shard: _Shard
    kernel: Kernel
    n_tok: int
    s_pad: int
    q_spec: PartitionSpec

    def heads_split(self, x: jax.Array) -> jax.Array:  # (B, S, dim) -> (B, H, S, hd)
        b, s, _ = x.shape
        return x.reshape(b, s, self.cfg.num_heads, self.cfg.head_dim).transpose(0, 2, 1, 3)

    def heads_merge(self, x: jax.Array) -> jax.Array:  # (B, H, S, hd) -> (B, S, dim)
        b, _, s, _ = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, s, self.cfg.num_heads * self.cfg.head_dim)


def _self_attention(
    st: _Step, x: jax.Array, p: Mapping[str, jax.Array], e: tuple[jax.Array, ...],
    angles: jax.Array,
) -> jax.Array:  # fmt: skip
    shift1, scale1, gate1 = e
    eps, shard, dt = st.cfg.eps, st.shard, x.dtype
    heads, hd = st.cfg.num_heads, st.cfg.head_dim
    y = (_layer_norm(x, eps) * (1 + scale1) + shift1).astype(dt)
    q = _rms_norm(_linear(y, p["sa_q_w"], p["sa_q_b"]), p["sa_norm_q"], eps)
    k = _rms_norm(_linear(y, p["sa_k_w"], p["sa_k_b"]), p["sa_norm_k"], eps)
    v = _linear(y, p["sa_v_w"], p["sa_v_b"])
    b_, s_, _ = q.shape
    q = _apply_rope(q.reshape(b_, s_, heads, hd), angles).reshape(b_, s_, -1)
    k = _apply_rope(k.reshape(b_, s_, heads, hd), angles).reshape(b_, s_, -1)
    q, k, v = (shard(st.heads_split(t), _QKV) for t in (q, k, v))
    a = sharded_attention(
        q, k, v, mesh=st.ctx.mesh, q_spec=st.q_spec, kind=st.ctx.attention, kernel=st.kernel,
        kv_valid_len=st.n_tok, tiles=st.ctx.splash_blocks,
    )  # fmt: skip
    a = shard(st.heads_merge(a), _HIDDEN)
    y = _linear(a, p["sa_o_w"], p["sa_o_b"])
    return shard((x.astype(jnp.float32) + y.astype(jnp.float32) * gate1).astype(dt), _HIDDEN)


def _cross_attention(
    st: _Step, x: jax.Array, p: Mapping[str, jax.Array], text: jax.Array
) -> jax.Array:
    """Cross-attention to the text tokens (no modulation; LayerNorm with affine)."""
    eps, shard, dt = st.cfg.eps, st.shard, x.dtype
    y = (_layer_norm(x, eps) * p["norm3_w"].astype(jnp.float32)
         + p["norm3_b"].astype(jnp.float32)).astype(dt)  # fmt: skip
    q = _rms_norm(_linear(y, p["ca_q_w"], p["ca_q_b"]), p["ca_norm_q"], eps)
    k = _rms_norm(_linear(text, p["ca_k_w"], p["ca_k_b"]), p["ca_norm_k"], eps)
    v = _linear(text, p["ca_v_w"], p["ca_v_b"])
    q = shard(st.heads_split(q), _QKV)
    k, v = shard(st.heads_split(k), _TEXT_KV), shard(st.heads_split(v), _TEXT_KV)
    # q is sharded like self-attention's; the text K/V are gathered.
    a = sharded_attention(
        q, k, v, mesh=st.ctx.mesh, q_spec=st.q_spec, kind="gather_kv", kernel=st.kernel,
        kv_valid_len=text.shape[1], tiles=st.ctx.splash_blocks,
    )  # fmt: skip
    a = shard(st.heads_merge(a), _HIDDEN)
    return shard(x + _linear(a, p["ca_o_w"], p["ca_o_b"]), _HIDDEN)


def _block(
    st: _Step, x: jax.Array, p: Mapping[str, jax.Array], e0: jax.Array, text: jax.Array,
    angles: jax.Array,
) -> jax.Array:  # fmt: skip
    """One transformer block: self-attention, cross-attention, feed-forward."""
    if st.cfg.per_token_timestep:  # (B, S, 6, dim): shift/scale/gate per token
        e = st.shard(p["modulation"].astype(jnp.float32)[None, None] + e0, _MOD_TOKENS)
        shift1, scale1, gate1, shift2, scale2, gate2 = (e[:, :, i] for i in range(6))
    else:  # (B, 6, dim): one per sample, broadcast over the tokens
        e = p["modulation"].astype(jnp.float32)[None] + e0
        e = st.shard(e, ("activation_batch", "modulation", "activation_embed"))
        shift1, scale1, gate1, shift2, scale2, gate2 = (e[:, i : i + 1] for i in range(6))
    dt = x.dtype
    x = _self_attention(st, x, p, (shift1, scale1, gate1), angles)
    x = _cross_attention(st, x, p, text)
    y = (_layer_norm(x, st.cfg.eps) * (1 + scale2) + shift2).astype(dt)
    hmid = st.shard(jax.nn.gelu(_linear(y, p["ffn_w1"], p["ffn_b1"]), approximate=True), _FFN)
    y = _linear(hmid, p["ffn_w2"], p["ffn_b2"])
    return st.shard((x.astype(jnp.float32) + y.astype(jnp.float32) * gate2).astype(dt), _HIDDEN)


def _embed(
    st: _Step, params: Any, latents: jax.Array, timestep: jax.Array, text: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Patchified tokens, the time embedding, the shared modulation and the text tokens."""
    cfg = st.cfg
    bsz, ch, f, h, w = latents.shape
    pf, ph, pw = cfg.patch
    gf, gh, gw = f // pf, h // ph, w // pw
    # Patchify: (B, C, F, H, W) -> (B, tokens, C*pf*ph*pw), tokens ordered (f, h, w)
    # like Conv3d(stride=patch).flatten(2).transpose(1, 2).
    x = latents.reshape(bsz, ch, gf, pf, gh, ph, gw, pw)
    x = x.transpose(0, 2, 4, 6, 1, 3, 5, 7).reshape(bsz, gf * gh * gw, ch * pf * ph * pw)
    x = _linear(x, params["patch_w"], params["patch_b"])
    if st.s_pad != st.n_tok:
        x = jnp.pad(x, ((0, 0), (0, st.s_pad - st.n_tok), (0, 0)))
    x = st.shard(x, _HIDDEN)

    # Time embedding and the shared modulation (f32, as Wan's autocast(float32) block):
    # one per sample, or one per token (TI2V-5B; padded tokens get t = 0).
    if cfg.per_token_timestep:
        t = jnp.pad(timestep, ((0, 0), (0, st.s_pad - st.n_tok)))
        t = st.shard(t, ("activation_batch", "activation_length"))
        e = _sinusoid(t.reshape(-1), cfg.freq_dim).reshape(bsz, st.s_pad, cfg.freq_dim)
    else:
        e = _sinusoid(timestep, cfg.freq_dim)
    e = _linear(e.astype(x.dtype), params["time_w1"], params["time_b1"])
    e = _linear(jax.nn.silu(e), params["time_w2"], params["time_b2"])
    e0 = _linear(jax.nn.silu(e), params["time_proj_w"], params["time_proj_b"])
    e0 = e0.astype(jnp.float32).reshape(*e0.shape[:-1], 6, cfg.dim)
    if cfg.per_token_timestep:
        e, e0 = st.shard(e, _HIDDEN), st.shard(e0, _MOD_TOKENS)

    txt = _linear(text, params["text_w1"], params["text_b1"])
    txt = _linear(jax.nn.gelu(txt, approximate=True), params["text_w2"], params["text_b2"])
    return x, e, e0, st.shard(txt, _TEXT)


def _head(
    st: _Step, params: Any, x: jax.Array, e: jax.Array, latent_shape: tuple[int, ...]
) -> jax.Array:
    """LayerNorm + (2, dim) modulation, Linear, unpatchify."""
    cfg = st.cfg
    bsz, _, f, h, w = latent_shape
    pf, ph, pw = cfg.patch
    gf, gh, gw = f // pf, h // ph, w // pw
    mod = params["head_modulation"].astype(jnp.float32)
    if cfg.per_token_timestep:  # e: (B, S, dim) -> (B, S, 2, dim)
        eh = mod[None, None] + e.astype(jnp.float32)[:, :, None]
        shift, scale = eh[:, :, 0], eh[:, :, 1]
    else:  # e: (B, dim) -> (B, 2, dim)
        eh = mod[None] + e.astype(jnp.float32)[:, None]
        shift, scale = eh[:, 0:1], eh[:, 1:2]
    y = (_layer_norm(x, cfg.eps) * (1 + scale) + shift).astype(x.dtype)
    y = _linear(y, params["head_w"], params["head_b"])[:, : st.n_tok]
    co = cfg.out_channels
    y = y.reshape(bsz, gf, gh, gw, pf, ph, pw, co)
    y = y.transpose(0, 7, 1, 4, 2, 5, 3, 6).reshape(bsz, co, f, h, w)
    return st.shard(y, _LATENT)


def wan_step(
    cfg: WanConfig,
    clip: Clip,
    ctx: BuildContext,
    *,
    kernel: Kernel,
    scan_layers: bool = True,
) -> Callable[[Any, jax.Array, jax.Array, jax.Array], jax.Array]:
    """The denoising step ``(params, latents, timestep, text) -> velocity`` for one candidate.

    The token sequence is padded to a multiple of its sharding degree under
    ``ctx.rules`` (padded keys are masked in self-attention; padded tokens are
    dropped before unpatchify). ``kernel`` picks splash (TPU) or XLA attention.
    """
    if ctx.attention not in attention_kinds(cfg.num_heads):
        raise WorkloadError(
            f"Wan step: attention {ctx.attention!r} unknown; use one of "
            f"{attention_kinds(cfg.num_heads)}"
        )
    shard = _Shard(ctx)
    n_tok = num_tokens(clip, cfg)
    seq_deg = sharding_degree(shard.spec(_HIDDEN)[1], ctx.mesh_sizes)
    st = _Step(
        cfg=cfg, ctx=ctx, shard=shard, kernel=kernel, n_tok=n_tok,
        s_pad=padded_tokens(n_tok, seq_deg), q_spec=shard.spec(_QKV),
    )  # fmt: skip
    grid = token_grid(clip, cfg)

    def step(params: Any, latents: jax.Array, timestep: jax.Array, text: jax.Array) -> jax.Array:
        x, e, e0, txt = _embed(st, params, latents, timestep, text)
        angles = _rope_angles(cfg, grid, st.s_pad)
        blocks = params["blocks"]
        if scan_layers:

            def body(carry: jax.Array, p: Mapping[str, jax.Array]) -> tuple[jax.Array, None]:
                return _block(st, carry, p, e0, txt, angles), None

            x, _ = jax.lax.scan(body, x, blocks)
        else:
            for i in range(cfg.num_layers):
                x = _block(st, x, {k: v[i] for k, v in blocks.items()}, e0, txt, angles)
        return _head(st, params, x, e, latents.shape)

    return step


# ---------------------------------------------------------------------------------------
# The workload value.

# A candidate whose sequence padding exceeds this fraction of the tokens is rejected:
# padded tokens are paid for in every matmul and attention.
MAX_PAD_FRACTION = 0.01


def _wan_check(cfg: WanConfig, clip: Clip, batch: int = CFG_BATCH,
               ) -> Callable[[Mapping[str, int], Rules, str], tuple[str, ...]]:  # fmt: skip
    tokens = num_tokens(clip, cfg)

    def check(sizes: Mapping[str, int], rules: Rules, attention: str) -> tuple[str, ...]:
        names = tuple(sizes)
        reasons: list[str] = []
        if sizes.get("data", 1) > batch:
            reasons.append(
                f"data={sizes['data']} exceeds the CFG batch of {batch} "
                f"(two passes per clip per step); use data <= {batch}"
            )
        qkv = logical_to_pspec(_QKV, rules, names, sizes)
        seq_deg = sharding_degree(qkv[2], sizes)
        head_deg = sharding_degree(qkv[1], sizes)
        reasons.extend(_attention_reasons(cfg, attention, seq_deg, head_deg))
        pad = padded_tokens(tokens, seq_deg) - tokens
        if pad > MAX_PAD_FRACTION * tokens:
            reasons.append(
                f"sequence of {tokens} tokens over degree {seq_deg} needs {pad} padding "
                f"tokens (> {MAX_PAD_FRACTION:.0%}); choose a degree dividing {tokens}"
            )
        return tuple(reasons)

    return check


def _attention_reasons(cfg: WanConfig, attention: str, seq_deg: int, head_deg: int) -> list[str]:
    """Why ``attention`` cannot split ``cfg``'s heads and a sequence of degree ``seq_deg``."""
    reasons: list[str] = []
    ulysses = usp_degree(attention)
    if attention == "ulysses" and cfg.num_heads % (seq_deg * head_deg):
        reasons.append(
            f"ulysses attention needs heads ({cfg.num_heads}) divisible by sequence degree "
            f"{seq_deg} x head degree {head_deg} = {seq_deg * head_deg}"
        )
    if attention in ("ulysses", "ring") and seq_deg == 1:
        reasons.append(
            f"{attention} attention needs a sharded sequence (activation_length degree 1 "
            f"here); it would equal gather_kv"
        )
    if ulysses is not None:
        if seq_deg % ulysses or not 1 < ulysses < seq_deg:
            reasons.append(
                f"{attention} (Ulysses {ulysses} x ring) needs the sequence degree {seq_deg} "
                f"to be {ulysses} x a ring of at least 2; splits of {seq_deg}: "
                f"{[f'usp_u{u}' for u in range(2, seq_deg) if seq_deg % u == 0] or 'none'}"
            )
        elif cfg.num_heads % (ulysses * head_deg):
            reasons.append(
                f"{attention} needs heads ({cfg.num_heads}) divisible by Ulysses degree "
                f"{ulysses} x head degree {head_deg} = {ulysses * head_deg}"
            )
    return reasons


def wan_workload(
    model: str,
    clip: Clip,
    *,
    kernel: Literal["auto", "splash", "xla"] = "auto",
    scan_layers: bool = True,
    config: WanConfig | None = None,
    clips: int = 1,
) -> Workload:
    """The Wan denoising step for ``model`` (a key of ``WAN_CONFIGS``) and ``clip``.

    ``kernel="auto"`` runs Pallas splash attention for TPU compiles and XLA
    attention for CPU compiles; ``"xla"`` forces XLA attention everywhere (used
    to cross-check FLOPs, since ``cost_analysis`` does not cost Pallas calls).
    ``scan_layers=False`` unrolls the layer loop (``cost_analysis`` counts a
    ``scan`` body once). ``config`` overrides the named model (custom test shapes).
    ``clips`` > 1 denoises that many clips of one kind together (a serving batch: batch
    ``2 x clips``, the name ends ``xN``).

        >>> wl = wan_workload("wan2.1-1.3b", parse_resolution("480p"))
        >>> wl.name, wl.info["tokens"]
        ('wan2.1-1.3b@832x480x81', 32760)
    """
    if config is None:
        if model not in WAN_CONFIGS:
            raise WorkloadError(
                f"unknown Wan model {model!r}; choose one of {sorted(WAN_CONFIGS)}, "
                f"e.g. 'wan2.1-1.3b'"
            )
        config = WAN_CONFIGS[model]
    cfg = config
    if kernel not in ("auto", "splash", "xla"):
        raise WorkloadError(f"kernel {kernel!r} unknown; use 'auto', 'splash' or 'xla'")
    if isinstance(clips, bool) or not isinstance(clips, int) or clips < 1:
        raise WorkloadError(f"clips {clips!r}: must be a positive number of clips, e.g. 2")
    batch = CFG_BATCH * clips
    args = wan_abstract_args(cfg, clip, clips=clips)
    arg_axes, out_axes = wan_logical_axes(cfg)

    def build(ctx: BuildContext) -> Callable[..., Any]:
        k: Kernel
        if kernel == "auto":
            k = "splash" if ctx.backend == "tpu" else "xla"
        else:
            k = kernel
        if k == "splash" and not ctx.kernel_bodies:
            k = "opaque_splash"
        step = wan_step(cfg, clip, ctx, kernel=k, scan_layers=scan_layers)
        if cfg.experts is None:
            return step

        def expert_step(params: Any, idle: Any, *rest: jax.Array) -> jax.Array:
            del idle  # the other expert: resident in HBM, not read by this step
            return step(params, *rest)

        return expert_step

    suffix = "" if (kernel == "auto" and scan_layers) else f"[{kernel},scan={scan_layers}]"
    suffix += "" if clips == 1 else f"x{clips}"
    return Workload(
        name=f"{cfg.name}@{clip.label}{suffix}",
        build=build,
        abstract_args=args,
        arg_logical_axes=arg_axes,
        out_logical_axes=out_axes,
        abstract_out=args[-3],  # the velocity has the latents' shape and dtype
        rule_sets=WAN_RULE_SETS,
        attention_kinds=attention_kinds(cfg.num_heads),
        probes=_probes(cfg, clip, batch),
        check=_wan_check(cfg, clip, batch),
        mesh_axis_names=MESH_AXIS_NAMES,  # fixed, so candidate ids stay data2.fsdp1.context4...
        model=cfg.name,
        clip=clip,
        info=_info(cfg, clip, clips),
    )


def _info(cfg: WanConfig, clip: Clip, clips: int) -> dict[str, Any]:
    """The workload's facts for reports (``clips`` when several are denoised together)."""
    return {
        "kind": "wan",
        "model": cfg.name,
        "clip": clip.label,
        "tokens": num_tokens(clip, cfg),
        "num_heads": cfg.num_heads,
        "num_layers": cfg.num_layers,
        "num_params": cfg.num_params,
        "analytic_flops": wan_flops(cfg, clip, batch=CFG_BATCH * clips).total,
        **({"clips": clips} if clips > 1 else {}),
        **_experts_info(cfg),
    }


def _probes(cfg: WanConfig, clip: Clip, batch: int = CFG_BATCH) -> tuple[Probe, ...]:
    """The activations whose sharding Stage 1 checks (hidden, q/k/v, FFN, text K/V)."""
    b, s, d, t = batch, num_tokens(clip, cfg), cfg.dim, cfg.text_len
    return (
        Probe("hidden", (b, s, d), _HIDDEN, paddable=("activation_length",)),
        Probe("qkv", (b, cfg.num_heads, s, cfg.head_dim), _QKV, paddable=("activation_length",)),
        Probe("ffn", (b, s, cfg.ffn_dim), _FFN, paddable=("activation_length",)),
        Probe("text_kv", (b, cfg.num_heads, t, cfg.head_dim), _TEXT_KV),
    )


def _experts_info(cfg: WanConfig) -> dict[str, Any]:
    """Report facts of a model with experts: which steps each takes (A14B)."""
    if cfg.experts is None:
        return {}
    return {
        "experts": [
            {"name": name, "steps": steps} for name, steps in cfg.experts.steps_per_expert()
        ],
        "resident_experts": 2,
    }
