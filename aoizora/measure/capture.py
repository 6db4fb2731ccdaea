"""Capturing a device profile: a call run under ``jax.profiler.trace``, its trace saved.

:func:`capture_profile` writes the trace file (``*.xplane.pb``) that
:mod:`aoizora.hlo.profile` reads back: measuring writes it, reading it is input.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.errors import MeasureError
from aoizora.hlo.profile import DeviceProfile, load_profile

__all__ = ["capture_profile", "save_profiled_call"]


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


def save_profiled_call(
    call: Callable[[], Any],
    *,
    hlo_text: str,
    module: str,
    out: Path,
    name: str,
    executions: int = 3,
) -> DeviceProfile:
    """Profile ``call`` (a compiled program of HLO ``hlo_text``, module ``module``) over
    ``executions`` runs and save ``out/<name>.hlo.txt.gz`` and ``out/<name>.ops.json.gz``
    (gzip without a timestamp: the same run gives the same bytes), what
    :func:`aoizora.hlo.profile.load_profile` and ``aoizora explain`` read back; the chip
    experiments under validation/ write their kernels so."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.hlo.txt.gz").write_bytes(gzip.compress(hlo_text.encode(), mtime=0))
    with tempfile.TemporaryDirectory() as tmp:
        trace = capture_profile(call, executions=executions, out=Path(tmp) / "t.xplane.pb")
        profile = load_profile(trace, module=module)
    data = json.dumps(profile.to_json_dict(), sort_keys=True).encode()
    (out / f"{name}.ops.json.gz").write_bytes(gzip.compress(data, mtime=0))
    return profile
