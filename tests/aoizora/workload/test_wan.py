"""The Wan 2.1 step: clip arithmetic, parameter counts, analytic FLOPs, and numerics.

Wan 2.2 (TI2V-5B, A14B) and its per-token timestep: ``test_wan22.py``.

The numeric tests run the step on 8 host CPU devices with XLA attention and check
that every attention kind and sharding computes the same function as one device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aoizora.errors import WorkloadError
from aoizora.workloads.attention import local_attention
from aoizora.workloads.base import BuildContext
from aoizora.workloads.wan import (
    WAN_CONFIGS,
    WAN_RULE_SETS,
    Clip,
    WanConfig,
    check_wan_clip,
    latent_shape,
    num_tokens,
    padded_tokens,
    parse_resolution,
    token_grid,
    wan_flops,
    wan_workload,
)


def test_clip_tokens_match_facts() -> None:
    # docs/facts.md, Wan 2.1: 81 frames 480p -> 21x30x52 = 32,760 tokens;
    # 720p -> 21x45x80 = 75,600.
    c480, c720 = parse_resolution("480p"), parse_resolution("720p")
    assert (c480.width, c480.height, c480.frames) == (832, 480, 81)
    assert latent_shape(c480) == (21, 60, 104)
    assert (token_grid(c480), num_tokens(c480)) == ((21, 30, 52), 32760)
    assert (token_grid(c720), num_tokens(c720)) == ((21, 45, 80), 75600)
    assert token_grid(parse_resolution("1280X720", frames=33)) == (9, 45, 80)


@pytest.mark.parametrize("text", ["481p", "800x", "x480"])
def test_parse_resolution_errors(text: str) -> None:
    with pytest.raises(WorkloadError, match="480p"):
        parse_resolution(text)


def test_clip_validation() -> None:
    with pytest.raises(WorkloadError, match="4k\\+1"):
        check_wan_clip(Clip(832, 480, 80))
    with pytest.raises(WorkloadError, match="multiples of 16"):
        check_wan_clip(Clip(840, 480, 81))
    with pytest.raises(WorkloadError, match="4k\\+1"):
        parse_resolution("832x480", frames=80)
    with pytest.raises(WorkloadError, match="clip.width is 0"):
        Clip(0, 480, 81)


def test_param_counts_match_published_sizes() -> None:
    # Wan 2.1 1.3B and 14B; docs/facts.md, Wan 2.1: 14B weights ~ 28.6 GB in bf16.
    n13 = WAN_CONFIGS["wan2.1-1.3b"].num_params
    n14 = WAN_CONFIGS["wan2.1-14b"].num_params
    assert 1.3e9 < n13 < 1.5e9
    assert abs(2 * n14 / 28.6e9 - 1) < 0.01


def test_tiny_config_heads_divisible() -> None:
    tiny = WAN_CONFIGS["wan-tiny"]
    assert tiny.num_layers == 2 and all(tiny.num_heads % t == 0 for t in (1, 2, 4, 8))
    with pytest.raises(WorkloadError, match="dim"):
        WanConfig("bad", 100, 200, 3, 32, 1)


def test_analytic_flops_against_facts_and_hand_count() -> None:
    # docs/facts.md, Wan 2.1: 14B @ 720p ~ 6.5e15 FLOP per forward, ~72 % in self-attention.
    f = wan_flops(WAN_CONFIGS["wan2.1-14b"], parse_resolution("720p"))
    assert abs(f.total / 2 / 6.5e15 - 1) < 0.01
    assert abs(f.self_attention / f.total - 0.72) < 0.01
    # Hand count for a one-layer toy (batch 1): every matmul written out.
    cfg = WanConfig("toy", 8, 16, 2, 4, 1, text_len=3, text_dim=5, freq_dim=6)
    clip = Clip(32, 16, 1)  # latent (1, 2, 4) -> tokens (1, 1, 2) = 2
    s, t, d, ff = 2, 3, 8, 16
    per_layer = (
        4 * 2 * s * d * d  # self q k v o
        + 2 * 2 * s * d * d  # cross q o
        + 2 * 2 * t * d * d  # cross k v on the text
        + 2 * 2 * s * d * ff  # FFN
    )
    outer = (
        2 * s * 64 * d + 2 * t * (5 * d + d * d) + 2 * (6 * d + d * d + d * 6 * d) + 2 * s * d * 64
    )
    attn_self, attn_cross = 4 * s * s * d, 4 * s * t * d
    got = wan_flops(cfg, clip, batch=1)
    assert (got.linear, got.self_attention, got.cross_attention) == (
        per_layer + outer,
        attn_self,
        attn_cross,
    )


def test_padded_tokens() -> None:
    assert padded_tokens(32760, 8) == 32760
    assert padded_tokens(32760, 16) == 32768
    assert padded_tokens(12, 8) == 16


def test_abstract_args_and_axes() -> None:
    wl = wan_workload("wan2.1-1.3b", parse_resolution("480p"))
    params, latents, timestep, text = wl.abstract_args
    assert latents.shape == (2, 16, 21, 60, 104) and latents.dtype == jnp.bfloat16
    assert timestep.shape == (2,) and text.shape == (2, 512, 4096)
    assert params["blocks"]["sa_q_w"].shape == (30, 1536, 1536)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
    assert wl.abstract_out.shape == latents.shape
    assert [r.name for r in wl.rule_sets] == [r.name for r in WAN_RULE_SETS]
    with pytest.raises(WorkloadError, match="unknown Wan model"):
        wan_workload("wan9", parse_resolution("480p"))


@pytest.mark.slow
def test_local_xla_attention_matches_jax_reference() -> None:
    k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(k0, (2, 3, 5, 8), jnp.float32)
    k = jax.random.normal(k1, (2, 3, 7, 8), jnp.float32)
    v = jax.random.normal(k2, (2, 3, 7, 8), jnp.float32)
    valid = jnp.arange(7) < 5
    out, lse = local_attention(q, k, v, valid, kernel="xla", with_lse=True)
    ref = jax.nn.dot_product_attention(
        q.transpose(0, 2, 1, 3),
        k[:, :, :5].transpose(0, 2, 1, 3),
        v[:, :, :5].transpose(0, 2, 1, 3),
    ).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k[:, :, :5]) / np.sqrt(8)
    np.testing.assert_allclose(lse, jax.nn.logsumexp(s, axis=-1), rtol=1e-5, atol=1e-5)


# A model small enough to execute on CPU; 12 tokens so context = 8 needs padding.
SMALL = WanConfig("small", 64, 128, 8, 8, 2, text_len=5, text_dim=16, freq_dim=16)
SMALL_CLIP = Clip(48, 32, 5)  # latent (2, 4, 6) -> tokens (2, 2, 3) = 12


def _run(mesh_shape: tuple[int, ...], rules_id: str, attention: str, inputs: tuple) -> np.ndarray:
    wl = wan_workload("small", SMALL_CLIP, config=SMALL, kernel="xla")
    n = int(np.prod(mesh_shape))
    mesh = jax.sharding.Mesh(
        np.array(jax.devices("cpu")[:n]).reshape(mesh_shape), ("data", "fsdp", "context", "tensor")
    )
    ctx = BuildContext(mesh=mesh, rules=wl.rules(rules_id), attention=attention, backend="cpu")
    return np.asarray(jax.jit(wl.build(ctx))(*inputs))


@pytest.mark.slow
def test_every_attention_kind_computes_the_same_step() -> None:
    assert num_tokens(SMALL_CLIP) == 12
    wl = wan_workload("small", SMALL_CLIP, config=SMALL, kernel="xla")
    leaves, tree = jax.tree.flatten(wl.abstract_args)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    vals = [
        0.3 * jax.random.normal(k, x.shape, jnp.float32) if x.ndim else jnp.float32(0)
        for k, x in zip(keys, leaves, strict=True)
    ]
    inputs = list(jax.tree.unflatten(tree, vals))
    inputs[2] = jnp.array([500.0, 500.0], jnp.float32)  # timestep
    inputs = tuple(inputs)
    ref = _run((1, 1, 1, 1), "maxdiffusion", "gather_kv", inputs)
    assert ref.shape == (2, 16, 2, 4, 6) and np.isfinite(ref).all()
    for mesh_shape, rules_id, attention in [
        ((1, 1, 8, 1), "maxdiffusion", "gather_kv"),  # 12 tokens padded to 16
        ((1, 2, 4, 1), "fsdp", "ring"),  # ring over (context, fsdp), padded to 16
        ((1, 2, 2, 2), "fsdp", "ulysses"),  # all-to-all over two axes, heads over tensor
        ((1, 2, 4, 1), "fsdp", "ulysses"),  # all-to-all over two axes, padded to 16
        ((1, 1, 8, 1), "maxdiffusion", "usp_u2"),  # Ulysses 2 x ring 4 on one axis, padded
        ((1, 1, 8, 1), "maxdiffusion", "usp_u4"),  # Ulysses 4 x ring 2
        ((1, 2, 4, 1), "fsdp", "usp_u4"),  # (context, fsdp): spec order != mesh order
        ((1, 2, 2, 2), "fsdp", "usp_u2"),  # heads over tensor too: 8 % (2 x 2) == 0
    ]:
        got = _run(mesh_shape, rules_id, attention, inputs)
        np.testing.assert_allclose(
            got, ref, rtol=2e-4, atol=2e-4, err_msg=f"{mesh_shape} {rules_id} {attention}"
        )
