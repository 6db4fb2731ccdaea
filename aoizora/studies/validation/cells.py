"""Reading one cell of a measurement file: numbers, integer lists, errors naming the line.

Shared by the file's row parser (:mod:`.format`) and its step columns
(:mod:`.format_step`); every error is a :class:`~aoizora.errors.ValidationError`
that starts with ``FILE:LINE:``.

>>> parse_float("6.8e-04", column="measured_s", name="m.csv", line=3, positive=True)
0.00068
>>> parse_float("-1", column="spread_s", name="m.csv", line=3, positive=False)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
aoizora.errors.ValidationError: m.csv:3: spread_s='-1' must be a non-negative finite number, ...
"""

from __future__ import annotations

import math

from aoizora.errors import ValidationError

__all__ = ["cell_error", "parse_float", "parse_ints"]


def cell_error(name: str, line: int, message: str) -> ValidationError:
    """An error about line ``line`` of file ``name``."""
    return ValidationError(f"{name}:{line}: {message}")


def parse_float(text: str, *, column: str, name: str, line: int, positive: bool) -> float:
    """A finite number (positive, or non-negative), else an error with an example."""
    try:
        value = float(text)
    except ValueError:
        raise cell_error(
            name, line, f"{column}={text!r} is not a number; write seconds, e.g. 6.8e-04"
        ) from None
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        rule = "a positive" if positive else "a non-negative"
        raise cell_error(
            name, line, f"{column}={text!r} must be {rule} finite number, e.g. 6.8e-04"
        )
    return value


def parse_ints(text: str, *, column: str, name: str, line: int) -> tuple[int, ...]:
    """Integers separated by spaces."""
    try:
        return tuple(int(t) for t in text.split())
    except ValueError:
        raise cell_error(
            name,
            line,
            f"{column}={text!r} must be integers separated by spaces, e.g. '0 1 3 2'",
        ) from None
