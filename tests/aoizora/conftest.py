"""Fixtures shared by the planner-level tests: one persistent plan cache per session.

The planner, what-if and report tests all plan the tiny Wan config on small
slices; sharing the cache means each (sharding, slice) is compiled once per test
session, whichever test asks first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
        return Path(keep)
    return tmp_path_factory.mktemp("aoizora-plan-cache")
