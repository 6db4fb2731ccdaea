"""The generic entry point: plan any JAX function from abstract args and logical names."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from aoizora.cache import JsonCache
from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import compile_candidate
from aoizora.errors import WorkloadError
from aoizora.tpu import slice_backend
from aoizora.workloads.base import user_workload
from aoizora.workloads.rules import Rules
from sim.topology import load_slice


def mlp(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """A plain two-layer MLP: no sharding code, no knowledge of AoiZora."""
    return jax.nn.gelu(x @ params["w1"]) @ params["w2"]


ARGS = (
    {
        "w1": jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16),
        "w2": jax.ShapeDtypeStruct((1024, 256), jnp.bfloat16),
    },
    jax.ShapeDtypeStruct((8, 128, 256), jnp.bfloat16),
)
AXES = ({"w1": ("embed", "mlp"), "w2": ("mlp", "embed")}, ("batch", "length", "embed"))
RULES = (
    Rules.of("dp_tp", [("batch", "data"), ("mlp", "tensor")]),
    Rules.of("fsdp", [("batch", ("data", "fsdp")), ("embed", "fsdp"), ("mlp", "tensor")]),
)


def _workload():  # type: ignore[no-untyped-def]
    return user_workload(
        "mlp", mlp, ARGS, AXES, out_logical_axes=("batch", "length", "embed"), rule_sets=RULES
    )


def test_user_workload_candidates() -> None:
    wl = _workload()
    assert wl.abstract_out.shape == (8, 128, 256)
    space = enumerate_candidates(wl, 4)
    ids = [c.id for c in space.legal]
    assert "data2.fsdp1.context1.tensor2/dp_sp_tp/none" not in ids
    assert "data2.fsdp1.context1.tensor2/dp_tp/none" in ids
    assert "data1.fsdp4.context1.tensor1/fsdp/none" in ids
    # 'context' is used by no rule: any candidate with context > 1 is rejected.
    assert all(c.mesh_sizes["context"] == 1 for c in space.legal)
    ctx = [r for r in space.rejected if r.candidate.mesh_sizes["context"] > 1]
    assert ctx and all("'context'" in r.reason for r in ctx)


@pytest.mark.skipif(slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable")
def test_user_workload_compiles_with_its_shardings() -> None:
    wl = _workload()
    space = enumerate_candidates(wl, 4)
    cand = space.by_id("data2.fsdp1.context1.tensor2/dp_tp/none")
    res = compile_candidate(wl, cand, load_slice("v5e:2x2"))
    assert res.ok, res.error
    # w2's contracting dim is sharded over tensor: the partitioner must reduce.
    assert "all-reduce" in res.hlo_text or "reduce-scatter" in res.hlo_text
    assert res.flops > 0


@pytest.mark.skipif(slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable")
def test_compile_cache_round_trip(tmp_path: Path) -> None:
    wl = _workload()
    cand = enumerate_candidates(wl, 4).by_id("data1.fsdp4.context1.tensor1/fsdp/none")
    cache = JsonCache(tmp_path, compress=True)
    cold = compile_candidate(wl, cand, load_slice("v5e:2x2"), cache=cache)
    warm = compile_candidate(wl, cand, load_slice("v5e:2x2"), cache=cache)
    assert cold.ok and not cold.cache_hit and warm.cache_hit
    assert len(list(tmp_path.rglob("*.json.gz"))) == 1
    assert (warm.hlo_text, warm.flops, warm.memory, warm.device_order) == (
        cold.hlo_text,
        cold.flops,
        cold.memory,
        cold.device_order,
    )
    # Another device order is another compile (another cache entry).
    other = compile_candidate(wl, cand, load_slice("v5e:2x2"), order=(3, 2, 1, 0), cache=cache)
    assert not other.cache_hit and len(list(tmp_path.rglob("*.json.gz"))) == 2


def test_user_workload_errors() -> None:
    with pytest.raises(WorkloadError, match="do not name the 3 dimensions"):
        user_workload("bad", mlp, ARGS, (AXES[0], ("batch", "embed")),
                      out_logical_axes=("batch", "length", "embed"), rule_sets=RULES)  # fmt: skip
    with pytest.raises(WorkloadError, match="structure"):
        user_workload("bad", mlp, ARGS, (("embed", "mlp"), AXES[1]),
                      out_logical_axes=("batch", "length", "embed"), rule_sets=RULES)  # fmt: skip
    with pytest.raises(WorkloadError, match="no rule sets"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=("batch", "length", "embed"),
                      rule_sets=())  # fmt: skip
