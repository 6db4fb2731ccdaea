"""Shardy's factor model: the sharding an op computes in, and the reshards to reach it.

Every op has a sharding rule that names *factors* of its dimensions
(:class:`~aoizora.stage1.shardy.ShardingRule`). The op runs in its *own*
(propagated) result sharding, which fixes the axes of every factor that appears
in a result. A factor only in operands (a contracting factor) keeps the axes of
the largest operand that has it sharded, minus axes already used -- moving the
big operand is what the partitioner avoids (:func:`computing_target`). Each
operand is then resharded to that target projected on its dimensions
(:func:`project`), and :func:`reshard_collectives` decomposes one reshard into
collectives the way Shardy's ``sdy-reshard-to-collectives`` does:

* axes the operand has but the target does not -> all-gather over them;
* axes that change dimension -> all-to-all over them;
* axes only the target has -> a local slice (free, no collective).

:mod:`aoizora.stage1.dag` turns these into DAG nodes.

>>> x = AxisRef("x", 2)
>>> target = factor_axes(Sharding(((x,), ())), [(0,), (1,)], [8, 16])
>>> project(target, [(1,), (0,)]).label()
'[{}, {x}]'
"""

from __future__ import annotations

from collections.abc import Sequence

from aoizora.stage1.shardy import AxisRef, Sharding, ShardingRule, TensorType

__all__ = ["computing_target", "factor_axes", "project", "reshard_collectives"]


def _positions(s: Sharding) -> dict[AxisRef, tuple[int, int]]:
    """Each axis of ``s`` -> (its dimension, its place in that dimension, major first)."""
    return {a: (d, i) for d, axes in enumerate(s.dims) for i, a in enumerate(axes)}


def reshard_collectives(
    src: Sharding, dst: Sharding, tensor: TensorType
) -> list[tuple[str, tuple[AxisRef, ...], int]]:
    """The collectives that turn a ``src``-sharded tensor into ``dst``: (kind, axes, bytes).

    Added axes are sliced first (free), moved axes go through one all-to-all on
    the sliced buffer, dropped axes are all-gathered last (output = ``dst``
    shard). The same decomposition as Shardy's ``sdy-reshard-to-collectives``.

    >>> x, y = AxisRef("x", 2), AxisRef("y", 4)
    >>> t = TensorType((8, 16), 2)
    >>> reshard_collectives(Sharding(((x,), ())), Sharding(((), ())), t)
    [('all-gather', (AxisRef(name='x', size=2, pre_size=1, is_sub_axis=False),), 256)]
    >>> [(k, b) for k, _, b in reshard_collectives(Sharding(((y,), ())), Sharding(((), (y,))), t)]
    [('all-to-all', 64)]
    >>> reshard_collectives(Sharding(((), ())), Sharding(((x,), (y,))), t)
    []
    """
    if len(src.dims) != len(dst.dims) or src == dst:
        return []
    sp, dp = _positions(src), _positions(dst)
    removed = [a for a in sp if a not in dp]
    moved = [a for a in sp if a in dp and sp[a][0] != dp[a][0]]
    # Same dimension but a different major-to-minor order is a permutation: all-to-all.
    for d in range(len(src.dims)):
        kept_src = [a for a in src.dims[d] if a in dp and dp[a][0] == d]
        kept_dst = [a for a in dst.dims[d] if a in sp and sp[a][0] == d]
        if kept_src != kept_dst:
            moved.extend(a for a in kept_src if a not in moved)
    added = [a for a in dp if a not in sp]
    out: list[tuple[str, tuple[AxisRef, ...], int]] = []
    if moved:
        inter = [list(axes) for axes in src.dims]
        for a in added:
            inter[dp[a][0]].append(a)
        nbytes = tensor.shard_bytes(Sharding(tuple(tuple(d) for d in inter)))
        out.append(("all-to-all", tuple(moved), nbytes))
    if removed:
        out.append(("all-gather", tuple(removed), tensor.shard_bytes(dst)))
    return out


def factor_axes(
    sharding: Sharding, mapping: Sequence[Sequence[int]], factor_sizes: Sequence[int]
) -> dict[int, tuple[AxisRef, ...]]:
    """Split each dimension's axes among its factors, major factor first (Shardy's rule)."""
    out: dict[int, tuple[AxisRef, ...]] = {}
    for d, factors in enumerate(mapping):
        if not factors or d >= len(sharding.dims):
            continue
        remaining = [factor_sizes[f] for f in factors]
        fi = 0
        for a in sharding.dims[d]:
            while fi < len(factors) - 1 and (remaining[fi] <= 1 or remaining[fi] % a.size):
                fi += 1
            f = factors[fi]
            out[f] = out.get(f, ()) + (a,)
            remaining[fi] = max(1, remaining[fi] // a.size)
    return out


def project(target: dict[int, tuple[AxisRef, ...]], mapping: Sequence[Sequence[int]]) -> Sharding:
    """The sharding of a tensor whose dimensions have ``mapping``'s factors, given their axes."""
    return Sharding(
        tuple(tuple(a for f in factors for a in target.get(f, ())) for factors in mapping)
    )


def computing_target(
    rule: ShardingRule,
    result_shardings: Sequence[Sharding],
    operand_shardings: Sequence[Sharding],
    operand_sizes_bytes: Sequence[int],
) -> dict[int, tuple[AxisRef, ...]]:
    """The axes of every factor in the sharding an op with ``rule`` computes in.

    Result factors take the axes of the op's own (propagated) result sharding;
    a factor only in operands keeps the axes of the largest operand that has it
    sharded, minus axes already used (see the module docstring). The lists are
    indexed like the op's results and operands.

    >>> x = AxisRef("x", 2)
    >>> rule = ShardingRule(
    ...     factor_sizes=(4, 8, 6), operand_factors=(((0,), (1,)), ((1,), (2,))),
    ...     result_factors=(((0,), (2,)),), reduction=(1,), need_replication=(),
    ... )
    >>> t = computing_target(
    ...     rule, [Sharding(((), ()))], [Sharding(((), (x,))), Sharding(((), ()))], [128, 192]
    ... )
    >>> {f: [a.name for a in axes] for f, axes in sorted(t.items())}
    {0: [], 1: ['x'], 2: []}
    """
    target: dict[int, tuple[AxisRef, ...]] = {}
    for ri, r in enumerate(result_shardings):
        if ri < len(rule.result_factors):
            fa = factor_axes(r, rule.result_factors[ri], rule.factor_sizes)
            for factors in rule.result_factors[ri]:
                for f in factors:
                    target.setdefault(f, fa.get(f, ()))
    order = sorted(
        range(min(len(operand_shardings), len(rule.operand_factors))),
        key=lambda i: (-operand_sizes_bytes[i], i),
    )
    operand_fa = {
        i: factor_axes(operand_shardings[i], rule.operand_factors[i], rule.factor_sizes)
        for i in order
    }
    # Operand-driven exception (what GSPMD does for dots and reductions): an
    # axis that shards a reduction factor in an operand but, in the result,
    # a factor no operand shards with it, stays on the reduction factor. The
    # op then computes partial sums, all-reduces them and slices the result
    # locally, instead of moving both operands.
    for f in rule.reduction:
        for i in order:
            for a in operand_fa[i].get(f, ()):
                holder = next((g for g, axes in target.items() if a in axes), None)
                if holder is None or holder in rule.reduction:
                    continue
                if not any(a in operand_fa[j].get(holder, ()) for j in order):
                    target[holder] = tuple(x for x in target[holder] if x != a)
    used = {a.name for axes in target.values() for a in axes}
    for f in range(len(rule.factor_sizes)):
        if f in target:
            continue
        chosen: tuple[AxisRef, ...] = ()
        if f not in rule.need_replication:
            for i in order:
                cand = tuple(a for a in operand_fa[i].get(f, ()) if a.name not in used)
                if cand:
                    chosen = cand
                    break
        target[f] = chosen
        used.update(a.name for a in chosen)
    return target
