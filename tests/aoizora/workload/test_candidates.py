"""The candidate space: enumeration, rejection reasons, baselines and their device orders."""

from __future__ import annotations

import pytest

from aoizora.candidates.baselines import baseline_candidates
from aoizora.candidates.space import (
    Candidate,
    argument_bytes_per_chip,
    candidate_from_json,
    candidate_to_json,
    check_candidate,
    enumerate_candidates,
    make_candidate,
    mesh_shapes,
)
from aoizora.errors import CandidateError
from aoizora.workloads.wan import WAN_CONFIGS, parse_resolution, wan_workload
from sim.topology import load_slice

WL_13B = wan_workload("wan2.1-1.3b", parse_resolution("480p"))
WL_14B = wan_workload("wan2.1-14b", parse_resolution("720p"))


def test_mesh_shapes_brute_force() -> None:
    for n in (1, 4, 8, 16):
        got = mesh_shapes(n, 4)
        brute = sorted(
            (a, b, c, d)
            for a in range(1, n + 1)
            for b in range(1, n + 1)
            for c in range(1, n + 1)
            for d in range(1, n + 1)
            if a * b * c * d == n
        )
        assert list(got) == brute
    assert len(mesh_shapes(16, 4)) == 35  # C(4+3, 3) ordered factorisations of 2^4


def _reasons(wl, shape, rules_id, attention) -> str:  # type: ignore[no-untyped-def]
    return " | ".join(check_candidate(wl, make_candidate(wl, shape, rules_id, attention)))


def test_rejection_reasons() -> None:
    # 12 heads cannot be split 8 ways by tensor.
    r = _reasons(WL_13B, (1, 1, 1, 8), "maxdiffusion", "gather_kv")
    assert "activation_heads, size 12) is not divisible by its sharding degree 8" in r
    # The CFG batch of 2 cannot go over data = 4.
    r = _reasons(WL_13B, (4, 1, 1, 1), "fsdp", "gather_kv")
    assert "data=4 exceeds the CFG batch of 2" in r
    assert "activation_batch, size 2) is not divisible by its sharding degree 4" in r
    # maxdiffusion puts the batch over (data, fsdp): 2 x 2 = 4 > 2.
    r = _reasons(WL_13B, (2, 2, 1, 1), "maxdiffusion", "gather_kv")
    assert "sharding degree 4 (mesh axes ('data', 'fsdp'))" in r
    # Ulysses: 12 heads over context 8.
    r = _reasons(WL_13B, (1, 1, 8, 1), "maxdiffusion", "ulysses")
    assert "ulysses attention needs heads (12) divisible by sequence degree 8" in r
    # Both fsdp and context carry tokens under dp_sp_tp, so neither is idle.
    r = _reasons(WL_13B, (1, 2, 2, 1), "dp_sp_tp", "gather_kv")
    assert r == ""  # dp_sp_tp puts tokens over (context, fsdp): both used
    r = _reasons(WL_13B, (1, 1, 2, 2), "dp_sp_tp", "ring")
    assert r == ""
    # Padding: 75,600 tokens over 32 would need 16 pad tokens (< 1 %: legal); a tiny clip
    # of 12 tokens over 8 needs 4 (33 %: illegal).
    tiny = wan_workload("wan-tiny", parse_resolution("48x32", frames=5))
    r = _reasons(tiny, (1, 1, 8, 1), "maxdiffusion", "gather_kv")
    assert "sequence of 12 tokens over degree 8 needs 4 padding tokens" in r
    # An attention kind the workload does not implement.
    r = _reasons(WL_13B, (1, 1, 4, 1), "maxdiffusion", "flash3")
    assert "attention 'flash3' is not implemented" in r


def test_idle_mesh_axis_rejected() -> None:
    import jax
    import jax.numpy as jnp

    from aoizora.workloads.base import user_workload
    from aoizora.workloads.rules import Rules

    wl = user_workload(
        "mm",
        lambda w, x: x @ w,
        (jax.ShapeDtypeStruct((64, 64), jnp.float32), jax.ShapeDtypeStruct((8, 64), jnp.float32)),
        ((None, "mlp"), ("batch", None)),
        out_logical_axes=("batch", "mlp"),
        rule_sets=(Rules.of("dp", [("batch", "data")]),),
        mesh_axis_names=("data", "fsdp", "context", "tensor"),  # more axes than the rules use
    )
    r = check_candidate(wl, make_candidate(wl, (2, 1, 1, 2), "dp", "none"))
    assert r == (
        "mesh axis 'tensor' (size 2) shards nothing under rules 'dp': every chip along it "
        "would repeat the same work",
    )


def test_enumeration_is_deterministic_and_complete() -> None:
    a = enumerate_candidates(WL_13B, 8)
    b = enumerate_candidates(WL_13B, 8)
    assert [c.id for c in a.legal] == [c.id for c in b.legal]
    assert [r.reasons for r in a.rejected] == [r.reasons for r in b.rejected]
    # Every combination is either legal or rejected, and every rejection has a reason.
    # Kinds: gather_kv, ulysses, ring and usp_uU for U in 2, 3, 4, 6, 12 (divisors of 12 heads).
    assert len(WL_13B.attention_kinds) == 3 + 5
    assert len(a.legal) + len(a.rejected) == len(mesh_shapes(8, 4)) * 3 * 8
    assert all(r.reasons and all(r.reasons) for r in a.rejected)
    ids = [c.id for c in a.legal]
    assert len(ids) == len(set(ids))
    for c in a.legal:
        assert check_candidate(WL_13B, c) == ()
        assert c.mesh_sizes["data"] <= 2
        assert WAN_CONFIGS["wan2.1-1.3b"].num_heads % c.mesh_sizes["tensor"] == 0
    assert "data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv" in ids
    # Every legal split of a sequence degree into Ulysses x ring (ring >= 2, Ulysses
    # dividing the heads) is a candidate: on context = 8, usp_u2 and usp_u4.
    usp = {c.attention for c in a.legal if c.mesh_sizes["context"] == 8}
    assert {"usp_u2", "usp_u4"} <= usp and not usp & {"usp_u3", "usp_u6", "usp_u8", "usp_u12"}
    dup = [r for r in a.rejected if r.reason.startswith("same shardings as")]
    assert dup, "equivalent rule sets on fsdp=1 meshes must be folded"
    with pytest.raises(CandidateError, match="illegal"):
        a.by_id("data1.fsdp1.context1.tensor8/maxdiffusion/gather_kv")


def test_candidate_json_round_trip() -> None:
    c = make_candidate(WL_13B, (2, 1, 4, 1), "fsdp", "ring")
    assert c.id == "data2.fsdp1.context4.tensor1/fsdp/ring"
    assert candidate_from_json(candidate_to_json(c)) == c
    bad = candidate_to_json(c) | {"id": "other"}
    with pytest.raises(CandidateError, match="does not match"):
        candidate_from_json(bad)
    with pytest.raises(CandidateError):
        Candidate(("data",), (2, 2), "fsdp", c.rules, "ring")


def test_argument_bytes_per_chip() -> None:
    n14 = WAN_CONFIGS["wan2.1-14b"].num_params
    one = argument_bytes_per_chip(
        WL_14B, make_candidate(WL_14B, (1, 1, 1, 1), "maxdiffusion", "gather_kv")
    )
    assert one > 2 * n14 > 16e9  # all weights on one chip: more than a v5e's HBM
    four = argument_bytes_per_chip(
        WL_14B, make_candidate(WL_14B, (1, 4, 1, 1), "fsdp", "gather_kv")
    )
    assert four < 16e9 / 2 and abs(four / one - 0.25) < 0.02


@pytest.mark.parametrize(
    ("slice_name", "existing", "recipe"),
    [
        # docs/facts.md, mesh_utils device order: 4 chips -> ring (0,1,3,2);
        # 8 chips -> (0,1,2,3,7,6,5,4)
        ("v5e:2x2", (0, 1, 3, 2), (0, 1, 3, 2)),
        ("v5e:2x4", (0, 1, 2, 3, 7, 6, 5, 4), (0, 1, 2, 3, 7, 6, 5, 4)),
    ],
)
def test_baselines_and_device_orders(
    slice_name: str, existing: tuple[int, ...], recipe: tuple[int, ...]
) -> None:
    base = {b.name: b for b in baseline_candidates(WL_13B, load_slice(slice_name))}
    n = len(existing)
    assert (
        base["existing deployment"].candidate.id
        == f"data1.fsdp1.context{n}.tensor1/maxdiffusion/gather_kv"
    )
    assert (
        base["maxdiffusion recipe"].candidate.id
        == f"data2.fsdp1.context{n // 2}.tensor1/maxdiffusion/gather_kv"
    )
    assert base["existing deployment"].device_order == existing
    assert base["maxdiffusion recipe"].device_order == recipe


def test_baseline_4x4_recipe_needs_split_axes() -> None:
    base = {b.name: b for b in baseline_candidates(WL_13B, load_slice("v5e:4x4"))}
    assert sorted(base["existing deployment"].device_order) == list(range(16))
    # docs/facts.md, mesh_utils device order: data=2 x context=8 raises
    # NotImplementedError without splitting axes.
    assert "allow_split_physical_axes=True" in base["maxdiffusion recipe"].note
    assert sorted(base["maxdiffusion recipe"].device_order) == list(range(16))


def test_candidates_that_differ_only_in_axis_names_are_folded() -> None:
    # fsdp=2 under the dp_sp_tp rules shards every array as context=2 under the fsdp
    # rules does: the same program with other axis names. The exhaustive planner
    # benchmark (benchmarks/stage1_recall.py, 1.3B 480p on v5e:2x2) simulated both
    # to the same step time, 872.77 ms.
    space = enumerate_candidates(WL_13B, 4)
    ids = [c.id for c in space.legal]
    assert "data2.fsdp1.context2.tensor1/fsdp/ring" in ids
    assert "data2.fsdp2.context1.tensor1/dp_sp_tp/ring" not in ids
    twin = {r.candidate.id: r.reason for r in space.rejected}
    assert twin["data2.fsdp2.context1.tensor1/dp_sp_tp/ring"] == (
        "same shardings as candidate 'data2.fsdp1.context2.tensor1/fsdp/ring'"
    )
    # A genuinely different layout (context over 4 vs data 2 x context 2) stays.
    assert "data1.fsdp1.context4.tensor1/fsdp/ring" in ids


# --- the default deployment: one rule for every workload ------------------------------------


def _brute_natural_mesh(wl: object, rules_name: str, n: int) -> str | None:
    """The natural mesh by its definition, read literally: try 1, 2, ... axes larger than 1;
    among legal meshes with that many, the most chips on the rule set's first-named axis,
    then its second-named, ... (an independent re-statement of natural_mesh)."""
    from aoizora.workloads.base import Workload

    assert isinstance(wl, Workload)
    rules = wl.rules(rules_name)
    order: list[str] = []
    for _, axes in rules.pairs:
        order += [a for a in axes if a not in order]
    order += [a for a in wl.mesh_axis_names if a not in order]
    legal = [
        c
        for shape in mesh_shapes(n, len(wl.mesh_axis_names))
        if not check_candidate(
            wl, c := make_candidate(wl, shape, rules_name, wl.attention_kinds[0])
        )
    ]
    for live in range(len(wl.mesh_axis_names) + 1):
        same = [c for c in legal if sum(s > 1 for s in c.mesh_shape) == live]
        if same:
            best = max(same, key=lambda c: [c.mesh_sizes[a] for a in order])
            return best.id
    return None


@pytest.mark.parametrize("n", [4, 8, 16, 32])
def test_natural_mesh_of_wan_is_maxdiffusions_existing_deployment(n: int) -> None:
    from aoizora.candidates.baselines import natural_mesh

    # The generic rule, applied to Wan's first rule set, reproduces what maxdiffusion
    # deploys by default: context = every chip, K/V all-gathered.
    cand = natural_mesh(WL_13B, WL_13B.rule_sets[0], n)
    assert cand is not None
    assert cand.id == f"data1.fsdp1.context{n}.tensor1/maxdiffusion/gather_kv"
    assert cand.id == _brute_natural_mesh(WL_13B, "maxdiffusion", n)
    if n in (4, 8):
        slice_ = load_slice("v5e:2x2" if n == 4 else "v5e:2x4")
        base = {b.name: b for b in baseline_candidates(WL_13B, slice_)}
        assert cand == base["existing deployment"].candidate


def test_natural_mesh_of_wan_on_two_chips_is_the_cfg_pair() -> None:
    from aoizora.candidates.baselines import natural_mesh

    # data is the first axis maxdiffusion's rules name and the CFG batch of 2 fills it.
    cand = natural_mesh(WL_13B, WL_13B.rule_sets[0], 2)
    assert cand is not None and cand.id == "data2.fsdp1.context1.tensor1/maxdiffusion/gather_kv"
    assert cand.id == _brute_natural_mesh(WL_13B, "maxdiffusion", 2)


def _user_model():  # type: ignore[no-untyped-def]
    import jax
    import jax.numpy as jnp

    from aoizora.workloads.base import user_workload
    from aoizora.workloads.rules import Rules

    def step(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.einsum("bse,ehk->bshk", x, w)

    return user_workload(
        "attn-proj",
        step,
        (jax.ShapeDtypeStruct((64, 4, 16), jnp.bfloat16),
         jax.ShapeDtypeStruct((2, 96, 64), jnp.bfloat16)),
        (("embed", "heads", None), ("batch", "length", "embed")),
        out_logical_axes=("batch", "length", "heads", None),
        rule_sets=(
            Rules.of("dp_tp", [("batch", "dp"), ("heads", "tp")]),
            Rules.of("sp", [("length", "sp")]),
        ),
    )  # fmt: skip


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32])
def test_default_deployment_rule_matches_its_definition(n: int) -> None:
    from aoizora.candidates.baselines import default_deployment

    wl = _user_model()  # batch 2, heads 4, length 96 over the user's dp, tp, sp
    found = default_deployment(wl, n)
    # dp_tp can use at most 2 x 4 = 8 chips; beyond that the next rule set (sp) serves.
    expected_rules = "dp_tp" if n <= 8 else "sp"
    brute = _brute_natural_mesh(wl, expected_rules, n)
    if brute is None:
        assert found is None
        return
    assert found is not None
    cand, note = found
    assert cand.id == brute
    assert f"rule set {expected_rules!r} on its natural mesh" in note
    assert ("has no legal mesh" in note) == (expected_rules != "dp_tp")


def test_default_deployment_values() -> None:
    from aoizora.candidates.baselines import default_deployment

    wl = _user_model()
    ids = {
        n: (found[0].id if (found := default_deployment(wl, n)) else None)
        for n in (2, 4, 8, 32, 64)
    }
    assert ids == {
        2: "dp2.tp1.sp1/dp_tp/none",  # all chips on the first axis dp_tp names
        4: "dp1.tp4.sp1/dp_tp/none",  # dp cannot take 4 (batch 2); tp can: still one axis
        8: "dp2.tp4.sp1/dp_tp/none",  # no single axis takes 8: two, dp first
        32: "dp1.tp1.sp32/sp/none",  # dp_tp has no legal mesh of 32: the next rule set
        64: None,  # 96 tokens over 64: no rule set is legal
    }


def test_every_workload_gets_a_baseline_with_its_order() -> None:
    wl = _user_model()
    (base,) = baseline_candidates(wl, load_slice("v5e:2x4"))
    assert base.name == "default deployment"
    assert base.candidate.id == "dp2.tp4.sp1/dp_tp/none"
    # docs/facts.md, mesh_utils device order: a 2 x 4 mesh on v5e:2x4 is (0,1,2,3,7,6,5,4).
    assert base.device_order == (0, 1, 2, 3, 7, 6, 5, 4)
    assert "natural mesh dp2.tp4.sp1" in base.note and "create_device_mesh" in base.note


def test_axes_used_only_together_fold_into_one_axis() -> None:
    # dp_sp_tp splits the sequence over (context, fsdp) and uses neither axis alone:
    # on fsdp2 x context2 that is fsdp's context4 split, the pair acting as one axis
    # numbered context-major (tests/aoizora/stage1/test_wan.py lowers and compiles
    # such twins: the same Stage 1 program and the same compiled collectives).
    space = enumerate_candidates(WL_13B, 8)
    ids = [c.id for c in space.legal]
    twin = {r.candidate.id: r.reason for r in space.rejected}
    for kind in ("gather_kv", "ulysses", "ring", "usp_u2"):
        assert f"data2.fsdp1.context4.tensor1/fsdp/{kind}" in ids
        assert twin[f"data2.fsdp2.context2.tensor1/dp_sp_tp/{kind}"] == (
            f"same shardings as candidate 'data2.fsdp1.context4.tensor1/fsdp/{kind}'"
        )
    # dp_sp_tp never uses fsdp alone, so none of its candidates is left.
    assert {c.rules.name for c in space.legal} == {"maxdiffusion", "fsdp"}
    # Under the fsdp rules, fsdp shards the weights alone and context the sequence:
    # a genuinely two-axis layout stays.
    assert "data2.fsdp2.context2.tensor1/fsdp/ring" in ids


def test_an_illegal_wan_baseline_is_left_out_and_said_so() -> None:
    # 4,096 tpu7x chips: context over 8,192 (or 4,096) devices divides neither the 14B's
    # embed (5,120) nor its 75,600 tokens: both of maxdiffusion's meshes are illegal there.
    # The plan compares with the legal ones only, and says why the others are missing
    # (it used to end at the first with "baseline ... is illegal").
    from aoizora.candidates.baselines import _wan_baselines, illegal_baselines
    from aoizora.candidates.space import check_candidate

    wl = wan_workload("wan2.1-14b", parse_resolution("720p"))
    pod = load_slice("tpu7x:16x16x16")
    lines = illegal_baselines(wl, pod)
    assert [line.split("'")[1] for line in lines] == ["existing deployment", "maxdiffusion recipe"]
    assert all("left out of the comparison" in line and "5120" in line for line in lines)
    assert _wan_baselines(wl, pod.num_devices) == []
    # Where they are legal nothing is said and both stay, each legal by the same check.
    s = load_slice("tpu7x:8x8x8")
    assert illegal_baselines(wl, s) == ()
    kept = _wan_baselines(wl, s.num_devices)
    assert [name for name, _, _ in kept] == ["existing deployment", "maxdiffusion recipe"]
    assert all(not check_candidate(wl, cand) for _, cand, _ in kept)
