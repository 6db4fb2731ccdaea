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
  slices: element-wise too, and a consumer that reads through one reads only its
  first operand (a slice only what it returns);

A value several kernels read is written once and read by each, except the
output of transparent ops, which every consumer recomputes.
* ``"root"`` -- ``reduce``, ``transpose``, ``pad``, ``gather``, ``scatter``,
  ``dynamic_update_slice``, ``sort``...: a kernel of its own that absorbs its
  element-wise producers; its result is written out (a transpose on TPU is a
  layout ``copy``, a pad a ``pad`` kernel: read once, written once);
* ``"matmul"`` -- ``dot_general`` and ``convolution``: a kernel that absorbs
  element-wise producers and, when it is the only user, the element-wise
  consumers of its result (TPU output fusion: bias, activation, residual), and a
  reduction of its result (multi-output fusion); one matmul per kernel;
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

__all__ = ["Kernel", "fuse_block", "fused_away", "op_class"]

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
        # An element-wise op read by several kernels is recomputed in each; it takes
        # no matmul along (the matmul writes its own, narrower result once).
        shared = len({g.find(u) for r in block.ops[i].results for u in users.get(r, [])}) > 1
        for v in block.ops[i].operands:
            j = defs.get(v)
            if j is None:
                continue
            producer = classes[j]
            uses = users.get(v, [])
            alone = all(g.find(u) == g.find(i) for u in uses)
            if shared and g.matmuls[g.find(j)]:
                continue
            if producer in ("elementwise", "transparent") and alone:
                g.merge(j, i)
            elif producer == "matmul" and kind == "elementwise" and len(uses) == 1:
                g.merge(j, i)  # output fusion: bias, activation, residual
            elif producer == "root" and kind == "matmul" and len(uses) == 1:
                if block.ops[j].name == "stablehlo.transpose":
                    g.merge(j, i)  # the matmul reads the operand in any layout
    return g


class _Fusion:
    """The groups of one block, which of them are duplicated, and what each reads."""

    def __init__(self, block: Block, bytes_of: Callable[[int], int]) -> None:
        self.ops = block.ops
        self.bytes_of = bytes_of
        self.classes = [op_class(op.name) for op in block.ops]
        self.defs, self.users = _users(block)
        self.g = _group(block, self.classes, self.users, self.defs)
        self._members()
        self.duplicated = {r for r, idx in self.members.items() if self._duplicable(idx)}
        self._read: dict[tuple[int, int], int] = {}
        self._multi_output()

    def _members(self) -> None:
        self.members: dict[int, list[int]] = {}
        for i, kind in enumerate(self.classes):
            if kind != "opaque":
                self.members.setdefault(self.g.find(i), []).append(i)

    def _duplicable(self, idx: Sequence[int]) -> bool:
        """Broadcasts, converts, reshapes and slices: XLA fuses them into each consumer
        (or makes them bitcasts) instead of writing them to HBM. Wider element-wise
        work with several consumers is written once: duplicating it into each
        consumer overshot the compiled programs' HBM traffic on Wan (docs/stage1.md)."""
        return all(self.classes[i] == "transparent" for i in idx)

    def read(self, v: int, group: int) -> int:
        """Bytes a kernel reads for value ``v``, looking through duplicated producers."""
        key = (v, group)
        if key not in self._read:
            j = self.defs.get(v)
            if j is not None and self.g.find(j) == group:
                self._read[key] = 0  # made by this kernel (reached through a duplicate)
            elif j is None or self.g.find(j) not in self.duplicated:
                self._read[key] = self.bytes_of(v)
            else:
                op = self.ops[j]
                # A duplicated op reads what it reads; a slice only what it returns.
                sources = op.operands[:1] if op.name in _TRANSPARENT else op.operands
                inner = sum(self.read(o, group) for o in sources)
                self._read[key] = min(inner, self.bytes_of(v)) if op.name in _SLICES else inner
        return self._read[key]

    def _sources(self, v: int) -> set[int]:
        """The values a read of ``v`` ends at, through duplicated producers."""
        j = self.defs.get(v)
        if j is None or self.g.find(j) not in self.duplicated:
            return {v}
        return {s for o in self.ops[j].operands for s in self._sources(o)}

    def _multi_output(self) -> None:
        """A reduction of a matmul's result joins the matmul's kernel (XLA's multi-output
        fusion: the row maxima of attention logits are taken as the logits are made)."""
        for root, idx in list(self.members.items()):
            if not any(self.ops[i].name == "stablehlo.reduce" for i in idx):
                continue
            if any(self.classes[i] == "matmul" for i in idx):
                continue
            inside = set(idx)
            for i in idx:
                for v in self.ops[i].operands:
                    for src in self._sources(v):
                        j = self.defs.get(src)
                        if j is not None and j not in inside and self.g.matmuls[self.g.find(j)]:
                            self.g.merge(root, j)
        self._members()

    def _input_bytes(self, v: int, group: int, inside: set[int]) -> int:
        """What a kernel reads of an input: only the slices it takes, if it only slices."""
        readers = [u for u in self.users.get(v, []) if u in inside]
        if readers and all(
            self.ops[u].name in _SLICES and self.ops[u].operands[0] == v for u in readers
        ):
            taken = sum(self.bytes_of(self.ops[u].results[0]) for u in readers)
            return min(taken, self.read(v, group))
        return self.read(v, group)

    def kernels(self) -> list[Kernel]:
        out = []
        for root, idx in sorted(self.members.items(), key=lambda kv: kv[1][-1]):
            if root in self.duplicated:
                continue
            inside = set(idx)
            ops = self.ops
            produced = {r for i in idx for r in ops[i].results}
            inputs = sorted({v for i in idx for v in ops[i].operands if v not in produced})
            outputs = sorted(
                r for i in idx for r in ops[i].results
                if any(u not in inside for u in self.users.get(r, []))
            )  # fmt: skip
            nbytes = sum(self._input_bytes(v, root, inside) for v in inputs)
            for r in outputs:
                op = ops[self.defs[r]]
                if op.name == "stablehlo.dynamic_update_slice" and len(op.operands) > 1:
                    nbytes += self.bytes_of(op.operands[1])
                    if op.operands[0] in inputs:
                        nbytes -= self.read(op.operands[0], root)
                else:
                    nbytes += self.bytes_of(r)
            out.append(Kernel(tuple(idx), tuple(inputs), tuple(outputs), max(0, nbytes)))
        return out


def fuse_block(block: Block, *, bytes_of: Callable[[int], int]) -> list[Kernel]:
    """The kernels of ``block`` (nested regions are not entered), in program order.

    ``bytes_of(v)`` is value ``v``'s bytes per chip. A kernel costs its inputs
    once plus its outputs once; a ``dynamic_update_slice`` writes only its update
    (in place) and a slice reads only what it returns. Transparent ops whose
    consumers are all kernels are duplicated into them and are no kernel.
    """
    return _Fusion(block, bytes_of).kernels()


def fused_away(block: Block, *, bytes_of: Callable[[int], int]) -> frozenset[int]:
    """The values of ``block`` no kernel writes to HBM: results of ops that live and die
    inside one fused kernel, and of transparent ops every consumer recomputes. They take
    no buffer of their own (:mod:`aoizora.stage1.memory`).

    >>> from aoizora.stage1.shardy import Block, Op
    >>> ops = (Op("stablehlo.add", (0, 1), (2,)), Op("stablehlo.exponential", (2,), (3,)),
    ...        Op("stablehlo.transpose", (3,), (4,)), Op("func.return", (4,), ()))
    >>> sorted(fused_away(Block((0, 1), ops), bytes_of=lambda v: 100))  # one kernel writes 4
    [2, 3]
    """
    fusion = _Fusion(block, bytes_of)
    written = {r for k in fusion.kernels() for r in k.outputs}
    return frozenset(
        r
        for i, op in enumerate(block.ops)
        if fusion.classes[i] != "opaque"
        for r in op.results
        if r not in written
    )
