"""Chip coordinates: the one rule every entry point of :mod:`sim` applies.

A coordinate is a sequence of integers, one per slice dimension, each in
``0 <= c < n``. Integers are Python ``int`` or numpy integers; ``bool`` is not
an integer here (``True`` would silently mean chip 1), and neither is a float,
even an integral one (``0.0``): a float coordinate is almost always a unit or
indexing mistake upstream. Accepted coordinates come back as tuples of plain
``int``, so every cache keyed by them (routes, link ids) only ever sees
canonical keys -- ``(0.0, 0) == (0, 0)`` in Python, and a cache lookup before
the check would let the float through.

>>> import numpy as np
>>> as_coord([np.int64(1), 2], shape=(2, 4), slice_name="v5e:2x4", role="source")
(1, 2)
>>> as_coord((0.0, 0), shape=(2, 4), slice_name="v5e:2x4", role="source")
Traceback (most recent call last):
...
sim.errors.RoutingError: source coordinate (0.0, 0) is not a chip of slice v5e:2x4 of shape \
(2, 4): every entry must be an int (not a float or bool) with 0 <= c < n, e.g. (1, 3)
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Iterable, Sequence
from itertools import chain

from sim.errors import RoutingError, SimError

__all__ = ["Coord", "all_plain", "as_coord", "is_index", "on_shape"]

Coord = tuple[int, ...]


def is_index(value: object) -> bool:
    """True for a Python or numpy integer that is not a bool."""
    if type(value) is int:
        return True
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        return False
    # numpy's bool_ is not numbers.Integral today; exclude it explicitly anyway.
    # Only a process that imported numpy can hold one, so numpy is not imported
    # here (`python -m sim flows` starts faster without it).
    numpy = sys.modules.get("numpy")
    return numpy is None or not isinstance(value, numpy.bool_)


def on_shape(coord: Sequence[object], shape: Sequence[int]) -> bool:
    """True when ``coord`` is an integer coordinate inside ``shape``."""
    return len(coord) == len(shape) and all(
        is_index(c) and 0 <= c < n  # type: ignore[operator]
        for c, n in zip(coord, shape, strict=True)
    )


def as_coord(
    value: object,
    *,
    shape: Sequence[int],
    slice_name: str,
    role: str,
    error: type[SimError] = RoutingError,
) -> Coord:
    """``value`` as a tuple of ints on a slice of ``shape``, or ``error`` saying why not."""
    if type(value) is tuple and len(value) == len(shape):
        # Fast path: a tuple of plain ints in range (the common case).
        ok = True
        for c, n in zip(value, shape, strict=True):
            if type(c) is not int or not 0 <= c < n:
                ok = False
                break
        if ok:
            return value
    example = tuple(n - 1 for n in shape)
    entries = tuple(value) if isinstance(value, Iterable) and not isinstance(value, str) else None
    if entries is None or not on_shape(entries, shape):
        raise error(
            f"{role} coordinate {value if entries is None else entries!r} is not a chip of "
            f"slice {slice_name} of shape {tuple(shape)}: every entry must be an int (not a "
            f"float or bool) with 0 <= c < n, e.g. {example!r}"
        )
    return tuple(int(c) for c in entries)


def all_plain(coords: Sequence[Sequence[int]], shape: Sequence[int], container: type) -> bool:
    """True when every one of ``coords`` is a ``container`` (list or tuple) of plain
    ``int`` on ``shape`` -- :func:`as_coord`'s fast path for a whole list at once.

    Sets of types and per-dimension minima and maxima: C loops, no Python call
    per coordinate (for the 20,000 endpoints of a 10,000-flow file). False
    says only that some coordinate needs the one-by-one checks.

    >>> all_plain([(0, 1), (1, 3)], (2, 4), tuple), all_plain([(0, 4)], (2, 4), tuple)
    (True, False)
    """
    nd = len(shape)
    if not set(map(type, coords)) <= {container} or not set(map(len, coords)) <= {nd}:
        return False
    flat = list(chain.from_iterable(coords))
    if not flat:
        return True
    if not set(map(type, flat)) <= {int}:
        return False
    return all(min(flat[d::nd]) >= 0 and max(flat[d::nd]) < n for d, n in enumerate(shape))
