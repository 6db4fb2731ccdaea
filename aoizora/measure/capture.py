"""Capturing a device profile: a call run under ``jax.profiler.trace``, its trace saved.

:func:`capture_profile` writes the trace file (``*.xplane.pb``) that
:mod:`aoizora.hlo.profile` reads back: measuring writes it, reading it is input.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.errors import MeasureError

__all__ = ["capture_profile"]


def capture_profile(call: Callable[[], Any], *, executions: int, out: str | Path) -> Path:
    """Run ``call()`` ``executions`` times under ``jax.profiler.trace`` and save the trace
    as ``out`` (an ``*.xplane.pb``). The device is idle when the trace starts and when it
    stops (every output is waited for), so each execution in it is whole."""
    import jax

    if executions < 1:
        raise MeasureError(f"--profile-steps {executions}: profile at least one step, e.g. 2")
    jax.block_until_ready(call())  # nothing of an earlier call runs into the trace
    with tempfile.TemporaryDirectory(prefix="aoizora-trace-") as tmp:
        with jax.profiler.trace(tmp):
            for _ in range(executions):
                jax.block_until_ready(call())
        found = sorted(glob.glob(os.path.join(tmp, "**", "*.xplane.pb"), recursive=True))
        if not found:
            raise MeasureError(f"jax.profiler.trace wrote no *.xplane.pb under {tmp}")
        target = Path(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found[-1], target)
    return target
