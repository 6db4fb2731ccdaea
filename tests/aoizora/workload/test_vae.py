"""The Wan VAE decoder: shapes from the public configs, chunked decoding equal to the whole
clip's causal decode, the analytic FLOPs against what compilers see, its candidates."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from aoizora.cache import JsonCache
from aoizora.candidates.baselines import baseline_candidates
from aoizora.candidates.space import enumerate_candidates, make_candidate
from aoizora.compile import compile_candidate
from aoizora.errors import WorkloadError
from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import ComputeSegment
from aoizora.workloads.base import BuildContext
from aoizora.workloads.clip import Clip
from aoizora.workloads.vae import vae_decode, vae_workload
from aoizora.workloads.vae_config import (
    VAE_CONFIGS,
    VAE_RULE_SETS,
    VaeConfig,
    decoder_stages,
    vae_flops,
    vae_num_params,
)
from sim.topology import load_slice

TINY_22 = VaeConfig(
    "tiny-2.2", z_dim=48, base_dim=8, dim_mult=(1, 2, 2, 2), num_res_blocks=1, variant="2.2",
    out_patch=2, stride=(4, 16, 16),
)  # fmt: skip


def _cpu_ctx() -> BuildContext:
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("width", "height"))
    return BuildContext(mesh=mesh, rules=VAE_RULE_SETS[0], attention="none", backend="cpu")


def _random(tree: Any, seed: int) -> Any:
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree.unflatten(
        treedef,
        [0.2 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)],
    )


def test_public_shapes() -> None:
    """Wan 2.1: 21 latent frames of 90x160 decode to 81 frames of 720x1280 (4x8x8);
    Wan 2.2 TI2V-5B: 31 of 44x80 to 121 of 704x1280 (4x16x16, 12-channel head)."""
    wl = vae_workload("wan2.1-vae", Clip(1280, 720, 81))
    assert wl.abstract_args[1].shape == (1, 21, 90, 160, 16)
    assert wl.abstract_out.shape == (1, 81, 720, 1280, 3)
    out = jax.eval_shape(lambda p, z: vae_decode(VAE_CONFIGS["wan2.1-vae"], _cpu_ctx())(p, z),
                         *wl.abstract_args)  # fmt: skip
    assert out.shape == (1, 81, 720, 1280, 3)
    cfg = VAE_CONFIGS["wan2.2-vae"]
    wl = vae_workload(cfg, Clip(1280, 704, 121))
    assert wl.abstract_args[1].shape == (1, 31, 44, 80, 48)
    out = jax.eval_shape(lambda p, z: vae_decode(cfg, _cpu_ctx())(p, z), *wl.abstract_args)
    assert out.shape == (1, 121, 704, 1280, 3)
    # Decoder widths: Wan 2.1 halves at each upsampler (384 -> 192 -> 96), Wan 2.2 keeps them.
    assert [s.out_dim for s in decoder_stages(VAE_CONFIGS["wan2.1-vae"])] == [384, 384, 192, 96]
    assert [s.out_dim for s in decoder_stages(cfg)] == [1024, 1024, 512, 256]
    # 73.3M decoder weights (Wan 2.1) -- the VAE's 127M with its encoder.
    assert round(vae_num_params(VAE_CONFIGS["wan2.1-vae"]) / 1e6, 1) == 73.3


@pytest.mark.parametrize("cfg", [VAE_CONFIGS["vae-tiny"], TINY_22], ids=["2.1", "2.2"])
def test_chunked_decode_equals_the_whole_causal_decode(cfg: VaeConfig) -> None:
    """Chunks of 1 or 2 latent frames with the two-frame caches (2: the last chunk padded)
    give the clip one causal pass over every frame gives: the caches carry exactly the
    frames a causal convolution needs, and the first frame is not doubled in time."""
    clip = Clip(32, 32, 13)  # 4 latent frames: the first, then 3 more
    wl = vae_workload(cfg, clip)
    params = _random(wl.abstract_args[0], 0)
    z = jax.random.normal(jax.random.PRNGKey(1), wl.abstract_args[1].shape)
    whole = jax.jit(vae_decode(cfg, _cpu_ctx(), whole=True))(params, z)
    assert whole.shape == (1, 13, 32, 32, 3) and float(jnp.std(whole)) > 0.1
    by_one = jax.jit(vae_decode(cfg, _cpu_ctx(), chunk=1))
    for decode in (by_one, jax.jit(vae_decode(cfg, _cpu_ctx(), chunk=2))):
        np.testing.assert_allclose(decode(params, z), whole, atol=1e-5, rtol=1e-5)
    # The caches matter: the last frames depend on the first latent frame.
    other = by_one(params, z.at[:, 0].set(0.0))
    assert float(jnp.max(jnp.abs(other[:, -1] - whole[:, -1]))) > 1e-3


def _matmul_work(hlo_text: str) -> float:
    """Every matmul FLOP of a compiled program as the replay sees it: each region's kernels
    times how often the region runs (a scan's body once per iteration)."""
    graph = graph_from_text(hlo_text)
    return sum(
        r.count * sum(m.flops for k in s.kernels for m in k.matmuls)
        for r in graph.regions
        for s in r.steps
        if isinstance(s, ComputeSegment)
    )


def test_analytic_flops_match_the_compiled_cpu_program() -> None:
    """The full-width Wan 2.1 decoder at a small clip, chunked as in production: the
    matmul work of the compiled program (:mod:`aoizora.hlo`, scan iterations counted)
    within 5 % of :func:`vae_flops` -- convolutions with only their real taps and the
    attention products."""
    cfg = VAE_CONFIGS["wan2.1-vae"]
    clip = Clip(64, 32, 13)  # latent 4 x 4 x 8: the first frame, then a scan of 3
    wl = vae_workload(cfg, clip)
    fn = jax.jit(vae_decode(cfg, _cpu_ctx(), chunk=1))
    compiled = fn.trace(*wl.abstract_args).lower().compile()
    analytic = vae_flops(cfg, clip)
    assert abs(_matmul_work(compiled.as_text()) / analytic.total - 1) < 0.05
    # XLA's own count sees the scan body once: without the trip count, far too little.
    assert compiled.cost_analysis()["flops"] < 0.8 * analytic.total


def test_bad_clip_and_chunk_are_refused() -> None:
    with pytest.raises(WorkloadError, match=r"frames must be 4k\+1"):
        vae_workload("wan2.1-vae", Clip(1280, 720, 80))
    with pytest.raises(WorkloadError, match="chunk 0: must be a positive"):
        vae_workload("wan2.1-vae", Clip(1280, 720, 81), chunk=0)
    with pytest.raises(WorkloadError, match="unknown VAE 'v3'"):
        vae_workload("v3", Clip(1280, 720, 81))
    with pytest.raises(WorkloadError, match="stride"):
        replace(VAE_CONFIGS["wan2.1-vae"], stride=(4, 16, 16))


def test_candidates_and_baselines_on_eight_devices() -> None:
    """maxdiffusion's spatial sharding and replication are the baselines; the candidate
    space splits width and height where they divide, and never replicates on 8 devices."""
    wl = vae_workload("wan2.1-vae", Clip(1280, 720, 81))  # latent 90 x 160
    ids = [c.id for c in enumerate_candidates(wl, 8).legal]
    assert "width8.height1/maxdiffusion/none" in ids
    assert "width4.height2/spatial/none" in ids
    assert not any("replicated" in i for i in ids)
    assert not any("height4" in i or "height8" in i for i in ids)  # 90 rows: 4 does not divide
    base = {b.name: b.candidate.id for b in baseline_candidates(wl, load_slice("v5e:2x4"))}
    assert base == {
        "maxdiffusion spatial": "width8.height1/maxdiffusion/none",
        "replicated": "width1.height8/replicated/none",
    }


@pytest.mark.slow
def test_compiled_program_does_the_analytic_work(compiled_cache: JsonCache) -> None:
    """The TPU program the planner replays: its matmul work over every region, times how
    often each runs (the scan over latent chunks included), is the analytic work."""
    cfg = VAE_CONFIGS["vae-tiny"]
    clip = Clip(64, 64, 13)  # 4 latent frames: the first alone, then a scan of 3 chunks
    wl = vae_workload(cfg, clip, chunk=1)
    cand = make_candidate(wl, (1, 1), "spatial", "none")
    res = compile_candidate(wl, cand, load_slice("v5e:1x1"), cache=compiled_cache)
    assert res.ok, res.error
    assert any(r.trip_count == 3 for r in graph_from_text(res.hlo_text).regions)
    # At least the real taps; for frames this small the TPU compiler tiles the narrow
    # convolutions with halos and spends more (measured: 1.23x here, 1.09x at 256x256;
    # docs/serving.md, VAE decode), never more than 1.3x every tap.
    seen = _matmul_work(res.hlo_text)
    assert vae_flops(cfg, clip).total <= seen <= 1.3 * vae_flops(cfg, clip, dense=True).total
    # The scan's iterations are real work: the first chunk and one iteration are not enough.
    assert seen > 1.5 * vae_flops(cfg, Clip(64, 64, 5), dense=True).total
