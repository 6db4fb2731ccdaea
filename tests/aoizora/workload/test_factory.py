"""``load_workload("FILE.py:FACTORY" | "package.module:FACTORY")``: every way it can go wrong."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from aoizora.errors import WorkloadError
from aoizora.workloads.base import Workload
from aoizora.workloads.factory import load_workload

MODEL = """
import jax, jax.numpy as jnp
from aoizora import Rules, user_workload

def mm(w, x):
    return x @ w

def make():
    return user_workload(
        "mm", mm,
        (jax.ShapeDtypeStruct((64, 32), jnp.float32), jax.ShapeDtypeStruct((8, 64), jnp.float32)),
        (("embed", "mlp"), ("batch", "embed")), out_logical_axes=("batch", "mlp"),
        rule_sets=(Rules.of("dp", [("batch", "dp")]),))

WORKLOAD = make()
"""


@pytest.fixture(autouse=True)
def _restore_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader appends folders


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_file_factory_and_value(tmp_path: Path) -> None:
    f = _write(tmp_path / "my_model.py", MODEL)
    wl = load_workload(f"{f}:make")
    assert isinstance(wl, Workload) and wl.name == "mm" and wl.mesh_axis_names == ("dp",)
    assert load_workload(f"{f}:WORKLOAD").cache_id == wl.cache_id  # a Workload value works too


def test_relative_file_and_a_sibling_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "models" / "layers.py", "def scale(x):\n    return 2 * x\n")
    uses_sibling = "import layers\n\ndef mm(w, x):\n    return layers.scale(x @ w)"
    _write(
        tmp_path / "models" / "net.py",
        MODEL.replace("def mm(w, x):\n    return x @ w", uses_sibling),
    )
    monkeypatch.chdir(tmp_path)
    assert load_workload("models/net.py:make").name == "mm"


def test_module_factory_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "zz_aoizora_pkg" / "__init__.py", "")
    _write(tmp_path / "zz_aoizora_pkg" / "models.py", MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "zz_aoizora_pkg", raising=False)
    assert load_workload("zz_aoizora_pkg.models:make").name == "mm"


def _error(spec: str) -> str:
    with pytest.raises(WorkloadError) as info:
        load_workload(spec)
    text = str(info.value)
    assert "\n" not in text  # one line for the CLI
    return text


def test_spec_and_file_errors(tmp_path: Path) -> None:
    assert "is not FILE.py:FACTORY or package.module:FACTORY" in _error("my_model.py")
    assert "is not FILE.py:FACTORY" in _error("my_model.py:")
    missing = _error(f"{tmp_path}/nope.py:make")
    assert "does not exist" in missing and "e.g. --workload my_model.py:make" in missing
    txt = _write(tmp_path / "model.txt", MODEL)
    assert "is not a .py file" in _error(f"{txt}:make")
    bad = _write(tmp_path / "syntax.py", "def make(:\n    pass\n")
    assert "running syntax.py failed: SyntaxError" in _error(f"{bad}:make")
    assert "(syntax.py, line 1)" in _error(f"{bad}:make")
    boom = _write(tmp_path / "boom.py", "import math\n\nx = math.sqrt(4)\ny = 1 / 0\n")
    text = _error(f"{boom}:make")
    assert "running boom.py failed: ZeroDivisionError: division by zero (boom.py, line 4" in text


def test_module_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert "no module named 'zz_no_such_module'" in _error("zz_no_such_module:make")
    assert "no module named 'json.zz_nope'" in _error("json.zz_nope:make")
    # A module that exists but fails inside: its own ImportError, with where.
    _write(tmp_path / "zz_broken_mod.py", "import zz_missing_dependency\n")
    text = _error("zz_broken_mod:make")
    assert "importing zz_broken_mod failed: ModuleNotFoundError" in text
    assert "zz_missing_dependency" in text and "(zz_broken_mod.py, line 1" in text


def test_factory_errors(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "factories.py",
        """
        from aoizora import Rules

        CONFIG = {"size": 3}

        def needs_args(size):
            return size

        def raises():
            return {}["missing"]

        def returns_rules():
            return Rules.of("dp", [("batch", "dp")])

        def returns_tuple():
            return (1, 2)
        """,
    )
    absent = _error(f"{f}:make")
    assert "'make' is not defined there" in absent
    assert "['needs_args', 'raises', 'returns_rules', 'returns_tuple']" in absent
    assert "FACTORY is called with no arguments, but missing a required argument: 'size'" in (
        _error(f"{f}:needs_args")
    )
    raised = _error(f"{f}:raises")
    assert "calling FACTORY() failed: KeyError: 'missing' (factories.py, line 10, in raises)" in (
        raised
    )
    not_workload = _error(f"{f}:returns_rules")
    assert "returns_rules() returned Rules Rules(name='dp'" in not_workload
    assert "not a workload; it must return what aoizora.user_workload(" in not_workload
    assert "e.g. def make(): return user_workload('mlp'" in not_workload
    assert "returned tuple (1, 2), not a workload" in _error(f"{f}:returns_tuple")
    assert "names dict {'size': 3}, not a function" in _error(f"{f}:CONFIG")
