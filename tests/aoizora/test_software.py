"""Provenance: AoiZora's version and commit from a checkout or an unpacked archive, and the
version-drift warning."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
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
from tests.child_env import child_env

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


def test_an_installed_copy_claims_the_commit_it_was_built_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup.py records the commit in a built package; none recorded (or not a commit: a
    damaged install) claims none."""
    monkeypatch.setattr(software, "_checkout", lambda: None)
    recorded = tmp_path / software.BUILD_COMMIT_FILE
    monkeypatch.setattr(software, "_BUILD_COMMIT", recorded)

    def commit() -> str | None:
        software.aoizora_commit.cache_clear()
        return aoizora_commit()

    try:
        assert commit() is None
        recorded.write_text("032b454e1f0a+dirty\n", encoding="utf-8")
        assert commit() == "032b454e1f0a+dirty"
        assert software.version_line().endswith(" (commit 032b454e1f0a+dirty)")
        recorded.write_text("not a commit\n", encoding="utf-8")
        assert commit() is None
    finally:
        software.aoizora_commit.cache_clear()


def _not_installed(name: str) -> str:
    raise importlib.metadata.PackageNotFoundError(name)


def test_the_version_comes_from_the_trees_pyproject_git_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree without .git (an unpacked archive) names its pyproject's version, installed
    or not; a pyproject of another project is not ours; with neither, no version."""
    monkeypatch.setattr(software, "_root", lambda: tmp_path)
    pyproject = tmp_path / "pyproject.toml"

    def version() -> str | None:
        software.aoizora_version.cache_clear()
        software.aoizora_commit.cache_clear()
        assert aoizora_commit() is None  # no .git: no commit claimed
        return aoizora_version()

    try:
        pyproject.write_text('[project]\nname = "aoizora"\nversion = "7.7.7"\n')
        assert version() == "7.7.7"  # over the installed metadata (another copy's)
        monkeypatch.setattr(importlib.metadata, "version", _not_installed)
        assert version() == "7.7.7"
        pyproject.write_text('[project]\nname = "other"\nversion = "1.0"\n')
        assert version() is None
        monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.9")
        assert version() == "0.0.9"  # installed, and no tree of ours: the metadata's
    finally:
        software.aoizora_version.cache_clear()
        software.aoizora_commit.cache_clear()


# In a child: the version, commit and a measured row's software column, with the installed
# metadata as it is, then as if AoiZora were not installed (a TPU VM running an archive).
_ARCHIVE_CHILD = """
import importlib.metadata, json, jax, aoizora
from aoizora import software
from aoizora.measure.environment import current_environment
seen = []
for hide in (False, True):
    if hide:
        real = importlib.metadata.version
        def version(name):
            if name == "aoizora":
                raise importlib.metadata.PackageNotFoundError(name)
            return real(name)
        importlib.metadata.version = version
        software.aoizora_version.cache_clear()
    env = current_environment(jax.devices("cpu")[:1], backend="cpu", plan_file="pyproject.toml")
    seen.append([software.aoizora_version(), software.aoizora_commit(), env.software()])
print(json.dumps({"package": aoizora.__file__, "seen": seen}))
"""


@needs_git
def test_rows_measured_from_an_unpacked_archive_name_the_version(tmp_path: Path) -> None:
    """The files ``git archive`` would pack (tracked and new, as they are now), without .git,
    and a version of their own: rows measured there say it, and "no commit"."""
    tree = tmp_path / "aoizora-archive"
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "--",
                  "aoizora", "sim", "topologies", "pyproject.toml")  # fmt: skip
    for name in listed.splitlines():
        if (ROOT / name).is_file():  # a file deleted but not yet committed is not packed
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, tree / name)
    text = (tree / "pyproject.toml").read_text(encoding="utf-8")
    ours = tomllib.loads(text)["project"]["version"] + ".post42"
    (tree / "pyproject.toml").write_text(
        re.sub(r'(?m)^version = ".*"$', f'version = "{ours}"', text, count=1), encoding="utf-8"
    )
    assert not (tree / ".git").exists()
    done = subprocess.run(
        [sys.executable, "-c", _ARCHIVE_CHILD],
        cwd=tree,
        env=child_env(tree, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert Path(got["package"]).resolve().parent == (tree / "aoizora").resolve()
    for version, commit, text in got["seen"]:  # installed elsewhere, then not installed
        assert (version, commit) == (ours, None)
        assert text.endswith(f", aoizora {ours} (no commit)"), text


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
    commit = aoizora_commit()
    assert text.endswith(f"(git {commit})" if commit is not None else "(no commit)")


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
