"""The Wan VAE decoder in JAX, decoding chunk by chunk as maxdiffusion does, as a workload.

Architecture from Wan-Video/Wan2.1 ``wan/modules/vae.py`` and Wan-Video/Wan2.2
``wan/modules/vae2_2.py`` (``Decoder3d``), written anew here; the decoding loop and
its sharding follow maxdiffusion ``models/wan/autoencoder_kl_wan.py``
(docs/facts.md, Wan VAE). Sizes are in :mod:`aoizora.workloads.vae_config`.

* A 1x1x1 conv on the whole latent, then the decoder runs on the first latent frame
  alone and on the others in chunks of ``chunk`` frames (maxdiffusion's
  ``vae_decode_chunk``, default 1) inside a :func:`jax.lax.scan`, the remainder padded
  with zero frames and trimmed after. Every causal 3x3x3 convolution keeps the last
  two frames of its input as a cache (Wan's ``CACHE_T = 2``) carried from chunk to
  chunk, so a chunk sees exactly the frames the whole-sequence causal convolution
  would: :func:`vae_decode` with ``whole=True`` decodes every frame at once and a test
  checks both give the same clip.
* Blocks: residual blocks (RMS norm, SiLU, causal conv, twice; a 1x1x1 shortcut when the
  width changes), the mid block's single-head attention over each frame's pixels,
  upsamplers (a causal (3,1,1) time conv doubling the frames -- skipped for the first
  latent frame -- then per frame a nearest 2x resize and a 3x3 conv), Wan 2.2's
  duplicating shortcut, the RMS-norm / SiLU / conv head, Wan 2.2's 2x2 unpatchify.
* Channel-last activations ``(B, T, H, W, C)`` in float32 with float32 weights
  (maxdiffusion ``vae_dtype`` / ``vae_weights_dtype``), every conv input constrained
  to the candidate's activation sharding (maxdiffusion constrains each to
  ``P("redundant", None, None, "vae_spatial", None)``); the clip leaves as uint8
  (maxdiffusion quantizes on the TPU before the host transfer).

    >>> wl = vae_workload("vae-tiny", Clip(64, 64, 9))
    >>> wl.name, wl.abstract_args[1].shape, wl.abstract_out.shape
    ('vae-tiny@64x64x9', (1, 3, 8, 8, 16), (1, 9, 64, 64, 3))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from aoizora.errors import WorkloadError
from aoizora.workloads.base import BuildContext, Workload
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import logical_to_pspec
from aoizora.workloads.vae_config import (
    VAE_ACTIVATION,
    VAE_CONFIGS,
    VAE_MESH_AXIS_NAMES,
    VAE_RULE_SETS,
    Stage,
    VaeConfig,
    decoder_stages,
    vae_flops,
    vae_latent_shape,
    vae_num_params,
    vae_param_axes,
    vae_param_shapes,
)

__all__ = ["vae_config_of", "vae_decode", "vae_decode_chunk", "vae_workload"]

_CACHE_T = 2  # frames of its input a causal 3-tap time conv keeps for the next chunk
_EPS = 1e-12  # F.normalize's floor on the norm (Wan RMS_norm)


def vae_config_of(name_or_config: str | VaeConfig) -> VaeConfig:
    """A :class:`VaeConfig` from its name (a key of ``VAE_CONFIGS``) or itself."""
    if isinstance(name_or_config, VaeConfig):
        return name_or_config
    if name_or_config not in VAE_CONFIGS:
        raise WorkloadError(
            f"unknown VAE {name_or_config!r}; choose one of {sorted(VAE_CONFIGS)}, "
            f"e.g. 'wan2.1-vae'"
        )
    return VAE_CONFIGS[name_or_config]


class _Pass:
    """One run of the decoder over some frames: the caches it reads and writes, in call order.

    ``old`` is None for the first chunk (or the whole clip): every cache starts as zero
    frames, the causal padding. ``first`` says the frames start with the clip's first
    latent frame, which upsamplers do not double in time.
    """

    def __init__(self, ctx: BuildContext, old: Sequence[jax.Array] | None, *, first: bool):
        self.ctx, self.old, self.first = ctx, old, first
        self.new: list[jax.Array] = []

    def shard(self, x: jax.Array) -> jax.Array:
        names = tuple(self.ctx.mesh.axis_names)
        spec = logical_to_pspec(VAE_ACTIVATION, self.ctx.rules, names, self.ctx.mesh_sizes)
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.ctx.mesh, spec))

    def _cache(self, x: jax.Array) -> jax.Array:
        if self.old is not None:
            return self.old[len(self.new)]
        b, _, h, w, c = x.shape
        return jnp.zeros((b, _CACHE_T, h, w, c), x.dtype)

    def causal(self, x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
        """A causal conv with a 3-tap time kernel: its cache, then this chunk's frames."""
        xc = self.shard(jnp.concatenate([self._cache(x), x], axis=1))
        self.new.append(xc[:, -_CACHE_T:])
        kh, kw = p["w"].shape[1:3]
        return _conv3d(xc, p, padding=((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))

    def skip(self, x: jax.Array) -> None:
        """A causal conv the first chunk does not run: its cache stays zero."""
        self.new.append(self._cache(x))


def _conv3d(x: jax.Array, p: dict[str, jax.Array], *, padding: Any) -> jax.Array:
    y = jax.lax.conv_general_dilated(
        x, p["w"], (1, 1, 1), padding, dimension_numbers=("NDHWC", "DHWIO", "NDHWC")
    )
    return y + p["b"]


def _conv2d(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
    """A 3x3 'same' conv on every frame of ``(B, T, H, W, C)``."""
    b, t, h, w, c = x.shape
    y = jax.lax.conv_general_dilated(
        x.reshape(b * t, h, w, c), p["w"], (1, 1), ((1, 1), (1, 1)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip
    return (y + p["b"]).reshape(b, t, *y.shape[1:])


def _rms(x: jax.Array, gamma: jax.Array) -> jax.Array:
    """Wan ``RMS_norm``: ``F.normalize`` over channels times ``sqrt(C)`` times gamma."""
    ss = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
    return x * jax.lax.rsqrt(jnp.maximum(ss, _EPS**2)) * (x.shape[-1] ** 0.5) * gamma


def _residual(run: _Pass, x: jax.Array, p: dict[str, Any]) -> jax.Array:
    h = _conv3d(x, p["shortcut"], padding="VALID") if "shortcut" in p else x
    y = run.causal(jax.nn.silu(_rms(x, p["norm1"])), p["conv1"])
    y = run.causal(jax.nn.silu(_rms(y, p["norm2"])), p["conv2"])
    return y + h


def _attention(run: _Pass, x: jax.Array, p: dict[str, Any]) -> jax.Array:
    """Single-head self-attention over each frame's pixels (Wan ``AttentionBlock``)."""
    b, t, h, w, c = x.shape
    y = _rms(x, p["norm"]).reshape(b * t, h * w, c)
    q, k, v = jnp.split(y @ p["qkv"]["w"] + p["qkv"]["b"], 3, axis=-1)
    scores = jnp.einsum("nqc,nkc->nqk", q, k) * (c**-0.5)
    y = jnp.einsum("nqk,nkc->nqc", jax.nn.softmax(scores, axis=-1), v)
    y = y @ p["proj"]["w"] + p["proj"]["b"]
    return x + run.shard(y.reshape(b, t, h, w, c))


def _time_double(run: _Pass, x: jax.Array, p: dict[str, Any]) -> jax.Array:
    """The upsampler's causal (3,1,1) conv to twice the channels, read as two frames per
    frame; the clip's first latent frame stays one frame (Wan's first chunk skips it)."""
    if run.first and x.shape[1] == 1:
        run.skip(x)
        return x
    head, rest = (x[:, :1], x[:, 1:]) if run.first else (None, x)
    y = run.causal(rest, p)
    b, t, h, w, c2 = y.shape
    y = y.reshape(b, t, h, w, 2, c2 // 2).transpose(0, 1, 4, 2, 3, 5)
    y = y.reshape(b, 2 * t, h, w, c2 // 2)
    return y if head is None else jnp.concatenate([head, y], axis=1)


def _dup_up(run: _Pass, x: jax.Array, out_dim: int, factor_t: int) -> jax.Array:
    """Wan 2.2 ``DupUp3D``: channels repeated and unfolded into 2x2 pixels (and ``factor_t``
    frames; the first chunk keeps only the last of its first frame's copies)."""
    b, t, h, w, c = x.shape
    y = jnp.repeat(x, out_dim * factor_t * 4 // c, axis=-1)
    y = y.reshape(b, t, h, w, out_dim, factor_t, 2, 2).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    y = y.reshape(b, t * factor_t, 2 * h, 2 * w, out_dim)
    return y[:, factor_t - 1 :] if run.first else y


def _stage(run: _Pass, x: jax.Array, st: Stage, p: dict[str, Any]) -> jax.Array:
    x_in = x
    for block in p["res"]:
        x = _residual(run, x, block)
    if st.upsample is None:
        return x
    if st.upsample == "upsample3d":
        x = _time_double(run, x, p["time_conv"])
    x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)  # nearest 2x, as jnp.repeat
    x = _conv2d(run.shard(x), p["spatial_conv"])
    if st.shortcut:
        x = x + _dup_up(run, x_in, st.resample_out, 2 if st.upsample == "upsample3d" else 1)
    return x


def _decoder(cfg: VaeConfig, run: _Pass, x: jax.Array, params: dict[str, Any]) -> jax.Array:
    """Wan ``Decoder3d.forward`` on some frames (the caches are ``run``'s)."""
    x = run.causal(x, params["conv_in"])
    mid = params["mid"]
    x = _residual(run, x, mid["res0"])
    x = _attention(run, x, mid["attn"])
    x = _residual(run, x, mid["res1"])
    for st, p in zip(decoder_stages(cfg), params["up"], strict=True):
        x = _stage(run, x, st, p)
    x = run.causal(jax.nn.silu(_rms(x, params["head_norm"])), params["conv_out"])
    if cfg.out_patch > 1:  # Wan 2.2 unpatchify: "b (c r q) f h w -> b c f (h q) (w r)"
        b, t, h, w, _ = x.shape
        q = cfg.out_patch
        x = x.reshape(b, t, h, w, 3, q, q).transpose(0, 1, 2, 6, 3, 5, 4)
        x = x.reshape(b, t, h * q, w * q, 3)
    return x


def _chunks(x: jax.Array, chunk: int) -> tuple[jax.Array, int]:
    """``(n, B, chunk, H, W, C)`` chunks of ``x``'s frames, zero-padded; and the real frames."""
    b, t, h, w, c = x.shape
    pad = -t % chunk
    if pad:
        x = jnp.concatenate([x, jnp.zeros((b, pad, h, w, c), x.dtype)], axis=1)
    n = (t + pad) // chunk
    return x.reshape(b, n, chunk, h, w, c).transpose(1, 0, 2, 3, 4, 5), t


def vae_decode(
    cfg: VaeConfig, ctx: BuildContext, *, chunk: int = 1, whole: bool = False
) -> Callable[[Any, jax.Array], jax.Array]:
    """``(params, latent (B, T, H, W, z)) -> clip (B, F, H*s, W*s, 3)`` in [-1, 1].

    The first latent frame is decoded alone, the rest ``chunk`` frames at a time in a
    scan carrying the caches; ``whole=True`` decodes every frame in one pass (the
    reference the chunked decode must equal).
    """
    if chunk < 1:
        raise WorkloadError(f"VAE decode chunk {chunk}: must be a positive number of frames")

    def decode(params: Any, z: jax.Array) -> jax.Array:
        x = _conv3d(z, params["post_quant"], padding="VALID")
        if whole or x.shape[1] == 1:
            return _decoder(cfg, _Pass(ctx, None, first=True), x, params)
        run0 = _Pass(ctx, None, first=True)
        out0 = run0.shard(_decoder(cfg, run0, x[:, :1], params))
        rest, frames = _chunks(x[:, 1:], chunk)

        def body(caches: tuple[jax.Array, ...], xs: jax.Array) -> tuple[Any, jax.Array]:
            run = _Pass(ctx, caches, first=False)
            out = run.shard(_decoder(cfg, run, xs, params))
            return tuple(run.shard(c) for c in run.new), out

        _, outs = jax.lax.scan(body, tuple(run0.shard(c) for c in run0.new), rest)
        n, b, f, h, w, c = outs.shape
        outs = outs.transpose(1, 0, 2, 3, 4, 5).reshape(b, n * f, h, w, c)
        keep = frames * (f // chunk)  # the padded frames' output is dropped
        return jnp.concatenate([out0, outs[:, :keep]], axis=1)

    return decode


def _to_uint8(x: jax.Array) -> jax.Array:
    """maxdiffusion's on-TPU post-processing: clip to [-1, 1], rescale, quantize."""
    return jnp.round((jnp.clip(x, -1.0, 1.0) + 1.0) * 127.5).astype(jnp.uint8)


_CHUNK_SUFFIX = re.compile(r"\[chunk([1-9][0-9]*)\]$")


def vae_decode_chunk(workload_name: str) -> int:
    """The chunk a VAE workload's name says (:func:`vae_workload` writes ``[chunkN]``
    after the clip when N is not 1).

    >>> vae_decode_chunk("wan2.1-vae@832x480x81[chunk2]"), vae_decode_chunk("wan2.1-vae@832x480x81")
    (2, 1)
    """
    found = _CHUNK_SUFFIX.search(workload_name)
    return 1 if found is None else int(found.group(1))


def vae_workload(
    config: str | VaeConfig,
    clip: Clip,
    *,
    chunk: int = 1,
    dtype: Any = jnp.float32,
) -> Workload:
    """The VAE decode of one ``clip`` as a plannable workload ``(params, latent) -> clip``.

    ``chunk`` is maxdiffusion's ``vae_decode_chunk`` (latent frames per scan step; it
    changes the compiled program, so it is part of the workload). Mesh axes
    ``(width, height)``; rule sets ``maxdiffusion`` (spatial over width, kernels split
    on their outputs), ``spatial`` (width x height, weights replicated) and
    ``replicated`` (:data:`~aoizora.workloads.vae_config.VAE_RULE_SETS`).
    """
    cfg = vae_config_of(config)
    t, h, w = vae_latent_shape(clip, cfg)
    if chunk < 1:
        raise WorkloadError(f"VAE decode chunk {chunk}: must be a positive number of frames")
    params = vae_param_shapes(cfg, dtype)
    latent = jax.ShapeDtypeStruct((1, t, h, w, cfg.z_dim), dtype)
    _, sh, sw = cfg.stride
    out = jax.ShapeDtypeStruct((1, clip.frames, h * sh, w * sw, 3), jnp.uint8)

    def build(ctx: BuildContext) -> Callable[..., Any]:
        decode = vae_decode(cfg, ctx, chunk=chunk)

        def fn(p: Any, z: jax.Array) -> jax.Array:
            return _to_uint8(decode(p, z))

        return fn

    suffix = "" if chunk == 1 else f"[chunk{chunk}]"
    return Workload(
        name=f"{cfg.name}@{clip.label}{suffix}",
        build=build,
        abstract_args=(params, latent),
        arg_logical_axes=(vae_param_axes(cfg), VAE_ACTIVATION),
        out_logical_axes=VAE_ACTIVATION,
        abstract_out=out,
        rule_sets=VAE_RULE_SETS,
        mesh_axis_names=VAE_MESH_AXIS_NAMES,
        model=cfg.name,
        clip=clip,
        program_fingerprint=f"vae:{cfg.name}:{jnp.dtype(dtype).name}:chunk{chunk}",
        info={
            "kind": "vae",
            "model": cfg.name,
            "clip": clip.label,
            "chunk": chunk,
            "num_params": vae_num_params(cfg),
            "analytic_flops": vae_flops(cfg, clip, chunk=chunk).total,
        },
    )
