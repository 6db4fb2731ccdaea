"""Which StableHLO ops XLA will fuse into one kernel, and the HBM bytes each kernel moves.

A compiled TPU step is a sequence of kernels (fusions, convolutions, copies, custom
calls); an element-wise op costs nothing of its own when it is fused: its
operands come from registers, not HBM. Stage 1 sees the program before XLA fuses
it, so it groups ops the way XLA's producer-consumer fusion does (openxla/xla
``xla/service/instruction_fusion.cc``: a producer is fused into its consumer
when every user of the producer is in that fusion; cheap producers such as
broadcasts are duplicated into each consumer instead of written out) and prices
each group like :mod:`aoizora.hlo.compute` prices a compiled fusion: the bytes of
its inputs read once plus the bytes of its outputs written once.

Op classes (:func:`op_class`):

* ``"elementwise"`` -- arithmetic, converts, selects, compares, broadcasts,
  reshapes, slices, concatenates: fused into their consumer;
* ``"transparent"`` -- broadcasts, iotas, constants, reshapes, converts and
  slices: also duplicated into every consumer rather than written out; a
  consumer reads what they read (a slice reads only what it returns);
* ``"root"`` -- ``reduce``, ``transpose``, ``pad``, ``gather``, ``scatter``,
  ``dynamic_update_slice``, ``sort``...: a kernel of its own that absorbs its
  element-wise producers; its result is written out (a transpose on TPU is a
  layout ``copy``, a pad a ``pad`` kernel: read once, written once);
* ``"matmul"`` -- ``dot_general`` and ``convolution``: a kernel that absorbs
  element-wise producers and, when it is the only user, the element-wise
  consumers of its result (TPU output fusion: bias, activation, residual);
  one matmul per kernel;
* ``"opaque"`` -- everything else (custom calls, collectives, loops, calls,
  ``shard_map``): never fused; its operands and results live in HBM.

>>> from aoizora.stage1.shardy import Block, Op
>>> ops = (Op("stablehlo.add", (0, 1), (2,)), Op("stablehlo.exponential", (2,), (3,)),
...        Op("stablehlo.transpose", (3,), (4,)), Op("func.return", (4,), ()))
>>> [(k.ops, k.hbm_bytes) for k in fuse_block(Block((0, 1), ops), bytes_of=lambda v: 100)]
[((0, 1, 2), 300)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aoizora.stage1.shardy import Block, Op

__all__ = ["Kernel", "fuse_block", "op_class"]

_TRANSPARENT = frozenset(
    {
        "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.iota",
        "stablehlo.constant", "sdy.constant", "arith.constant", "stablehlo.reshape",
        "stablehlo.convert", "stablehlo.bitcast_convert", "stablehlo.slice",
        "stablehlo.dynamic_slice", "sdy.all_slice",
    }
)  # fmt: skip
_SLICES = frozenset({"stablehlo.slice", "stablehlo.dynamic_slice", "sdy.all_slice"})
_ELEMENTWISE = frozenset(
    {
        "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex",
        "concatenate", "cosine", "divide", "exponential", "exponential_minus_one", "floor",
        "imag", "is_finite", "log", "log_plus_one", "logistic", "maximum", "minimum",
        "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce_precision",
        "remainder", "reverse", "round_nearest_afz", "round_nearest_even", "rsqrt",
        "select", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign",
        "sine", "sqrt", "subtract", "tan", "tanh", "xor", "count_leading_zeros",
    }
)  # fmt: skip
_ROOTS = frozenset(
    {
        "reduce", "reduce_window", "transpose", "pad", "gather", "scatter", "sort",
        "dynamic_update_slice", "select_and_scatter", "cholesky", "triangular_solve", "fft",
    }
)  # fmt: skip
_MATMULS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})


def op_class(name: str) -> str:
    """``"transparent"``, ``"elementwise"``, ``"root"``, ``"matmul"`` or ``"opaque"``.

    >>> [op_class(n) for n in ("stablehlo.broadcast_in_dim", "stablehlo.exponential",
    ...                        "stablehlo.reduce", "stablehlo.dot_general", "sdy.all_gather")]
    ['transparent', 'elementwise', 'root', 'matmul', 'opaque']
    """
    if name in _TRANSPARENT:
        return "transparent"
    if name in _MATMULS:
        return "matmul"
    short = name.removeprefix("stablehlo.").removeprefix("chlo.")
    if name.startswith(("stablehlo.", "chlo.")) and short in _ELEMENTWISE:
        return "elementwise"
    if name.startswith("stablehlo.") and short in _ROOTS:
        return "root"
    return "opaque"


@dataclass(frozen=True)
class Kernel:
    """One fused kernel: its ops (indices into the block, program order) and its HBM bytes.

    ``inputs`` are the values it reads from HBM (through duplicated transparent
    producers), ``outputs`` the values it writes; ``root`` is its last op, where
    it runs in program order.
    """

    ops: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    hbm_bytes: int

    @property
    def root(self) -> int:
        return self.ops[-1]


class _Groups:
    """Union-find over op indices, with the number of matmuls per group."""

    def __init__(self, n: int, matmul: Sequence[bool]) -> None:
        self.parent = list(range(n))
        self.matmuls = [int(m) for m in matmul]

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def merge(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if self.matmuls[ra] + self.matmuls[rb] > 1:
            return False
        self.parent[ra] = rb
        self.matmuls[rb] += self.matmuls[ra]
        return True


def _users(block: Block) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Value -> index of its defining op in ``block``; value -> indices of ops using it."""
    defs: dict[int, int] = {}
    users: dict[int, list[int]] = {}
    for i, op in enumerate(block.ops):
        for r in op.results:
            defs[r] = i
        for v in _operands_deep(op):
            users.setdefault(v, []).append(i)
    return defs, users


def _operands_deep(op: Op) -> list[int]:
    """Operands of ``op`` and of every op in its regions (what it reads from outside)."""
    out = list(op.operands)
    for region in op.regions:
        for inner in region.ops:
            out.extend(_operands_deep(inner))
    return out


def _group(block: Block, classes: Sequence[str], users: dict[int, list[int]],
           defs: dict[int, int]) -> _Groups:  # fmt: skip
    """Merge producers into consumers, last op first (XLA's post-order walk)."""
    g = _Groups(len(block.ops), [c == "matmul" for c in classes])
    for i in range(len(block.ops) - 1, -1, -1):
        kind = classes[i]
        if kind == "opaque":
            continue
        for v in block.ops[i].operands:
            j = defs.get(v)
            if j is None:
                continue
            producer = classes[j]
            uses = users.get(v, [])
            alone = all(g.find(u) == g.find(i) for u in uses)
            if producer in ("elementwise", "transparent") and alone:
                g.merge(j, i)
            elif producer == "matmul" and kind == "elementwise" and len(uses) == 1:
                g.merge(j, i)  # output fusion: bias, activation, residual
            elif producer == "root" and kind == "matmul" and len(uses) == 1:
                if block.ops[j].name == "stablehlo.transpose":
                    g.merge(j, i)  # the matmul reads the operand in any layout
    return g


def fuse_block(block: Block, *, bytes_of: Callable[[int], int]) -> list[Kernel]:
    """The kernels of ``block`` (nested regions are not entered), in program order.

    ``bytes_of(v)`` is value ``v``'s bytes per chip. A kernel costs its inputs
    once plus its outputs once; a ``dynamic_update_slice`` writes only its update
    (in place) and a slice reads only what it returns. Groups of transparent
    ops alone (a broadcast every consumer duplicates) are no kernel.
    """
    ops = block.ops
    classes = [op_class(op.name) for op in ops]
    defs, users = _users(block)
    g = _group(block, classes, users, defs)
    members: dict[int, list[int]] = {}
    for i, kind in enumerate(classes):
        if kind != "opaque":
            members.setdefault(g.find(i), []).append(i)
    read_cache: dict[tuple[int, int], int] = {}

    def read(v: int, group: int) -> int:
        """Bytes a kernel reads for value ``v``, looking through duplicated producers."""
        key = (v, group)
        if key not in read_cache:
            j = defs.get(v)
            if j is None or classes[j] != "transparent" or g.find(j) == group:
                read_cache[key] = bytes_of(v)
            else:
                op = ops[j]
                inner = sum(read(o, group) for o in op.operands[:1])
                if op.name in _SLICES:
                    inner = min(inner, bytes_of(v))
                read_cache[key] = inner
        return read_cache[key]

    kernels = []
    for root, idx in sorted(members.items(), key=lambda kv: kv[1][-1]):
        if all(classes[i] == "transparent" for i in idx):
            continue
        inside = set(idx)
        produced = {r for i in idx for r in ops[i].results}
        inputs = sorted({v for i in idx for v in ops[i].operands if v not in produced})
        outputs = sorted(
            r for i in idx for r in ops[i].results
            if any(u not in inside for u in users.get(r, []))
        )  # fmt: skip
        nbytes = sum(read(v, root) for v in inputs)
        for r in outputs:
            op = ops[defs[r]]
            if op.name == "stablehlo.dynamic_update_slice" and len(op.operands) > 1:
                nbytes += bytes_of(op.operands[1])
                nbytes -= read(op.operands[0], root) if op.operands[0] in inputs else 0
            else:
                nbytes += bytes_of(r)
        kernels.append(Kernel(tuple(idx), tuple(inputs), tuple(outputs), max(0, nbytes)))
    return kernels
