"""A seed for the test suite's shared compile cache: libtpu's results for the programs the
planner-level tests compile, so a fresh clone does not spend minutes compiling them again.

A compile key (:func:`aoizora.cache.compile_key`) covers the pinned jax/jaxlib/libtpu,
the target, the device order and the lowered program made install-neutral, and no code:
an entry is read only for the very program it was compiled from. A changed model or
candidate lowers to another key and is compiled afresh, so a stale seed costs time,
never a wrong result. ``tests/aoizora/conftest.py`` copies the seed into the session's
plan cache (:func:`seed_compiles`); ``test_validation.py`` checks that it still serves
the shipped step gate without a compile. Tests with caches of their own
(``fresh_plan_cache`` in conftest.py) hand what they compiled back to the session's cache,
so a refresh finds theirs too. Refresh it from a cache the suite filled::

    rm -rf /tmp/seed && AOIZORA_TEST_CACHE_DIR=/tmp/seed python -m pytest tests/aoizora
    python -m tests.aoizora.compile_seed /tmp/seed
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

__all__ = ["COMPILE_SEED", "refresh_seed", "seed_compiles"]

COMPILE_SEED = Path(__file__).resolve().parent / "fixtures" / "compile-cache"


def seed_compiles(cache_dir: Path) -> None:
    """Copy :data:`COMPILE_SEED`'s entries into ``cache_dir``'s ``compiled/`` folder."""
    for entry in sorted(COMPILE_SEED.glob("*.json.gz")):
        target = cache_dir / "compiled" / entry.name[:2] / entry.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry, target)


def _is_tpu_result(path: Path) -> bool:
    """A compile result for a TPU target (not the lowered-program index, whose keys
    depend on the code, nor a CPU fallback)."""
    value = json.loads(gzip.decompress(path.read_bytes()))["value"]
    return "hlo_text" in value and value.get("backend") == "tpu" and bool(value.get("ok"))


def refresh_seed(cache_dir: Path) -> int:
    """Replace :data:`COMPILE_SEED` with the TPU compile results under ``cache_dir``."""
    found = sorted(p for p in (cache_dir / "compiled").glob("*/*.json.gz") if _is_tpu_result(p))
    if not found:
        raise SystemExit(f"no TPU compile results under {cache_dir / 'compiled'}")
    shutil.rmtree(COMPILE_SEED, ignore_errors=True)
    COMPILE_SEED.mkdir(parents=True)
    for path in found:
        shutil.copyfile(path, COMPILE_SEED / path.name)
    return len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", type=Path, help="a plan cache the test suite filled")
    n = refresh_seed(parser.parse_args().cache_dir)
    size = sum(p.stat().st_size for p in COMPILE_SEED.iterdir())
    print(f"{COMPILE_SEED}: {n} compile results, {size:,} bytes")


if __name__ == "__main__":
    main()
