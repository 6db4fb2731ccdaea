"""Cache keys change when the code that decides a result changes, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest

import aoizora.cache
from aoizora.cache import SOURCES, code_fingerprint


def test_the_q2_fingerprint_covers_the_compiled_core() -> None:
    # A simulated step time depends on sim/_flowcore.c as much as on sim/*.py.
    assert "sim" in SOURCES["q2"]
    root = Path(aoizora.cache.__file__).resolve().parent.parent
    assert (root / "sim" / "_flowcore.c").is_file()


def test_fingerprint_follows_python_and_c_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aoizora.cache, "_ROOT", tmp_path)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    files = {name: pkg / name for name in ("a.py", "core.c", "core.h", "notes.txt")}
    for f in files.values():
        f.write_text("one\n")

    def fingerprint() -> str:
        code_fingerprint.cache_clear()
        return code_fingerprint(("pkg",))

    seen = {fingerprint()}
    for name in ("a.py", "core.c", "core.h"):
        files[name].write_text("two\n")
        seen.add(fingerprint())
    assert len(seen) == 4  # every source edit gave a new key
    files["notes.txt"].write_text("two\n")
    assert fingerprint() in seen  # a non-source file does not
    code_fingerprint.cache_clear()
