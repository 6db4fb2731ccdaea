"""The Stage-1 prediction DAG: the kernels and collectives of one step, per chip.

Input is a :class:`~aoizora.stage1.shardy.ShardyModule` read after Shardy's
propagation and partitioner passes (:data:`~aoizora.stage1.shardy.PIPELINE`);
output a :class:`PredictionDag` whose :class:`Node` values are

* ``compute`` -- one fused kernel (:mod:`aoizora.stage1.fusion`): its FLOPs
  (matmuls and convolutions, :func:`sim.costs.matmul_flops` /
  :func:`sim.costs.conv_flops`) and the HBM bytes it reads and writes; or an
  opaque kernel (``custom_call``, e.g. Pallas splash attention) priced by
  :func:`aoizora.stage1.flops.kernel_cost`;
* ``implicit`` -- a collective the partitioner inserts: each ``sdy`` collective
  Shardy's ``sdy-reshard-to-collectives`` emitted (``sdy.all_gather``,
  ``sdy.all_to_all``, ``sdy.collective_permute``, ``sdy.all_reduce``,
  ``sdy.reduce_scatter``; ``sdy.all_slice`` is a local slice, fused like one);
* ``explicit`` -- a collective the user wrote inside a ``shard_map`` body
  (``all_gather``, ``psum`` -> ``all_reduce``, ``ppermute`` ->
  ``collective_permute``, ``all_to_all``, ``reduce_scatter``).

Given ``times``, a dot XLA would run as a *windowed einsum* (its all-gather
replaced by a loop of collective-permutes and partial dots) gets that loop
instead of Shardy's all-gather: a region of its own, per
:mod:`aoizora.stage1.windowed`.

Hand models remain only where Shardy cannot answer, each marked in
``Node.reason``:

* ``shard_map`` bodies are opaque to Shardy: their collectives are read as
  written (axes from the replica groups mapped to mesh coordinates);
* an opaque ``custom_call`` outside ``shard_map`` without a sharding rule: Shardy
  passes its sharding through, while XLA's SPMD partitioner runs it replicated,
  so each sharded operand is all-gathered ("replicated operands of ...");
* an all-to-all is followed by a relayout copy (:data:`RELAYOUT_PASSES`): TPU's
  all-to-all exchanges chunks of the major dimension, so the partitioner
  transposes the split dimension to the front and back (openxla/xla SPMD
  all-to-all resharding), which the program before partitioning does not show.

Per-node bytes follow the compiled-HLO convention, so they compare with
``compiled.as_text()``: all-gather = its *output* per device, reduce-scatter =
its *input*, all-reduce / all-to-all / collective-permute = the buffer.
Everything inside a ``stablehlo.while`` (``jax.lax.scan``) runs ``count`` times,
the trip count derived from the loop.

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

from aoizora.stage1.flops import kernel_work, op_matmul
from aoizora.stage1.fusion import Kernel, fuse_block, op_class
from aoizora.stage1.groups import MeshGroups
from aoizora.stage1.memory import peak_temp_bytes
from aoizora.stage1.partitioner import as_xla_partitions
from aoizora.stage1.prediction import RELAYOUT_PASSES, Node, PredictionDag
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
from aoizora.stage1.windowed import DotTimes, WindowedDot, keeps_window, window_shape
from sim.compute import Work

__all__ = ["build_dag"]

_EXPLICIT_HLO = {
    "stablehlo.all_gather": "all-gather",
    "stablehlo.all_reduce": "all-reduce",
    "stablehlo.reduce_scatter": "reduce-scatter",
    "stablehlo.all_to_all": "all-to-all",
    "stablehlo.collective_permute": "collective-permute",
    "stablehlo.collective_broadcast": "collective-permute",
}
# Shardy's collectives: the kind and whether the HLO byte convention counts the result.
_SDY = {
    "sdy.all_gather": ("all-gather", True),
    "sdy.all_reduce": ("all-reduce", True),
    "sdy.reduce_scatter": ("reduce-scatter", False),
    "sdy.all_to_all": ("all-to-all", False),
    "sdy.collective_permute": ("collective-permute", False),
}
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
    def __init__(self, module: ShardyModule, times: DotTimes | None = None) -> None:
        self.m = module
        self.axis_sizes = dict(module.mesh_axes)
        self.axis_order = {name: i for i, (name, _) in enumerate(module.mesh_axes)}
        self.nodes: list[Node] = []
        self.frontier: dict[int, tuple[int, ...]] = {}
        self.defs: dict[int, Op] = {}
        self.const_int: dict[int, int] = {}
        self.warnings: list[str] = []
        self._sharding_cache: dict[int, Sharding] = {}
        self.regions: list[tuple[int, int, int]] = []
        self._groups: MeshGroups | None = None  # built at the first explicit collective
        self._fused: dict[int, dict[int, Kernel]] = {}  # id(block) -> kernels by root op
        self.uses: dict[int, int] = {}
        self._dots: list[Op] = []
        # id(dot) -> its windowed-einsum loop and the mesh axes its ring runs over
        self.windowed: dict[int, tuple[WindowedDot, tuple[tuple[str, int], ...]]] = {}
        self.window_gathers: set[int] = set()  # all-gathers a windowed dot replaces
        for fn in module.functions.values():
            self._index(fn.body)
        if times is not None:
            self._find_windows(times)

    # ---- helpers
    def _index(self, block: Block) -> None:
        for op in block.ops:
            for r in op.results:
                self.defs[r] = op
            for v in op.operands:
                self.uses[v] = self.uses.get(v, 0) + 1
            if op.name == "stablehlo.dot_general":
                self._dots.append(op)
            if op.int_value is not None and op.results:
                self.const_int[op.results[0]] = op.int_value
            for region in op.regions:
                self._index(region)

    def _find_windows(self, times: DotTimes) -> None:
        """XLA's windowed-einsum decision for every dot (:mod:`aoizora.stage1.windowed`)."""
        n = math.prod(size for _, size in self.m.mesh_axes)
        for op in self._dots:
            shape = window_shape(
                op, sharding=self._sharding, gathered_from=self._gathered_from, num_devices=n
            )
            if shape is None:
                continue
            g, on_contracting = shape
            mm = op_matmul(op, local_shape=self._local_shape)
            if mm is None:
                continue
            w = WindowedDot(
                gathered=g, at_contracting=on_contracting, partitions=n,
                other_bytes=self._bytes(op.operands[1 - g]),
                gathered_bytes=self._bytes(op.operands[g]), out_bytes=self._bytes(op.results[0]),
                matmul=mm,
            )  # fmt: skip
            compute_s = times.compute_s(w.work)
            gather_s = times.gather_s(n, w.gathered_bytes)
            if keeps_window(compute_s=compute_s, gather_s=gather_s, partitions=n):
                axes = self._extents(self.defs[op.operands[g]].collective_axes)
                self.windowed[id(op)] = (w, tuple(axes))
                self.window_gathers.add(op.operands[g])

    def _gathered_from(self, v: int) -> int | None:
        """The value an ``sdy.all_gather`` replicated into ``v`` for its one user, or None."""
        op = self.defs.get(v)
        if op is None or op.name != "sdy.all_gather" or self.uses.get(v, 0) != 1:
            return None
        return op.operands[0] if self._sharding(v).num_shards == 1 else None

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

    def _stored_bytes(self, v: int) -> int:
        """What a kernel moves reading or writing ``v``: its tiled footprint (the compiled
        program's pricing counts the same, aoizora.hlo.compute.hbm_size_bytes)."""
        return self._type(v).stored_bytes(self._local_shape(v))

    def _local_shape(self, v: int) -> tuple[int, ...]:
        t, s = self._type(v), self._sharding(v)
        return tuple(
            -(-size // math.prod(a.size for a in axes)) if axes else size
            for size, axes in zip(t.shape, s.dims, strict=True)
        )

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
        work: Work | None = None,
    ) -> int:
        work = work or Work()
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
                flops_per_chip=work.flops,
                hbm_bytes_per_chip=float(work.hbm_bytes),
                work=work,
                count=ctx.count,
                deps=deps,
                op=op.name,
                reason=reason,
                region=ctx.region,
            )
        )
        return nid

    def _collective(
        self, op: Op, ctx: _Ctx, *, collective: str, axes: Sequence[tuple[str, int]],
        nbytes: int, kind: str, reason: str, deps: tuple[int, ...] | None = None,
    ) -> int:  # fmt: skip
        """A communication node (plus the relayout after an all-to-all); its last node id."""
        nid = self._add(
            kind=kind,
            collective=collective,
            axes=axes,
            nbytes=nbytes,
            ctx=ctx,
            deps=self._deps(op.operands) if deps is None else deps,
            op=op,
            reason=reason,
        )
        if collective == "all-to-all":
            nid = self._relayout(nid, nbytes, ctx, op)
        return nid

    def _relayout(self, a2a: int, nbytes: int, ctx: _Ctx, op: Op) -> int:
        """The memory-bound copies around an all-to-all; returns the new last node.

        XLA's TPU all-to-all exchanges chunks of the *major* dimension, so the
        partitioner transposes the split dimension to the front before it and
        the concatenated dimension back after it (``AllToAllDecomposer`` /
        SPMD ``AllToAll`` resharding in openxla/xla). Each transpose reads and
        writes the buffer: ``RELAYOUT_PASSES * V`` HBM bytes per chip for
        ``V = bytes_per_device`` (a copy kernel at HBM bandwidth).
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
            work=Work(hbm_bytes=RELAYOUT_PASSES * nbytes),
        )

    def _set_results(self, op: Op, front: tuple[int, ...]) -> None:
        for r in op.results:
            self.frontier[r] = front

    # ---- walking
    def build_function(self, fn: Function, ctx: _Ctx) -> None:
        for a in fn.body.args:
            self.frontier.setdefault(a, ())
        self._block(fn.body, ctx)

    def _block(self, block: Block, ctx: _Ctx) -> None:
        # A function called many times (ring attention's steps) fuses the same way
        # at every call: fuse each block once.
        at_root = self._fused.get(id(block))
        if at_root is None:
            at_root = {k.root: k for k in fuse_block(block, bytes_of=self._stored_bytes)}
            self._fused[id(block)] = at_root
        for i, op in enumerate(block.ops):
            if op.name in _RETURNS:
                continue
            kernel = at_root.get(i)
            if kernel is not None:
                self._kernel(block, kernel, ctx)
            elif op_class(op.name) == "opaque":
                self._opaque(op, ctx)
            else:  # fused into a later kernel, or duplicated into its consumers
                self._set_results(op, self._deps(op.operands))

    def _return_front(self, block: Block) -> tuple[int, ...]:
        if block.ops and block.ops[-1].name in _RETURNS:
            return self._deps(block.ops[-1].operands)
        return ()

    def _kernel(self, block: Block, kernel: Kernel, ctx: _Ctx) -> None:
        ops = [block.ops[i] for i in kernel.ops]
        deps = self._deps(kernel.inputs)
        matmuls = {id(op): op_matmul(op, local_shape=self._local_shape) for op in ops}
        hbm = float(kernel.hbm_bytes)
        for op in ops:
            window = self.windowed.get(id(op))
            if window is not None:
                deps = self._window_loop(op, window, ctx, deps)
                w = window[0]
                # The loop reads both operands and writes the dot's result; what is
                # left of the kernel reads that result unless the dot is its root.
                rest = hbm - w.other_bytes - w.gathered_bytes
                rest += -w.out_bytes if op is ops[-1] else w.out_bytes
                matmuls[id(op)], hbm = None, max(0.0, rest)
        work = Work(matmuls=tuple(m for m in matmuls.values() if m is not None), hbm_bytes=hbm)
        named = [op for op in ops if op_class(op.name) in ("matmul", "root")] or ops
        nid = self._add(
            kind="compute",
            collective="",
            axes=(),
            nbytes=0,
            ctx=ctx,
            deps=deps,
            op=named[-1],
            reason=f"fused kernel of {len(ops)} op(s): {named[-1].location or named[-1].name}",
            work=work,
        )
        for op in ops:
            self._set_results(op, (nid,))

    def _window_loop(
        self,
        op: Op,
        window: tuple[WindowedDot, tuple[tuple[str, int], ...]],
        ctx: _Ctx,
        deps: tuple[int, ...],
    ) -> tuple[int, ...]:
        """The windowed-einsum loop of ``op``, a region of its own; returns its last node.

        Each iteration: two permutes (one per ring direction) under the first
        partial dot, two more under the second, which needs the first's shards.
        """
        w, axes = window
        reason = "windowed einsum of an all-gathered dot (XLA dot_handler)"
        if w.iterations > 1:  # one more shard moves before the loop (measured at n = 8)
            self._add(kind="implicit", collective="collective-permute", axes=axes,
                      nbytes=w.permute_bytes, ctx=ctx, deps=deps, op=op, reason=reason)  # fmt: skip
        rid = len(self.regions) + 1
        self.regions.append((rid, ctx.region, w.iterations))
        inner = _Ctx(ctx.count * w.iterations, ctx.manual, ctx.depth, rid)
        before: tuple[int, ...] = ()
        for stage in w.stages():
            permutes = tuple(
                self._add(kind="implicit", collective="collective-permute", axes=axes,
                          nbytes=w.permute_bytes, ctx=inner, deps=deps, op=op, reason=reason)
                for _ in range(2)
            )  # fmt: skip
            nid = self._add(
                kind="compute", collective="", axes=(), nbytes=0, ctx=inner,
                deps=tuple(sorted({*deps, *before})), op=op, reason=reason, work=stage,
            )  # fmt: skip
            before = (*permutes, nid)
        return (before[-1],)

    def _opaque(self, op: Op, ctx: _Ctx) -> None:
        name = op.name
        if name == "sdy.manual_computation":
            self._manual(op, ctx)
        elif name == "stablehlo.while":
            self._while(op, ctx)
        elif name in ("func.call", "call"):
            self._call(op, ctx)
        elif name in _EXPLICIT_HLO:
            self._explicit_hlo(op, ctx, _EXPLICIT_HLO[name])
        elif name in _SDY:
            self._sdy_collective(op, ctx)
        elif name == "stablehlo.custom_call":
            self._custom_call(op, ctx)
        else:
            if name in ("sdy.reshard", "sdy.sharding_constraint"):
                self.warnings.append(
                    f"{name} left after sdy-reshard-to-collectives ({op.location or 'no location'})"
                    "; its communication is not counted"
                )
            for region in op.regions:  # case/if branches, reduce bodies...
                self._block(region, ctx)
            self._set_results(op, self._deps(op.operands))

    def _manual(self, op: Op, ctx: _Ctx) -> None:
        body = op.regions[0]
        for a, v in zip(body.args, op.operands, strict=False):
            self.frontier[a] = self.frontier.get(v, ())
        inner = _Ctx(ctx.count, ctx.manual | frozenset(op.manual_axes), ctx.depth, ctx.region)
        self._block(body, inner)
        self._set_results(op, self._return_front(body))

    def _while(self, op: Op, ctx: _Ctx) -> None:
        trip = self._trip_count(op)
        cond, body = op.regions[0], op.regions[1]
        # Condition and body share one region: Q1's schedule runs the body once
        # per trip (the condition's one extra evaluation is left out there).
        rid = len(self.regions) + 1
        self.regions.append((rid, ctx.region, trip))
        for region, count in ((cond, ctx.count * (trip + 1)), (body, ctx.count * trip)):
            for a, v in zip(region.args, op.operands, strict=False):
                self.frontier[a] = self.frontier.get(v, ())
            self._block(region, _Ctx(count, ctx.manual, ctx.depth, rid))
        self._set_results(op, self._return_front(body) or self._deps(op.operands))

    def _call(self, op: Op, ctx: _Ctx) -> None:
        fn = self.m.functions.get(op.callee)
        if fn is None or ctx.depth > 64:
            self.warnings.append(f"call to @{op.callee} not followed (missing or too deep)")
            self._set_results(op, self._deps(op.operands))
            return
        for a, v in zip(fn.body.args, op.operands, strict=False):
            self.frontier[a] = self.frontier.get(v, ())
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

    # ---- collectives
    def _sdy_collective(self, op: Op, ctx: _Ctx) -> None:
        if op.results and op.results[0] in self.window_gathers:
            # A windowed dot's loop moves these shards (_window_loop).
            self._set_results(op, self._deps(op.operands))
            return
        collective, counts_result = _SDY[op.name]
        value = op.results[0] if counts_result else op.operands[0]
        axes: Sequence[AxisRef] = op.collective_axes
        if op.name == "sdy.collective_permute":
            src, dst = self._sharding(op.operands[0]), self._sharding(op.results[0])
            axes = _moved_axes(src, dst)
        nid = self._collective(
            op, ctx, collective=collective, axes=self._extents(axes), nbytes=self._bytes(value),
            kind="implicit", reason=f"{op.name} (Shardy reshard-to-collectives)",
        )  # fmt: skip
        self._set_results(op, (nid,))

    def _varying_axes(self, groups: Sequence[Sequence[int]]) -> list[tuple[str, int]]:
        if self._groups is None:
            self._groups = MeshGroups(self.m.mesh_axes, device_ids=self.m.device_ids)
        return self._groups.varying_axes(groups)

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
        nid = self._collective(
            op, ctx, collective=collective, axes=axes, nbytes=nbytes, kind="explicit",
            reason=f"{op.name} in shard_map",
        )  # fmt: skip
        self._set_results(op, (nid,))

    # ---- opaque kernels
    def _custom_call(self, op: Op, ctx: _Ctx) -> None:
        deps = self._deps(op.operands)
        if any(a not in ctx.manual for a in self.axis_sizes):
            deps = self._replicate_operands(op, ctx) or deps
        io = sum(self._bytes(v) for v in op.operands) + sum(self._bytes(r) for r in op.results)
        work, known = kernel_work(
            op, operand_types=[self._type(v) for v in op.operands], io_bytes=io
        )
        if not known:
            if op.call_target == "tpu_custom_call":
                self.warnings.append(
                    f"kernel {op.kernel_name or op.call_target!r} has no CostEstimate; its FLOPs "
                    "are not counted"
                )
        nid = self._add(
            kind="compute", collective="", axes=(), nbytes=0, ctx=ctx, deps=deps, op=op,
            reason=f"kernel {op.kernel_name or op.call_target}", work=work,
        )  # fmt: skip
        self._set_results(op, (nid,))

    def _replicate_operands(self, op: Op, ctx: _Ctx) -> tuple[int, ...]:
        """Hand model: XLA runs an opaque custom call outside shard_map replicated.

        Shardy has no sharding rule for it and passes shardings through; the SPMD
        partitioner all-gathers every sharded operand first.
        """
        lasts = []
        for v in op.operands:
            axes = [a for d in self._sharding(v).dims for a in d if a.name not in ctx.manual]
            if not axes:
                continue
            lasts.append(
                self._collective(
                    op,
                    ctx,
                    collective="all-gather",
                    axes=self._extents(axes),
                    nbytes=self._type(v).size_bytes,
                    kind="implicit",
                    deps=self._deps([v]),
                    reason=f"replicated operands of opaque custom call {op.call_target}",
                )  # fmt: skip
            )
        return tuple(lasts)


def _moved_axes(src: Sharding, dst: Sharding) -> list[AxisRef]:
    """Axes whose place (dimension, position) differs between two shardings."""

    def places(s: Sharding) -> dict[AxisRef, tuple[int, int]]:
        return {a: (d, i) for d, axes in enumerate(s.dims) for i, a in enumerate(axes)}

    a, b = places(src), places(dst)
    return sorted({x for x in (*a, *b) if a.get(x) != b.get(x)})


def build_dag(module: ShardyModule, *, times: DotTimes | None = None) -> PredictionDag:
    """Build the prediction DAG and memory estimate of a module read after :data:`PIPELINE`.

    Where XLA's partitioner departs from Shardy's reshards the module is first
    rewritten to match it (:func:`aoizora.stage1.partitioner.as_xla_partitions`).
    ``times`` prices XLA's windowed-einsum cost rule; without it no dot is windowed.

    Raises :class:`~aoizora.stage1.shardy.Stage1Error` when the module has no mesh.
    """
    if not module.mesh_axes:
        raise Stage1Error(
            "the lowered program has no sdy.mesh: lower it with shardings over a "
            "jax.sharding.Mesh, e.g. jax.jit(f, in_shardings=NamedSharding(mesh, P('data')))"
        )
    module = as_xla_partitions(module)
    b = _Builder(module, times)
    main = module.functions[module.main]
    b.build_function(main, _Ctx(1, frozenset()))
    args = sum(b._bytes(a) for a in main.body.args)
    peak = peak_temp_bytes(
        main.body,
        functions=module.functions,
        bytes_of=b._stored_bytes,
        transient_bytes={},
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
