"""A plan as maxdiffusion config overrides, or the reason maxdiffusion cannot run it.

maxdiffusion (``generate_wan.py``) reads one YAML config and ``key=value`` overrides
(``pyconfig``). A Wan plan maps onto its keys as follows (docs/export.md):

* the mesh -> ``ici_data_parallelism``, ``ici_fsdp_parallelism``,
  ``ici_context_parallelism``, ``ici_tensor_parallelism`` (maxdiffusion's ``mesh_axes``
  are AoiZora's Wan axes, in the same order);
* the rules -> ``logical_axis_rules``: the plan's rules as they are (maxdiffusion's Flax
  rules have the same semantics and, for the names both use, the same names), with
  ``batch`` (maxdiffusion's name for the latents' batch) following ``activation_batch``,
  and the config's rules for names AoiZora's step does not use;
* the attention kind -> ``attention``: ``gather_kv`` = ``flash`` (uniform sharding, K/V
  all-gathered), ``ring`` = ``tokamax_ring``, ``ulysses`` = ``ulysses``, ``usp_uU`` =
  ``ulysses_ring`` with ``ulysses_shards=U`` (maxdiffusion splits ``context`` into
  (ring, Ulysses), ring major, as ``usp_uU`` does);
* ``flash_block_sizes`` (the plan's splash tiles: ``block_q``, ``block_kv``,
  ``block_kv_compute``; 512 where it planned none), the clip (``height``, ``width``,
  ``num_frames``) and, for clips shorter than the config's ``flash_min_seq_length``, that
  threshold (else maxdiffusion would fall back to dot-product attention);
* the plan's scoped VMEM limit (``scoped_vmem_kib``, what its tiles need) -> no config key:
  the libtpu flag ``--xla_tpu_scoped_vmem_limit_kib=N`` in ``LIBTPU_INIT_ARGS``, as
  maxdiffusion's Wan recipes pass it (:attr:`MaxdiffusionExport.libtpu_flags`; ``mesh.py``
  adds it to the environment before jax starts, the README's command exports it).

What maxdiffusion cannot express (:func:`refusal_reason`): a sequence split over any axis
but ``context`` (its sequence-parallel kernels and the rules ``pyconfig`` prepends use
``context`` alone), tensor parallelism (its ``activation_heads`` names both the hidden
states' embedding dimension and the attention heads, and its sequence-parallel kernels
pin self-attention heads to replicated), an attention kind it lacks, a mesh that is not
Wan's, a model without a config.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aoizora.errors import ExportError
from aoizora.export.maxdiffusion_table import (
    ATTENTION_KERNELS,
    CONFIGS,
    FLASH_BLOCK_SIZES,
    KEY_TYPES,
    MESH_AXES,
    OTHER_RULES,
    ULYSSES_RING_KERNELS,
    MaxdiffusionConfig,
    config_for_model,
)
from aoizora.plan.file import Plan
from aoizora.plan.splash import libtpu_flags
from aoizora.workloads.attention import spec_axes, usp_degree
from aoizora.workloads.rules import logical_to_pspec
from aoizora.workloads.wan_config import WAN_CONFIGS, num_tokens

__all__ = [
    "HIDDEN_AXES",
    "QKV_AXES",
    "MaxdiffusionExport",
    "attention_of",
    "check_overrides",
    "maxdiffusion_export",
    "refusal_reason",
]

# Logical axes of the Wan step's hidden states and of q/k/v (aoizora/workloads/wan.py).
HIDDEN_AXES: tuple[str, ...] = ("activation_batch", "activation_length", "activation_embed")
QKV_AXES: tuple[str, ...] = (
    "activation_batch",
    "activation_heads",
    "activation_length",
    "activation_kv",
)
_KERNELS = {"gather_kv": "flash", "ring": "tokamax_ring", "ulysses": "ulysses"}

Override = tuple[str, Any]


def attention_of(kind: str) -> tuple[str, int | None] | None:
    """maxdiffusion's ``attention`` (and ``ulysses_shards``) for an AoiZora kind, or None.

    >>> attention_of("gather_kv"), attention_of("usp_u2"), attention_of("none")
    (('flash', None), ('ulysses_ring', 2), None)
    """
    ulysses = usp_degree(kind)
    if ulysses is not None:
        return "ulysses_ring", ulysses
    return (_KERNELS[kind], None) if kind in _KERNELS else None


def _config(plan: Plan, config_file: str | None) -> MaxdiffusionConfig | str:
    name = config_file or config_for_model(plan.model)
    if name is None:
        have = ", ".join(sorted(CONFIGS))
        return (
            f"maxdiffusion ships no config for model {plan.model!r} (its Wan configs: {have}; "
            "pass --maxdiffusion-config FILE to override one of them anyway)"
        )
    if name not in CONFIGS:
        raise ExportError(
            f"--maxdiffusion-config {name!r} is not a Wan config AoiZora knows; allowed: "
            f"{sorted(CONFIGS)}, e.g. --maxdiffusion-config base_wan_14b.yml"
        )
    return CONFIGS[name]


def _seq_axes(plan: Plan, logical: Sequence[str]) -> tuple[str, ...]:
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    spec = logical_to_pspec(logical, plan.rules, plan.mesh_axis_names, sizes)
    return spec_axes(spec[list(logical).index("activation_length")])


def refusal_reason(plan: Plan, *, config_file: str | None = None) -> str | None:
    """Why maxdiffusion cannot run ``plan`` as planned (one clause), or None if it can."""
    if plan.mesh_axis_names != MESH_AXES:
        return (
            f"its mesh axes {list(plan.mesh_axis_names)} are not maxdiffusion's Wan mesh "
            f"{list(MESH_AXES)}"
        )
    config = _config(plan, config_file)
    if isinstance(config, str):
        return config
    attention = attention_of(plan.attention)
    if attention is None:
        return f"maxdiffusion has no attention kind for {plan.attention!r}"
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    if sizes["tensor"] > 1:
        return (
            f"it is tensor-parallel (tensor={sizes['tensor']}): maxdiffusion's "
            "activation_heads names both the hidden states' embedding and the attention heads, "
            "and its sequence-parallel kernels keep self-attention heads whole"
        )
    for what, logical in (("hidden states", HIDDEN_AXES), ("attention", QKV_AXES)):
        axes = _seq_axes(plan, logical)
        if axes not in ((), ("context",)):
            return (
                f"its {what} split the sequence over {list(axes)}; maxdiffusion splits it over "
                "'context' alone (attention_flax, and the rules pyconfig prepends)"
            )
    ulysses = attention[1]
    if ulysses is not None and (sizes["context"] % ulysses or ulysses >= sizes["context"]):
        return (
            f"{plan.attention} needs a context degree that is a larger multiple of {ulysses}, "
            f"got context={sizes['context']}"
        )
    return None


@dataclass(frozen=True)
class MaxdiffusionExport:
    """The overrides that make maxdiffusion's ``config`` run ``plan``'s sharding."""

    plan: Plan
    config: MaxdiffusionConfig
    overrides: tuple[Override, ...]

    def yaml_text(self) -> str:
        """The overrides as a YAML fragment (flow style, which YAML reads as JSON)."""
        lines = [
            f"# Overrides for maxdiffusion {self.config.path} reproducing AoiZora plan",
            f"# {self.plan.candidate_id} on {self.plan.slice_name} (aoizora export).",
        ]
        lines += [f"# and in the environment: LIBTPU_INIT_ARGS={f}" for f in self.libtpu_flags]
        lines += [f"{key}: {json.dumps(value)}" for key, value in self.overrides]
        return "\n".join(lines) + "\n"

    @property
    def libtpu_flags(self) -> tuple[str, ...]:
        """The libtpu flags the plan runs with (``LIBTPU_INIT_ARGS``; no config key holds
        them): its splash tiles' scoped VMEM limit, if it has one."""
        return libtpu_flags(self.plan.scoped_vmem_kib)

    def args(self) -> tuple[str, ...]:
        """The same overrides as maxdiffusion command-line ``key=value`` arguments."""
        return tuple(f"{key}={_arg_value(value)}" for key, value in self.overrides)


def _arg_value(value: Any) -> str:
    # pyconfig types a command-line value like the YAML's: int(), "True"/"False",
    # ast.literal_eval for lists (Python literals: None, not null), json.loads for dicts.
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return repr(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _md_axes(axes: Sequence[str]) -> str | list[str] | None:
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else list(axes)


def _rules(plan: Plan) -> list[list[Any]]:
    out: list[list[Any]] = []
    for logical, axes in plan.logical_rules:
        if logical == "activation_batch":
            out.append(["batch", _md_axes(axes)])
        out.append([logical, _md_axes(axes)])
    named = {logical for logical, _ in plan.logical_rules} | {"batch"}
    for logical, value in OTHER_RULES:
        if logical not in named:
            out.append([logical, list(value) if isinstance(value, tuple) else value])
    return out


def flash_block_sizes(tiles: tuple[int, int, int] | None) -> dict[str, int | bool]:
    """maxdiffusion's ``flash_block_sizes`` for a plan's splash tiles (None: its 512s); the
    backward blocks stay at 512 (inference runs no backward pass).

    >>> flash_block_sizes((512, 2048, 512))["block_kv"], flash_block_sizes(None)["block_kv"]
    (2048, 512)
    """
    blocks = dict(FLASH_BLOCK_SIZES)
    if tiles is not None:
        blocks |= dict(zip(("block_q", "block_kv", "block_kv_compute"), tiles, strict=True))
    return blocks


def maxdiffusion_export(plan: Plan, *, config_file: str | None = None) -> MaxdiffusionExport:
    """The overrides for ``plan``; raises :class:`ExportError` (the reason) if maxdiffusion
    cannot express it (:func:`refusal_reason`)."""
    reason = refusal_reason(plan, config_file=config_file)
    if reason is not None:
        raise ExportError(f"maxdiffusion cannot express plan {plan.candidate_id}: {reason}")
    config = _config(plan, config_file)
    assert not isinstance(config, str)  # refusal_reason returned None
    attention = attention_of(plan.attention)
    assert attention is not None
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    overrides: list[Override] = [(f"ici_{a}_parallelism", sizes[a]) for a in MESH_AXES]
    overrides.append(("logical_axis_rules", _rules(plan)))
    overrides.append(("attention", attention[0]))
    if attention[1] is not None:
        overrides.append(("ulysses_shards", attention[1]))
    overrides.append(("flash_block_sizes", flash_block_sizes(plan.splash_blocks)))
    if plan.clip is not None:
        clip = plan.clip
        overrides += [("height", clip.height), ("width", clip.width), ("num_frames", clip.frames)]
        wan = WAN_CONFIGS.get(plan.model)
        tokens = num_tokens(clip, wan) if wan is not None else None
        if tokens is not None and tokens < config.flash_min_seq_length:
            overrides.append(("flash_min_seq_length", tokens))
    result = MaxdiffusionExport(plan=plan, config=config, overrides=tuple(overrides))
    check_overrides(result.overrides, num_devices=plan.num_devices)
    return result


def check_overrides(overrides: Sequence[Override], *, num_devices: int) -> None:
    """Check overrides against maxdiffusion's Wan configs (keys, types, allowed values)."""
    values = dict(overrides)
    for key, value in overrides:
        want = KEY_TYPES.get(key)
        if want is None:
            raise ExportError(f"override {key!r} is not a key of maxdiffusion's Wan configs")
        if type(value) is not want:
            raise ExportError(
                f"override {key}={value!r} must be a {want.__name__} (its type in the config)"
            )
        if isinstance(value, int) and value < 1 and key != "flash_min_seq_length":
            raise ExportError(f"override {key}={value!r} must be a positive integer")
    ici = [values.get(f"ici_{a}_parallelism", 1) for a in MESH_AXES]
    if math.prod(ici) != num_devices:
        raise ExportError(f"ici parallelism {ici} does not multiply to {num_devices} devices")
    attention = values.get("attention", "flash")
    if attention not in ATTENTION_KERNELS:
        raise ExportError(f"attention={attention!r}; maxdiffusion has {list(ATTENTION_KERNELS)}")
    if attention in ULYSSES_RING_KERNELS and values.get("ulysses_shards", -1) < 1:
        raise ExportError(f"attention={attention} needs ulysses_shards > 0 (pyconfig)")
    blocks = values.get("flash_block_sizes", FLASH_BLOCK_SIZES)
    if set(blocks) != set(FLASH_BLOCK_SIZES):
        raise ExportError(f"flash_block_sizes keys {sorted(blocks)}; allowed {FLASH_BLOCK_SIZES}")
    for i, rule in enumerate(values.get("logical_axis_rules", [])):
        axes = [] if rule[1] is None else [rule[1]] if isinstance(rule[1], str) else rule[1]
        if not isinstance(rule[0], str) or any(a not in MESH_AXES for a in axes):
            raise ExportError(
                f"logical_axis_rules[{i}] {rule!r} must map a name to axes of {MESH_AXES}"
            )
