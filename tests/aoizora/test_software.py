"""Provenance: AoiZora's version and commit from a checkout, and the version-drift warning."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import jax
import jsonschema
import pytest

from aoizora import software
from aoizora.commands.measure import _warn_version_drift
from aoizora.errors import PlanError
from aoizora.measure.environment import current_environment
from aoizora.plan import Plan, Provenance, load_plan
from aoizora.plan.schema import PLAN_JSON_SCHEMA
from aoizora.software import (
    PINNED,
    aoizora_commit,
    aoizora_version,
    version_drift,
    warn_version_drift,
)

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_pins_are_pyprojects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = {}
    for dep in project["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^;\s]+).*", dep)
        assert m is not None, dep
        pins[m.group(1)] = m.group(2)
    assert {k: pins[k] for k in PINNED} == dict(PINNED)
    assert aoizora_version() == project["version"]  # read from the checkout's pyproject


@needs_git
def test_the_commit_is_the_checkouts() -> None:
    software.aoizora_commit.cache_clear()  # once a process: others may have committed since
    commit = aoizora_commit()
    assert commit is not None and re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", commit)
    full = _git("rev-parse", commit.removesuffix("+dirty"))
    # HEAD, or an ancestor of it should a commit land between the two reads
    merged = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", full, "HEAD"])
    assert merged.returncode == 0
    # the tree may change under a running test suite; a clean tree can only say clean
    if not _git("status", "--porcelain", "--untracked-files=no"):
        assert not commit.endswith("+dirty")


def test_an_installed_copy_claims_no_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(software, "_checkout", lambda: None)
    software.aoizora_commit.cache_clear()
    try:
        assert aoizora_commit() is None
    finally:
        software.aoizora_commit.cache_clear()


def test_version_drift_names_each_package_and_what_may_differ() -> None:
    pinned = dict(PINNED)
    assert version_drift(pinned, pinned, against="AoiZora pins") is None
    tpu_vm = {**pinned, "libtpu": "0.0.42.1"}
    line = version_drift(tpu_vm, pinned, against="AoiZora pins")
    assert line == (
        "libtpu 0.0.42.1 runs here but AoiZora pins 0.0.52: the compiled HLO, and so the "
        "prediction, may differ"
    )
    both = version_drift({**tpu_vm, "jaxlib": None}, pinned, against="the plan was made with")
    assert both is not None and both.startswith("jaxlib missing, libtpu 0.0.42.1 run here but")
    # a plan made without libtpu (libtpu: null) is not compared on libtpu
    assert version_drift(tpu_vm, {**pinned, "libtpu": None}, against="the plan") is None


def test_warning_is_one_line_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(software, "running_versions", lambda: {**PINNED, "libtpu": "0.0.42.1"})
    warn_version_drift("validate")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("aoizora validate: warning: libtpu 0.0.42.1")
    monkeypatch.setattr(software, "running_versions", lambda: dict(PINNED))
    assert warn_version_drift("plan") is None and capsys.readouterr().err == ""


def _plan_data(plan_file: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(plan_file.read_text(encoding="utf-8"))
    return data


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    from tests.aoizora.test_plan import _plan

    path = tmp_path / "plan.json"
    path.write_text(_plan().to_json(), encoding="utf-8")
    return path


def test_plans_carry_the_commit(plan_file: Path) -> None:
    plan = load_plan(plan_file)
    made = Plan.from_json(plan.to_json())
    with_commit = Provenance("0.1.0", "0.10.2", "0.10.2", "0.0.52", "032b454e1f0a+dirty")
    data = json.loads(made.to_json())
    data["provenance"] = with_commit.to_json()
    jsonschema.validate(data, PLAN_JSON_SCHEMA)
    again = Plan.from_json(json.dumps(data))
    assert again.provenance == with_commit
    # a plan made without a checkout (or before issue 34) has no aoizora_commit, and loads
    assert "aoizora_commit" not in json.loads(plan.to_json())["provenance"]
    for bad in ("032B454", "abc", "032b454e1f0a dirty"):
        data["provenance"] = {**with_commit.to_json(), "aoizora_commit": bad}
        with pytest.raises(PlanError, match="provenance.aoizora_commit"):
            Plan.from_json(json.dumps(data))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(data, PLAN_JSON_SCHEMA)
    current = Provenance.current()
    assert current.aoizora == aoizora_version() and current.aoizora_commit == aoizora_commit()


def test_measured_rows_say_the_checkout(plan_file: Path) -> None:
    env = current_environment(jax.devices("cpu")[:1], backend="cpu", plan_file=plan_file)
    text = env.software()
    assert "not installed" not in text.split("aoizora")[-1]
    assert f"aoizora {aoizora_version()}" in text
    if aoizora_commit() is not None:
        assert text.endswith(f"(git {aoizora_commit()})")


def test_measure_warns_when_the_plan_was_made_with_other_versions(
    plan_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan_data(plan_file)
    data["provenance"] = {**data["provenance"], "libtpu": "0.0.42.1"}  # type: ignore[dict-item]
    plan_file.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(software, "running_versions", lambda: dict(PINNED))
    _warn_version_drift([str(plan_file), str(plan_file)])
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"aoizora measure: warning: {plan_file}: libtpu 0.0.52 runs here but the plan was made "
        "with 0.0.42.1: the compiled HLO, and so the prediction, may differ"
    ]


class _Item:
    """The two attributes of a pytest item the collection hook uses."""

    def __init__(self, **keywords: bool) -> None:
        self.keywords = keywords
        self.markers: list[pytest.MarkDecorator] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker)


@pytest.mark.parametrize(("libtpu", "skipped"), [("0.0.42.1", [1, 0]), (PINNED["libtpu"], [0, 0])])
def test_pinned_libtpu_tests_skip_only_under_another_libtpu(
    monkeypatch: pytest.MonkeyPatch, libtpu: str, skipped: list[int]
) -> None:
    import tests.conftest as conftest

    monkeypatch.setattr(conftest, "running_versions", lambda: {"libtpu": libtpu})
    items = [_Item(pinned_libtpu=True), _Item(slow=True)]
    conftest.pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [len(i.markers) for i in items] == skipped
    if skipped[0]:
        (mark,) = items[0].markers
        assert mark.mark.name == "skip" and f"libtpu {libtpu} runs here" in mark.kwargs["reason"]
