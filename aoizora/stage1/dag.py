"""The Stage-1 prediction DAG: explicit and implicit communication plus compute, per chip.

Input is a propagated :class:`~aoizora.stage1.shardy.ShardyModule`; output a
:class:`PredictionDag` whose :class:`Node` values are

* ``compute`` -- a ``dot_general``, ``convolution`` or opaque kernel
  (``custom_call``) with its FLOPs and HBM bytes per chip;
* ``explicit`` -- a collective the user wrote (``shard_map`` bodies:
  ``all_gather``, ``psum`` -> ``all_reduce``, ``ppermute`` ->
  ``collective_permute``, ``all_to_all``; Shardy's ``sdy.all_gather`` etc.);
* ``implicit`` -- a collective the SPMD partitioner will have to insert:

  - a *reshard* where a value's sharding differs from what its user needs
    (the user's sharding rule projected from the user's own sharding, a
    ``with_sharding_constraint``, a ``shard_map`` ``in_specs``, a loop carry, a
    function boundary, the jit's ``out_shardings``);
  - a *reduction* over a sharded contracting (reduction) factor, e.g. a
    ``dot_general`` whose contracting dimension is split over a mesh axis:
    an all-reduce of the partial result over that axis;
  - the boundary of an opaque kernel (``custom_call`` without a Shardy rule
    outside ``shard_map``): its operands must arrive replicated.

How the partitioner's choice is predicted (Shardy's factor model, the same
idea as ``sdy-insert-explicit-reshards``; :mod:`.reshard`): every op has a sharding rule that
names *factors* of its dimensions. The op runs in its *own* (propagated) result
sharding, which fixes the axes of every factor that appears in a result. A
factor only in operands (a contracting factor) keeps the axes of the largest
operand that has it sharded, minus axes already used -- moving the big operand
is what the partitioner avoids. Each operand is then resharded to the target
projected on its dimensions:

* axes the operand has but the target does not -> all-gather over them;
* axes that change dimension -> all-to-all over them;
* axes only the target has -> a local slice (free, no node).

Per-node bytes follow the compiled-HLO convention, so they can be compared with
``compiled.as_text()``: all-gather = its *output* per device, reduce-scatter =
its *input*, all-reduce / all-to-all / collective-permute = the buffer.
Everything inside a ``stablehlo.while`` (``jax.lax.scan``) is multiplied by the
trip count derived from the loop (``count``).

>>> import jax, jax.numpy as jnp
>>> from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
>>> from aoizora.stage1.shardy import read_lowered
>>> mesh = AbstractMesh((2,), ("m",), axis_types=(AxisType.Auto,))
>>> a = jax.ShapeDtypeStruct((4, 8), jnp.float32)
>>> low = jax.jit(lambda x, y: x @ y.T, in_shardings=NamedSharding(mesh, P(None, "m")),
...               out_shardings=NamedSharding(mesh, P())).trace(a, a).lower(
...     lowering_platforms=("tpu",))
>>> dag = build_dag(read_lowered(low))
>>> [(n.kind, n.collective, n.axes, n.bytes_per_device) for n in dag.nodes]
[('compute', '', (), 0), ('implicit', 'all-reduce', ('m',), 64)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.stage1.flops import conv_flops, kernel_cost
from aoizora.stage1.memory import peak_temp_bytes
from aoizora.stage1.prediction import RELAYOUT_PASSES, Node, PredictionDag
from aoizora.stage1.reshard import computing_target, project, reshard_collectives
from aoizora.stage1.shardy import (
    AxisRef,
    Block,
    Function,
    Op,
    Sharding,
    ShardyModule,
    Stage1Error,
    TensorType,
)

__all__ = ["build_dag"]

_EXPLICIT_HLO = {
    "stablehlo.all_gather": "all-gather",
    "stablehlo.all_reduce": "all-reduce",
    "stablehlo.reduce_scatter": "reduce-scatter",
    "stablehlo.all_to_all": "all-to-all",
    "stablehlo.collective_permute": "collective-permute",
    "stablehlo.collective_broadcast": "collective-permute",
}
_SDY_RESHARD_COLLECTIVES = (
    "sdy.all_gather",
    "sdy.all_slice",
    "sdy.all_to_all",
    "sdy.collective_permute",
)
_RETURNS = ("func.return", "stablehlo.return", "sdy.return")
# Dependency lists are truncated to the latest producers: enough for ordering,
# and it keeps the DAG linear in the program size.
_MAX_DEPS = 16


# --------------------------------------------------------------------------- builder


@dataclass
class _Ctx:
    count: int
    manual: frozenset[str]
    depth: int = 0
    region: int = 0


class _Builder:
    def __init__(self, module: ShardyModule) -> None:
        self.m = module
        self.axis_sizes = dict(module.mesh_axes)
        self.axis_order = {name: i for i, (name, _) in enumerate(module.mesh_axes)}
        self.nodes: list[Node] = []
        self.frontier: dict[int, tuple[int, ...]] = {}
        self.defs: dict[int, Op] = {}
        self.const_int: dict[int, int] = {}
        self.warnings: list[str] = []
        self.transient: dict[int, int] = {}  # id(op) -> resharded operand bytes at that op
        self._sharding_cache: dict[int, Sharding] = {}
        self.regions: list[tuple[int, int, int]] = []
        for fn in module.functions.values():
            self._index(fn.body)

    # ---- helpers
    def _index(self, block: Block) -> None:
        for op in block.ops:
            for r in op.results:
                self.defs[r] = op
            if op.int_value is not None and op.results:
                self.const_int[op.results[0]] = op.int_value
            for region in op.regions:
                self._index(region)

    def _type(self, v: int) -> TensorType:
        return self.m.value_types[v]

    def _sharding(self, v: int) -> Sharding:
        cached = self._sharding_cache.get(v)
        if cached is not None:
            return cached
        s = self.m.value_shardings[v]
        rank = len(self._type(v).shape)
        if s is None or len(s.dims) != rank:
            s = Sharding.replicated(rank)
        self._sharding_cache[v] = s
        return s

    def _bytes(self, v: int) -> int:
        return self._type(v).shard_bytes(self._sharding(v))

    def _axis_names(self, axes: Sequence[AxisRef] | Sequence[str]) -> tuple[str, ...]:
        names = {a.name if isinstance(a, AxisRef) else a for a in axes}
        return tuple(sorted(names, key=lambda n: (self.axis_order.get(n, 1 << 30), n)))

    def _extents(self, axes: Sequence[AxisRef]) -> list[tuple[str, int]]:
        sizes: dict[str, int] = {}
        for a in axes:
            sizes[a.name] = sizes.get(a.name, 1) * a.size
        return [(n, sizes[n]) for n in self._axis_names(list(sizes))]

    def _deps(self, values: Sequence[int]) -> tuple[int, ...]:
        ids: set[int] = set()
        for v in values:
            ids.update(self.frontier.get(v, ()))
        return tuple(sorted(ids)[-_MAX_DEPS:])

    def _add(
        self,
        *,
        kind: str,
        collective: str,
        axes: Sequence[tuple[str, int]],
        nbytes: int,
        ctx: _Ctx,
        deps: tuple[int, ...],
        op: Op,
        reason: str,
        flops: float = 0.0,
        hbm_bytes: float = 0.0,
    ) -> int:
        nid = len(self.nodes)
        self.nodes.append(
            Node(
                node_id=nid,
                kind=kind,
                collective=collective,
                axes=tuple(n for n, _ in axes),
                axis_sizes=tuple(e for _, e in axes),
                group_size=math.prod(e for _, e in axes),
                bytes_per_device=int(nbytes),
                flops_per_chip=float(flops),
                hbm_bytes_per_chip=float(hbm_bytes),
                count=ctx.count,
                deps=deps,
                op=op.name,
                reason=reason,
                region=ctx.region,
            )
        )
        return nid

    def _reshard(
        self, v: int, dst: Sharding, ctx: _Ctx, op: Op, reason: str, *, kind: str = "implicit"
    ) -> int | None:
        """Add the nodes moving value ``v`` to ``dst``; return the last node id, if any."""
        src = self._sharding(v)
        if len(dst.dims) != len(src.dims):
            return None
        last = None
        deps = self._deps([v])
        for coll, axes, nbytes in reshard_collectives(src, dst, self._type(v)):
            last = self._add(
                kind=kind,
                collective=coll,
                axes=self._extents(axes),
                nbytes=nbytes,
                ctx=ctx,
                deps=deps,
                op=op,
                reason=f"{reason}: {src.label()} -> {dst.label()}",
            )
            if coll == "all-to-all":
                last = self._relayout(last, nbytes, ctx, op)
            deps = (last,)
        if last is not None:
            self.transient[id(op)] = self.transient.get(id(op), 0) + self._type(v).shard_bytes(dst)
        return last

    def _relayout(self, a2a: int, nbytes: int, ctx: _Ctx, op: Op) -> int:
        """The memory-bound copies around an all-to-all; returns the new last node.

        XLA's TPU all-to-all exchanges chunks of the *major* dimension, so the
        partitioner transposes the split dimension to the front before it and
        the concatenated dimension back after it (``AllToAllDecomposer`` /
        SPMD ``AllToAll`` resharding in openxla/xla). Each transpose reads and
        writes the buffer: ``RELAYOUT_PASSES * V`` HBM bytes per chip for
        ``V = bytes_per_device`` (a copy fusion at HBM bandwidth).
        """
        return self._add(
            kind="compute",
            collective="",
            axes=(),
            nbytes=0,
            ctx=ctx,
            deps=(a2a,),
            op=op,
            reason="relayout around all-to-all",
            hbm_bytes=RELAYOUT_PASSES * nbytes,
        )

    def _reshard_operands(
        self, op: Op, wanted: Sequence[Sharding | None], ctx: _Ctx, reason: str
    ) -> list[tuple[int, ...]]:
        """Reshard every operand to ``wanted`` (None = leave); the operands' new frontiers."""
        fronts = []
        for i, v in enumerate(op.operands):
            dst = wanted[i] if i < len(wanted) else None
            last = None
            if dst is not None:
                last = self._reshard(v, dst, ctx, op, f"{reason} (operand {i})")
            fronts.append((last,) if last is not None else self.frontier.get(v, ()))
        return fronts

    def _set_results(self, op: Op, front: tuple[int, ...]) -> None:
        for r in op.results:
            self.frontier[r] = front

    # ---- walking
    def build_function(self, fn: Function, ctx: _Ctx) -> None:
        for a in fn.body.args:
            self.frontier.setdefault(a, ())
        self._block(fn.body, ctx)
        ret = fn.body.ops[-1] if fn.body.ops else None
        if ret is not None and ret.name in _RETURNS:
            wanted = [s.without(ctx.manual) if s is not None else None for s in fn.result_shardings]
            self._reshard_operands(ret, wanted, ctx, "result sharding of @" + fn.name)

    def _block(self, block: Block, ctx: _Ctx) -> None:
        for op in block.ops:
            if op.name not in _RETURNS:
                self._op(op, ctx)

    def _return_front(self, block: Block) -> tuple[int, ...]:
        if block.ops and block.ops[-1].name in _RETURNS:
            return self._deps(block.ops[-1].operands)
        return ()

    def _op(self, op: Op, ctx: _Ctx) -> None:
        name = op.name
        if name == "sdy.manual_computation":
            self._manual(op, ctx)
        elif name == "stablehlo.while":
            self._while(op, ctx)
        elif name in ("func.call", "call"):
            self._call(op, ctx)
        elif name in _EXPLICIT_HLO:
            self._explicit_hlo(op, ctx, _EXPLICIT_HLO[name])
        elif name in ("sdy.reshard", "sdy.sharding_constraint") or name in _SDY_RESHARD_COLLECTIVES:
            assert op.target_sharding is not None  # set by the reader for these ops
            kind = "implicit" if name in ("sdy.reshard", "sdy.sharding_constraint") else "explicit"
            last = self._reshard(op.operands[0], op.target_sharding, ctx, op, name, kind=kind)
            self._set_results(op, (last,) if last is not None else self._deps(op.operands))
        elif name in ("sdy.all_reduce", "sdy.reduce_scatter"):
            self._sdy_reduce(op, ctx)
        elif name == "stablehlo.custom_call":
            self._custom_call(op, ctx)
        elif op.rule is not None:
            self._ruled(op, ctx)
        else:
            for region in op.regions:  # case/if branches, reduce bodies...
                self._block(region, ctx)
            self._set_results(op, self._deps(op.operands))

    def _manual(self, op: Op, ctx: _Ctx) -> None:
        wanted = [s.without(ctx.manual) for s in op.in_shardings]
        fronts = self._reshard_operands(op, wanted, ctx, "shard_map in_specs")
        body = op.regions[0]
        for a, f in zip(body.args, fronts, strict=False):
            self.frontier[a] = f
        inner = _Ctx(ctx.count, ctx.manual | frozenset(op.manual_axes), ctx.depth, ctx.region)
        self._block(body, inner)
        self._set_results(op, self._return_front(body))

    def _while(self, op: Op, ctx: _Ctx) -> None:
        trip = self._trip_count(op)
        loop_sh = [self._sharding(r) for r in op.results]
        fronts = self._reshard_operands(op, loop_sh, ctx, "loop carry")
        cond, body = op.regions[0], op.regions[1]
        # Condition and body share one region: Q1's schedule runs the body once
        # per trip (the condition's one extra evaluation is left out there).
        rid = len(self.regions) + 1
        self.regions.append((rid, ctx.region, trip))
        for region, count in ((cond, ctx.count * (trip + 1)), (body, ctx.count * trip)):
            for a, f in zip(region.args, fronts, strict=False):
                self.frontier[a] = f
            self._block(region, _Ctx(count, ctx.manual, ctx.depth, rid))
        ret = body.ops[-1] if body.ops else None
        if ret is not None and ret.name in _RETURNS and trip > 0:
            self._reshard_operands(
                ret, loop_sh, _Ctx(ctx.count * trip, ctx.manual, ctx.depth, rid), "loop carry back"
            )
        self._set_results(op, self._return_front(body) or self._deps(op.operands))

    def _call(self, op: Op, ctx: _Ctx) -> None:
        fn = self.m.functions.get(op.callee)
        if fn is None or ctx.depth > 64:
            self.warnings.append(f"call to @{op.callee} not followed (missing or too deep)")
            self._set_results(op, self._deps(op.operands))
            return
        wanted = [s.without(ctx.manual) if s is not None else None for s in fn.arg_shardings]
        fronts = self._reshard_operands(op, wanted, ctx, f"arguments of @{fn.name}")
        for a, f in zip(fn.body.args, fronts, strict=False):
            self.frontier[a] = f
        self.build_function(fn, _Ctx(ctx.count, ctx.manual, ctx.depth + 1, ctx.region))
        self._set_results(op, self._return_front(fn.body))

    # ---- loops
    def _trip_count(self, op: Op) -> int:
        """Trip count of a ``stablehlo.while`` from ``compare(i, N)`` in cond, i's init and step.

        jax.lax.scan lowers to ``while(i = 0, ...)`` with cond ``i < N`` and body
        ``i + 1``; TPU-compiled HLO keeps no ``known_trip_count``
        (docs/facts.md, Compiled-HLO collectives), so we read it from the loop itself.
        """
        cond, body = op.regions[0], op.regions[1]
        try:
            ret = cond.ops[-1]
            cmp = self.defs[ret.operands[0]]
            if cmp.name != "stablehlo.compare":
                raise KeyError(cmp.name)
            lhs, rhs = cmp.operands[0], cmp.operands[1]
            direction = cmp.compare_direction
            if lhs not in cond.args:
                lhs, rhs = rhs, lhs
                direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(
                    direction, direction
                )
            k = cond.args.index(lhs)
            bound = self.const_int[rhs]
            init = self.const_int[op.operands[k]]
            step_op = self.defs[body.ops[-1].operands[k]]
            if step_op.name not in ("stablehlo.add", "stablehlo.subtract"):
                raise KeyError(step_op.name)
            other = [v for v in step_op.operands if v != body.args[k]]
            step = self.const_int[other[0]] * (-1 if step_op.name == "stablehlo.subtract" else 1)
        except (KeyError, IndexError, ValueError) as e:
            self.warnings.append(
                f"trip count of a stablehlo.while ({op.location or 'no location'}) not derivable "
                f"({e}); counted once"
            )
            return 1
        span = bound - init
        if step == 0:
            return 1
        if direction in ("LT", "GT", "NE"):
            trip = -(-span // step)
        elif direction in ("LE", "GE"):
            trip = span // step + 1
        else:
            trip = 1
        return max(0, int(trip))

    # ---- explicit collectives
    def _coords(self, device: int) -> tuple[int, ...]:
        ids = self.m.device_ids
        pos = ids.index(device) if ids and device in ids else device
        sizes = [s for _, s in self.m.mesh_axes]
        return tuple(int(c) for c in np.unravel_index(pos, sizes)) if sizes else ()

    def _varying_axes(self, groups: Sequence[Sequence[int]]) -> list[tuple[str, int]]:
        """Mesh axes along which the members of a group differ, with the group's extent."""
        names = [n for n, _ in self.m.mesh_axes]
        extent: dict[str, int] = {}
        for g in groups:
            coords = [self._coords(d) for d in g]
            for i, n in enumerate(names):
                k = len({c[i] for c in coords})
                if k > 1:
                    extent[n] = max(extent.get(n, 1), k)
        return [(n, extent[n]) for n in self._axis_names(list(extent))]

    def _explicit_hlo(self, op: Op, ctx: _Ctx, collective: str) -> None:
        if op.source_target_pairs:
            # A permutation moves data between the pair's chips only: the extent
            # along an axis is that axis' size (the shift spans it).
            axes = [
                (n, self.axis_sizes[n])
                for n, _ in self._varying_axes([list(p) for p in op.source_target_pairs])
            ]
        else:
            groups = op.replica_groups or (tuple(range(math.prod(self.axis_sizes.values()))),)
            axes = self._varying_axes(groups)
        values = op.results if collective == "all-gather" else op.operands
        nbytes = sum(self._bytes(v) for v in values)
        nid = self._add(
            kind="explicit",
            collective=collective,
            axes=axes,
            nbytes=nbytes,
            ctx=ctx,
            deps=self._deps(op.operands),
            op=op,
            reason=f"{op.name} in shard_map",
        )
        if collective == "all-to-all":
            nid = self._relayout(nid, nbytes, ctx, op)
        self._set_results(op, (nid,))

    def _sdy_reduce(self, op: Op, ctx: _Ctx) -> None:
        names = self._axis_names([a for a in op.reduction_axes if a in self.axis_sizes])
        collective = "all-reduce" if op.name == "sdy.all_reduce" else "reduce-scatter"
        v = op.results[0] if collective == "all-reduce" else op.operands[0]
        nid = self._add(
            kind="explicit",
            collective=collective,
            axes=[(n, self.axis_sizes[n]) for n in names],
            nbytes=self._bytes(v),
            ctx=ctx,
            deps=self._deps(op.operands),
            op=op,
            reason=op.name,
        )
        self._set_results(op, (nid,))

    # ---- ops with a sharding rule
    def _ruled(self, op: Op, ctx: _Ctx) -> None:
        rule = op.rule
        assert rule is not None
        operands = op.operands[: len(rule.operand_factors)]
        target = computing_target(
            rule,
            [self._sharding(r) for r in op.results[: len(rule.result_factors)]],
            [self._sharding(v) for v in operands],
            [self._type(v).size_bytes for v in operands],
        )
        wanted = [project(target, m) for m in rule.operand_factors]
        fronts = self._reshard_operands(op, wanted, ctx, op.name)
        deps = tuple(sorted({d for f in fronts for d in f})[-_MAX_DEPS:])
        last: int | None = None
        if op.name in ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"):
            shards = math.prod(a.size for axes in target.values() for a in axes)
            if op.name == "stablehlo.convolution":
                flops = conv_flops(
                    self._type(op.results[0]),
                    self._type(op.operands[1]),
                    output_feature_dim=op.kernel_output_feature_dim,
                )
            else:
                # 2 FLOPs per multiply-add over every (batch, free, contracting) index.
                flops = 2.0 * math.prod(rule.factor_sizes)
            hbm = sum(
                self._type(v).shard_bytes(w) for v, w in zip(op.operands, wanted, strict=False)
            ) + sum(self._bytes(r) for r in op.results)
            last = self._add(
                kind="compute",
                collective="",
                axes=(),
                nbytes=0,
                ctx=ctx,
                deps=deps,
                op=op,
                reason=op.location or op.name,
                flops=flops / shards,
                hbm_bytes=hbm,
            )
            deps = (last,)
        red_axes = [a for f in rule.reduction for a in target.get(f, ())]
        if red_axes:
            last = self._add(
                kind="implicit",
                collective="all-reduce",
                axes=self._extents(red_axes),
                # The partial result is reduced in the op's computing sharding
                # (the target), before any local slicing to the result's own.
                nbytes=sum(
                    self._type(r).shard_bytes(project(target, m))
                    for r, m in zip(op.results, rule.result_factors, strict=False)
                ),
                ctx=ctx,
                deps=deps,
                op=op,
                reason=f"{op.name} reduces over sharded factor(s) on {self._axis_names(red_axes)}",
            )
        for region in op.regions:
            self._block(region, ctx)
        self._set_results(op, (last,) if last is not None else deps)

    # ---- opaque kernels
    def _custom_call(self, op: Op, ctx: _Ctx) -> None:
        free = [a for a in self.axis_sizes if a not in ctx.manual]
        if op.rule is not None:
            self._ruled(op, ctx)
            fronts = [self.frontier.get(r, ()) for r in op.results]
            deps = tuple(sorted({d for f in fronts for d in f}))
        else:
            wanted: list[Sharding | None] = (
                [Sharding.replicated(len(self._type(v).shape)) for v in op.operands] if free else []
            )
            fronts = self._reshard_operands(
                op, wanted, ctx, f"opaque custom call {op.call_target} needs replicated operands"
            )
            deps = tuple(sorted({d for f in fronts for d in f})[-_MAX_DEPS:])
        io = sum(self._bytes(v) for v in op.operands) + sum(self._bytes(r) for r in op.results)
        flops, hbm = kernel_cost(
            op, operand_types=[self._type(v) for v in op.operands], io_bytes=io
        )
        if flops is None:
            self._set_results(op, deps)
            if op.call_target == "tpu_custom_call":
                self.warnings.append(
                    f"kernel {op.kernel_name or op.call_target!r} has no CostEstimate; its FLOPs "
                    "are not counted"
                )
            return
        nid = self._add(
            kind="compute",
            collective="",
            axes=(),
            nbytes=0,
            ctx=ctx,
            deps=deps,
            op=op,
            reason=f"kernel {op.kernel_name or op.call_target}",
            flops=flops,
            hbm_bytes=hbm,
        )
        self._set_results(op, (nid,))


def build_dag(module: ShardyModule) -> PredictionDag:
    """Build the prediction DAG and memory estimate of a propagated module.

    Raises :class:`~aoizora.stage1.shardy.Stage1Error` when the module has no mesh.
    """
    if not module.mesh_axes:
        raise Stage1Error(
            "the lowered program has no sdy.mesh: lower it with shardings over a "
            "jax.sharding.Mesh, e.g. jax.jit(f, in_shardings=NamedSharding(mesh, P('data')))"
        )
    b = _Builder(module)
    main = module.functions[module.main]
    b.build_function(main, _Ctx(1, frozenset()))
    args = sum(b._bytes(a) for a in main.body.args)
    peak = peak_temp_bytes(
        main.body,
        functions=module.functions,
        bytes_of=b._bytes,
        transient_bytes=b.transient,
        seen=(module.main,),
    )
    return PredictionDag(
        nodes=tuple(b.nodes),
        mesh_axes=module.mesh_axes,
        argument_bytes_per_chip=args,
        peak_temp_bytes_per_chip=peak,
        warnings=tuple(dict.fromkeys(b.warnings)),
        regions=tuple(b.regions),
    )
