"""Logical axis rules: Flax/MaxText semantics, PartitionSpecs, JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

from aoizora.errors import WorkloadError
from aoizora.workloads.rules import (
    Rules,
    is_logical_axes,
    logical_to_mesh_axes,
    logical_to_pspec,
    rules_from_json,
    rules_to_json,
    sharding_degree,
)

# The rules of Flax's partitioning docs / MaxText base.yml style.
FLAX = Rules.of(
    "flax",
    [
        ("batch", "data"),
        ("hidden", "model"),
        ("embed", None),
        ("mlp", "model"),
        ("heads", "model"),
        ("kv", None),
    ],
)


def test_flax_docs_cases() -> None:
    # Flax: ('batch', 'embed') -> ('data', None); ('embed', 'mlp') -> (None, 'model').
    assert logical_to_pspec(("batch", "embed"), FLAX) == P("data", None)
    assert logical_to_pspec(("embed", "mlp"), FLAX) == P(None, "model")
    assert logical_to_pspec(("batch", "heads", "kv"), FLAX) == P("data", "model", None)


def test_first_free_mesh_axis_wins() -> None:
    # MaxText-style fallbacks: 'activation_length' falls back to 'fsdp' when
    # 'context' is taken by an earlier rule on another dimension.
    r = Rules.of(
        "fallback",
        [("a", "context"), ("b", "context"), ("b", "fsdp"), ("c", ("context", "tensor"))],
    )
    assert logical_to_mesh_axes(("a", "b"), r) == (("context",), ("fsdp",))
    assert logical_to_mesh_axes(("b",), r) == (("context",),)
    # A multi-axis rule is all-or-nothing: context is taken, so c stays replicated.
    assert logical_to_mesh_axes(("a", "c"), r) == (("context",), None)
    assert logical_to_mesh_axes(("c",), r) == (("context", "tensor"),)


def test_rule_order_not_dimension_order_decides() -> None:
    r = Rules.of("order", [("y", "m"), ("x", "m")])
    assert logical_to_mesh_axes(("x", "y"), r) == (None, ("m",))


def test_explicit_none_rule_pins_replicated() -> None:
    r = Rules.of("pin", [("embed", None), ("embed", "fsdp")])
    assert logical_to_pspec(("embed",), r) == P(None)


def test_repeated_logical_name_only_first_dimension() -> None:
    # Flax uses array_dim_names.index(name): only the first occurrence is sharded.
    r = Rules.of("rep", [("embed", "fsdp"), ("embed", "tensor")])
    assert logical_to_pspec(("embed", "embed"), r) == P("fsdp", None)


def test_unknown_mesh_axis_and_size_one_dropping() -> None:
    r = Rules.of("md", [("batch", ("data", "fsdp")), ("length", "context")])
    names = ("data", "fsdp", "context")
    assert logical_to_pspec(("batch", "length"), r, names, (2, 1, 4)) == P("data", "context")
    assert logical_to_pspec(
        ("batch", "length"), r, names, {"data": 1, "fsdp": 1, "context": 1}
    ) == P(None, None)
    with pytest.raises(WorkloadError, match="not in the mesh"):
        logical_to_pspec(("length",), r, ("data", "fsdp"))


def test_sharding_degree() -> None:
    sizes = {"data": 2, "context": 4}
    assert sharding_degree(None, sizes) == 1
    assert sharding_degree("context", sizes) == 4
    assert sharding_degree(("data", "context"), sizes) == 8


def test_bad_rules_rejected() -> None:
    with pytest.raises(WorkloadError, match="twice"):
        Rules.of("dup", [("embed", ("fsdp", "fsdp"))])
    with pytest.raises(WorkloadError):
        Rules.of("bad", [("embed",)])  # type: ignore[list-item]
    with pytest.raises(WorkloadError):
        Rules(name="", pairs=())


def test_json_round_trip_and_errors() -> None:
    data = rules_to_json(FLAX)
    assert rules_from_json(data) == FLAX
    assert rules_from_json(json.dumps(data)) == FLAX
    assert data["rules"][2] == ["embed", []]
    with pytest.raises(WorkloadError, match="format"):
        rules_from_json("{}")
    with pytest.raises(WorkloadError, match="not \\[logical name"):
        rules_from_json({"format": "aoizora.rules/1", "name": "x", "rules": [["a", "b"]]})


def test_is_logical_axes() -> None:
    assert is_logical_axes(("a", None)) and is_logical_axes(())
    assert not is_logical_axes(["a"]) and not is_logical_axes((1, "a"))


LOGICAL = ["a", "b", "c", "d"]
MESH = ["m0", "m1", "m2"]

rule_strategy = st.lists(
    st.tuples(
        st.sampled_from(LOGICAL),
        st.lists(st.sampled_from(MESH), unique=True, max_size=2).map(tuple),
    ),
    max_size=8,
)


@given(rules=rule_strategy, dims=st.lists(st.sampled_from(LOGICAL + [None]), max_size=4))
def test_resolution_characterisation(
    rules: list[tuple[str, tuple[str, ...]]], dims: list[str | None]
) -> None:
    """Check the result against an independent statement of Flax's semantics.

    Replaying the rules in order: a rule takes effect iff its name is in the array,
    the first dimension with that name is still unassigned, and none of its mesh
    axes is used by a rule that took effect before it.
    """
    r = Rules(name="h", pairs=tuple(rules))
    got = logical_to_mesh_axes(tuple(dims), r)
    # No mesh axis is used twice.
    flat = [a for axes in got if axes for a in axes]
    assert len(flat) == len(set(flat))
    # Independent replay.
    assigned: dict[int, tuple[str, ...]] = {}
    decided: set[int] = set()
    used: set[str] = set()
    for name, axes in rules:
        if name not in dims:
            continue
        pos = dims.index(name)
        if pos in decided or used & set(axes):
            continue
        decided.add(pos)
        if axes:
            assigned[pos] = axes
            used |= set(axes)
    expected = tuple(assigned.get(i) for i in range(len(dims)))
    assert got == expected


def test_pspecs_are_memoised_and_still_checked() -> None:
    # Enumerating a pod's candidates asks each question once per attention kind.
    sizes = {"data": 2, "model": 1}
    first = logical_to_pspec(("batch", "mlp"), FLAX, ("data", "model"), sizes)
    assert first == P("data", None)
    assert logical_to_pspec(("batch", "mlp"), FLAX, ("data", "model"), dict(sizes)) is first
    # Sizes by position and by name are answered alike; another size is another answer.
    assert logical_to_pspec(("batch", "mlp"), FLAX, ("data", "model"), (2, 1)) == first
    assert logical_to_pspec(("batch", "mlp"), FLAX, ("data", "model"), (2, 4)) == P("data", "model")
    # Errors are not memoised away: every call still raises.
    for _ in range(2):
        with pytest.raises(WorkloadError, match="not in the mesh"):
            logical_to_pspec(("batch",), FLAX, ("model",), (2,))
        with pytest.raises(WorkloadError, match="same length"):
            logical_to_pspec(("batch",), FLAX, ("data", "model"), (2,))
