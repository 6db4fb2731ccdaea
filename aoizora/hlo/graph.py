"""The typed collective graph of a compiled HLO module, in schedule order.

:func:`build_graph` walks the call graph from the ENTRY computation. Every
non-fused computation that runs is a :class:`Region` (the entry, a ``while``
body, a ``call`` target, a ``conditional`` branch) holding its *steps* in
schedule order (the node types are in :mod:`.nodes`):

- :class:`ComputeSegment` — the instructions between two communication events,
  with flops and HBM bytes per kernel (:mod:`.costs`);
- :class:`CollectiveStart` / :class:`CollectiveDone` — where a collective is
  issued and where its result is first needed. A synchronous collective has its
  done step right after its start; an asynchronous one (``*-start``/``*-done``,
  ``async-start``/``async-done``, send/recv, TPU async collective fusions) has
  the compute it overlaps between the two;
- :class:`OpaqueCall` — a custom call (e.g. a Pallas kernel) with its operand
  and result shapes, for a caller to cost;
- :class:`SubRegion` — a ``while`` (with its trip count), ``call`` or
  ``conditional`` (one region per branch).

Rules that decide what a logical collective is:

- A collective inside a fusion belongs to the region running the fusion. TPU
  async collective fusions mention one collective (same opcode and
  ``channel_id``) in a start fusion (root ``AsyncCollectiveStart``), in overlap
  fusions and in a done fusion (root ``AsyncCollectiveDone``): that is ONE
  collective, issued at the start fusion and complete at the done fusion, and
  the overlap fusions are compute. ``channel_id`` is not unique across kinds, so
  the key is ``(kind, channel_id)`` within one region execution.
- A fusion that holds an ``all-reduce`` whose result it dynamic-slices by
  partition id (TPU's ``all-reduce-scatter`` fusion) is reported as an
  all-reduce with ``scatter=True``: each device keeps only its shard, so it is
  replayed as a reduce-scatter.
- ``send``/``recv`` with one ``channel_id`` are one collective (kind ``send``;
  pairs from ``_xla_send_recv_source_target_pairs``).
- A ``while`` runs ``trip_count`` times: ``known_trip_count`` from its
  backend_config when present, else derived from the condition
  (``compare(induction, constant)``), the induction variable's initial value in
  the init tuple and its increment in the body (:mod:`.loops`). Counts multiply
  through nesting.

Example:
    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m, num_partitions=4
    ... %add (x: f32[], y: f32[]) -> f32[] {
    ...   %x = f32[] parameter(0)
    ...   %y = f32[] parameter(1)
    ...   ROOT %s = f32[] add(%x, %y)
    ... }
    ... ENTRY %e (p: f32[1024]) -> f32[1024] {
    ...   %p = f32[1024]{0} parameter(0)
    ...   %ar = f32[1024] all-reduce(%p), channel_id=1, replica_groups=[2,2]<=[4], to_apply=%add
    ... }''')
    >>> g = build_graph(m)
    >>> c = g.collectives[0]
    >>> c.kind, c.groups, c.buffer_bytes, c.count
    ('all-reduce', ((0, 1), (2, 3)), 4096, 1)
"""

from __future__ import annotations

import re
from dataclasses import replace

from aoizora.errors import HloParseError
from aoizora.hlo.compute import CostModel, collective_base
from aoizora.hlo.loops import trip_count
from aoizora.hlo.nodes import (
    Collective,
    CollectiveDone,
    CollectiveGraph,
    CollectiveStart,
    ComputeSegment,
    OpaqueCall,
    OpaqueNode,
    Region,
    Step,
    SubRegion,
    instruction_error,
    kernel_blocks,
    read_collective,
)
from aoizora.hlo.text import Computation, HloModule, Instruction, parse_module
from sim.compute import Work

# CollectiveGraph is re-exported: it is what build_graph returns, and callers
# import it from here beside graph_from_text.
__all__ = ["BOOKKEEPING_CALLS", "CollectiveGraph", "build_graph", "graph_from_text"]

_MARKERS = frozenset({"AsyncCollectiveStart", "AsyncCollectiveDone"})
# Compiler-internal custom calls that launch no kernel (buffer bookkeeping,
# sharding annotations): not opaque nodes, and free.
BOOKKEEPING_CALLS = frozenset(
    {
        "AllocateBuffer",
        "ConcatBitcast",
        "SliceToDynamic",
        "PadToStatic",
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "LayoutConstraint",
        "annotate_device_placement",
        "MoveToHost",
        "MoveToDevice",
    }
)


class _Builder:
    def __init__(self, module: HloModule) -> None:
        self.module = module
        self.costs = CostModel(module)
        self.collectives: list[Collective] = []  # index == id
        self.opaques: list[OpaqueNode] = []
        self.regions: list[Region | None] = []
        self.warnings: list[str] = []
        self._stack: list[str] = []
        self.walks: list[_RegionWalk] = []

    def open_in_ancestors(self, key: tuple[str, object]) -> int | None:
        """A fused collective started, and not yet done, by an enclosing region.

        An async collective fusion may start in a loop body, overlap a nested
        loop (its overlap fusion sits in the nested body) and complete after it.
        """
        for walk in reversed(self.walks[:-1]):
            cid = walk.fused.get(key)
            if cid is not None and cid in walk.started and cid not in walk.finished:
                return cid
        return None

    # ----------------------------------------------------------------- helpers
    def _fail(self, instr: Instruction, problem: str) -> HloParseError:
        return instruction_error(instr, problem)

    def _new_collective(
        self,
        comp: Computation,
        instr: Instruction,
        *,
        region: int,
        count: int,
        via: str,
        is_async: bool,
        depends_on: frozenset[str],
    ) -> int:
        self.collectives.append(
            read_collective(
                comp,
                instr,
                collective_id=len(self.collectives),
                num_devices=self.module.num_devices,
                region=region,
                count=count,
                via=via,
                is_async=is_async,
                depends_on=depends_on,
            )
        )
        return len(self.collectives) - 1

    # ------------------------------------------------------------------ regions
    def region(
        self,
        comp_name: str,
        *,
        kind: str,
        parent: int | None,
        trip_count: int,
        trip_source: str,
        count: int,
    ) -> int:
        if comp_name in self._stack:
            raise HloParseError(
                f"computation %{comp_name} calls itself through {' -> '.join(self._stack)}; "
                f"HLO call graphs are acyclic"
            )
        self._stack.append(comp_name)
        region_id = len(self.regions)
        self.regions.append(None)
        comp = self.module.computations[comp_name]
        walk = _RegionWalk(self, comp, region_id, count)
        self.walks.append(walk)
        steps = walk.run()
        self.walks.pop()
        self.regions[region_id] = Region(
            id=region_id,
            computation=comp_name,
            kind=kind,
            parent=parent,
            trip_count=trip_count,
            trip_count_source=trip_source,
            count=count,
            steps=steps,
        )
        self._stack.pop()
        return region_id


class _RegionWalk:
    """Turns one computation execution into steps (see the module docstring)."""

    def __init__(self, builder: _Builder, comp: Computation, region: int, count: int) -> None:
        self.b = builder
        self.comp = comp
        self.region = region
        self.count = count
        self.steps: list[Step] = []
        self.kernels: list[Work] = []
        self.issued: list[Work] = []  # every kernel of this execution, in order
        self.dma_started: dict[str, int] = {}  # copy-start/slice-start -> len(issued) then
        self.names: list[str] = []
        self.seg_first = ""
        self.seg_last = ""
        self.frontier: dict[str, frozenset[str]] = {}
        self.open_ops: dict[str, int] = {}  # start instruction name -> collective
        self.fused: dict[tuple[str, object], int] = {}  # (kind, channel) -> collective
        self.started: set[int] = set()
        self.finished: set[int] = set()
        self.send_recv: dict[int, int] = {}
        self.last_done: dict[int, str] = {}
        for instr in comp.instructions:
            if instr.opcode in ("send-done", "recv-done"):
                ch = instr.attrs.get("channel_id")
                if ch is not None and ch.isdigit():
                    self.last_done[int(ch)] = instr.name

    def deps(self, instr: Instruction) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for operand in instr.operands:
            f = self.frontier.get(operand)
            if f:
                out = out | f
        return out

    def add_compute(self, instr: Instruction, work: Work) -> None:
        if (
            work.flops <= 0
            and work.hbm_bytes <= 0
            and work.onchip_bytes + work.onchip_copy_bytes + work.dma_bytes <= 0
        ):
            return
        if not work.dma_bytes:  # a wait is no kernel another DMA could run beside
            self.issued.append(work)
        if not self.kernels:
            self.seg_first = instr.name
        self.seg_last = instr.name
        self.kernels.append(work)
        self.names.append(instr.name)

    def flush(self) -> None:
        if not self.kernels:
            return
        self.steps.append(
            ComputeSegment(
                flops=sum(k.flops for k in self.kernels),
                bytes_accessed=sum(k.hbm_bytes for k in self.kernels),
                kernels=tuple(self.kernels),
                first=self.seg_first,
                last=self.seg_last,
                names=tuple(self.names),
            )
        )
        self.kernels = []
        self.names = []

    def start(self, cid: int) -> None:
        self.flush()
        self.steps.append(CollectiveStart(cid))
        self.started.add(cid)

    def done(self, cid: int) -> None:
        self.flush()
        self.steps.append(CollectiveDone(cid))
        self.finished.add(cid)

    def run(self) -> tuple[Step, ...]:
        for instr in self.comp.instructions:
            self.visit(instr)
        self.flush()
        return tuple(self.steps)

    # ------------------------------------------------------------------ visit
    def visit(self, instr: Instruction) -> None:
        op = instr.opcode
        base = collective_base(op)
        deps = self.deps(instr)
        b = self.b
        if base is not None:
            self.visit_collective(instr, base, deps)
        elif op == "fusion":
            self.visit_fusion(instr, deps)
        elif op == "async-start":
            self.visit_async_start(instr, deps)
        elif op == "async-update":
            if instr.operands and instr.operands[0] in self.open_ops:
                self.open_ops[instr.name] = self.open_ops[instr.operands[0]]
            self.frontier[instr.name] = deps
        elif op == "async-done":
            cid = self.open_ops.get(instr.operands[0]) if instr.operands else None
            if cid is not None:
                self.done(cid)
                self.frontier[instr.name] = frozenset({f"c{cid}"})
            else:
                self.frontier[instr.name] = deps
        elif op == "while":
            self.visit_while(instr, deps)
        elif op == "call":
            self.flush()
            callee = instr.called()[0]
            rid = b.region(
                callee,
                kind="call",
                parent=self.region,
                trip_count=1,
                trip_source="call",
                count=self.count,
            )
            self.steps.append(SubRegion("call", instr.name, (rid,), 1))
            self.frontier[instr.name] = deps | {f"r{rid}"}
        elif op == "conditional":
            self.flush()
            branches = instr.called()
            rids = tuple(
                b.region(
                    br,
                    kind="branch",
                    parent=self.region,
                    trip_count=1,
                    trip_source="branch",
                    count=self.count,
                )
                for br in branches
            )
            b.warnings.append(
                f"line {instr.line}: conditional %{instr.name} has {len(rids)} branches; "
                f"the taken branch is unknown, so each branch's collectives are listed once per "
                f"execution and the replay charges the slowest branch"
            )
            self.steps.append(SubRegion("conditional", instr.name, rids, 1))
            self.frontier[instr.name] = deps | {f"r{r}" for r in rids}
        elif op in ("copy-start", "slice-start"):
            # a cross-program prefetch is issued as the previous execution ends: no wait
            if "cross_program_prefetch_index" not in instr.attrs:
                self.dma_started[instr.name] = len(self.issued)
            self.frontier[instr.name] = deps
        elif op in ("copy-done", "slice-done"):
            # a DMA this execution started: its wait runs beside what was issued since
            at = self.dma_started.get(instr.operands[0]) if instr.operands else None
            if at is not None:
                beside = tuple(self.issued[at:])
                self.add_compute(instr, Work(dma_bytes=instr.shape.stored_bytes, beside=beside))
            self.frontier[instr.name] = deps
        elif op == "custom-call":
            target = instr.attrs.get("custom_call_target", "").strip('"')
            if target in _MARKERS or target in BOOKKEEPING_CALLS:
                self.frontier[instr.name] = deps
            else:
                oid = self.opaque(instr, target, deps)
                self.frontier[instr.name] = frozenset({f"o{oid}"})
        else:
            self.add_compute(instr, b.costs.instruction(self.comp, instr))
            self.frontier[instr.name] = deps

    def opaque(
        self,
        instr: Instruction,
        target: str,
        deps: frozenset[str],
        *,
        comp: Computation | None = None,
    ) -> int:
        """Record a custom call; ``comp`` is the computation holding it (default: this one)."""
        self.flush()
        b = self.b
        comp = self.comp if comp is None else comp
        m = re.search(r'op_name="([^"]*)"', instr.attrs.get("metadata", ""))
        oid = len(b.opaques)
        b.opaques.append(
            OpaqueNode(
                id=oid,
                name=instr.name,
                target=target,
                op_name=m.group(1) if m else "",
                computation=comp.name,
                line=instr.line,
                region=self.region,
                operand_shapes=tuple(comp.by_name[o].shape for o in instr.operands),
                result_shape=instr.shape,
                count=self.count,
                depends_on=tuple(sorted(deps)),
                blocks=kernel_blocks(instr),
            )
        )
        self.steps.append(OpaqueCall(oid))
        return oid

    def visit_collective(self, instr: Instruction, base: str, deps: frozenset[str]) -> None:
        op = instr.opcode
        b = self.b
        if op.endswith("-done"):
            start = instr.operands[0] if instr.operands else ""
            cid = self.open_ops.get(start)
            if cid is None:
                raise b._fail(instr, f"its operand %{start} is not a matching {base}-start")
            if base in ("send", "recv"):
                ch = instr.attrs.get("channel_id", "")
                if ch.isdigit() and self.last_done.get(int(ch)) != instr.name:
                    self.frontier[instr.name] = frozenset({f"c{cid}"})
                    return
            else:
                b.collectives[cid] = replace(
                    b.collectives[cid], result_bytes=instr.shape.size_bytes
                )
            self.done(cid)
            self.frontier[instr.name] = frozenset({f"c{cid}"})
            return
        if base in ("send", "recv"):
            ch = instr.attrs.get("channel_id", "")
            channel = int(ch) if ch.isdigit() else -1 - len(self.send_recv)
            cid_or_none = self.send_recv.get(channel)

            def read_side() -> int:
                return b._new_collective(
                    self.comp,
                    instr,
                    region=self.region,
                    count=self.count,
                    via="send-recv",
                    is_async=True,
                    depends_on=deps,
                )

            if cid_or_none is None:
                cid = read_side()
                self.send_recv[channel] = cid
                self.start(cid)
            else:
                cid = cid_or_none
                pending = b.collectives[cid]
                if base == "send":  # the send side defines the payload and pairs
                    sent = b.collectives.pop(read_side())
                    pending = b.collectives[cid] = replace(
                        pending,
                        kind="send",
                        name=sent.name,
                        line=sent.line,
                        operand_bytes=sent.operand_bytes,
                        pairs=sent.pairs or pending.pairs,
                    )
                b.collectives[cid] = replace(
                    pending, depends_on=tuple(sorted(set(pending.depends_on) | deps))
                )
            self.open_ops[instr.name] = cid
            self.frontier[instr.name] = deps
            return
        is_async = op.endswith("-start")
        cid = b._new_collective(
            self.comp,
            instr,
            region=self.region,
            count=self.count,
            via="async-op" if is_async else "op",
            is_async=is_async,
            depends_on=deps,
        )
        self.start(cid)
        if is_async:
            self.open_ops[instr.name] = cid
            self.frontier[instr.name] = deps
        else:
            self.done(cid)
            self.frontier[instr.name] = frozenset({f"c{cid}"})

    def visit_async_start(self, instr: Instruction, deps: frozenset[str]) -> None:
        b = self.b
        callee = b.module.computations[instr.called()[0]]
        wrapped = _wrapped_collective(b.module, callee)
        if wrapped is not None:
            owner, inner = wrapped
            cid = b._new_collective(
                owner,
                inner,
                region=self.region,
                count=self.count,
                via="async-wrapper",
                is_async=True,
                depends_on=deps,
            )
            self.start(cid)
            self.open_ops[instr.name] = cid
        else:
            for inner in callee.instructions:
                if inner.opcode == "custom-call":
                    target = inner.attrs.get("custom_call_target", "").strip('"')
                    self.opaque(inner, target, deps, comp=callee)
                else:
                    self.add_compute(inner, b.costs.instruction(callee, inner))
        self.frontier[instr.name] = deps

    def visit_fusion(self, instr: Instruction, deps: frozenset[str]) -> None:
        b = self.b
        summary = b.costs.fusion(instr)
        if not summary.collectives:
            self.add_compute(instr, b.costs.fusion_work(instr))
            self.frontier[instr.name] = deps
            return
        is_start = "AsyncCollectiveStart" in summary.markers
        is_done = "AsyncCollectiveDone" in summary.markers
        ids: list[int] = []
        fresh: list[int] = []
        for comp, inner in summary.collectives:
            kind = collective_base(inner.opcode) or inner.opcode
            ch = inner.attrs.get("channel_id")
            key: tuple[str, object] = (kind, int(ch) if ch and ch.isdigit() else inner.name)
            cid = self.fused.get(key)
            if cid is None and not (is_start or is_done):
                if b.open_in_ancestors(key) is not None:
                    continue  # an overlap mention of a collective in flight outside
            if cid is None:
                cid = b._new_collective(
                    comp,
                    inner,
                    region=self.region,
                    count=self.count,
                    via="async-fusion" if (is_start or is_done) else "fusion",
                    is_async=is_start,
                    depends_on=deps,
                )
                self.fused[key] = cid
                fresh.append(cid)
                if kind == "all-reduce" and _scatters(comp, inner):
                    b.collectives[cid] = replace(b.collectives[cid], scatter=True)
            ids.append(cid)
        compute = b.costs.fusion_work(instr)
        if not ids:
            self.add_compute(instr, compute)
            self.frontier[instr.name] = deps
        elif is_start:
            for cid in fresh:
                self.start(cid)
            self.frontier[instr.name] = deps
        elif is_done:
            for cid in ids:
                if cid not in self.started:
                    self.start(cid)
                self.done(cid)
            self.frontier[instr.name] = frozenset(f"c{cid}" for cid in ids)
        elif all(cid in self.started for cid in ids):
            # An overlap fusion: compute that runs while the collective is in flight.
            self.add_compute(instr, compute)
            self.frontier[instr.name] = deps
        else:
            for cid in ids:
                if cid not in self.started:
                    self.start(cid)
                    self.done(cid)
            self.add_compute(instr, compute)
            self.frontier[instr.name] = frozenset(f"c{cid}" for cid in ids)

    def visit_while(self, instr: Instruction, deps: frozenset[str]) -> None:
        self.flush()
        b = self.b
        trip, source = trip_count(b.module, self.comp, instr)
        if trip is None:
            b.warnings.append(
                f"line {instr.line}: the trip count of while %{instr.name} could not be derived "
                f"(no known_trip_count and no 'compare(induction, constant)' condition); its "
                f"body is counted once"
            )
            trip, source = 1, "unknown"
        cond_name = instr.attrs.get("condition", "").strip().lstrip("%")
        cond = b.module.computations.get(cond_name)
        if cond is not None and any(collective_base(i.opcode) for i in cond.instructions):
            b.warnings.append(
                f"line {instr.line}: the condition %{cond_name} of while %{instr.name} holds "
                f"collectives; they are not counted"
            )
        body = instr.attrs.get("body", "").strip().lstrip("%")
        rid = b.region(
            body,
            kind="while",
            parent=self.region,
            trip_count=trip,
            trip_source=source,
            count=self.count * trip,
        )
        self.steps.append(SubRegion("while", instr.name, (rid,), trip))
        self.frontier[instr.name] = deps | {f"r{rid}"}


def _wrapped_collective(
    module: HloModule, callee: Computation
) -> tuple[Computation, Instruction] | None:
    """The collective an ``async-start`` runs, with the computation that holds it.

    Usually the called computation holds it directly. tpu7x offloads collectives to
    SparseCores: ``async-start()`` calls a computation whose custom call calls the
    computation holding the collective (docs/facts.md, Ironwood (TPU7x); docs/hlo.md).
    """
    for inner in callee.instructions:
        if collective_base(inner.opcode) is not None:
            return callee, inner
    for inner in callee.instructions:
        if inner.opcode != "custom-call":
            continue
        for name in inner.called():
            comp = module.computations[name]
            for deep in comp.instructions:
                if collective_base(deep.opcode) is not None:
                    return comp, deep
    return None


def _scatters(comp: Computation, allreduce: Instruction) -> bool:
    """Whether the all-reduce's only use is a dynamic-slice by partition (TPU fused RS)."""
    users = [i for i in comp.instructions if allreduce.name in i.operands]
    if len(users) != 1 or users[0].opcode != "dynamic-slice":
        return False
    return any(i.opcode == "partition-id" for i in comp.instructions)


# ------------------------------------------------------------------ entry points
def build_graph(module: HloModule) -> CollectiveGraph:
    """Build the collective graph of a parsed module (see the module docstring)."""
    builder = _Builder(module)
    builder.region(
        module.entry_name, kind="entry", parent=None, trip_count=1, trip_source="entry", count=1
    )
    collectives = tuple(builder.collectives)
    regions = tuple(r for r in builder.regions if r is not None)
    return CollectiveGraph(
        module_name=module.name,
        num_partitions=module.num_partitions,
        replica_count=module.replica_count,
        regions=regions,
        collectives=collectives,
        opaques=tuple(builder.opaques),
        warnings=tuple(builder.warnings),
    )


def graph_from_text(text: str) -> CollectiveGraph:
    """Parse compiled HLO text and build its collective graph."""
    return build_graph(parse_module(text))
