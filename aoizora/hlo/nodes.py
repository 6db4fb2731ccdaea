"""The nodes of a collective graph, and how one HLO collective is read into one.

The value types :func:`aoizora.hlo.graph.build_graph` returns: a
:class:`CollectiveGraph` holds :class:`Region` s whose steps (:data:`Step`)
are :class:`ComputeSegment`, :class:`CollectiveStart`/:class:`CollectiveDone`,
:class:`OpaqueCall` and :class:`SubRegion`, and the :class:`Collective` and
:class:`OpaqueNode` records those steps point at. :func:`read_collective`
reads one collective instruction (kind, ``channel_id``, replica groups or
source-target pairs, bytes per device) into a :class:`Collective`; pairing
starts with dones, fusions and loops is the graph builder's job.

Example:
    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m, num_partitions=4
    ... ENTRY %e (p: f32[256]) -> f32[1024] {
    ...   %p = f32[256]{0} parameter(0)
    ...   ROOT %ag = f32[1024]{0} all-gather(%p), replica_groups=[1,4]<=[4], dimensions={0}
    ... }''')
    >>> comp = m.computations[m.entry_name]
    >>> c = read_collective(
    ...     comp, comp.by_name["ag"], collective_id=0, num_devices=4, region=0, count=1,
    ...     via="op", is_async=False, depends_on=frozenset(),
    ... )
    >>> c.kind, c.groups, c.operand_bytes, c.result_bytes, c.buffer_bytes
    ('all-gather', ((0, 1, 2, 3),), 1024, 4096, 4096)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from aoizora.errors import HloParseError
from aoizora.hlo.compute import collective_base
from aoizora.hlo.groups import ReplicaGroupError, parse_pairs, parse_replica_groups
from aoizora.hlo.shapes import Shape
from aoizora.hlo.text import Computation, Instruction
from sim.compute import Work

__all__ = [
    "kernel_blocks",
    "Collective",
    "CollectiveDone",
    "CollectiveGraph",
    "CollectiveStart",
    "ComputeSegment",
    "OpaqueCall",
    "OpaqueNode",
    "Region",
    "Step",
    "SubRegion",
    "instruction_error",
    "read_collective",
]

_PAIRS_ATTR_RE = re.compile(r'_xla_send_recv_source_target_pairs\s*=\s*"([^"]*)"')


@dataclass(frozen=True)
class Collective:
    """One logical collective (counted ``count`` times per step).

    ``groups`` are logical device ids (``mesh.devices.flat`` positions);
    a ``collective-permute``/``send`` carries ``pairs`` instead (``groups`` empty).
    ``operand_bytes``/``result_bytes`` are per device; ``buffer_bytes`` is the
    size the simulator's collective model takes (all-gather: output; others:
    input). ``depends_on`` lists the nearest upstream nodes its operands come
    from: ``"c<id>"`` collectives, ``"o<id>"`` opaque calls, ``"r<id>"`` regions.
    """

    id: int
    kind: str
    name: str
    computation: str
    line: int
    region: int
    channel_id: int | None
    group_form: str
    groups: tuple[tuple[int, ...], ...]
    pairs: tuple[tuple[int, int], ...]
    operand_bytes: int
    result_bytes: int
    is_async: bool
    via: str
    count: int
    depends_on: tuple[str, ...]
    scatter: bool = False

    @property
    def buffer_bytes(self) -> int:
        if self.kind == "all-gather":
            return self.result_bytes
        return self.operand_bytes

    @property
    def group_size(self) -> int:
        if self.pairs:
            return 2
        return max((len(g) for g in self.groups), default=1)


@dataclass(frozen=True)
class OpaqueNode:
    """A custom call kept whole (e.g. a Pallas kernel); the caller costs it."""

    id: int
    name: str
    target: str
    op_name: str
    computation: str
    line: int
    region: int
    operand_shapes: tuple[Shape, ...]
    result_shape: Shape
    count: int
    depends_on: tuple[str, ...]
    # (q block, kv block, kv compute block) a blocked attention kernel says it runs
    # with, () if unsaid
    blocks: tuple[int, int, int] | tuple[()] = ()


_BLOCK_RE = {
    key: re.compile(rf'{key}\\*"\s*:\s*(\d+)')
    for key in ("block_q", "block_kv_compute", "block_kv")
}


def kernel_blocks(instr: Instruction) -> tuple[int, int, int] | tuple[()]:
    """(q block, kv block, kv compute block) of a Pallas attention kernel, from the
    ``xprof_metadata`` jax's splash kernel writes into its custom call's
    ``frontend_attributes`` (``"block_q": 512, "block_kv": 512, "block_kv_compute":
    512``); a block it does not say is the kv block's; () when absent.

    >>> from aoizora.hlo.shapes import Shape
    >>> meta = ('kernel_metadata={"xprof_metadata":"{\\\\"block_q\\\\": 512, '
    ...         '\\\\"block_kv\\\\": 2048, \\\\"block_kv_compute\\\\": 512}"}')
    >>> k = Instruction("k", "custom-call", Shape("f32"), (), {"frontend_attributes": meta}, 1)
    >>> kernel_blocks(k)
    (512, 2048, 512)
    """
    text = instr.attrs.get("frontend_attributes", "")
    found = {k: r.search(text) for k, r in _BLOCK_RE.items()}
    q = found["block_q"]
    kv = found["block_kv"] or found["block_kv_compute"]
    if q is None or kv is None:
        return ()
    kvc = found["block_kv_compute"] or kv
    return int(q.group(1)), int(kv.group(1)), int(kvc.group(1))


@dataclass(frozen=True)
class ComputeSegment:
    """Compute between communication events: each kernel's :class:`~sim.compute.Work`.

    ``names`` are the kernels' instruction names, in the same order (what a device
    profile calls them: ``aoizora explain`` joins the two by these).
    """

    flops: float
    bytes_accessed: float
    kernels: tuple[Work, ...]
    first: str
    last: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class CollectiveStart:
    collective: int


@dataclass(frozen=True)
class CollectiveDone:
    collective: int


@dataclass(frozen=True)
class OpaqueCall:
    opaque: int


@dataclass(frozen=True)
class SubRegion:
    """A ``while`` (``regions`` = its body), ``call`` or ``conditional`` (one per branch)."""

    kind: str
    name: str
    regions: tuple[int, ...]
    trip_count: int


Step = ComputeSegment | CollectiveStart | CollectiveDone | OpaqueCall | SubRegion


@dataclass(frozen=True)
class Region:
    """A computation execution context and its steps in schedule order."""

    id: int
    computation: str
    kind: str
    parent: int | None
    trip_count: int
    trip_count_source: str
    count: int
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class CollectiveGraph:
    """Collectives, opaque calls and regions of one compiled module."""

    module_name: str
    num_partitions: int
    replica_count: int
    regions: tuple[Region, ...]
    collectives: tuple[Collective, ...]
    opaques: tuple[OpaqueNode, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def num_devices(self) -> int:
        return self.num_partitions * self.replica_count

    def total_collective_bytes(self) -> int:
        """Sum over collectives of ``buffer_bytes * count`` (per device)."""
        return sum(c.buffer_bytes * c.count for c in self.collectives)

    def to_json_dict(self) -> dict[str, object]:
        """The item-6 JSON shape without ``step_time_s`` (the replay adds it)."""
        out: list[dict[str, object]] = []
        for c in self.collectives:
            entry: dict[str, object] = {"kind": c.kind}
            if c.pairs or c.kind in ("collective-permute", "send", "recv"):
                entry["pairs"] = [list(p) for p in c.pairs]
            else:
                entry["groups"] = [list(g) for g in c.groups]
            entry["bytes_per_device"] = c.buffer_bytes
            entry["count"] = c.count
            out.append(entry)
        return {"num_partitions": self.num_partitions, "collectives": out}


def instruction_error(instr: Instruction, problem: str) -> HloParseError:
    """An :class:`HloParseError` naming the instruction's line, name and opcode."""
    return HloParseError(f"line {instr.line}: %{instr.name} ({instr.opcode}): {problem}")


def read_collective(
    comp: Computation,
    instr: Instruction,
    *,
    collective_id: int,
    num_devices: int,
    region: int,
    count: int,
    via: str,
    is_async: bool,
    depends_on: frozenset[str],
) -> Collective:
    """The :class:`Collective` of one collective instruction of ``comp``.

    ``num_devices`` bounds the logical ids in its groups or pairs; the other
    keywords are the builder's context, stored as given.
    """
    kind = collective_base(instr.opcode) or instr.opcode
    channel = instr.attrs.get("channel_id")
    channel_id = int(channel) if channel is not None and channel.isdigit() else None
    n = num_devices
    groups: tuple[tuple[int, ...], ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    try:
        if kind == "collective-permute":
            text = instr.attrs.get("source_target_pairs")
            if text is None:
                raise instruction_error(instr, "collective-permute without source_target_pairs")
            pairs, form = parse_pairs(text, num_devices=n), "pairs"
        elif kind in ("send", "recv"):
            m = _PAIRS_ATTR_RE.search(instr.attrs.get("frontend_attributes", ""))
            pairs = parse_pairs(m.group(1), num_devices=n) if m else ()
            form = "pairs"
        else:
            rg = parse_replica_groups(instr.attrs.get("replica_groups", "{}"), num_devices=n)
            groups, form = rg.groups, rg.form
    except ReplicaGroupError as exc:
        raise instruction_error(instr, str(exc)) from None
    operands = instr.operands[:1] if kind == "collective-permute" else instr.operands
    if kind == "recv":
        operand_bytes = 0
    else:
        operand_bytes = sum(comp.by_name[o].shape.size_bytes for o in operands)
        if kind == "send":
            operand_bytes = comp.by_name[instr.operands[0]].shape.size_bytes
    result_bytes = _result_bytes(kind, instr)
    if kind == "recv":
        operand_bytes = result_bytes
    return Collective(
        id=collective_id,
        kind=kind,
        name=instr.name,
        computation=comp.name,
        line=instr.line,
        region=region,
        channel_id=channel_id,
        group_form=form,
        groups=groups,
        pairs=pairs,
        operand_bytes=operand_bytes,
        result_bytes=result_bytes,
        is_async=is_async,
        via=via,
        count=count,
        depends_on=tuple(sorted(depends_on)),
    )


def _result_bytes(kind: str, instr: Instruction) -> int:
    shape = instr.shape
    if kind == "recv" and shape.is_tuple:
        return shape.tuple_shapes[0].size_bytes
    if instr.opcode.endswith("-start") and shape.is_tuple and shape.tuple_shapes:
        # (operands..., outputs..., context scalars): the done's shape is exact;
        # until then take the largest non-scalar element as the output.
        return max(s.size_bytes for s in shape.tuple_shapes)
    if kind == "send":
        return 0
    return shape.size_bytes
