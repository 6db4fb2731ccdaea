"""The generic entry point: plan any JAX function from abstract args and logical names."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from aoizora.cache import JsonCache
from aoizora.candidates.space import enumerate_candidates, mesh_shapes
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
# The user's own mesh axis names: nothing here knows data/fsdp/context/tensor.
RULES = (
    Rules.of("dp_tp", [("batch", "dp"), ("mlp", "tp")]),
    Rules.of("fsdp", [("batch", ("dp", "fsdp")), ("embed", "fsdp"), ("mlp", "tp")]),
)


def _workload():  # type: ignore[no-untyped-def]
    return user_workload(
        "mlp", mlp, ARGS, AXES, out_logical_axes=("batch", "length", "embed"), rule_sets=RULES
    )


def test_user_workload_candidates() -> None:
    wl = _workload()
    assert wl.abstract_out.shape == (8, 128, 256)
    # The mesh is every axis the rule sets name, in order of first mention.
    assert wl.mesh_axis_names == ("dp", "tp", "fsdp")
    space = enumerate_candidates(wl, 4)
    ids = [c.id for c in space.legal]
    assert "dp2.tp2.fsdp1/dp_tp/none" in ids
    assert "dp1.tp1.fsdp4/fsdp/none" in ids
    assert all(c.mesh_axis_names == ("dp", "tp", "fsdp") for c in space.legal)
    # 'fsdp' shards nothing under dp_tp: every dp_tp candidate with fsdp > 1 is rejected.
    idle = [r for r in space.rejected if r.candidate.rules_id == "dp_tp"]
    assert {r.candidate.mesh_sizes["fsdp"] > 1 for r in idle} == {True}
    assert all("mesh axis 'fsdp'" in r.reason for r in idle)
    # Brute force: legal + rejected cover every (mesh shape, rule set) exactly once.
    every = [
        (c.mesh_shape, c.rules_id) for c in [*space.legal, *(r.candidate for r in space.rejected)]
    ]
    assert sorted(every) == sorted({(s, r.name) for s in mesh_shapes(4, 3) for r in RULES})


def test_rule_sets_may_name_any_axes_and_a_rule_naming_model_is_legal() -> None:
    wl = user_workload(
        "mlp", mlp, ARGS, AXES, out_logical_axes=("batch", "length", "embed"),
        rule_sets=Rules.of("model", [("mlp", "model")]),
    )  # fmt: skip
    assert wl.mesh_axis_names == ("model",)
    assert [c.id for c in enumerate_candidates(wl, 8).legal] == ["model8/model/none"]


def test_cache_id_follows_the_program_and_the_rules() -> None:
    def mlp_relu(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return jax.nn.relu(x @ params["w1"]) @ params["w2"]

    out = ("batch", "length", "embed")
    a, b = _workload(), _workload()
    assert a.cache_id == b.cache_id and a.cache_id.startswith("mlp#")
    edited = user_workload("mlp", mlp_relu, ARGS, AXES, out_logical_axes=out, rule_sets=RULES)
    other_rules = user_workload("mlp", mlp, ARGS, AXES, out_logical_axes=out, rule_sets=RULES[:1])
    assert len({a.cache_id, edited.cache_id, other_rules.cache_id}) == 3


@pytest.mark.skipif(slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable")
def test_user_workload_compiles_with_its_shardings() -> None:
    wl = _workload()
    space = enumerate_candidates(wl, 4)
    cand = space.by_id("dp2.tp2.fsdp1/dp_tp/none")
    res = compile_candidate(wl, cand, load_slice("v5e:2x2"))
    assert res.ok, res.error
    # w2's contracting dim is sharded over tp: the partitioner must reduce.
    assert "all-reduce" in res.hlo_text or "reduce-scatter" in res.hlo_text
    assert res.flops > 0


@pytest.mark.skipif(slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable")
def test_compile_cache_round_trip(tmp_path: Path) -> None:
    wl = _workload()
    cand = enumerate_candidates(wl, 4).by_id("dp1.tp1.fsdp4/fsdp/none")
    cache = JsonCache(tmp_path, compress=True)
    cold = compile_candidate(wl, cand, load_slice("v5e:2x2"), cache=cache)
    warm = compile_candidate(wl, cand, load_slice("v5e:2x2"), cache=cache)
    assert cold.ok and not cold.cache_hit and warm.cache_hit
    # One compile result, and the lowered-program index entry that points at it.
    files = {f.name.split(".")[0]: f for f in tmp_path.rglob("*.json.gz")}
    values = {k: json.loads(gzip.decompress(f.read_bytes()))["value"] for k, f in files.items()}
    [index] = [v for v in values.values() if "compile_key" in v]
    assert len(files) == 2 and index["compile_key"] in files
    assert values[index["compile_key"]]["hlo_text"] == cold.hlo_text
    assert (warm.hlo_text, warm.flops, warm.memory, warm.device_order) == (
        cold.hlo_text,
        cold.flops,
        cold.memory,
        cold.device_order,
    )
    # Another device order is another compile (another cache entry and index entry).
    other = compile_candidate(wl, cand, load_slice("v5e:2x2"), order=(3, 2, 1, 0), cache=cache)
    assert not other.cache_hit and len(list(tmp_path.rglob("*.json.gz"))) == 4


def test_user_workload_errors() -> None:
    out = ("batch", "length", "embed")
    with pytest.raises(WorkloadError, match="do not name the 3 dimensions"):
        user_workload("bad", mlp, ARGS, (AXES[0], ("batch", "embed")),
                      out_logical_axes=out, rule_sets=RULES)  # fmt: skip
    with pytest.raises(WorkloadError, match="structure"):
        user_workload("bad", mlp, ARGS, (("embed", "mlp"), AXES[1]),
                      out_logical_axes=out, rule_sets=RULES)  # fmt: skip
    with pytest.raises(WorkloadError, match=r"rule_sets \(\) must be one or more Rules"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=out, rule_sets=())
    with pytest.raises(WorkloadError, match="must be one or more Rules values"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=out,
                      rule_sets=[("batch", "dp")])  # type: ignore[list-item]  # fmt: skip
    with pytest.raises(WorkloadError, match="name no mesh axis"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=out,
                      rule_sets=Rules.of("r", [("batch", None)]))  # fmt: skip
    with pytest.raises(WorkloadError, match=r"offending: \['d p'\]"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=out,
                      rule_sets=Rules.of("r", [("batch", "d p")]))  # fmt: skip
    with pytest.raises(WorkloadError, match=r"mesh axes \['tp'\] that are not in mesh_axis_names"):
        user_workload("bad", mlp, ARGS, AXES, out_logical_axes=out, rule_sets=RULES,
                      mesh_axis_names=("dp", "fsdp"))  # fmt: skip
    with pytest.raises(WorkloadError, match="tracing fn.*failed: TypeError"):
        user_workload("bad", mlp, (ARGS[1], ARGS[0]), (AXES[1], AXES[0]),
                      out_logical_axes=out, rule_sets=RULES)  # fmt: skip
    with pytest.raises(WorkloadError, match="is not callable"):
        user_workload("bad", 3, ARGS, AXES, out_logical_axes=out, rule_sets=RULES)  # type: ignore[arg-type]


def test_public_api_is_stable() -> None:
    import inspect

    import aoizora

    assert {"Rules", "user_workload", "load_plan", "AoizoraError"} <= set(aoizora.__all__)
    assert aoizora.user_workload is user_workload and aoizora.Rules is Rules
    params = inspect.signature(aoizora.user_workload).parameters
    positional = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    # The documented call: user_workload(name, fn, abstract_args, arg_logical_axes,
    # out_logical_axes=..., rule_sets=...); later additions must be optional keywords.
    assert positional == ["name", "fn", "abstract_args", "arg_logical_axes"]
    assert {"out_logical_axes", "rule_sets"} <= keyword
    required = {n for n, p in params.items() if p.default is p.empty}
    assert required == {
        "name",
        "fn",
        "abstract_args",
        "arg_logical_axes",
        "out_logical_axes",
        "rule_sets",
    }
    assert list(inspect.signature(aoizora.Rules.of).parameters) == ["name", "pairs"]
