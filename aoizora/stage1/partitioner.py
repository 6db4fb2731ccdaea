"""Where XLA's SPMD partitioner departs from Shardy's explicit reshards, rewritten to match it.

The TPU compile runs Shardy's *propagation*, then XLA's own SPMD partitioner
(GSPMD), not Shardy's partitioner passes. Stage 1 reads Shardy's
``sdy-insert-explicit-reshards`` and ``sdy-reshard-to-collectives``
(:data:`aoizora.stage1.shardy.PIPELINE`) because they say, op by op, which
collectives a sharding needs; this module rewrites the one pattern where the two
partitioners measurably disagree on the Wan step (``docs/stage1.md``):

* **a dot whose operands disagree about an axis on the contracting dimension.**
  Shardy moves that axis onto the contracting dimension of one operand
  (``sdy.all_slice`` of a replicated dimension, or ``sdy.all_to_all`` from a
  batch dimension), computes partial sums and all-reduces them (then slices the
  result back). XLA's dot handler keeps the result sharding that propagation
  chose and reshards an operand to match it (openxla/xla
  ``xla/service/spmd/dot_handler.cc``): where the axis shards a batch dimension
  of the result (Shardy's all-to-all), it all-gathers the other operand -- the
  weight -- over that axis, FSDP's weight all-gather; where one operand holds the
  contracting dimension whole (Shardy's all-slice), it all-gathers the other one
  when that moves no more bytes than the all-reduce would, and keeps the partial
  sums otherwise. Under the ``fsdp`` and ``maxdiffusion`` rules with ``tensor`` >
  1 this turns the 100--200 MB all-reduce after Wan's attention output
  projection into a 5 MB weight all-gather. All three cases are checked against
  the compiled HLO in ``tests/aoizora/stage1/test_dag.py``.

* **an all-gather that the next op slices back** (a sharding constraint that
  replicates a value its user wants sharded again): XLA's simplifier removes the
  pair, unless the gathered value comes straight from a reshape or transpose --
  XLA then gathers the reshape's input, and the slice after the reshape no longer
  meets the gather (Wan's heads merge keeps both, checked on wan-tiny). Shardy's
  partitioner keeps every pair; its own canonicalizer would cancel every pair,
  so :data:`PIPELINE` does not run it.

:func:`as_xla_partitions` returns a new :class:`~aoizora.stage1.shardy.ShardyModule`;
the input is not changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from aoizora.stage1.shardy import AxisRef, Block, Function, Op, Sharding, ShardyModule, TensorType

__all__ = ["as_xla_partitions"]


@dataclass
class _Values:
    """Appendable copies of a module's value tables."""

    types: list[TensorType]
    shardings: list[Sharding | None]
    defs: list[int]

    def new(self, t: TensorType, s: Sharding | None) -> int:
        self.types.append(t)
        self.shardings.append(s)
        self.defs.append(-1)
        return len(self.types) - 1


def _sharding(m: ShardyModule, values: _Values, v: int) -> Sharding:
    s = values.shardings[v]
    rank = len(values.types[v].shape)
    return s if s is not None and len(s.dims) == rank else Sharding.replicated(rank)


def _rewrite_block(block: Block, m: ShardyModule, values: _Values) -> Block:
    ops = [
        replace(op, regions=tuple(_rewrite_block(r, m, values) for r in op.regions))
        if op.regions
        else op
        for op in block.ops
    ]
    defs = {r: i for i, op in enumerate(ops) for r in op.results}
    users: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            users.setdefault(v, []).append(i)
    plans = {}
    for i, op in enumerate(ops):
        plan = _gather_instead(i, ops, defs, users, m, values) if _is_dot(op) else None
        if plan is not None:
            plans[i] = plan
    drop = {j for resharded, _, _, tail in plans.values() for j in (resharded, *tail)}
    forward = _cancelled_pairs(ops, defs, users, drop)
    out: list[Op] = []
    for i, op in enumerate(ops):
        if i in drop:
            continue
        if forward and any(v in forward for v in op.operands):
            op = replace(op, operands=tuple(forward.get(v, v) for v in op.operands))
        if i not in plans:
            out.append(op)
            continue
        resharded, other, axes, tail = plans[i]
        w = op.operands[other]
        gathered_sharding = _without(_sharding(m, values, w), axes)
        g = values.new(values.types[w], gathered_sharding)
        gather = Op(
            name="sdy.all_gather",
            operands=(w,),
            results=(g,),
            target_sharding=gathered_sharding,
            collective_axes=tuple(axes),
            location=f"{op.location} (XLA gathers the other dot operand)",
        )
        operands = [g if k == other else ops[resharded].operands[0] for k in (0, 1)]
        # The dot now yields what the all-reduce (and the slice after it) yielded.
        final = ops[tail[-1]].results[0]
        out.extend([gather, replace(op, operands=tuple(operands), results=(final,))])
        drop.update(tail)
    return Block(args=block.args, ops=tuple(out))


_RESHAPES = frozenset({"stablehlo.reshape", "stablehlo.transpose"})


def _cancelled_pairs(
    ops: Sequence[Op], defs: dict[int, int], users: dict[int, list[int]], drop: set[int]
) -> dict[int, int]:
    """An all-gather whose only user slices the same axes back: XLA drops both.

    (Its all-gather / dynamic-slice simplification; Shardy's partitioner emits the
    pair where a sharding constraint replicates a value that the next op slices.)
    Marks both ops in ``drop``; returns slice result -> the all-gather's operand.
    """
    forward: dict[int, int] = {}
    for i, op in enumerate(ops):
        if op.name != "sdy.all_slice" or i in drop:
            continue
        j = defs.get(op.operands[0])
        if j is None or j in drop or ops[j].name != "sdy.all_gather":
            continue
        gather = ops[j]
        if len(users.get(gather.results[0], [])) != 1:
            continue
        k = defs.get(gather.operands[0])
        if k is not None and ops[k].name in _RESHAPES:
            # XLA gathers the reshape's (or transpose's) input instead, and the slice
            # after the reshape no longer meets the gather: both stay (Wan's heads merge).
            continue
        if sorted(op.collective_axes) != sorted(gather.collective_axes):
            continue
        forward[op.results[0]] = gather.operands[0]
        drop.update((i, j))
    return forward


def _is_dot(op: Op) -> bool:
    return op.name == "stablehlo.dot_general" and len(op.operands) == 2


def _without(s: Sharding, axes: Sequence[AxisRef]) -> Sharding:
    names = {a.name for a in axes}
    return Sharding(tuple(tuple(a for a in d if a.name not in names) for d in s.dims))


def _sole_user(v: int, name: str, ops: Sequence[Op], users: dict[int, list[int]]) -> int | None:
    found = users.get(v, [])
    return found[0] if len(found) == 1 and ops[found[0]].name == name else None


def _gather_instead(
    i: int,
    ops: Sequence[Op],
    defs: dict[int, int],
    users: dict[int, list[int]],
    m: ShardyModule,
    values: _Values,
) -> tuple[int, int, list[AxisRef], list[int]] | None:
    """Where XLA gathers the other dot operand instead: (the resharding op, the operand
    to gather, the axes, the all-reduce and optional all-slice the dot no longer needs)."""
    op = ops[i]
    reduce_index = _sole_user(op.results[0], "sdy.all_reduce", ops, users)
    if reduce_index is None:
        return None
    reduced = {a.name for a in ops[reduce_index].collective_axes}
    tail = [reduce_index]
    after = _sole_user(ops[reduce_index].results[0], "sdy.all_slice", ops, users)
    if after is not None and {a.name for a in ops[after].collective_axes} == reduced:
        tail.append(after)
    for k in (0, 1):
        j = defs.get(op.operands[k])
        if j is None or ops[j].name not in ("sdy.all_slice", "sdy.all_to_all"):
            continue
        moved = [a for a in ops[j].collective_axes if a.name in reduced]
        other = op.operands[1 - k]
        w = _sharding(m, values, other)
        has = {a.name for d in w.dims for a in d}
        if {a.name for a in moved} != reduced or not reduced <= has:
            continue
        if len(users[op.operands[k]]) != 1:
            continue
        if ops[j].name == "sdy.all_slice":
            # A choice: gather the weight or all-reduce the result, the fewer bytes.
            gathered = values.types[other].shard_bytes(_without(w, moved))
            out = op.results[0]
            if gathered > values.types[out].shard_bytes(_sharding(m, values, out)):
                continue
        return j, 1 - k, moved, tail
    return None


def as_xla_partitions(module: ShardyModule) -> ShardyModule:
    """``module`` with the collectives XLA's partitioner chooses where it departs from Shardy.

    See the module docstring for the rewritten pattern. Value ids of the input
    are kept; new values (the gathered operands) are appended.
    """
    values = _Values(list(module.value_types), list(module.value_shardings),
                     list(module.value_defs) or [-1] * len(module.value_types))  # fmt: skip
    functions = {
        name: Function(
            name=fn.name,
            body=_rewrite_block(fn.body, module, values),
            arg_shardings=fn.arg_shardings,
            result_shardings=fn.result_shardings,
        )
        for name, fn in module.functions.items()
    }
    return replace(
        module,
        functions=functions,
        value_types=tuple(values.types),
        value_shardings=tuple(values.shardings),
        value_defs=tuple(values.defs),
    )
