"""The environment of a Python child process that a test starts.

A child must import what this process imports: the checkout first, then whatever
``PYTHONPATH`` already names. On a TPU VM whose jax is preinstalled that is the folder
holding jax and the folder the wheels went to (docs/measure.md), so replacing
``PYTHONPATH`` by the checkout alone loses jax in the child.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ROOT", "child_env"]

ROOT = Path(__file__).resolve().parent.parent


def child_env(*first: Path | str, drop: Iterable[str] = (), **overrides: str) -> dict[str, str]:
    """This process's environment less ``drop``, with ``PYTHONPATH`` = ``first``, the
    checkout, then the entries it had (each once), and ``overrides`` set.

    With ``PYTHONPATH=/opt/jax``, ``child_env("/tmp/x")["PYTHONPATH"]`` is
    ``/tmp/x:<checkout>:/opt/jax``.
    """
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    had = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    paths = [str(p) for p in first] + [str(ROOT)] + had
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(overrides)
    return env
