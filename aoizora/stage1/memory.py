"""The per-chip memory estimate of a Stage-1 program: a liveness scan in program order.

``memory_bytes_per_chip = argument_bytes_per_chip + peak_temp_bytes_per_chip``
(:class:`~aoizora.stage1.prediction.PredictionDag`): arguments (sharded parameters and
inputs) stay live for the whole step; the temporary peak is a liveness scan of
the entry function in program order (a value lives from its definition to its
last use; a loop, ``shard_map`` or call adds its body's own peak at that point,
counted once, not per trip -- a call or ``shard_map`` the larger of that peak and its
results, which are the buffers its body returns; each op adds the resharded copies of its
operands, e.g. all-gathered weights). A value is its tiled footprint (the caller's
``bytes_of``); one fused into a kernel, or the result of a call that only views its operand
(a scan's ``dynamic_index_in_dim`` of its stacked weights), takes no buffer unless the block
returns it. A ``while`` result its body passes through unchanged
(a ``scan``'s stacked weights and inputs) is no new buffer: XLA keeps the loop state
in its init operand's buffer (``while`` aliases its operand and result tuples; copy
insertion adds a copy only where the body writes the state -- openxla/xla
``copy_insertion.cc``, ``AddCopiesForWhile``), so such a result extends the
operand's life instead. XLA's scheduler may do better or worse; this is an
estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aoizora.stage1.fusion import fused_away, op_class
from aoizora.stage1.shardy import Block, Function, Op

__all__ = ["MEMORY_MARGIN", "MEMORY_UNDERESTIMATE", "peak_temp_bytes"]

# The most Stage 1's per-chip estimate has exceeded the compiled program's own memory
# analysis (arguments + outputs + temporaries + code - aliased), over the programs that
# `python benchmarks/stage1_memory.py --big` compiles (the 1.3B and TI2V-5B steps and VAE
# decodes on v5e:1x1, wan-tiny steps on v5e:2x4, five Wan 2.1 14B 720p candidates on
# v5e:8x8): 1.26, the 14B gather_kv step at context 64 (Stage 1 7.11 GB, XLA 5.64 GB) and
# the tensor-8 wan-tiny step (most of its temporaries live in VMEM). Stage 1 refuses a
# candidate only above this many budgets; nearer the budget the compile decides
# (docs/stage1.md, "Memory"). Kept at 1.6, above the 1.54 of the estimate before the
# call and view rules, so no candidate the older estimate kept is refused now.
MEMORY_MARGIN = 1.6
# The least Stage 1's estimate has been of the compiled figure: 0.589, the Wan 2.2 VAE decode
# of 832x480x61 on v5e:1x1 (6.10 GB by Stage 1, 10.36 GB compiled, 10.35 GB held on the
# chip; validation/v5e/heldout4), and 0.602 at 640x352x41 (4.41 GB, 7.32 GB compiled and
# held): XLA materialises their DupUp3D up-sampling as a buffer padded to 128 lanes (3.7 GB
# at 640x352x41), which Stage 1 takes for a view. A program Stage 1 puts above this share of
# the budget may not fit: what is planned without a compile (the VAE) is then compiled to
# decide.
MEMORY_UNDERESTIMATE = 0.55
_CALLS = frozenset({"func.call", "call"})
# Ops whose results are what their body returns (a call, a shard_map's manual body).
_RETURNS_RESULTS = _CALLS | {"sdy.manual_computation"}


def peak_temp_bytes(
    block: Block,
    *,
    functions: Mapping[str, Function],
    bytes_of: Callable[[int], int],
    transient_bytes: Mapping[int, int],
    seen: tuple[str, ...] = (),
    memo: dict[tuple[str, ...], int] | None = None,
) -> int:
    """Peak of live non-argument bytes over ``block`` in program order.

    ``bytes_of(v)`` is value ``v``'s bytes per chip; ``transient_bytes`` maps
    ``id(op)`` to the resharded operand copies alive while ``op`` runs;
    ``functions`` resolves ``call`` targets, and ``seen`` lists the functions
    already on the call path (not entered again). ``memo`` keeps the peak of each
    called function per call path (a ring-attention step calls the same kernel
    wrapper hundreds of times; its peak is the same at every call).

    >>> ops = (
    ...     Op(name="a", operands=(), results=(1,)),
    ...     Op(name="b", operands=(1,), results=(2,)),
    ...     Op(name="c", operands=(2,), results=(3,)),
    ...     Op(name="func.return", operands=(3,), results=()),
    ... )
    >>> peak_temp_bytes(
    ...     Block(args=(), ops=ops), functions={}, bytes_of=lambda v: 100 * v, transient_bytes={}
    ... )
    500
    """
    memo = {} if memo is None else memo
    # What the block returns is written out (the caller's buffer), views and all.
    returned = set(block.ops[-1].operands) if block.ops else set()
    views = _views(block, functions)
    away = (fused_away(block, bytes_of=bytes_of) | views) - returned
    own_bytes = bytes_of
    bytes_of = lambda v: 0 if v in away else own_bytes(v)  # noqa: E731
    alias = _passed_through(block)
    last_use: dict[int, int] = {}
    for i, op in enumerate(block.ops):
        for v in _uses(op):
            last_use[alias.get(v, v)] = i
    defined = {r for op in block.ops for r in op.results if r not in alias}
    live = 0
    peak = 0
    for i, op in enumerate(block.ops):
        viewed = bool(op.results) and all(r in views for r in op.results)
        inner = _inner_peak(
            op, functions=functions, bytes_of=own_bytes, transient_bytes=transient_bytes,
            seen=seen, memo=memo, enter_call=not viewed,
        )  # fmt: skip
        fresh = [r for r in op.results if r not in alias]
        res = sum(bytes_of(r) for r in fresh)
        # A called body's peak holds the results it returns: they are the call's own
        # buffers. A loop's results (a scan's stacked outputs) are not its body's.
        made = max(res, inner) if op.name in _RETURNS_RESULTS else res + inner
        peak = max(peak, live + made + transient_bytes.get(id(op), 0))
        live += res
        for v in fresh:
            if v not in last_use:
                live -= bytes_of(v)  # dead on definition
        for v in {alias.get(u, u) for u in _uses(op)}:
            if last_use.get(v) == i and v in defined:
                live -= bytes_of(v)
    return peak


def _inner_peak(
    op: Op,
    *,
    functions: Mapping[str, Function],
    bytes_of: Callable[[int], int],
    transient_bytes: Mapping[int, int],
    seen: tuple[str, ...],
    memo: dict[tuple[str, ...], int],
    enter_call: bool,
) -> int:
    """The peak of what ``op`` runs inside: its regions' (the larger), or its callee's
    (once per call path, :func:`peak_temp_bytes`'s ``memo``) unless ``enter_call`` is off."""
    inner = 0
    for region in op.regions:
        inner = max(
            inner,
            peak_temp_bytes(
                region, functions=functions, bytes_of=bytes_of,
                transient_bytes=transient_bytes, seen=seen, memo=memo,
            ),
        )  # fmt: skip
    if not enter_call or op.name not in _CALLS or op.callee in seen:
        return inner
    fn = functions.get(op.callee)
    if fn is None:
        return inner
    path = (*seen, op.callee)
    if path not in memo:
        memo[path] = peak_temp_bytes(
            fn.body, functions=functions, bytes_of=bytes_of,
            transient_bytes=transient_bytes, seen=path, memo=memo,
        )  # fmt: skip
    return memo[path]


def _views(block: Block, functions: Mapping[str, Function]) -> frozenset[int]:
    """Results of calls whose body only views its operands (``jax.lax.dynamic_index_in_dim``:
    a ``dynamic_slice`` and a ``reshape``): XLA inlines the call and fuses the slice into
    its consumers, so a scan's layer weights are read from the stacked array in place."""
    out: set[int] = set()
    for op in block.ops:
        fn = functions.get(op.callee) if op.name in _CALLS else None
        if fn is not None and all(
            inner.name in ("func.return", "stablehlo.return")
            or op_class(inner.name) == "transparent"
            for inner in fn.body.ops
        ):
            out.update(op.results)
    return frozenset(out)


def _passed_through(block: Block) -> dict[int, int]:
    """``{while result: the operand it aliases}`` for results the body returns unchanged.

    A ``stablehlo.while`` has two regions, the condition and the body; result ``i``
    is passed through when the body's ``return`` gives back its own argument ``i``.

    >>> body = Block(args=(10, 11), ops=(
    ...     Op(name="stablehlo.add", operands=(10, 10), results=(12,)),
    ...     Op(name="stablehlo.return", operands=(12, 11), results=()),
    ... ))
    >>> cond = Block(args=(10, 11), ops=())
    >>> loop = Op(name="stablehlo.while", operands=(1, 2), results=(3, 4), regions=(cond, body))
    >>> _passed_through(Block(args=(1, 2), ops=(loop,)))
    {4: 2}
    """
    out: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for i, op in enumerate(block.ops):
        for v in _uses(op):
            last_use[v] = i
    defined = {r for op in block.ops for r in op.results}
    for at, op in enumerate(block.ops):
        if op.name != "stablehlo.while" or len(op.regions) != 2 or not op.regions[1].ops:
            continue
        body = op.regions[1]
        ret = body.ops[-1]
        if ret.name != "stablehlo.return" or len(ret.operands) != len(op.results):
            continue
        for i, (arg, back) in enumerate(zip(body.args, ret.operands, strict=False)):
            if i >= len(op.operands):
                continue
            init = op.operands[i]
            # The loop state lives in one buffer: a result the body passes through, or
            # whose init value dies at the loop, is the init's buffer (XLA writes the
            # state in place; copy insertion copies only an init still read later).
            if arg == back or (init in defined and last_use.get(init) == at):
                # chains: an operand that is itself an alias points at the first buffer
                out[op.results[i]] = out.get(init, init)
    return out


def _uses(op: Op) -> list[int]:
    out = list(op.operands)
    for region in op.regions:
        for inner in region.ops:
            out.extend(_uses(inner))
    return out
