"""docs/plan.schema.json: published, in sync with the code, and cited by load_plan's errors.

Every plan the suite writes is validated against it by tests/aoizora/conftest.py; here:
the file equals :data:`aoizora.plan.schema.PLAN_JSON_SCHEMA`, it is a valid draft 2020-12
schema, and each invalid field of tests/aoizora/test_plan.py's list is rejected by
load_plan citing a schema location that exists and that jsonschema, an independent
validator, also points at when it catches the same field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from aoizora.errors import PlanError
from aoizora.plan import load_plan
from aoizora.plan.schema import PLAN_JSON_SCHEMA, SCHEMA_FILE, cite_schema, schema_pointer
from tests.aoizora.maxdiffusion_reader import check_plan_document
from tests.aoizora.test_plan import INVALID, _plan, invalid_plan_file

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / SCHEMA_FILE).read_text(encoding="utf-8"))
_CITED = re.compile(r"\[schema: docs/plan\.schema\.json(#[^\]]*)\]$")


def _resolve(pointer: str) -> Any:
    node: Any = SCHEMA
    for part in pointer.lstrip("#").strip("/").split("/"):
        if part:
            node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def test_the_published_file_is_the_code_s_schema() -> None:
    assert SCHEMA == PLAN_JSON_SCHEMA, "regenerate: python -m aoizora.plan.schema > " + SCHEMA_FILE
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_a_plan_validates_and_the_reserved_fields_are_optional() -> None:
    data = _plan().to_json_dict()
    jsonschema.validate(data, SCHEMA)
    later = {
        **data,
        "compute_model": {"name": "calibrated", "file": "params.toml"},
        "clip_s": 61.2,
        "text_encoder_s": 1.1,
        "denoise_s": 55.0,
        "vae_decode_s": 5.1,
        "vae": {"candidate": "spatial8"},
    }
    jsonschema.validate(later, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "clip_s": -1.0}, SCHEMA)
    with pytest.raises(jsonschema.ValidationError, match="'extra' was unexpected"):
        jsonschema.validate({**data, "extra": 1}, SCHEMA)


@pytest.mark.parametrize(("name", "edit", "match"), INVALID, ids=[c[0] for c in INVALID])
def test_load_plan_errors_cite_the_schema_path(
    name: str, edit: Callable[[dict[str, Any]], None], match: str, tmp_path: Path
) -> None:
    path, data = invalid_plan_file(name, edit, tmp_path)
    with pytest.raises(PlanError) as exc:
        load_plan(path)
    cited = _CITED.search(str(exc.value))
    assert cited, str(exc.value)
    pointer = cited.group(1)
    _resolve(pointer)  # the location exists in the published schema
    assert pointer != "#" or name in ("missing-field", "unknown-field")
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    errors += [sub for e in errors for sub in e.context or ()]  # inside oneOf (clip)
    if errors:  # where the schema catches it too, it points at the same field
        paths = ["#/" + "/".join(str(p) for p in e.absolute_schema_path) for e in errors]
        # (a missing field: jsonschema names its parent's "required")
        parents = [p.removesuffix("/required") for p in paths if p.endswith("/required")]
        assert any(p.startswith(pointer) for p in paths) or any(
            pointer.startswith(p) for p in parents
        ), (pointer, paths)


def test_schema_pointers() -> None:
    assert schema_pointer("rules[0]") == "#/properties/rules/items"
    assert schema_pointer("clip.width") == "#/properties/clip/oneOf/1/properties/width"
    assert schema_pointer("inputs['arg0'].dtype") == "#/properties/inputs/items/properties/dtype"
    assert cite_schema("plan lacks field(s) ['model']").endswith("json#/required]")
    assert cite_schema("mesh has unknown field(s) ['x']").endswith(
        "#/properties/mesh/additionalProperties]"
    )


def test_the_hook_rejects_a_plan_outside_the_schema() -> None:
    data = _plan().to_json_dict()
    check_plan_document(json.dumps(data))
    data["predicted_latency_s"]["winner"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        check_plan_document(json.dumps(data))
