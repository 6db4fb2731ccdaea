"""What a Wan DiT is, without the JAX model: sizes, clips, weights, FLOPs, rule sets.

* :class:`WanConfig` and :data:`WAN_CONFIGS` -- the model sizes (Wan-Video/Wan2.1 and
  Wan-Video/Wan2.2 ``wan/configs``; docs/facts.md, Wan 2.2);
* :class:`ExpertSchedule` -- which denoising steps each expert of Wan 2.2 A14B takes;
* clip arithmetic -- :data:`RESOLUTIONS`, :func:`parse_resolution`, :func:`model_clip`,
  :func:`check_wan_clip`, :func:`latent_shape`, :func:`token_grid`,
  :func:`num_tokens` (VAE stride (4, 8, 8) or Wan 2.2's (4, 16, 16), patch (1, 2, 2));
* :data:`WAN_RULE_SETS` -- logical-axis rule sets over :data:`MESH_AXIS_NAMES`;
* :func:`wan_param_shapes` / :func:`wan_param_axes` -- every weight's shape and
  logical axes;
* :func:`wan_flops` -- the analytic matmul FLOPs of one step.

The step itself (:func:`aoizora.workloads.wan.wan_step`) and the workload value
are in :mod:`aoizora.workloads.wan`, which re-exports these names.

    >>> clip = parse_resolution("480p")
    >>> clip, token_grid(clip), num_tokens(clip)
    (Clip(width=832, height=480, frames=81), (21, 30, 52), 32760)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from aoizora.errors import WorkloadError
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import LogicalAxes, Rules

__all__ = [
    "CFG_BATCH",
    "Clip",
    "ExpertSchedule",
    "MESH_AXIS_NAMES",
    "RESOLUTIONS",
    "VAE_STRIDE",
    "WAN_CONFIGS",
    "WAN_RULE_SETS",
    "WanConfig",
    "WanFlops",
    "check_wan_clip",
    "latent_shape",
    "model_clip",
    "num_tokens",
    "parse_resolution",
    "token_grid",
    "wan_flops",
    "wan_param_axes",
    "wan_param_shapes",
]

MESH_AXIS_NAMES: tuple[str, ...] = ("data", "fsdp", "context", "tensor")
CFG_BATCH = 2  # classifier-free guidance: conditional and unconditional pass in one batch


@dataclass(frozen=True)
class ExpertSchedule:
    """The two experts of Wan 2.2 A14B and which steps each denoises.

    Wan-Video/Wan2.2 ``wan/text2video.py``: a step whose timestep ``t`` is at least
    ``boundary * num_train_timesteps`` runs the high-noise expert, the others the
    low-noise one; the timesteps are the UniPC schedule of ``wan/utils/
    fm_solvers_unipc.py`` (``set_timesteps``): sigmas evenly spaced from 0.999 to 0
    (``sample_steps + 1`` points, the last dropped), shifted ``shift*s / (1 +
    (shift-1)*s)``, times ``num_train_timesteps``, truncated to integers.

        >>> t2v = ExpertSchedule(sample_steps=40, sample_shift=12.0, boundary=0.875)
        >>> t2v.steps_per_expert()  # maxdiffusion base_wan_27b.yml: "~step 26 of 40"
        (('high_noise', 26), ('low_noise', 14))
    """

    sample_steps: int
    sample_shift: float
    boundary: float
    num_train_timesteps: int = 1000
    names: tuple[str, str] = ("high_noise", "low_noise")

    def timesteps(self) -> tuple[int, ...]:
        """The integer timesteps of the sampling loop, first (noisiest) first."""
        n, shift = self.num_train_timesteps, self.sample_shift
        sigma_max = 1.0 - 1.0 / n  # the training sigmas run from 1 - 1/n down to 0
        out = []
        for i in range(self.sample_steps):
            s = sigma_max * (1.0 - i / self.sample_steps)
            out.append(int(n * shift * s / (1.0 + (shift - 1.0) * s)))
        return tuple(out)

    def steps_per_expert(self) -> tuple[tuple[str, int], ...]:
        """(expert, steps): the high-noise expert first."""
        high = sum(1 for t in self.timesteps() if t >= self.boundary * self.num_train_timesteps)
        return ((self.names[0], high), (self.names[1], self.sample_steps - high))


@dataclass(frozen=True)
class WanConfig:
    """Shape of a Wan DiT (no weights). ``dim == num_heads * head_dim``.

    Wan 2.2 adds: ``vae_stride`` (TI2V-5B's VAE compresses 4x16x16 into 48
    channels), ``per_token_timestep`` (TI2V-5B embeds a timestep per token, so the
    modulation is per token), ``sizes``/``default_frames`` (what ``"720p"`` means for
    the model, e.g. 1280x704 for TI2V-5B) and ``experts`` (A14B: two experts of this
    shape, both resident in HBM, switching at a boundary step). ``vae`` names the VAE
    decoder (a key of :data:`aoizora.workloads.vae_config.VAE_CONFIGS`) and
    ``sample_steps`` the denoising steps of one clip as the model is served
    (maxdiffusion's ``num_inference_steps``; docs/facts.md, Clip latency).
    """

    name: str
    dim: int
    ffn_dim: int
    num_heads: int
    head_dim: int
    num_layers: int
    text_len: int = 512
    text_dim: int = 4096
    in_channels: int = 16
    out_channels: int = 16
    patch: tuple[int, int, int] = (1, 2, 2)
    freq_dim: int = 256
    eps: float = 1e-6
    vae_stride: tuple[int, int, int] = (4, 8, 8)
    per_token_timestep: bool = False
    sizes: tuple[tuple[str, int, int], ...] = (("480p", 832, 480), ("720p", 1280, 720))
    default_frames: int = 81
    experts: ExpertSchedule | None = None
    vae: str = "wan2.1-vae"
    sample_steps: int = 50

    def __post_init__(self) -> None:
        if self.dim != self.num_heads * self.head_dim:
            raise WorkloadError(
                f"WanConfig {self.name!r}: dim {self.dim} != num_heads {self.num_heads} x "
                f"head_dim {self.head_dim}; e.g. dim=1536, num_heads=12, head_dim=128"
            )
        if self.head_dim % 2:
            raise WorkloadError(f"WanConfig {self.name!r}: head_dim {self.head_dim} must be even")

    @property
    def patch_size(self) -> int:
        return math.prod(self.patch)

    @property
    def num_params(self) -> int:
        """Parameter count of one expert (every weight and bias of :func:`wan_param_shapes`)."""
        import jax  # here, not above: the command line reads WAN_CONFIGS before jax starts
        import jax.numpy as jnp

        return sum(
            math.prod(s.shape) for s in jax.tree.leaves(wan_param_shapes(self, jnp.bfloat16))
        )


WAN_CONFIGS: dict[str, WanConfig] = {
    # Wan-Video/Wan2.1 wan/configs/wan_t2v_1_3B.py and wan_t2v_14B.py
    # Steps: maxdiffusion base_wan_1_3b.yml / base_wan_14b.yml num_inference_steps 30 / 50.
    "wan2.1-1.3b": WanConfig("wan2.1-1.3b", 1536, 8960, 12, 128, 30, sample_steps=30),
    "wan2.1-14b": WanConfig("wan2.1-14b", 5120, 13824, 40, 128, 40),
    # CI-sized: 8 heads (divisible by 1, 2, 4, 8); head_dim 128 = splash's lane width.
    "wan-tiny": WanConfig(
        "wan-tiny", 1024, 2048, 8, 128, 2, text_len=128, text_dim=256, freq_dim=256,
        vae="vae-tiny",
    ),
    # Wan-Video/Wan2.2 wan/configs/wan_ti2v_5B.py: Wan2.2_VAE (z_dim 48, stride 4x16x16),
    # sizes 1280*704 / 704*1280 (configs/__init__.py SUPPORTED_SIZES), frame_num 121; its
    # textimage2video.py feeds a timestep per token (first-frame tokens t=0 for I2V).
    "wan2.2-ti2v-5b": WanConfig(
        "wan2.2-ti2v-5b", 3072, 14336, 24, 128, 30, in_channels=48, out_channels=48,
        vae_stride=(4, 16, 16), per_token_timestep=True,
        sizes=(("720p", 1280, 704), ("704p", 1280, 704)), default_frames=121,
        vae="wan2.2-vae",  # sample_steps 50: wan_ti2v_5B.py
    ),
    # Wan-Video/Wan2.2 wan/configs/wan_t2v_A14B.py: two Wan-14B-shaped experts
    # (high_noise_model, low_noise_model), 40 steps, shift 12, boundary 0.875; the same
    # in maxdiffusion configs/base_wan_27b.yml (boundary_ratio: 0.875).
    "wan2.2-a14b": WanConfig(
        "wan2.2-a14b", 5120, 13824, 40, 128, 40,
        experts=ExpertSchedule(sample_steps=40, sample_shift=12.0, boundary=0.875),
        sample_steps=40,
    ),
}  # fmt: skip

# VAE stride of Wan 2.1's causal video VAE (frames, height, width); Wan 2.2 A14B uses the
# same VAE. A WanConfig carries its own (TI2V-5B: 4x16x16).
VAE_STRIDE: tuple[int, int, int] = (4, 8, 8)

# Named sizes of Wan 2.1 (a WanConfig carries its own in ``sizes``).
RESOLUTIONS: dict[str, tuple[int, int]] = {"480p": (832, 480), "720p": (1280, 720)}

_WAN21 = WanConfig("wan2.1", 1536, 8960, 12, 128, 30)  # the clip arithmetic of Wan 2.1


def _cfg(config: WanConfig | None) -> WanConfig:
    return _WAN21 if config is None else config


def check_wan_clip(clip: Clip, config: WanConfig | None = None) -> Clip:
    """``clip`` if the model can take it, else WorkloadError.

    Width and height must be multiples of VAE stride x patch (16 for Wan 2.1, 32
    for TI2V-5B) and frames ``4k+1`` (the VAE keeps frame 0, then compresses 4:1).

    >>> check_wan_clip(Clip(832, 480, 80))
    Traceback (most recent call last):
    ...
    aoizora.errors.WorkloadError: clip frames 80: must be 4k+1 (the VAE keeps frame 0 ...), e.g. 81
    """
    cfg = _cfg(config)
    step_h, step_w = cfg.vae_stride[1] * cfg.patch[1], cfg.vae_stride[2] * cfg.patch[2]
    if clip.width % step_w or clip.height % step_h:
        _, width, height = cfg.sizes[0]
        raise WorkloadError(
            f"clip {clip.width}x{clip.height}: width and height must be positive multiples "
            f"of {step_w} (VAE stride {cfg.vae_stride[2]} x patch {cfg.patch[2]}) for "
            f"{cfg.name}, e.g. {width}x{height}"
        )
    if (clip.frames - 1) % cfg.vae_stride[0]:
        raise WorkloadError(
            f"clip frames {clip.frames}: must be 4k+1 (the VAE keeps frame 0 and compresses "
            f"4:1 after it), e.g. {cfg.default_frames}"
        )
    return clip


def latent_shape(clip: Clip, config: WanConfig | None = None) -> tuple[int, int, int]:
    """(frames, height, width) of the VAE latent: frames (F-1)/4+1, pixels / VAE stride.

    >>> latent_shape(Clip(832, 480, 81))
    (21, 60, 104)
    >>> latent_shape(Clip(1280, 704, 121), WAN_CONFIGS["wan2.2-ti2v-5b"])
    (31, 44, 80)
    """
    cfg = _cfg(config)
    check_wan_clip(clip, cfg)
    sf, sh, sw = cfg.vae_stride
    return ((clip.frames - 1) // sf + 1, clip.height // sh, clip.width // sw)


def token_grid(clip: Clip, config: WanConfig | None = None) -> tuple[int, int, int]:
    """(frames, height, width) in tokens after the (1, 2, 2) patch."""
    cfg = _cfg(config)
    f, h, w = latent_shape(clip, cfg)
    pf, ph, pw = cfg.patch
    return (f // pf, h // ph, w // pw)


def num_tokens(clip: Clip, config: WanConfig | None = None) -> int:
    """Tokens in the sequence for ``clip`` (the product of :func:`token_grid`).

    >>> num_tokens(Clip(1280, 704, 121), WAN_CONFIGS["wan2.2-ti2v-5b"])  # 31 x 22 x 40
    27280
    """
    return math.prod(token_grid(clip, config))


def parse_resolution(
    text: str, *, frames: int | None = None, config: WanConfig | None = None
) -> Clip:
    """A named size (``"480p"``, ``"720p"``) or ``"WxH"`` (pixels) -> :class:`Clip`.

    Named sizes and the default frame count are the model's (``config``; Wan 2.1's
    when None): ``"720p"`` is 1280x720 for Wan 2.1 and A14B but 1280x704 for TI2V-5B.

    >>> num_tokens(parse_resolution("720p"))
    75600
    >>> token_grid(parse_resolution("256x256", frames=5))
    (2, 16, 16)
    >>> parse_resolution("720p", config=WAN_CONFIGS["wan2.2-ti2v-5b"])
    Clip(width=1280, height=704, frames=121)
    """
    cfg = _cfg(config)
    n = cfg.default_frames if frames is None else frames
    named = {key: (w, h) for key, w, h in cfg.sizes}
    key = text.strip().lower()
    if key in named:
        width, height = named[key]
        return check_wan_clip(Clip(width, height, n), cfg)
    m = re.fullmatch(r"(\d+)x(\d+)", key)
    if not m:
        first, width, height = cfg.sizes[0]
        raise WorkloadError(
            f"resolution {text!r} is not one of {sorted(named)} or WIDTHxHEIGHT for "
            f"{cfg.name}; e.g. '{first}' or '{width}x{height}'"
        )
    return check_wan_clip(Clip(int(m.group(1)), int(m.group(2)), n), cfg)


def model_clip(model: str, resolution: str, *, frames: int | None = None) -> Clip:
    """The clip of ``resolution`` for the Wan model named ``model`` (a WAN_CONFIGS key).

    >>> model_clip("wan2.2-ti2v-5b", "720p")
    Clip(width=1280, height=704, frames=121)
    """
    if model not in WAN_CONFIGS:
        raise WorkloadError(
            f"unknown Wan model {model!r}; choose one of {sorted(WAN_CONFIGS)}, e.g. 'wan2.1-1.3b'"
        )
    return parse_resolution(resolution, frames=frames, config=WAN_CONFIGS[model])


# ---------------------------------------------------------------------------------------
# Rule sets over the mesh axes (data, fsdp, context, tensor).

WAN_RULE_SETS: tuple[Rules, ...] = (
    # maxdiffusion configs/base_wan_14b.yml logical_axis_rules (uniform attention sharding),
    # with our activation names: batch over (data, fsdp), tokens over context, weights'
    # embed dim over (context, fsdp) -> all-gathered every layer, heads/mlp over tensor.
    Rules.of(
        "maxdiffusion",
        [
            ("activation_batch", ("data", "fsdp")),
            ("activation_length", "context"),
            ("activation_heads", "tensor"),
            ("activation_mlp", "tensor"),
            ("mlp", "tensor"),
            ("embed", ("context", "fsdp")),
            ("heads", "tensor"),
            ("norm", "tensor"),
        ],
    ),
    # FSDP: weights' embed dim over fsdp only (context chips keep a copy), tokens over
    # (context, fsdp) so FSDP chips share the work; heads/mlp over tensor.
    Rules.of(
        "fsdp",
        [
            ("activation_batch", "data"),
            ("activation_length", ("context", "fsdp")),
            ("activation_heads", "tensor"),
            ("activation_mlp", "tensor"),
            ("mlp", "tensor"),
            ("embed", "fsdp"),
            ("heads", "tensor"),
            ("norm", "tensor"),
        ],
    ),
    # Data + sequence + tensor (Megatron) parallelism with weights sharded only by tensor.
    Rules.of(
        "dp_sp_tp",
        [
            ("activation_batch", "data"),
            ("activation_length", ("context", "fsdp")),
            ("activation_heads", "tensor"),
            ("activation_mlp", "tensor"),
            ("mlp", "tensor"),
            ("heads", "tensor"),
            ("norm", "tensor"),
        ],
    ),
)


def wan_param_shapes(cfg: WanConfig, dtype: Any) -> dict[str, Any]:
    """Abstract weights, keyed by name; ``blocks`` are stacked over layers for the scan."""
    import jax  # here, not above: the command line reads WAN_CONFIGS before jax starts

    d, f, n = cfg.dim, cfg.ffn_dim, cfg.num_layers
    p_in = cfg.in_channels * cfg.patch_size
    p_out = cfg.out_channels * cfg.patch_size

    def s(*shape: int) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(tuple(shape), dtype)

    blocks: dict[str, jax.ShapeDtypeStruct] = {"modulation": s(n, 6, d)}
    for pre in ("sa", "ca"):
        for m in ("q", "k", "v", "o"):
            blocks[f"{pre}_{m}_w"] = s(n, d, d)
            blocks[f"{pre}_{m}_b"] = s(n, d)
        blocks[f"{pre}_norm_q"] = s(n, d)
        blocks[f"{pre}_norm_k"] = s(n, d)
    blocks.update(
        norm3_w=s(n, d), norm3_b=s(n, d),
        ffn_w1=s(n, d, f), ffn_b1=s(n, f), ffn_w2=s(n, f, d), ffn_b2=s(n, d),
    )  # fmt: skip
    return {
        "patch_w": s(p_in, d), "patch_b": s(d),
        "text_w1": s(cfg.text_dim, d), "text_b1": s(d), "text_w2": s(d, d), "text_b2": s(d),
        "time_w1": s(cfg.freq_dim, d), "time_b1": s(d), "time_w2": s(d, d), "time_b2": s(d),
        "time_proj_w": s(d, 6 * d), "time_proj_b": s(6 * d),
        "head_modulation": s(2, d), "head_w": s(d, p_out), "head_b": s(p_out),
        "blocks": blocks,
    }  # fmt: skip


def wan_param_axes(cfg: WanConfig) -> dict[str, Any]:
    """Logical axes of every weight (same keys as :func:`wan_param_shapes`)."""
    blocks: dict[str, LogicalAxes] = {"modulation": ("layers", "modulation", "embed")}
    for pre in ("sa", "ca"):
        for m in ("q", "k", "v"):
            blocks[f"{pre}_{m}_w"] = ("layers", "embed", "heads")
            blocks[f"{pre}_{m}_b"] = ("layers", "heads")
        blocks[f"{pre}_o_w"] = ("layers", "heads", "embed")
        blocks[f"{pre}_o_b"] = ("layers", "embed")
        blocks[f"{pre}_norm_q"] = ("layers", "norm")
        blocks[f"{pre}_norm_k"] = ("layers", "norm")
    blocks.update(
        norm3_w=("layers", "norm"), norm3_b=("layers", "norm"),
        ffn_w1=("layers", "embed", "mlp"), ffn_b1=("layers", "mlp"),
        ffn_w2=("layers", "mlp", "embed"), ffn_b2=("layers", "embed"),
    )  # fmt: skip
    return {
        "patch_w": ("patch_in", "embed"), "patch_b": ("embed",),
        "text_w1": ("text_in", "embed"), "text_b1": ("embed",),
        "text_w2": ("embed_in", "embed"), "text_b2": ("embed",),
        "time_w1": ("freq", "embed"), "time_b1": ("embed",),
        "time_w2": ("embed_in", "embed"), "time_b2": ("embed",),
        "time_proj_w": ("embed_in", "modulation_out"), "time_proj_b": ("modulation_out",),
        "head_modulation": ("modulation", "embed"),
        "head_w": ("embed", "patch_out"), "head_b": ("patch_out",),
        "blocks": blocks,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------
# Analytic FLOPs.


@dataclass(frozen=True)
class WanFlops:
    """Matmul FLOPs of one step (2 per multiply-add), split by where they come from.

    ``linear``: every Linear (patch, text, time, per-block q/k/v/o, FFN, head);
    ``self_attention`` and ``cross_attention``: the QK^T and PV products.
    Elementwise work (norms, softmax, RoPE, GELU) is left out; it is < 1 % for Wan.
    """

    linear: int
    self_attention: int
    cross_attention: int

    @property
    def total(self) -> int:
        return self.linear + self.self_attention + self.cross_attention


def wan_flops(cfg: WanConfig, clip: Clip, *, batch: int = CFG_BATCH, tokens: int | None = None
              ) -> WanFlops:  # fmt: skip
    """Analytic FLOPs of one denoising step (both CFG passes), no padding by default.

    Per token of S and layer (d = dim, f = ffn_dim, T = text_len): self q/k/v/o 4*2d^2,
    cross q/o 2*2d^2, FFN 2*2df; per text token cross k/v 2*2d^2; attention scores and
    values 2*2*S*d (self) and 2*2*T*d (cross); the time MLP (freq->d, d->d, d->6d) once
    per sample, or per token with ``per_token_timestep``. Source: the step in
    :mod:`aoizora.workloads.wan`.

        >>> f = wan_flops(WAN_CONFIGS["wan2.1-14b"], parse_resolution("720p"))
        >>> round(f.total / 2 / 1e15, 2), round(f.self_attention / f.total, 2)
        (6.52, 0.72)
    """
    s = num_tokens(clip, cfg) if tokens is None else tokens
    d, f, t, n = cfg.dim, cfg.ffn_dim, cfg.text_len, cfg.num_layers
    p_in = cfg.in_channels * cfg.patch_size
    p_out = cfg.out_channels * cfg.patch_size
    per_layer_linear = s * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * f) + t * 2 * 2 * d * d
    # Time embedding + projection: once per sample, or once per token (TI2V-5B).
    time_rows = s if cfg.per_token_timestep else 1
    outer_linear = (
        s * 2 * p_in * d  # patch embedding
        + t * (2 * cfg.text_dim * d + 2 * d * d)  # text embedding
        + time_rows * (2 * cfg.freq_dim * d + 2 * d * d + 2 * d * 6 * d)
        + s * 2 * d * p_out  # head
    )
    linear = batch * (n * per_layer_linear + outer_linear)
    self_attn = batch * n * 2 * 2 * s * s * d
    cross_attn = batch * n * 2 * 2 * s * t * d
    return WanFlops(linear=linear, self_attention=self_attn, cross_attention=cross_attn)
