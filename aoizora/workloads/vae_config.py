"""What a Wan VAE decoder is, without the JAX model: sizes, stages, weights, FLOPs, rule sets.

The decoder turns the denoised latent ``(1, T, H, W, z)`` into the clip. Its shape
comes from the public configs (docs/facts.md, Wan VAE):

* Wan 2.1 (also Wan 2.2 A14B): Wan-Video/Wan2.1 ``wan/modules/vae.py`` ``_video_vae``:
  ``dim=96``, ``z_dim=16``, ``dim_mult=[1, 2, 4, 4]``, ``num_res_blocks=2``,
  ``temperal_downsample=[False, True, True]`` (so the decoder upsamples in time in its
  first two stages); stride 4x8x8;
* Wan 2.2 TI2V-5B: Wan-Video/Wan2.2 ``wan/modules/vae2_2.py`` ``Wan2_2_VAE``:
  ``dec_dim=256``, ``z_dim=48``, the same multipliers and temporal flags, residual
  stages with a duplicating shortcut (``Up_ResidualBlock``/``DupUp3D``), and a
  12-channel head unpatchified 2x2 to RGB; stride 4x16x16.

:func:`decoder_stages` lists the up stages both the decoder
(:mod:`aoizora.workloads.vae`) and the analytic FLOP count (:func:`vae_flops`) walk, so
the two describe one network. :data:`VAE_RULE_SETS` are its sharding candidates over
the mesh axes ``(width, height)``: maxdiffusion's spatial sharding (``vae_spatial``: the
width of every activation over all devices, conv kernels' output channels too), a
weight-replicated spatial split over width and height, and replication.

    >>> cfg = VAE_CONFIGS["wan2.1-vae"]
    >>> [(s.in_dim, s.out_dim, s.upsample) for s in decoder_stages(cfg)]
    [(384, 384, 'upsample3d'), (192, 384, 'upsample3d'), (192, 192, 'upsample2d'), (96, 96, None)]
    >>> round(vae_flops(cfg, Clip(1280, 720, 81)).total / 1e12)   # one 720p clip, chunk 1
    631
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from aoizora.errors import WorkloadError
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import LogicalAxes, Rules

__all__ = [
    "VAE_ACTIVATION",
    "VAE_CONFIGS",
    "VAE_MESH_AXIS_NAMES",
    "VAE_RULE_SETS",
    "Stage",
    "VaeConfig",
    "VaeFlops",
    "decoder_stages",
    "frames_at",
    "vae_flops",
    "vae_latent_shape",
    "vae_num_params",
    "vae_param_axes",
    "vae_param_shapes",
]

Variant = Literal["2.1", "2.2"]
Upsample = Literal["upsample2d", "upsample3d"]


@dataclass(frozen=True)
class VaeConfig:
    """A Wan VAE decoder's shape (no weights).

    ``base_dim`` is the decoder's base width (Wan 2.1 ``dim``, Wan 2.2 ``dec_dim``);
    stage widths are ``base_dim * dim_mult`` read backwards. ``temporal_upsample`` says
    which of the first stages double the frames (Wan's ``temperal_downsample`` reversed).
    ``variant`` "2.1" halves the width at each upsampler and has a plain residual path;
    "2.2" keeps the width and adds a duplicating shortcut to every upsampling stage.
    ``out_patch`` unpatchifies the head's ``3 * out_patch**2`` channels (2 for Wan 2.2).
    """

    name: str
    z_dim: int
    base_dim: int
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_upsample: tuple[bool, ...] = (True, True, False)
    variant: Variant = "2.1"
    out_patch: int = 1
    stride: tuple[int, int, int] = (4, 8, 8)

    def __post_init__(self) -> None:
        ups = len(self.dim_mult) - 1
        if len(self.temporal_upsample) != ups:
            raise WorkloadError(
                f"VaeConfig {self.name!r}: temporal_upsample {self.temporal_upsample} needs one "
                f"flag per upsampling stage ({ups}), e.g. (True, True, False)"
            )
        expected = (2 ** sum(self.temporal_upsample), *(2**ups * self.out_patch,) * 2)
        if tuple(self.stride) != expected:
            raise WorkloadError(
                f"VaeConfig {self.name!r}: stride {self.stride} does not match its upsampling "
                f"stages, which give {expected}"
            )

    @property
    def out_channels(self) -> int:
        """Channels of the head: RGB times the unpatchify patch."""
        return 3 * self.out_patch**2


VAE_CONFIGS: dict[str, VaeConfig] = {
    # Wan-Video/Wan2.1 wan/modules/vae.py _video_vae (dim 96, z_dim 16); Wan 2.2 A14B uses it.
    "wan2.1-vae": VaeConfig("wan2.1-vae", z_dim=16, base_dim=96),
    # Wan-Video/Wan2.2 wan/modules/vae2_2.py Wan2_2_VAE (dec_dim 256, z_dim 48, patch 2).
    "wan2.2-vae": VaeConfig(
        "wan2.2-vae", z_dim=48, base_dim=256, variant="2.2", out_patch=2, stride=(4, 16, 16)
    ),
    # CI-sized: Wan 2.1's structure (stride 4x8x8, 16 latent channels), 8 channels wide.
    "vae-tiny": VaeConfig(
        "vae-tiny", z_dim=16, base_dim=8, dim_mult=(1, 1, 1, 1), num_res_blocks=1
    ),
}

VAE_MESH_AXIS_NAMES: tuple[str, ...] = ("width", "height")
# Activations are channel-last (B, T, H, W, C), as maxdiffusion's decoder keeps them.
VAE_ACTIVATION: LogicalAxes = ("vae_batch", "vae_frames", "vae_height", "vae_width", "vae_channels")

VAE_RULE_SETS: tuple[Rules, ...] = (
    # maxdiffusion models/wan/autoencoder_kl_wan.py: every activation constrained to
    # P("redundant", None, None, "vae_spatial", None) (the width over all devices,
    # vae_spatial: -1 in base_wan_14b.yml) and conv kernels sharded on their output
    # channels over vae_spatial (the attention projection on its input channels).
    Rules.of(
        "maxdiffusion",
        [("vae_width", "width"), ("conv_out", "width"), ("conv_in", "width")],
    ),
    # Width and height split, weights replicated (no weight all-gathers in the loop).
    Rules.of("spatial", [("vae_width", "width"), ("vae_height", "height")]),
    # Every device decodes the whole clip (maxdiffusion replicate_vae: True).
    Rules.of("replicated", []),
)


@dataclass(frozen=True)
class Stage:
    """One up stage: ``1 + num_res_blocks`` residual blocks ``in_dim -> out_dim``, then
    (``upsample``) a 2x spatial upsampler that also doubles frames for ``upsample3d``;
    ``resample_out`` is the upsampler's output width; ``shortcut`` (Wan 2.2) a
    duplicating shortcut around the stage."""

    in_dim: int
    out_dim: int
    upsample: Upsample | None
    resample_out: int
    shortcut: bool


def decoder_stages(cfg: VaeConfig) -> tuple[Stage, ...]:
    """The up stages of ``cfg``'s decoder, in order (Wan ``Decoder3d.__init__``)."""
    dims = [cfg.base_dim * m for m in (cfg.dim_mult[-1], *cfg.dim_mult[::-1])]
    last = len(cfg.dim_mult) - 1
    out: list[Stage] = []
    for i, (in_dim, out_dim) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        if cfg.variant == "2.1" and i > 0:
            in_dim //= 2  # Wan 2.1's upsamplers halve the width (Resample: dim -> dim // 2)
        mode: Upsample | None = None
        if i != last:
            mode = "upsample3d" if cfg.temporal_upsample[i] else "upsample2d"
        halve = cfg.variant == "2.1" and mode is not None
        out.append(
            Stage(
                in_dim=in_dim,
                out_dim=out_dim,
                upsample=mode,
                resample_out=out_dim // 2 if halve else out_dim,
                shortcut=cfg.variant == "2.2" and mode is not None,
            )
        )
    return tuple(out)


def vae_latent_shape(clip: Clip, cfg: VaeConfig) -> tuple[int, int, int]:
    """(frames, height, width) of the latent the decoder reads for ``clip``.

    >>> vae_latent_shape(Clip(1280, 720, 81), VAE_CONFIGS["wan2.1-vae"])
    (21, 90, 160)
    """
    sf, sh, sw = cfg.stride
    if (clip.frames - 1) % sf or clip.height % sh or clip.width % sw:
        raise WorkloadError(
            f"clip {clip.label} does not fit VAE {cfg.name} (stride {cfg.stride}): frames must "
            f"be {sf}k+1 and width, height multiples of {sw}, e.g. 1280x720x81"
        )
    return ((clip.frames - 1) // sf + 1, clip.height // sh, clip.width // sw)


def frames_at(level: int, latent_frames: int) -> int:
    """Frames a layer after ``level`` temporal upsamplings sees for ``latent_frames``:
    the first latent frame stays one frame (Wan's first chunk skips the time conv)."""
    return 1 + (latent_frames - 1) * 2**level


# ---------------------------------------------------------------------------------------
# Weights.


def _conv(kernel: tuple[int, ...], cin: int, cout: int) -> dict[str, tuple[int, ...]]:
    return {"w": (*kernel, cin, cout), "b": (cout,)}


def _res(cin: int, cout: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "norm1": (cin,),
        "conv1": _conv((3, 3, 3), cin, cout),
        "norm2": (cout,),
        "conv2": _conv((3, 3, 3), cout, cout),
    }
    if cin != cout:
        out["shortcut"] = _conv((1, 1, 1), cin, cout)
    return out


def _shapes(cfg: VaeConfig) -> dict[str, Any]:
    stages = decoder_stages(cfg)
    d0 = stages[0].in_dim
    up: list[dict[str, Any]] = []
    for st in stages:
        blocks = [_res(st.in_dim if j == 0 else st.out_dim, st.out_dim)
                  for j in range(cfg.num_res_blocks + 1)]  # fmt: skip
        entry: dict[str, Any] = {"res": blocks}
        if st.upsample is not None:
            entry["spatial_conv"] = _conv((3, 3), st.out_dim, st.resample_out)
        if st.upsample == "upsample3d":
            entry["time_conv"] = _conv((3, 1, 1), st.out_dim, 2 * st.out_dim)
        up.append(entry)
    return {
        "post_quant": _conv((1, 1, 1), cfg.z_dim, cfg.z_dim),
        "conv_in": _conv((3, 3, 3), cfg.z_dim, d0),
        "mid": {
            "res0": _res(d0, d0),
            "attn": {"norm": (d0,), "qkv": _conv((), d0, 3 * d0), "proj": _conv((), d0, d0)},
            "res1": _res(d0, d0),
        },
        "up": up,
        "head_norm": (stages[-1].out_dim,),
        "conv_out": _conv((3, 3, 3), stages[-1].out_dim, cfg.out_channels),
    }


def _map_shapes(tree: Any, leaf: Any, path: tuple[str, ...] = ()) -> Any:
    if isinstance(tree, dict):
        return {k: _map_shapes(v, leaf, (*path, k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_map_shapes(v, leaf, (*path, str(i))) for i, v in enumerate(tree)]
    return leaf(tree, path)


def vae_param_shapes(cfg: VaeConfig, dtype: Any) -> dict[str, Any]:
    """Abstract decoder weights (:class:`jax.ShapeDtypeStruct`), conv kernels ``(*k, in, out)``."""
    import jax  # here, not above: the command line reads VAE_CONFIGS before jax starts

    return _map_shapes(_shapes(cfg), lambda s, _: jax.ShapeDtypeStruct(s, dtype))


def _axes_of(shape: tuple[int, ...], path: tuple[str, ...]) -> LogicalAxes:
    name = path[-1]
    if name == "b":  # nnx.Conv biases carry no partitioning in maxdiffusion: replicated
        return ("conv_bias",)
    if name != "w":
        return ("vae_norm",)
    kernel = (None,) * (len(shape) - 2)
    conv = path[-2]
    if conv == "proj":  # maxdiffusion: the attention projection is split on its input
        return (*kernel, "conv_in", "conv_kout")
    if conv in ("conv_out", "post_quant"):  # RGB head and the latent 1x1: too narrow to split
        return (*kernel, "conv_kin", "conv_narrow")
    return (*kernel, "conv_kin", "conv_out")


def vae_param_axes(cfg: VaeConfig) -> dict[str, Any]:
    """Logical axes of :func:`vae_param_shapes` (same structure)."""
    return _map_shapes(_shapes(cfg), _axes_of)


def vae_num_params(cfg: VaeConfig) -> int:
    """Weights of the decoder (and the latent 1x1 conv before it)."""
    total = 0

    def count(shape: tuple[int, ...], _: tuple[str, ...]) -> None:
        nonlocal total
        total += math.prod(shape)

    _map_shapes(_shapes(cfg), count)
    return total


# ---------------------------------------------------------------------------------------
# Analytic FLOPs.


@dataclass(frozen=True)
class VaeFlops:
    """Matmul FLOPs of one clip's decode (2 per multiply-add): convolutions and the
    mid block's attention (QK^T and PV). Norms, activations and resizes are left out."""

    conv: int
    attention: int

    @property
    def total(self) -> int:
        return self.conv + self.attention


def vae_flops(cfg: VaeConfig, clip: Clip, *, chunk: int = 1, dense: bool = False) -> VaeFlops:
    """FLOPs of decoding ``clip`` as the compiled decoder does: the first latent frame
    alone, the others in chunks of ``chunk`` frames (padded to whole chunks, as
    maxdiffusion's scan pads them). Taps that meet only zero padding are not counted
    (XLA ``HloCostAnalysis::HandleConvolution``; :mod:`aoizora.hlo.compute` prices the
    same): a 3-tap spatial kernel meets real input ``3n - 2`` times along a dimension of
    ``n``; in time, the first chunk's zero caches are constants the compiler folds into
    padding (one tap per frame), while later chunks read carried caches (three taps),
    so a causal conv over ``n`` frames counts ``3n - 2`` time taps. ``dense=True``
    counts every tap, padding included: what a compiler that materialises the padding
    (the TPU compiler does for narrow convolutions) spends."""
    t, h, w = vae_latent_shape(clip, cfg)
    frames = 1 + -(-(t - 1) // chunk) * chunk if t > 1 else 1
    conv = 0

    edge = 0 if dense else 2  # taps that meet only padding, per dimension

    def conv3(n_frames: int, hh: int, ww: int, cin: int, cout: int) -> int:
        return 2 * (3 * n_frames - edge) * (3 * hh - edge) * (3 * ww - edge) * cin * cout

    def res(n_frames: int, hh: int, ww: int, cin: int, cout: int) -> int:
        short = 2 * n_frames * hh * ww * cin * cout if cin != cout else 0
        return conv3(n_frames, hh, ww, cin, cout) + conv3(n_frames, hh, ww, cout, cout) + short

    stages = decoder_stages(cfg)
    d0 = stages[0].in_dim
    conv += 2 * frames * h * w * cfg.z_dim * cfg.z_dim  # post-quant 1x1x1
    conv += conv3(frames, h, w, cfg.z_dim, d0) + 2 * res(frames, h, w, d0, d0)
    conv += 2 * frames * h * w * d0 * 4 * d0  # attention q, k, v and output projections
    attention = 2 * 2 * frames * (h * w) ** 2 * d0
    level = 0
    for st in stages:
        n = frames_at(level, frames)
        conv += res(n, h, w, st.in_dim, st.out_dim)
        conv += cfg.num_res_blocks * res(n, h, w, st.out_dim, st.out_dim)
        if st.upsample == "upsample3d":
            conv += 2 * (n - 1) * 3 * h * w * st.out_dim * 2 * st.out_dim  # the first frame skips
            level += 1
        if st.upsample is not None:
            n, h, w = frames_at(level, frames), 2 * h, 2 * w
            conv += 2 * n * (3 * h - edge) * (3 * w - edge) * st.out_dim * st.resample_out
    conv += conv3(frames_at(level, frames), h, w, stages[-1].out_dim, cfg.out_channels)
    return VaeFlops(conv=conv, attention=attention)
