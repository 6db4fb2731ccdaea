"""Where XLA's SPMD partitioner departs from Shardy's explicit reshards, rewritten to match it.

The TPU compile runs Shardy's *propagation*, then XLA's own SPMD partitioner
(GSPMD), not Shardy's partitioner passes. Stage 1 reads Shardy's
``sdy-insert-explicit-reshards`` and ``sdy-reshard-to-collectives``
(:data:`aoizora.stage1.shardy.PIPELINE`) because they say, op by op, which
collectives a sharding needs; this module rewrites the one pattern where the two
partitioners measurably disagree on the Wan step (``docs/stage1.md``):

* **a dot whose contracting dimension one operand has replicated and the other
  sharded.** Shardy slices the replicated operand (``sdy.all_slice``, free),
  computes partial sums and all-reduces the result. XLA's dot handler reshards
  the *smaller* operand to match the larger one (openxla/xla
  ``xla/service/spmd/dot_handler.cc``, ``PartitionBaseCase``): when the sharded
  operand is the smaller, it all-gathers it instead, and the dot runs on the
  whole contraction with no all-reduce. On Wan's attention output projection
  under the ``fsdp`` and ``maxdiffusion`` rules with ``tensor`` > 1 that turns a
  100--200 MB all-reduce into a 5 MB weight all-gather (checked against the
  compiled HLO in ``tests/aoizora/stage1/test_partitioner.py``).

:func:`as_xla_partitions` returns a new :class:`~aoizora.stage1.shardy.ShardyModule`;
the input is not changed.
"""

from __future__ import annotations

import math
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
    ops = [replace(op, regions=tuple(_rewrite_block(r, m, values) for r in op.regions))
           for op in block.ops]  # fmt: skip
    defs = {r: i for i, op in enumerate(ops) for r in op.results}
    users: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            users.setdefault(v, []).append(i)
    out: list[Op] = []
    forward: dict[int, int] = {}  # value -> the value that replaces it
    drop: set[int] = set()
    for i, op in enumerate(ops):
        if i in drop:
            continue
        op = replace(op, operands=tuple(forward.get(v, v) for v in op.operands))
        plan = _gather_instead(i, ops, defs, users, m, values) if _is_dot(op) else None
        if plan is None:
            out.append(op)
            continue
        slice_index, other, axes, reduce_index = plan
        sliced = ops[slice_index]
        whole = sliced.operands[0]
        gathered_sharding = _without(_sharding(m, values, op.operands[other]), axes)
        g = values.new(values.types[op.operands[other]], gathered_sharding)
        gather = Op(
            name="sdy.all_gather",
            operands=(op.operands[other],),
            results=(g,),
            target_sharding=gathered_sharding,
            collective_axes=tuple(axes),
            location=f"{op.location} (XLA gathers the smaller dot operand)",
        )
        new_operands = [g if k == other else (whole if v == sliced.results[0] else v)
                        for k, v in enumerate(op.operands)]  # fmt: skip
        out.extend([gather, replace(op, operands=tuple(new_operands))])
        reduce = ops[reduce_index]
        forward[reduce.results[0]] = op.results[0]
        drop.add(reduce_index)
    return Block(args=block.args, ops=tuple(out))


def _is_dot(op: Op) -> bool:
    return op.name == "stablehlo.dot_general" and len(op.operands) == 2


def _without(s: Sharding, axes: Sequence[AxisRef]) -> Sharding:
    names = {a.name for a in axes}
    return Sharding(tuple(tuple(a for a in d if a.name not in names) for d in s.dims))


def _gather_instead(
    i: int,
    ops: Sequence[Op],
    defs: dict[int, int],
    users: dict[int, list[int]],
    m: ShardyModule,
    values: _Values,
) -> tuple[int, int, list[AxisRef], int] | None:
    """(slice op, index of the operand to gather, axes, all-reduce op) if XLA gathers instead."""
    op = ops[i]
    result_users = users.get(op.results[0], [])
    if len(result_users) != 1 or ops[result_users[0]].name != "sdy.all_reduce":
        return None
    reduce_index = result_users[0]
    reduced = {a.name for a in ops[reduce_index].collective_axes}
    for k in (0, 1):
        j = defs.get(op.operands[k])
        if j is None or ops[j].name != "sdy.all_slice":
            continue
        sliced = ops[j]
        if {a.name for a in sliced.collective_axes} != reduced:
            continue
        other = op.operands[1 - k]
        full = values.types[sliced.operands[0]].shard_bytes(
            _sharding(m, values, sliced.operands[0])
        )
        gathered = values.types[other].shard_bytes(
            _without(_sharding(m, values, other), sliced.collective_axes)
        )
        if gathered <= full and math.prod(a.size for a in sliced.collective_axes) > 1:
            return j, 1 - k, list(sliced.collective_axes), reduce_index
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
