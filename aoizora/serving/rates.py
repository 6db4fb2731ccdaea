"""Request rates as people write them: ``2/min``, ``0.5/s``, ``30/h``.

>>> parse_rate("2/min"), parse_rate("0.5/s"), parse_rate("30/h")
(0.03333333333333333, 0.5, 0.008333333333333333)
>>> format_rate(parse_rate("2/min"))
'2/min'
>>> parse_rate("2 per minute")
Traceback (most recent call last):
...
aoizora.errors.ServingError: --rate '2 per minute' is not COUNT/UNIT; ...
"""

from __future__ import annotations

import math
import re

from aoizora.errors import ServingError

__all__ = ["UNITS_S", "format_rate", "parse_rate"]

# Seconds per unit a rate may be written in.
UNITS_S: dict[str, float] = {
    "s": 1.0, "sec": 1.0, "second": 1.0,
    "min": 60.0, "minute": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
}  # fmt: skip
_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*/\s*([A-Za-z]+)\s*$")


def parse_rate(text: str) -> float:
    """Requests per second from ``COUNT/UNIT`` (units: s, min, h and their long forms)."""
    m = _RATE_RE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in UNITS_S:
        raise ServingError(
            f"--rate {text!r} is not COUNT/UNIT; write a positive number of requests per "
            f"s, min or h, e.g. 2/min, 0.5/s or 30/h"
        )
    count = float(m.group(1))
    if not math.isfinite(count) or count <= 0:
        raise ServingError(f"--rate {text!r}: the count must be positive, e.g. 2/min")
    return count / UNITS_S[unit]


def format_rate(per_s: float) -> str:
    """A rate in the largest unit that shows it as a count of at least one."""
    for unit, scale in (("s", 1.0), ("min", 60.0), ("h", 3600.0)):
        if per_s * scale >= 1:
            return f"{per_s * scale:.4g}/{unit}"
    return f"{per_s * 3600:.3g}/h"
