"""The plan file's published JSON Schema (``docs/plan.schema.json``) and where a field sits in it.

:data:`PLAN_JSON_SCHEMA` describes schema ``aoizora.plan/2`` (JSON Schema draft 2020-12):
strict where the plan is defined (every field required, no unknown field) but with
optional fields reserved for work in progress -- ``compute_model`` (the compute model and
its parameter file), ``clip_s``, ``text_encoder_s``, ``denoise_s``, ``vae_decode_s``
(whole-request latency, seconds) and ``vae`` (the VAE decoder's plan) -- and the optional
``alternatives`` (runners-up and baselines with their configurations,
:mod:`aoizora.plan.alternatives`), ``memory`` (a configuration's per-device HBM,
:mod:`aoizora.plan.memory`), ``splash_blocks`` and ``scoped_vmem_kib`` (its splash tiles
and the VMEM limit they need, :mod:`aoizora.plan.splash`). The schema checks
shapes and types; :func:`aoizora.plan.load_plan` checks the rest (the device order against
the slice, the mesh size, ...) and cites the schema location of the field it rejects
(:func:`cite_schema`). ``docs/plan.schema.json`` is this dictionary written out
(``python -m aoizora.plan.schema > docs/plan.schema.json``; a test keeps them equal).

    >>> schema_pointer("mesh.shape[0]")
    '#/properties/mesh/properties/shape/items'
    >>> schema_pointer("predicted_latency_s.baselines['x']")
    '#/properties/predicted_latency_s/properties/baselines/additionalProperties'
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["PLAN_JSON_SCHEMA", "SCHEMA_FILE", "cite_schema", "schema_pointer"]

SCHEMA_FILE = "docs/plan.schema.json"

_TEXT: dict[str, Any] = {"type": "string", "pattern": r"\S"}
_COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
_SECONDS: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0}
_VERSION: dict[str, Any] = {"type": ["string", "null"], "pattern": r"\S"}


def _object(
    properties: dict[str, Any], *, optional: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**properties, **(optional or {})},
        "required": sorted(properties),
        "additionalProperties": False,
    }


_CLIP = _object(
    {k: {"type": "integer", "minimum": 1} for k in ("frames", "height", "width")},
)
_INPUT = _object(
    {
        "name": _TEXT,
        "shape": {"type": "array", "items": _COUNT},
        "dtype": _TEXT,
        "logical_axes": {"type": "array", "items": {"type": ["string", "null"]}},
    }
)
_MESH = _object(
    {
        "axis_names": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
            "minItems": 1,
            "uniqueItems": True,
        },
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}},
    }
)
_ATTENTION: dict[str, Any] = {
    "type": "string",
    "pattern": "^(gather_kv|ulysses|ring|none|usp_u([2-9]|[1-9][0-9]+))$",
}
_RULE = {
    "type": "array",
    "prefixItems": [{"type": "string", "minLength": 1}, {"type": "array", "items": _TEXT}],
    "items": False,
    "minItems": 2,
}
_RESERVED: dict[str, Any] = {
    "compute_model": {
        "type": "object",
        "description": "optional: the compute model and its parameter file (provenance)",
    },
    **{
        name: {**_SECONDS, "description": f"optional: predicted {what}, seconds (simulated)"}
        for name, what in (
            ("clip_s", "whole-clip latency"),
            ("text_encoder_s", "text-encoder time"),
            ("denoise_s", "denoising time (every step)"),
            ("vae_decode_s", "VAE decode time"),
        )
    },
    "vae": {"type": "object", "description": "optional: the VAE decoder's plan"},
    "workload_source": {
        **_object({"spec": _TEXT, "program": _TEXT}),
        "description": "optional: a --workload plan's FILE.py:FACTORY and its program "
        "fingerprint (aoizora measure rebuilds it and checks it is the same program)",
    },
}

# One configuration's per-device HBM (aoizora/plan/memory.py): the winner's, each
# alternative's and the VAE plan's.
_MEMORY: dict[str, Any] = {
    "memory": {
        **_object(
            {
                "hbm_bytes_per_chip": _COUNT,
                "budget_bytes": _COUNT,
                "source": {"enum": ["compiled", "buffer_assignment", "stage1"]},
            }
        ),
        "description": "optional: per-device HBM (arguments + outputs + peak temporaries + "
        "code - aliased), the budget it is held against, and where the figure comes from",
    }
}

# The splash kernel's tiles a configuration runs (aoizora/stage1/tiles.py); absent: 512 each.
_SPLASH: dict[str, Any] = {
    "splash_blocks": {
        "type": "array",
        "prefixItems": [{"type": "integer", "minimum": 128, "multipleOf": 128}] * 3,
        "items": False,
        "minItems": 3,
        "description": "optional: the splash attention tiles [block_q, block_kv, "
        "block_kv_compute] the plan runs (maxdiffusion's flash_block_sizes); absent: 512 each",
    },
    "scoped_vmem_kib": {
        "type": "integer",
        "minimum": 1,
        "description": "optional, only with splash_blocks: the compiler's scoped VMEM limit "
        "(KiB) those tiles need, --xla_tpu_scoped_vmem_limit_kib (aoizora measure and validate "
        "compile with it; the maxdiffusion export passes it in LIBTPU_INIT_ARGS); absent: the "
        "compiler's default",
    },
}
# A scoped VMEM limit is what planned tiles need: it comes with them (aoizora/plan/splash.py).
_LIMIT_NEEDS_TILES: dict[str, Any] = {"dependentRequired": {"scoped_vmem_kib": ["splash_blocks"]}}

# The runners-up and baselines with their configurations (aoizora/plan/alternatives.py).
_ALTERNATIVES: dict[str, Any] = {
    "alternatives": {
        "type": "array",
        "description": "optional: runners-up (Q2 order) and baselines, for aoizora measure",
        "items": _LIMIT_NEEDS_TILES
        | _object(
            {
                "role": {"enum": ["runner-up", "baseline"]},
                "name": _TEXT,
                "candidate": _TEXT,
                "placement": _TEXT,
                "mesh": _MESH,
                "rules_name": _TEXT,
                "rules": {"type": "array", "items": _RULE},
                "attention": _ATTENTION,
                "device_order": _object({"physical_ids": {"type": "array", "items": _COUNT}}),
                "predicted_step_s": _SECONDS,
            },
            optional={**_MEMORY, **_SPLASH},
        ),
    }
}

PLAN_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "AoiZora plan file (aoizora.plan/2)",
    "description": (
        "A chosen (logical sharding, physical placement) for one workload on one TPU slice "
        "(docs/planner.md, aoizora/plan/file.py). load_plan also checks what a schema cannot: "
        "the mesh size against the slice, every device exactly once, rules naming mesh axes."
    ),
    **_object(
        {
            "schema": {"const": "aoizora.plan/2"},
            "model": _TEXT,
            "workload": _TEXT,
            "clip": {"oneOf": [{"type": "null"}, _CLIP]},
            "inputs": {"type": "array", "items": _INPUT},
            "slice": _TEXT,
            "mesh": _MESH,
            "rules_name": _TEXT,
            "rules": {"type": "array", "items": _RULE},
            "attention": _ATTENTION,
            "candidate": _TEXT,
            "placement": _TEXT,
            "device_order": _object(
                {
                    "coords": {"type": "array", "items": {"type": "array", "items": _COUNT}},
                    "physical_ids": {"type": "array", "items": _COUNT},
                }
            ),
            "predicted_latency_s": _object(
                {
                    "source": {"enum": ["simulated", "stage1"]},
                    "winner": _SECONDS,
                    "baselines": {"type": "object", "additionalProperties": _SECONDS},
                }
            ),
            "provenance": _object(
                {k: _VERSION for k in ("aoizora", "jax", "jaxlib", "libtpu")},
                optional={
                    "aoizora_commit": {
                        "type": "string",
                        "pattern": "^[0-9a-f]{7,40}(\\+dirty)?$",
                        "description": "optional: the git commit of the AoiZora checkout "
                        "that made the plan ('+dirty': modified)",
                    }
                },
            ),
        },
        optional={**_RESERVED, **_ALTERNATIVES, **_MEMORY, **_SPLASH},
    ),
    **_LIMIT_NEEDS_TILES,
}

# A field as load_plan's messages name it: "mesh.shape[0]", "inputs['arg0'].dtype", ...
_FIELD = re.compile(r"^[A-Za-z_]+(?:\.[A-Za-z_]+|\[[^\]]*\])*")
_STEP = re.compile(r"\.?([A-Za-z_]+)|\[([^\]]*)\]")


def _object_branch(node: Any, pointer: str) -> tuple[Any, str]:
    if "oneOf" in node:  # clip: null or an object
        i = next(i for i, s in enumerate(node["oneOf"]) if s.get("type") == "object")
        return node["oneOf"][i], f"{pointer}/oneOf/{i}"
    return node, pointer


def schema_pointer(field: str, *, of_object: bool = False) -> str:
    """The JSON Pointer (``#/...``) of the schema that describes ``field`` of a plan.

    Walks :data:`PLAN_JSON_SCHEMA` along the field's names (``properties``), indices
    (``items`` or ``prefixItems``) and keys of maps (``additionalProperties``); stops at
    the deepest schema the path reaches (``of_object``: at its object form, for errors
    about the object's fields).
    """
    node: Any = PLAN_JSON_SCHEMA
    pointer = "#"
    for step in _STEP.finditer(field):
        name, index = step.group(1), step.group(2)  # index "" for "[]", None for a name
        node, pointer = _object_branch(node, pointer)
        if name and name in node.get("properties", {}):
            node, pointer = node["properties"][name], f"{pointer}/properties/{name}"
        elif index is not None and index.isdigit() and "prefixItems" in node:
            i = int(index)
            if i >= len(node["prefixItems"]):
                break
            node, pointer = node["prefixItems"][i], f"{pointer}/prefixItems/{i}"
        elif index is not None and isinstance(node.get("items"), dict):
            node, pointer = node["items"], f"{pointer}/items"
        elif index and isinstance(node.get("additionalProperties"), dict):
            node, pointer = node["additionalProperties"], f"{pointer}/additionalProperties"
        else:
            break
    return _object_branch(node, pointer)[1] if of_object else pointer


def cite_schema(message: str) -> str:
    """``message`` (a :class:`~aoizora.errors.PlanError` text that starts with the field it
    rejects) with the schema location of that field appended."""
    match = _FIELD.match(message)
    field = match.group(0) if match else ""
    first = re.split(r"[.\[]", field)[0]
    if first not in PLAN_JSON_SCHEMA["properties"]:
        field = ""  # the plan as a whole ("a plan must be ...", "plan lacks field(s) ...")
    rest = message[len(field) :] if field else message
    suffix = ""
    if " lacks field(s)" in rest[:20]:
        suffix = "/required"
    elif " has unknown field(s)" in rest[:25]:
        suffix = "/additionalProperties"
    pointer = schema_pointer(field, of_object=bool(suffix)) + suffix
    return f"{message} [schema: {SCHEMA_FILE}{pointer}]"


if __name__ == "__main__":
    print(json.dumps(PLAN_JSON_SCHEMA, indent=2))
