"""HLO shapes: element types, dimensions, tuples and their sizes in bytes.

Compiled HLO prints a shape as ``f32[32,64]{1,0:T(8,128)S(1)}`` (element type,
logical dimensions, then an optional layout with tiling ``T(...)`` and memory
space ``S(n)``), a tuple as ``(f32[2], /*index=1*/u32[])`` and a token as
``token[]``. The layout says how the array sits in memory; the payload a
collective moves is the logical array, so sizes here are
``prod(dims) * bits(element type) / 8`` (rounded up for sub-byte types), never
the padded tile footprint.

What an array *occupies* is its tiled footprint (:attr:`Shape.stored_bytes`): the
layout ``{minor_to_major:T(a,b)}`` tiles the most minor dimensions by its first tile,
each padded up to a multiple of it (openxla.org/xla/tiled_layout, "Tiled layout"):
``f32[6,60,104,96]{3,2,1,0:T(8,128)}`` stores 96 channels in 128 lanes, 4/3 of its
payload. Kernels that stream an array from HBM move its footprint, so the compute model
prices those bytes (:func:`aoizora.hlo.compute.hbm_size_bytes`).

The memory space ``S(n)`` is kept (:attr:`Shape.memory_space`) because it says where
an array lives, which decides what reading it costs: on TPU, space 1 is the core's
on-chip vector memory (VMEM), not HBM (XLA's TPU memory-space assignment prints it;
docs/simulator.md, "On-chip memory"). It does not change what the array *is*, so
two shapes that differ only in it compare equal.

Element widths follow ``xla/xla_data.proto`` (``PrimitiveType``) and
``primitive_util::BitWidth``.

Example:
    >>> shape, end = parse_shape("(f32[32,64]{1,0:T(8,128)S(1)}, u32[]{:S(2)}) x", 0)
    >>> shape.size_bytes, shape.tuple_shapes[0].dims, end
    (8196, (32, 64), 44)
    >>> shape.stored_bytes  # 64 columns in 128 lanes
    16388
    >>> shape.tuple_shapes[0].memory_space, parse_shape("f32[2]{0}", 0)[0].memory_space
    (1, 0)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["ELEMENT_BITS", "Shape", "ShapeSyntaxError", "parse_shape"]

# Bits per element (xla_data.proto PrimitiveType; primitive_util::BitWidth).
ELEMENT_BITS: dict[str, int] = {
    "pred": 8,
    "s1": 1,
    "s2": 2,
    "s4": 4,
    "s8": 8,
    "s16": 16,
    "s32": 32,
    "s64": 64,
    "u1": 1,
    "u2": 2,
    "u4": 4,
    "u8": 8,
    "u16": 16,
    "u32": 32,
    "u64": 64,
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "c64": 64,
    "c128": 128,
    "f4e2m1fn": 4,
    "f8e3m4": 8,
    "f8e4m3": 8,
    "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8,
    "f8e4m3fnuz": 8,
    "f8e5m2": 8,
    "f8e5m2fnuz": 8,
    "f8e8m0fnu": 8,
    "token": 0,
    "opaque": 0,
}

# ``f32[32,<=64,?]`` followed by an optional ``{layout}`` (layouts never nest braces).
_ARRAY_RE = re.compile(r"\s*([a-z][a-z0-9]*)\[([^\]]*)\](\{[^{}]*\})?")
# The memory space inside a layout: ``{1,0:T(8,128)S(1)}``.
_MEMORY_SPACE_RE = re.compile(r"S\((\d+)\)")
# The minor-to-major order and the first tile: ``{4,3,2,1,0:T(8,128)(2,1)}``.
_LAYOUT_RE = re.compile(r"^\{([\d,]*)(?::T\(([\d,]+)\))?")
_COMMENT_RE = re.compile(r"\s*(?:/\*.*?\*/\s*)?")


class ShapeSyntaxError(ValueError):
    """A shape could not be read; the text parser turns it into an HloParseError."""


@dataclass(frozen=True)
class Shape:
    """An array shape (``element_type`` and ``dims``) or a tuple of shapes.

    ``element_type`` is ``"tuple"`` for tuples; then ``tuple_shapes`` holds the
    elements and ``dims`` is empty.
    """

    element_type: str
    dims: tuple[int, ...] = ()
    tuple_shapes: tuple[Shape, ...] = ()
    # The layout's memory space S(n) (0: the default, HBM on TPU; 1: VMEM).
    memory_space: int = field(default=0, compare=False)
    # Elements the layout's first tile pads the array to (0: no tiling printed).
    stored_elements: int = field(default=0, compare=False)
    # (dimension, tile size) of each dimension the first tile pads, the most minor first
    # (empty: no tiling printed): what a read of part of the array fetches whole
    tiling: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def num_elements(self) -> int:
        """Elements of an array shape (1 for a scalar); summed over a tuple."""
        if self.is_tuple:
            return sum(s.num_elements for s in self.tuple_shapes)
        return math.prod(self.dims)

    @property
    def size_bytes(self) -> int:
        """Logical payload bytes (sum over tuple elements; tokens are 0)."""
        if self.is_tuple:
            return sum(s.size_bytes for s in self.tuple_shapes)
        return (math.prod(self.dims) * ELEMENT_BITS[self.element_type] + 7) // 8

    @property
    def stored_bytes(self) -> int:
        """Bytes the array occupies under its tiled layout (the module docstring); its
        payload when no tiling is printed. Summed over a tuple."""
        if self.is_tuple:
            return sum(s.stored_bytes for s in self.tuple_shapes)
        if not self.stored_elements:
            return self.size_bytes
        return (self.stored_elements * ELEMENT_BITS[self.element_type] + 7) // 8

    @property
    def tile_rows(self) -> int:
        """Rows of the layout's tile: its size along the second-most-minor tiled dimension
        (8 for ``T(8,128)``, 2 for ``T(2,128)``; 0 without a 2D tile).

        >>> parse_shape("bf16[4,2,384]{2,1,0:T(2,128)(2,1)}", 0)[0].tile_rows
        2
        """
        return self.tiling[1][1] if len(self.tiling) > 1 else 0

    def leaves(self) -> tuple[Shape, ...]:
        """The array shapes of a (nested) tuple in order; ``(self,)`` for an array."""
        if not self.is_tuple:
            return (self,)
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return tuple(out)

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        return f"{self.element_type}[{','.join(str(d) for d in self.dims)}]"


def _parse_dims(text: str) -> tuple[int, ...]:
    if not text.strip():
        return ()
    dims: list[int] = []
    for part in text.split(","):
        token = part.strip().removeprefix("<=")
        if token == "?":
            # An unbounded dynamic dimension has no static size; count it as 0.
            dims.append(0)
            continue
        if not token.isdigit():
            raise ShapeSyntaxError(f"dimension {part.strip()!r} is not a non-negative integer")
        dims.append(int(token))
    return tuple(dims)


def parse_shape(text: str, pos: int) -> tuple[Shape, int]:
    """Parse one shape starting at ``text[pos]`` (leading blanks allowed).

    Returns the shape and the index just after it (after its layout).
    Raises :class:`ShapeSyntaxError` when no shape starts there.
    """
    m = _COMMENT_RE.match(text, pos)
    if m is not None:
        pos = m.end()
    if pos < len(text) and text[pos] == "(":
        elements: list[Shape] = []
        pos += 1
        while True:
            m = _COMMENT_RE.match(text, pos)
            if m is not None:
                pos = m.end()
            if pos < len(text) and text[pos] == ")":
                return Shape("tuple", (), tuple(elements)), pos + 1
            element, pos = parse_shape(text, pos)
            elements.append(element)
            m = _COMMENT_RE.match(text, pos)
            if m is not None:
                pos = m.end()
            if pos < len(text) and text[pos] == ",":
                pos += 1
            elif pos >= len(text) or text[pos] != ")":
                raise ShapeSyntaxError(
                    f"expected ',' or ')' in a tuple shape, found {text[pos : pos + 20]!r}"
                )
    m = _ARRAY_RE.match(text, pos)
    if m is None:
        raise ShapeSyntaxError(
            f"expected a shape such as f32[8,128] or (f32[2], u32[]), "
            f"found {text[pos : pos + 30].strip()!r}"
        )
    element_type = m.group(1)
    if element_type not in ELEMENT_BITS:
        raise ShapeSyntaxError(
            f"unknown element type {element_type!r} (known: {', '.join(sorted(ELEMENT_BITS))})"
        )
    layout = m.group(3) or ""
    space = _MEMORY_SPACE_RE.search(layout) if ":" in layout else None
    memory_space = int(space.group(1)) if space is not None else 0
    dims = _parse_dims(m.group(2))
    tiling = _tiling(dims, layout)
    stored = _tiled_elements(dims, tiling) if tiling else 0
    shape = Shape(
        element_type, dims, memory_space=memory_space, stored_elements=stored, tiling=tiling
    )
    return shape, m.end()


def _tiling(dims: tuple[int, ...], layout: str) -> tuple[tuple[int, int], ...]:
    """``(dimension, tile size)`` of each dimension the layout's first tile pads, the most
    minor first; empty without a tile. The tile's last size pads the most minor dimension,
    the one before it the next, and so on.

    >>> _tiling((6, 60, 104, 96), "{3,2,1,0:T(8,128)(2,1)}")
    ((3, 128), (2, 8))
    >>> _tiling((96, 104), "{0,1:T(8,128)}"), _tiling((5,), "{0}")
    (((0, 128), (1, 8)), ())
    """
    m = _LAYOUT_RE.match(layout)
    if m is None or m.group(2) is None or not m.group(1):
        return ()
    order = [int(d) for d in m.group(1).split(",")]
    tile = [int(t) for t in m.group(2).split(",")]
    if sorted(order) != list(range(len(dims))) or len(tile) > len(dims):
        return ()
    return tuple((order[i], size) for i, size in enumerate(reversed(tile)))


def _tiled_elements(dims: tuple[int, ...], tiling: tuple[tuple[int, int], ...]) -> int:
    """Elements of ``dims`` with each tiled dimension padded up to its tile.

    >>> _tiled_elements((6, 60, 104, 96), ((3, 128), (2, 8)))  # 104 rows, 96 lanes
    4792320
    >>> _tiled_elements((96, 104), ((0, 128), (1, 8))), _tiled_elements((5,), ((0, 256),))
    (13312, 256)
    """
    padded = list(dims)
    for d, size in tiling:
        padded[d] = -(-dims[d] // size) * size
    return math.prod(padded)
