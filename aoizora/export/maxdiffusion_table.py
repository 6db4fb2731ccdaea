"""What maxdiffusion's Wan configs accept: the keys AoiZora overrides, their types and values.

A small table of facts read from AI-Hypercomputer/maxdiffusion at commit
:data:`MAXDIFFUSION_COMMIT` (2026-08-21), not a copy of its files; see
docs/facts.md, maxdiffusion config overrides:

* ``src/maxdiffusion/configs/base_wan_14b.yml``, ``base_wan_1_3b.yml``, ``base_wan_27b.yml``
  -- the YAML type of every key we override (the command line types a value like the
  YAML's: ``pyconfig._HyperParameters``), ``mesh_axes``, the ``logical_axis_rules`` of
  names AoiZora's step does not use (kept as the config has them), ``flash_min_seq_length``
  and the clip each config runs by default;
* ``src/maxdiffusion/models/attention_flax.py`` -- the attention kernels registered
  (``register_kernel``); ``ring`` is listed in the configs' comment but not registered at
  this commit (``tokamax_ring`` is the ring over ``context``);
* ``src/maxdiffusion/pyconfig.py`` -- ``ulysses_ring*`` needs ``ulysses_shards`` > 0; a key
  given on the command line must exist in the YAML.

    >>> CONFIGS["base_wan_14b.yml"].model_name, config_for_model("wan2.1-1.3b")
    ('wan2.1', 'base_wan_1_3b.yml')
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ATTENTION_KERNELS",
    "CONFIGS",
    "CONFIG_DIR",
    "FLASH_BLOCK_SIZES",
    "KEY_TYPES",
    "MAXDIFFUSION_COMMIT",
    "MAXDIFFUSION_REPO",
    "MESH_AXES",
    "OTHER_RULES",
    "ULYSSES_RING_KERNELS",
    "MaxdiffusionConfig",
    "config_for_model",
]

MAXDIFFUSION_REPO = "AI-Hypercomputer/maxdiffusion"
MAXDIFFUSION_COMMIT = "7cfb8801d41d1728f0232cd7ee59e900a151fecf"
CONFIG_DIR = "src/maxdiffusion/configs"

# mesh_axes of every Wan config; the ici_<axis>_parallelism keys follow it.
MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context", "tensor")

# The YAML type of each key AoiZora writes (pyconfig types a command-line value like it).
KEY_TYPES: dict[str, type] = {
    "ici_data_parallelism": int,
    "ici_fsdp_parallelism": int,
    "ici_context_parallelism": int,
    "ici_tensor_parallelism": int,
    "logical_axis_rules": list,
    "attention": str,
    "ulysses_shards": int,
    "flash_block_sizes": dict,
    "flash_min_seq_length": int,
    "height": int,
    "width": int,
    "num_frames": int,
}

# attention_flax.py register_kernel(...) names at MAXDIFFUSION_COMMIT.
ATTENTION_KERNELS: tuple[str, ...] = (
    "dot_product",
    "flash",
    "tokamax_flash",
    "tokamax_ring",
    "tokamax_ring_custom",
    "cudnn_flash_te",
    "ulysses",
    "ulysses_custom",
    "ulysses_custom_fixed_m",
    "ulysses_ring",
    "ulysses_ring_custom",
    "ulysses_ring_custom_fixed_m",
    "ulysses_ring_custom_bidir",
)
# pyconfig.user_init: these need ulysses_shards > 0.
ULYSSES_RING_KERNELS: tuple[str, ...] = (
    "ulysses_ring",
    "ulysses_ring_custom",
    "ulysses_ring_custom_fixed_m",
    "ulysses_ring_custom_bidir",
)

# flash_block_sizes of all three configs (512 everywhere, as AoiZora's splash kernel;
# aoizora/workloads/splash.py), in the configs' key order.
FLASH_BLOCK_SIZES: dict[str, int | bool] = {
    "block_q": 512,
    "block_kv_compute": 512,
    "block_kv": 512,
    "block_q_dkv": 512,
    "block_kv_dkv": 512,
    "block_kv_dkv_compute": 512,
    "block_q_dq": 512,
    "block_kv_dq": 512,
    "use_fused_bwd_kernel": False,
}

# logical_axis_rules entries (all three configs) for names AoiZora's Wan step does not
# use: self/cross-attention internals (pyconfig prepends its own rules for them), the
# patch-embedding conv. Kept as the config has them; None = replicated.
OTHER_RULES: tuple[tuple[str, tuple[str, ...] | str | None], ...] = (
    ("activation_self_attn_heads", ("context", "tensor")),
    ("activation_cross_attn_q_length", ("context", "tensor")),
    ("conv_batch", ("data", "context", "fsdp")),
    ("out_channels", "tensor"),
    ("conv_out", "context"),
)


@dataclass(frozen=True)
class MaxdiffusionConfig:
    """One Wan config of maxdiffusion: its file, model and defaults AoiZora reads."""

    file: str
    model_name: str
    pretrained: str
    flash_min_seq_length: int
    num_inference_steps: int
    clip: tuple[int, int, int]  # width, height, num_frames

    @property
    def path(self) -> str:
        return f"{CONFIG_DIR}/{self.file}"


CONFIGS: dict[str, MaxdiffusionConfig] = {
    c.file: c
    for c in (
        MaxdiffusionConfig(
            "base_wan_14b.yml", "wan2.1", "Wan-AI/Wan2.1-T2V-14B-Diffusers", 4096, 50,
            (1280, 720, 81),
        ),
        MaxdiffusionConfig(
            "base_wan_1_3b.yml", "wan2.1", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", 0, 30,
            (832, 480, 81),
        ),
        MaxdiffusionConfig(
            "base_wan_27b.yml", "wan2.2", "Wan-AI/Wan2.2-T2V-A14B-Diffusers", 4096, 40,
            (1280, 720, 81),
        ),
    )
}  # fmt: skip

# AoiZora's Wan models and the maxdiffusion config that runs each (same checkpoint family).
_MODEL_CONFIGS: dict[str, str] = {
    "wan2.1-14b": "base_wan_14b.yml",
    "wan2.1-1.3b": "base_wan_1_3b.yml",
    "wan2.2-a14b": "base_wan_27b.yml",
}


def config_for_model(model: str) -> str | None:
    """The maxdiffusion config file for AoiZora model ``model``, None if it ships none
    (``wan2.2-ti2v-5b``, the test model ``wan-tiny``)."""
    return _MODEL_CONFIGS.get(model)
