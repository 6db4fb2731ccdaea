"""A small reader of maxdiffusion's config semantics, to read exported overrides back.

Written from maxdiffusion's source at 7cfb880, independently of aoizora/export (see
docs/facts.md, maxdiffusion config overrides):

* ``pyconfig._HyperParameters``: a command-line value is typed like the YAML's (int(),
  "true"/"false", ast.literal_eval for lists, json.loads for dicts); unknown keys refused;
* ``pyconfig.user_init``: the rules it prepends for the attention kind and the sequence
  rules it appends; ``wan_init``: ``layers_per_stage``;
* ``max_utils.fill_unspecified_mesh_axes``: one -1 takes the remaining devices;
* Flax's ``logical_to_mesh_axes``: the first rule whose axes are free wins, None pins.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from typing import Any

import yaml

# The keys of base_wan_14b.yml this reader needs, with their defaults (types as in the file).
BASE: dict[str, Any] = {
    "mesh_axes": ["data", "fsdp", "context", "tensor"],
    "ici_data_parallelism": 1,
    "ici_fsdp_parallelism": 1,
    "ici_context_parallelism": -1,
    "ici_tensor_parallelism": 1,
    "logical_axis_rules": [
        ["batch", ["data", "fsdp"]],
        ["activation_batch", ["data", "fsdp"]],
        ["activation_self_attn_heads", ["context", "tensor"]],
        ["activation_cross_attn_q_length", ["context", "tensor"]],
        ["activation_length", "context"],
        ["activation_heads", "tensor"],
        ["mlp", "tensor"],
        ["embed", ["context", "fsdp"]],
        ["heads", "tensor"],
        ["norm", "tensor"],
        ["conv_batch", ["data", "context", "fsdp"]],
        ["out_channels", "tensor"],
        ["conv_out", "context"],
    ],
    "attention": "flash",
    "ulysses_shards": -1,
    "attention_sharding_uniform": True,
    "flash_block_sizes": {"block_q": 512},
    "flash_min_seq_length": 4096,
    "height": 720,
    "width": 1280,
    "num_frames": 81,
}

# common_types.py: what pyconfig prepends (heads pinned, sequences on context).
_HEADS = ("activation_self_attn_heads", "activation_cross_attn_heads")
_Q = ("activation_self_attn_q_length", "activation_cross_attn_q_length")
_KV = ("activation_self_attn_kv_length", "activation_cross_attn_kv_length")
_ULYSSES_RING = {"ulysses_ring", "ulysses_ring_custom", "ulysses_ring_custom_fixed_m",
                 "ulysses_ring_custom_bidir"}  # fmt: skip


def read_yaml(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    unknown = set(data) - set(BASE)
    assert not unknown, f"keys maxdiffusion's Wan config lacks: {unknown}"
    return data


def read_args(lines: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in lines:
        key, value = line.split("=", 1)
        assert key in BASE, f"Key {key} was passed at the command line but isn't in config."
        kind = type(BASE[key])
        if kind is dict:
            out[key] = json.loads(value)
        elif kind is list:
            out[key] = ast.literal_eval(value)
        elif kind is bool:
            assert value.lower() in ("true", "false")
            out[key] = value.lower() == "true"
        else:
            out[key] = kind(value)
    return out


def _tuples(x: Any) -> Any:
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def _final_rules(raw: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    rules = list(_tuples(raw["logical_axis_rules"]))
    attention = raw["attention"]
    usp = attention in _ULYSSES_RING
    ring = "ring" in attention and not usp
    ulysses = "ulysses" in attention and not usp
    if ring or ulysses or usp or raw["attention_sharding_uniform"]:
        for pair in (("activation_length", "context"), ("activation_kv_length", "context")):
            if pair not in rules:
                rules.append(pair)
        kv = "context" if ring or ulysses or usp else None
        new = [(_HEADS[0], None), (_Q[0], "context"), (_KV[0], kv),
               (_HEADS[1], None), (_Q[1], "context"), (_KV[1], kv)]  # fmt: skip
        rules = new + rules  # pyconfig compares lists with tuples: always prepended
    if not any("layers_per_stage" in r for r in rules):
        rules.append(("layers_per_stage", None))
    return tuple(rules)


def flax_axes(names: tuple[str | None, ...], rules: tuple[tuple[str, Any], ...]) -> list[Any]:
    """Flax's logical_to_mesh_axes: per dimension a mesh axis, a tuple of them, or None."""
    unassigned = object()
    result: list[Any] = [unassigned] * len(names)
    for logical, mesh in rules:
        if logical not in names:
            continue
        pos = names.index(logical)
        axes = () if mesh is None else (mesh,) if isinstance(mesh, str) else tuple(mesh)
        taken = {a for r in result if r is not unassigned and r is not None for a in r}
        if result[pos] is unassigned and not set(axes) & taken:
            result[pos] = axes if axes else None
    return [None if r is unassigned else r for r in result]


def spec(names: tuple[str | None, ...], rules: Any, sizes: dict[str, int]) -> tuple[Any, ...]:
    """Per dimension the mesh axes of size > 1 (a tuple, () = replicated)."""
    return tuple(
        () if axes is None else tuple(a for a in axes if sizes[a] > 1)
        for axes in flax_axes(names, rules)
    )


@dataclass(frozen=True)
class MaxdiffusionRun:
    """What maxdiffusion would run with these overrides on ``num_devices`` devices."""

    raw: dict[str, Any]
    num_devices: int

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(self.raw["mesh_axes"])

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        ici = [self.raw[f"ici_{a}_parallelism"] for a in self.axis_names]
        if -1 in ici:
            assert ici.count(-1) == 1
            ici[ici.index(-1)] = self.num_devices // -math.prod(ici)
        assert math.prod(ici) == self.num_devices
        return tuple(ici)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.mesh_shape, strict=True))

    @property
    def rules(self) -> tuple[tuple[str, Any], ...]:
        return _final_rules(self.raw)

    @property
    def attention_kind(self) -> str:
        """The kind in AoiZora's names (gather_kv, ring, ulysses, usp_uU)."""
        attention = self.raw["attention"]
        if attention in ("flash", "tokamax_flash") and self.raw["attention_sharding_uniform"]:
            return "gather_kv"
        if attention in ("tokamax_ring", "tokamax_ring_custom"):
            return "ring"
        if attention in ("ulysses", "ulysses_custom"):
            return "ulysses"
        if attention in _ULYSSES_RING:
            shards = self.raw["ulysses_shards"]
            assert shards > 0 and self.sizes["context"] % shards == 0
            return "ulysses" if shards == self.sizes["context"] else f"usp_u{shards}"
        raise AssertionError(f"attention {attention!r} has no AoiZora kind")

    def q_spec(self) -> tuple[Any, ...]:
        names = ("activation_batch", _HEADS[0], _Q[0], "activation_kv")
        return spec(names, self.rules, self.sizes)

    def kv_spec(self) -> tuple[Any, ...]:
        names = ("activation_batch", _HEADS[0], _KV[0], "activation_kv")
        return spec(names, self.rules, self.sizes)

    def latents_spec(self) -> tuple[Any, ...]:
        # transformer_wan.py: hidden_states constrained to ("batch", None, None, None, None)
        return spec(("batch", None, None, None, None), self.rules, self.sizes)

    def hidden_spec(self) -> tuple[Any, ...]:
        # transformer_wan.py constrains hidden states to these names (heads = embed dim)
        names = ("activation_batch", "activation_length", "activation_heads")
        return spec(names, self.rules, self.sizes)


def read_run(overrides: dict[str, Any], num_devices: int) -> MaxdiffusionRun:
    return MaxdiffusionRun({**BASE, **overrides}, num_devices)


# --- checks the tests share (tests/aoizora/conftest.py, test_export.py) ----------------------


def _entry_axes(entry: Any, sizes: dict[str, int]) -> tuple[str, ...]:
    axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    return tuple(a for a in axes if sizes[a] > 1)


def plan_spec(plan: Any, names: tuple[str | None, ...]) -> tuple[tuple[str, ...], ...]:
    """The plan's own sharding of an array with these (AoiZora) logical names."""
    from aoizora.workloads.rules import logical_to_pspec

    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    pspec = logical_to_pspec(names, plan.rules, plan.mesh_axis_names, sizes)
    return tuple(_entry_axes(e, sizes) for e in pspec)


def check_export_dir(plan: Any, directory: Any) -> MaxdiffusionRun:
    """The files in ``directory`` read back as maxdiffusion would give ``plan``'s mesh,
    axis names, rules and attention kind, and the same sharding of every array."""
    yml = read_yaml((directory / "maxdiffusion.yml").read_text())
    args = read_args((directory / "maxdiffusion.args").read_text().splitlines())
    assert yml == args, "the YAML and the command-line overrides differ"
    run = read_run(yml, plan.num_devices)
    assert run.axis_names == plan.mesh_axis_names
    assert run.mesh_shape == plan.mesh_shape
    assert run.attention_kind == plan.attention
    ours = {name for name, _ in plan.logical_rules}
    written = [
        (name, () if a is None else (a,) if isinstance(a, str) else tuple(a))
        for name, a in yml["logical_axis_rules"]
        if name in ours
    ]
    assert written == list(plan.logical_rules), "the rules as written are not the plan's"
    q = plan_spec(
        plan, ("activation_batch", "activation_heads", "activation_length", "activation_kv")
    )
    assert run.q_spec() == q
    kv = q if plan.attention != "gather_kv" else (q[0], q[1], (), q[3])
    assert run.kv_spec() == kv
    hidden = plan_spec(plan, ("activation_batch", "activation_length", "activation_embed"))
    assert run.hidden_spec() == hidden
    assert run.latents_spec() == (hidden[0], (), (), (), ())  # the CFG batch, as planned
    for given in plan.inputs:
        assert spec(given.logical_axes, run.rules, run.sizes) == plan_spec(
            plan, given.logical_axes
        ), given.name
    return run


def check_plan_document(text: str) -> None:
    """A plan the suite wrote: valid under docs/plan.schema.json and, if it is a Wan plan,
    exported and read back (round trip) or refused in one line (with the nearest plan)."""
    import tempfile
    from pathlib import Path

    import jsonschema

    from aoizora.errors import ExportError
    from aoizora.export.directory import export_maxdiffusion
    from aoizora.export.maxdiffusion import refusal_reason
    from aoizora.export.maxdiffusion_table import MESH_AXES, config_for_model
    from aoizora.export.nearest import plan_alternatives
    from aoizora.plan import Plan

    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "docs" / "plan.schema.json").read_text())
    jsonschema.validate(json.loads(text), schema)
    plan = Plan.from_json(text)
    if plan.mesh_axis_names != MESH_AXES:
        return
    # wan-tiny and other models maxdiffusion ships no config for: the 1.3B config's keys.
    config = None if config_for_model(plan.model) else "base_wan_1_3b.yml"
    reason = refusal_reason(plan, config_file=config)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            export_maxdiffusion(
                plan, Path(tmp), alternatives=plan_alternatives(plan), among="x",
                config_file=config,
            )  # fmt: skip
        except ExportError as exc:
            assert reason is not None, exc
            check_refusal(str(exc), plan, reason)
            return
        assert reason is None
        check_export_dir(plan, Path(tmp))


def check_refusal(message: str, plan: Any, reason: str) -> None:
    """One line: the plan, the reason and, when the plan records maxdiffusion's baselines,
    the cheaper of them as the nearest expressible plan."""
    assert "\n" not in message
    assert message.startswith(f"maxdiffusion cannot express plan {plan.candidate_id} ")
    assert reason in message
    known = {
        n: s
        for n, s in plan.predicted.baselines_s
        if n in ("existing deployment", "maxdiffusion recipe")
    }
    if known and plan.slice.chip.devices_per_chip and "ships no config" not in reason:
        name = min(known, key=lambda n: (known[n], n))
        assert f"nearest expressible plan: baseline {name!r}" in message, message
        assert f"at {known[name] * 1e3:.2f} ms per step" in message
