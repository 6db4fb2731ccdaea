"""Writing a file whole or not at all: a reader, or a rerun after a crash, never sees half.

Every file AoiZora writes -- cache entries (:mod:`aoizora.cache`), the plan file,
``--report`` pictures and traces, what-if CSVs -- goes through :func:`write_atomic`:
the bytes go to a temporary file beside the target (same directory, so the same
file system), are flushed to disk, and :func:`os.replace` swaps it in, which POSIX
makes atomic. A process killed at any moment leaves the old file (or none) and at
most a ``.tmp`` file that the next write of that path replaces.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     p = write_atomic(pathlib.Path(d) / "plan.json", "{}\\n")
...     p.read_text(), sorted(x.name for x in pathlib.Path(d).iterdir())
('{}\\n', ['plan.json'])
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_atomic", "write_atomic_with"]


def _temporary(path: Path) -> Path:
    # The pid keeps two processes writing one path (two plans on one cache) apart.
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def write_atomic_with(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """``write(temporary_path)`` (e.g. a figure's ``savefig``), then swap it into ``path``."""
    target = Path(path)
    tmp = _temporary(target)
    try:
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return target


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; returns the path."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return write_atomic_with(path, lambda tmp: tmp.write_bytes(raw))
