"""Wan 2.2: TI2V-5B and A14B configs, their clips, FLOPs, experts and numerics.

Numbers come from Wan-Video/Wan2.2 ``wan/configs`` (docs/workload.md, Wan 2.2); the
numeric tests run on 8 host CPU devices with XLA attention.
"""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aoizora.errors import WorkloadError
from aoizora.workloads.base import BuildContext, Workload
from aoizora.workloads.wan import (
    WAN_CONFIGS,
    Clip,
    WanConfig,
    latent_shape,
    model_clip,
    num_tokens,
    parse_resolution,
    wan_flops,
    wan_workload,
)
from aoizora.workloads.wan_config import ExpertSchedule

TI2V = WAN_CONFIGS["wan2.2-ti2v-5b"]
A14B = WAN_CONFIGS["wan2.2-a14b"]


def test_configs_match_the_public_wan22_configs() -> None:
    # wan_ti2v_5B.py: dim 3072, ffn 14336, 24 heads, 30 layers, Wan2.2_VAE z_dim 48, 4x16x16.
    assert (TI2V.dim, TI2V.ffn_dim, TI2V.num_heads, TI2V.num_layers) == (3072, 14336, 24, 30)
    assert (TI2V.in_channels, TI2V.out_channels, TI2V.vae_stride) == (48, 48, (4, 16, 16))
    assert TI2V.per_token_timestep and TI2V.default_frames == 121
    assert abs(TI2V.num_params / 5.0e9 - 1) < 0.01  # "TI2V-5B"
    # wan_t2v_A14B.py: two experts shaped like Wan 2.1 14B.
    shape = lambda c: (c.dim, c.ffn_dim, c.num_heads, c.num_layers, c.vae_stride)  # noqa: E731
    assert shape(A14B) == shape(WAN_CONFIGS["wan2.1-14b"])
    assert A14B.num_params == WAN_CONFIGS["wan2.1-14b"].num_params


def test_expert_schedules_reproduce_the_boundaries() -> None:
    # T2V: boundary 0.875, shift 12, 40 steps -> 26 high-noise steps (maxdiffusion
    # base_wan_27b.yml: "~step 26 of 40"); I2V: 0.900, shift 5 -> 15 ("near step 15").
    assert A14B.experts is not None
    t2v = A14B.experts.timesteps()
    assert len(t2v) == 40 and t2v[0] == 999 and list(t2v) == sorted(t2v, reverse=True)
    assert [t for t in t2v if t >= 875][-1] == 877 and t2v[26] < 875
    assert A14B.experts.steps_per_expert() == (("high_noise", 26), ("low_noise", 14))
    i2v = ExpertSchedule(sample_steps=40, sample_shift=5.0, boundary=0.9)
    assert i2v.steps_per_expert() == (("high_noise", 15), ("low_noise", 25))


def test_ti2v_clip_is_1280x704_and_27280_tokens() -> None:
    clip = model_clip("wan2.2-ti2v-5b", "720p")
    assert clip == Clip(1280, 704, 121)
    assert latent_shape(clip, TI2V) == (31, 44, 80) and num_tokens(clip, TI2V) == 27280
    assert model_clip("wan2.2-ti2v-5b", "720p", frames=81).frames == 81
    assert model_clip("wan2.2-a14b", "720p") == parse_resolution("720p") == Clip(1280, 720, 81)
    with pytest.raises(WorkloadError, match="multiples of 32"):
        parse_resolution("1280x720", config=TI2V)  # 720 / 16 / 2 is not whole
    with pytest.raises(WorkloadError, match="unknown Wan model"):
        model_clip("wan2.3", "720p")


def test_per_token_time_embedding_is_counted_per_token() -> None:
    clip = model_clip("wan2.2-ti2v-5b", "720p")
    per_sample = replace(TI2V, per_token_timestep=False)
    d, f, s = TI2V.dim, TI2V.freq_dim, num_tokens(clip, TI2V)
    extra = 2 * (s - 1) * (2 * f * d + 2 * d * d + 2 * d * 6 * d)  # CFG batch of 2
    assert wan_flops(TI2V, clip).total - wan_flops(per_sample, clip).total == extra
    assert wan_flops(TI2V, clip).self_attention == wan_flops(per_sample, clip).self_attention


def test_a14b_workload_holds_both_experts() -> None:
    wl = wan_workload("wan2.2-a14b", parse_resolution("480p"))
    active, idle, latents, timestep, text = wl.abstract_args
    assert jax.tree.structure(active) == jax.tree.structure(idle)
    assert [x.shape for x in jax.tree.leaves(active)] == [x.shape for x in jax.tree.leaves(idle)]
    assert wl.arg_logical_axes[0] == wl.arg_logical_axes[1]
    assert latents.shape == (2, 16, 21, 60, 104) and timestep.shape == (2,)
    assert wl.info["experts"] == [
        {"name": "high_noise", "steps": 26},
        {"name": "low_noise", "steps": 14},
    ]
    assert wl.info["resident_experts"] == 2
    ti2v = wan_workload("wan2.2-ti2v-5b", model_clip("wan2.2-ti2v-5b", "720p"))
    assert ti2v.abstract_args[2].shape == (2, 27280)  # a timestep per token
    assert ti2v.abstract_args[1].shape == (2, 48, 31, 44, 80)
    assert "experts" not in ti2v.info


# CPU-sized models: 12 tokens, so context = 8 pads to 16.
SMALL = WanConfig("small", 64, 128, 8, 8, 2, text_len=5, text_dim=16, freq_dim=16)
SMALL_TOKENS = replace(SMALL, name="small-ti2v", per_token_timestep=True)
SMALL_EXPERTS = replace(SMALL, name="small-moe", experts=A14B.experts)
CLIP = Clip(48, 32, 5)


def _inputs(wl: Workload, seed: int) -> list[jax.Array]:
    leaves, tree = jax.tree.flatten(wl.abstract_args)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    vals = [
        0.3 * jax.random.normal(k, x.shape, jnp.float32) for k, x in zip(keys, leaves, strict=True)
    ]
    return list(jax.tree.unflatten(tree, vals))


def _run(cfg: WanConfig, mesh_shape: tuple[int, ...], rules_id: str, attention: str,
         inputs: list[jax.Array]) -> np.ndarray:  # fmt: skip
    wl = wan_workload(cfg.name, CLIP, config=cfg, kernel="xla")
    n = int(np.prod(mesh_shape))
    devices = np.array(jax.devices("cpu")[:n]).reshape(mesh_shape)
    mesh = jax.sharding.Mesh(devices, ("data", "fsdp", "context", "tensor"))
    ctx = BuildContext(mesh=mesh, rules=wl.rules(rules_id), attention=attention, backend="cpu")
    return np.asarray(jax.jit(wl.build(ctx))(*inputs))


@pytest.mark.slow
def test_per_token_step_equals_per_sample_step_for_a_constant_timestep() -> None:
    inputs = _inputs(wan_workload("s", CLIP, config=SMALL, kernel="xla"), 3)
    inputs[2] = jnp.array([400.0, 700.0], jnp.float32)
    ref = _run(SMALL, (1, 1, 1, 1), "maxdiffusion", "gather_kv", inputs)
    per_token = list(inputs)
    per_token[2] = jnp.repeat(inputs[2][:, None], num_tokens(CLIP, SMALL), axis=1)
    got = _run(SMALL_TOKENS, (1, 1, 1, 1), "maxdiffusion", "gather_kv", per_token)
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)
    # Per-token timesteps that differ change the result (the path is live), and every
    # sharding computes the same function.
    per_token[2] = per_token[2].at[:, :4].set(0.0)  # first-frame tokens clean, as in TI2V
    base = _run(SMALL_TOKENS, (1, 1, 1, 1), "maxdiffusion", "gather_kv", per_token)
    assert not np.allclose(base, got, atol=1e-3)
    for mesh_shape, rules_id, attention in [
        ((1, 1, 8, 1), "maxdiffusion", "usp_u2"),
        ((2, 2, 2, 1), "fsdp", "ring"),
    ]:
        out = _run(SMALL_TOKENS, mesh_shape, rules_id, attention, per_token)
        np.testing.assert_allclose(out, base, rtol=2e-4, atol=2e-4, err_msg=str(mesh_shape))


@pytest.mark.slow
def test_expert_step_reads_only_the_active_expert() -> None:
    inputs = _inputs(wan_workload("m", CLIP, config=SMALL_EXPERTS, kernel="xla"), 5)
    inputs[3] = jnp.array([900.0, 900.0], jnp.float32)
    a = _run(SMALL_EXPERTS, (1, 1, 2, 1), "maxdiffusion", "gather_kv", inputs)
    other_idle = list(inputs)
    other_idle[1] = jax.tree.map(lambda x: x + 1.0, inputs[1])
    b = _run(SMALL_EXPERTS, (1, 1, 2, 1), "maxdiffusion", "gather_kv", other_idle)
    np.testing.assert_array_equal(a, b)
    single = [inputs[0], *inputs[2:]]
    c = _run(SMALL, (1, 1, 2, 1), "maxdiffusion", "gather_kv", single)
    np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-6)
