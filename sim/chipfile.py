"""Reading one number of a chip file (``topologies/<generation>.toml``), checked.

:mod:`sim.chips` parses the file; this module holds the checks of its values, so
a file someone edited by hand -- or a fuzzer mutated -- is refused with the file, the
line and what is allowed, never with a Python exception: a number of the wrong type,
NaN or infinite, a count below 1 or absurdly large (a loop over a pod of 10^30 chips
would never end).

>>> key_lines('a = 1\\n# b = 2\\n[t]\\nb = { value = 3, source = "x" }\\n')
{'a': 1, 'b': 4}
>>> check_value("ports", 0, "v5e.toml:9")
Traceback (most recent call last):
...
sim.errors.TopologyError: v5e.toml:9: 'ports.value' must be a whole number from 1 to 1048576, got 0
"""

from __future__ import annotations

import math
import re
from typing import Any

from sim.errors import TopologyError

__all__ = ["MAX_CHIPS", "MAX_COUNT", "check_value", "is_count", "key_lines"]

# Keys whose value is a whole count (at least 1) or a shape (a list of them); every other
# number is a finite real. The cap keeps a typo (1e30 chips) from a loop over the pod.
_COUNTS = ("ports", "num_dims", "devices_per_chip")
_SHAPES = ("pod_shape",)
MAX_COUNT = 2**20
# The most chips a slice may have (a 256x256 mesh builds in under a second; the largest
# TPU pods have about 9,000 chips): a shape beyond it is a typo, not a slice to build.
MAX_CHIPS = 2**16


def key_lines(text: str) -> dict[str, int]:
    """The line each top-level key of a topology file is set on (for error messages)."""
    found: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=", line)
        if m and not line.lstrip().startswith("#"):
            found.setdefault(m.group(1), number)
    return found


def is_count(value: Any) -> bool:
    """A whole number from 1 to :data:`MAX_COUNT` (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_COUNT


def check_value(key: str, value: Any, where: str) -> None:
    """Raise :class:`TopologyError` (naming ``where``, a file or ``file:line``) unless
    ``value`` fits ``key``'s kind: a count, a shape (a list of counts, at most
    :data:`MAX_CHIPS` chips in all), else a finite number."""
    if key in _SHAPES:
        if (
            not isinstance(value, list)
            or not value
            or not all(is_count(n) for n in value)
            or math.prod(value) > MAX_CHIPS
        ):
            raise TopologyError(
                f"{where}: '{key}.value' must be a list of whole numbers from 1 to "
                f"{MAX_COUNT} with at most {MAX_CHIPS} chips in all, e.g. [16, 16]; got {value!r}"
            )
    elif key in _COUNTS:
        if not is_count(value):
            raise TopologyError(
                f"{where}: '{key}.value' must be a whole number from 1 to {MAX_COUNT}, "
                f"got {value!r}"
            )
    elif (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(float(value))
    ):
        raise TopologyError(f"{where}: '{key}.value' must be a finite number, got {value!r}")
