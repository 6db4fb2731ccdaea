"""Fixtures shared by the planner-level tests: one persistent plan cache per session.

The planner, what-if and report tests all plan the tiny Wan config on small
slices; sharing the cache means each (sharding, slice) is compiled once per test
session, whichever test asks first.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aoizora.atomic import write_atomic
from aoizora.cache import JsonCache, plan_caches
from tests.aoizora.compile_seed import seed_compiles
from tests.aoizora.maxdiffusion_reader import check_plan_document

# Test processes may load libtpu at once; no TPU is ever opened (AOT compiles only).
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


@pytest.fixture(scope="session")
def plan_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Stage-1 + compile-result cache shared by every planner-level test.

    ``AOIZORA_TEST_CACHE_DIR`` names a directory kept across sessions instead (for
    development: entries are keyed by the program and the code, so a stale entry
    is never read); CI leaves it unset and starts empty.
    """
    keep = os.environ.get("AOIZORA_TEST_CACHE_DIR")
    if keep:
        cache = Path(keep)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        # pytest-xdist (make test): every worker shares one cache beside their own temp
        # folders, so a program one worker compiled is read by the others; entries are
        # written atomically (aoizora/cache.py).
        cache = tmp_path_factory.getbasetemp().parent / "aoizora-plan-cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("aoizora-plan-cache")
    seed_compiles(cache)  # libtpu's results for what the tests compile: compile_seed.py
    return cache


@pytest.fixture
def compiled_cache(plan_cache_dir: Path) -> JsonCache:
    """The session's ``compiled/`` cache, for tests that check what libtpu compiles:
    a program the seed holds is read, not compiled again (``compile_seed.py`` says how
    the seed is checked against the pinned libtpu)."""
    return plan_caches(plan_cache_dir).compiled


@pytest.fixture
def fresh_plan_cache(plan_cache_dir: Path, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Makes plan caches of a test's own (``fresh_plan_cache("name")``): empty but for
    the session's compile results (the seed's and this session's), so a test that
    counts what the planner hands its compile step does not wait on libtpu for them.
    What the test compiles goes back to the session's cache when it ends, where a seed
    refresh (``compile_seed.py``) finds it."""
    made: list[Path] = []

    def make(name: str) -> Path:
        folder = tmp_path / name
        shutil.copytree(plan_cache_dir / "compiled", folder / "compiled")
        made.append(folder)
        return folder

    yield make
    shared = plan_cache_dir / "compiled"
    for folder in made:
        for entry in sorted((folder / "compiled").glob("*/*.json.gz")):
            target = shared / entry.parent.name / entry.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(target, entry.read_bytes())


def _plan_files(directory: Path) -> list[str]:
    """Texts of the plan files (schema aoizora.plan/2) under ``directory`` that load_plan
    accepts (tests also write broken plans on purpose, to see them refused)."""
    from aoizora.errors import PlanError
    from aoizora.plan import PLAN_SCHEMA, load_plan

    texts = []
    for path in sorted(directory.rglob("*.json")):
        try:
            text = path.read_text(encoding="utf-8")
            if json.loads(text).get("schema") != PLAN_SCHEMA:
                continue
            load_plan(path)
        except (OSError, ValueError, AttributeError, PlanError):
            continue
        texts.append(text)
    return texts


@pytest.fixture(autouse=True)
def every_plan_written_is_checked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every plan a test writes -- in this process (``Plan.to_json``) or by a command it
    runs into its ``tmp_path`` -- validates against docs/plan.schema.json, and every Wan
    plan among them exports to maxdiffusion and reads back, or is refused in one line
    (tests/aoizora/maxdiffusion_reader.py)."""
    from aoizora.plan.file import Plan

    written: dict[str, None] = {}
    real = Plan.to_json

    def to_json(self: Plan) -> str:
        text = real(self)
        written[text] = None
        return text

    monkeypatch.setattr(Plan, "to_json", to_json)
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    monkeypatch.setattr(Plan, "to_json", real)
    if tmp is not None:
        written.update(dict.fromkeys(_plan_files(tmp)))
    for text in written:
        check_plan_document(text)
