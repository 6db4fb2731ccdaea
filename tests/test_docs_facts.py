"""Facts are cited from inside the repository: docs/facts.md and its section headings.

Two rules of the layout (issue 9): no file names the facts file that lives outside
the repository (a reader could not follow the citation), and a citation of the form
``docs/facts.md`` + comma + section names a ``## `` heading that exists, so a
renamed or removed section cannot leave dangling citations behind. And every test
the facts page names as the check of a fact exists, so "checked by" stays true when
tests are renamed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FACTS = ROOT / "docs" / "facts.md"
# Built from pieces so that this file does not match its own rules.
OUTSIDE_FACTS = "FACTS" + ".md"
CITATION = re.compile(r"docs/facts\.md`{0,2}," + r"[ \t]*")
_SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        "node_modules",
        "build",
        "dist",
    }
)
_MAX_BYTES = 5_000_000


def _repo_text_files() -> Iterator[tuple[Path, str]]:
    """Every text file of the checkout, as (path relative to the root, content)."""
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for path in sorted(folder.iterdir()):
            if path.is_dir():
                if path.name not in _SKIP_DIRS and not path.name.endswith(".egg-info"):
                    stack.append(path)
                continue
            if not path.is_file() or path.stat().st_size > _MAX_BYTES:
                continue
            data = path.read_bytes()
            if b"\0" in data[:8192]:
                continue  # binary (PNG, gzip)
            yield path.relative_to(ROOT), data.decode("utf-8", errors="replace")


def facts_sections() -> tuple[str, ...]:
    """The ``## `` headings of the facts page, in order."""
    return tuple(
        line[3:].strip()
        for line in FACTS.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    )


def bad_citations(text: str, sections: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line number, cited text) of every facts citation not naming a section."""
    bad = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in CITATION.finditer(line):
            rest = line[match.end() :]
            if not any(rest.startswith(section) for section in sections):
                bad.append((number, rest[:40]))
    return bad


def test_facts_doc_has_unique_sections() -> None:
    sections = facts_sections()
    assert len(sections) == len(set(sections)), sections
    for required in (
        "TPU chips",
        "libtpu AOT topologies",
        "Compiled-HLO collectives",
        "Shardy from Python",
        "Placement and compilation",
        "Wan 2.1",
        "maxdiffusion deployment",
    ):
        assert required in sections, (required, sections)


def test_no_file_names_the_outside_facts_file() -> None:
    offenders = [
        f"{path}:{number}"
        for path, text in _repo_text_files()
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE_FACTS in line
    ]
    assert not offenders, (
        f"{len(offenders)} line(s) cite {OUTSIDE_FACTS}, which is not in this repository; "
        f"cite docs/facts.md and its section instead: {offenders}"
    )


def test_every_facts_citation_names_an_existing_section() -> None:
    sections = facts_sections()
    offenders = [
        f"{path}:{number}: {cited!r}"
        for path, text in _repo_text_files()
        if path != FACTS.relative_to(ROOT)
        for number, cited in bad_citations(text, sections)
    ]
    assert not offenders, (
        "citations of docs/facts.md must be followed, on the same line, by one of its "
        f"section headings {list(sections)}: {offenders}"
    )


# `tests/x.py`, `tests/x.py::test_y`, or `::test_z` (a test of the file named just before).
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`")


def named_tests(text: str) -> list[tuple[str, str]]:
    """(file, test name or "") of every test the text names, in order."""
    refs: list[tuple[str, str]] = []
    last = ""
    for match in TEST_REFERENCE.finditer(text):
        path, name = match.group(1) or "", match.group(2) or ""
        if not path and not name:
            continue
        last = path or last
        refs.append((last, name))
    return refs


def test_every_test_named_in_the_facts_doc_exists() -> None:
    """A fact "checked by tests/x.py::test_y" must keep pointing at a real test."""
    refs = named_tests(FACTS.read_text(encoding="utf-8"))
    missing = []
    for path, name in refs:
        file = ROOT / path
        if not path or not file.is_file():
            missing.append(f"{path or '?'}::{name}")
        elif name and not re.search(rf"^(?:async )?def {name}\(", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert len(refs) > 20 and not missing, missing


def test_citations_are_used() -> None:
    """The checks above see real citations (a broken walk would pass them vacuously)."""
    cited = {
        section
        for _path, text in _repo_text_files()
        for match in CITATION.finditer(text)
        for section in facts_sections()
        if text[match.end() :].startswith(section)
    }
    assert {"TPU chips", "Compiled-HLO collectives", "Wan 2.1"} <= cited, cited


_F = "docs/facts.md"  # the examples below must not be citations of this file itself


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"# {_F}, Wan 2.1: 81 frames", []),
        (f"({_F}, Placement and compilation)", []),
        (f"`{_F}`, TPU chips", []),
        (f"see {_F} for everything", []),
        (f"{_F}, Today's TPU deployment", [(1, "Today's TPU deployment")]),
        (f"{_F}, TPU chips; {_F}, GPUs", [(1, "GPUs")]),
        (f"a\nb {_F},\nTPU chips", [(2, "")]),
    ],
)
def test_bad_citations_examples(text: str, expected: list[tuple[int, str]]) -> None:
    assert bad_citations(text, ("TPU chips", "Wan 2.1", "Placement and compilation")) == expected
