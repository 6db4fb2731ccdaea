"""Replay a compiled step on a slice: collective graph + placement → simulated time.

:func:`replay` turns a :class:`~aoizora.hlo.nodes.CollectiveGraph` into the
simulator's DAG (:mod:`sim.engine`) for one device order and runs it.

Model, per region (the entry computation, a while body, a call, a branch):

- All chips run the same SPMD program, so compute is one timeline on one
  representative chip (logical device 0's chip): each step waits for the step
  before it. A :class:`ComputeSegment` is a delay of the sum of its kernels'
  times by the device's compute model (:mod:`sim.compute`: the roofline of
  Williams, Waterman & Patterson, CACM 2009, with the MXU tile padding and the
  achieved matmul, attention and HBM rates of ``topologies/<generation>.toml``).
- A collective becomes flows (:func:`sim.collectives.collective_flows`) over
  its groups' chips; by default each group runs the algorithm and order its
  physical layout calls for (``auto``: a ring round a physical ring, a folded
  ring on a line without wrap-around; docs/simulator.md), whatever order the
  HLO lists, and pays the chip's per-collective overhead; its flows are released
  when the timeline reaches its start step, and the timeline waits for its
  completion at its done step. Compute scheduled between an async start and
  its done overlaps the transfer; a synchronous collective blocks at once.
  Collectives in flight at the same time share links (max-min fair).
- An opaque kernel (custom call) is a delay by :func:`opaque_cost_s` (its
  :func:`opaque_work` priced by the same compute model).
- A ``while`` step is a delay of ``trip_count`` times its body's simulated
  time; a ``call`` of its callee's time; a ``conditional`` of its slowest
  branch. XLA completes every async op of a loop iteration inside that
  iteration, and the next iteration starts only after the body's root, so
  iterations never overlap: simulating the body once and multiplying is exact
  under this model, and keeps a 40-layer scan as cheap as one layer. (Loops
  the compiler already unrolled are simulated in full.)

Kinds the simulator does not name map as follows: an all-reduce that the TPU
fuses with a per-device dynamic-slice (``scatter=True``) runs as a
reduce-scatter of the same input; ``send`` (send/recv pairs) runs as a
collective-permute; ``ragged-all-to-all`` as an all-to-all; a
``collective-broadcast`` as an all-gather of its buffer.

Example:
    >>> from sim.topology import load_slice
    >>> from aoizora.placement.device_order import Coord, DeviceOrder
    >>> from aoizora.hlo.graph import graph_from_text
    >>> g = graph_from_text('''HloModule m, num_partitions=2
    ... ENTRY %e (p: f32[1048576]) -> f32[2097152] {
    ...   %p = f32[1048576]{0} parameter(0)
    ...   %ag = f32[2097152] all-gather(%p), channel_id=1, replica_groups={{0,1}}, dimensions={0}
    ... }''')
    >>> s = load_slice("v5e:1x2")
    >>> r = replay(g, s, DeviceOrder.identity(mesh_shape=(2,), slice_=s))
    >>> round(r.step_time_s * 1e6, 3)  # 1 us hop + 2 MiB each way on a 45 GB/s link
    94.207
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from aoizora.errors import PlacementError
from aoizora.hlo.nodes import (
    Collective,
    CollectiveDone,
    CollectiveGraph,
    CollectiveStart,
    ComputeSegment,
    OpaqueCall,
    OpaqueNode,
    SubRegion,
)
from aoizora.placement.device_order import Coord, DeviceOrder
from sim.collectives import CollectivePlan, collective_flows
from sim.columns import ColumnPlan, FlowColumns, collective_columns
from sim.compute import Attention, Matmul, Work
from sim.engine import Compute, Flow, simulate
from sim.records import SimResult
from sim.routing import route
from sim.topology import Chip, Slice

__all__ = [
    "CollectiveTiming",
    "LinkTotal",
    "algorithm_for",
    "collective_link_bytes",
    "collective_plan",
    "attention_family",
    "is_attention_call",
    "step_delays_s",
    "ReplayResult",
    "network_footprint",
    "opaque_cost_s",
    "opaque_work",
    "segment_s",
    "NodeTimesFn",
    "simulate_region",
    "step_link_totals",
    "replay",
    "sim_kind",
]

# A node of a region's DAG: a ring or all-to-all may stay compact (``columns=True``).
Node = Flow | Compute | FlowColumns
# ``(slice_, nodes) -> (releases, finishes)`` in node order: another way to the
# engine's times (see :func:`simulate_region`).
NodeTimesFn = Callable[[Slice, Sequence[Node]], tuple[Sequence[float], Sequence[float]]]

_ATTENTION_RE = re.compile(r"splash|flash|attention|mha|mqa|gqa", re.IGNORECASE)


@dataclass(frozen=True)
class CollectiveTiming:
    """Simulated timing of one logical collective.

    ``duration_s``: one execution, from its flows' release to its completion;
    ``exposed_s``: how long the compute timeline waited for it at its done step
    (0 when fully overlapped); ``total_s``/``total_exposed_s``: times ``count``.
    """

    collective: int
    kind: str
    count: int
    buffer_bytes: int
    duration_s: float
    exposed_s: float

    @property
    def total_s(self) -> float:
        return self.duration_s * self.count

    @property
    def total_exposed_s(self) -> float:
        return self.exposed_s * self.count


@dataclass(frozen=True)
class ReplayResult:
    """Step time, per-collective breakdown and the simulator's records.

    ``sim`` is the entry region's run; ``region_sims[i]`` the run of region
    ``i`` (one execution); ``region_times_s[i]`` its makespan.
    """

    step_time_s: float
    collectives: tuple[CollectiveTiming, ...]
    region_times_s: tuple[float, ...]
    compute_s: float
    sim: SimResult
    region_sims: tuple[SimResult, ...]


def sim_kind(collective: Collective) -> str:
    """The :mod:`sim.collectives` kind a collective is replayed as."""
    if collective.scatter and collective.kind == "all-reduce":
        return "reduce-scatter"
    return {
        "send": "collective-permute",
        "recv": "collective-permute",
        "ragged-all-to-all": "all-to-all",
        "collective-broadcast": "all-gather",
    }.get(collective.kind, collective.kind)


def segment_s(kernels: tuple[Work, ...], chip: Chip) -> float:
    """A compute segment's time: its kernels back to back, each priced by the
    device's compute model (:meth:`sim.compute.ComputeModel.time_s`)."""
    model = chip.compute_model()
    return float(sum(model.time_s(k) for k in kernels))


def _shapes(node: OpaqueNode) -> list[tuple[int, ...]]:
    return [s.dims for s in node.operand_shapes if not s.is_tuple]


def is_attention_call(label: str) -> bool:
    """Whether a custom call whose name, op_name and target are ``label`` is an attention
    kernel (it mentions splash, flash, attention, mha, mqa or gqa).

    >>> is_attention_call("splash_mha_fwd_segmented_no_residuals.12"), is_attention_call("gemm")
    (True, False)
    """
    return _ATTENTION_RE.search(label) is not None


def attention_family(label: str) -> str:
    """The kernel family an attention call's name, op_name and target name: ``splash`` for
    jax's Pallas splash kernel (``splash_mha_fwd...``), else "" (the generation's default
    kernel prices it).

    >>> attention_family("splash_mha_fwd_segmented_no_residuals.12"), attention_family("mha")
    ('splash', '')
    """
    return "splash" if "splash" in label.lower() else ""


def opaque_work(node: OpaqueNode) -> Work:
    """What a custom call (e.g. a Pallas kernel) does, by a documented rule.

    1. Attention kernels (name, op_name or target mentions splash/flash/
       attention/mha) with q ``[..., Sq, D]`` and k ``[..., Skv, D]`` as the
       first two float operands of rank >= 3 (a splash kernel's integer mask
       operands come first): one :class:`~sim.compute.Attention` of
       ``prod(q batch dims)`` heads (FlashAttention, Dao et al. 2022, forward pass).
    2. Matmul-shaped kernels (operands ``[..., M, K]`` and ``[..., K, N]``, result
       ``[..., M, N]``): one :class:`~sim.compute.Matmul`.
    3. Anything else: memory-bound.

    Every kernel moves its operand and result bytes through HBM.

    >>> from aoizora.hlo.shapes import Shape
    >>> q = Shape("bf16", (1, 12, 4096, 128))
    >>> n = OpaqueNode(0, "splash", "tpu_custom_call", "splash_mha_fwd", "e", 1, 0,
    ...                (q, q, q), q, 1, ())
    >>> opaque_work(n).attention  # doctest: +NORMALIZE_WHITESPACE
    (Attention(lead=12, q_length=4096, kv_length=4096, head_dim=128, value_dim=128,
               block_q=0, block_kv=0, kernel='splash', block_kv_compute=0),)
    """
    nbytes = sum(s.size_bytes for s in node.operand_shapes) + node.result_shape.size_bytes
    label = f"{node.name} {node.op_name} {node.target}"
    if is_attention_call(label):
        # q, k, v: the first floating-point operands of rank >= 3 with one head dim.
        qkv = [
            s.dims for s in node.operand_shapes
            if not s.is_tuple and s.element_type[0] in "fb" and len(s.dims) >= 3
        ]  # fmt: skip
        if len(qkv) >= 2 and qkv[0][-1] == qkv[1][-1]:
            q, k = qkv[0], qkv[1]
            dv = qkv[2][-1] if len(qkv) >= 3 and qkv[2][-2] == k[-2] else q[-1]
            bq, bkv, bkvc = node.blocks or (0, 0, 0)
            att = Attention(
                math.prod(q[:-2]), q[-2], k[-2], q[-1], dv, block_q=bq, block_kv=bkv,
                kernel=attention_family(label), block_kv_compute=bkvc,
            )  # fmt: skip
            return Work(attention=(att,), hbm_bytes=nbytes)
    shapes = _shapes(node)
    if len(shapes) >= 2 and not node.result_shape.is_tuple:
        a, b, r = shapes[0], shapes[1], node.result_shape.dims
        if len(a) >= 2 and len(b) >= 2 and len(r) >= 2 and a[-1] == b[-2]:
            if r[-2] == a[-2] and r[-1] == b[-1]:
                mm = Matmul(math.prod(r[:-2]), a[-2], a[-1], b[-1])
                return Work(matmuls=(mm,), hbm_bytes=nbytes)
    return Work(hbm_bytes=nbytes)


def opaque_cost_s(node: OpaqueNode, chip: Chip) -> float:
    """Time of a custom call: :func:`opaque_work` priced by the device's compute model.

    >>> from sim.topology import load_chip
    >>> from aoizora.hlo.shapes import Shape
    >>> q = Shape("bf16", (1, 12, 4096, 128))
    >>> n = OpaqueNode(0, "splash", "tpu_custom_call", "splash_mha_fwd", "e", 1, 0,
    ...                (q, q, q), q, 1, ())
    >>> chip = load_chip("v5e")
    >>> t = opaque_cost_s(n, chip)  # 4*12*4096^2*128 FLOPs at the splash kernel's rate
    >>> params = chip.compute
    >>> eff = dict(params.attention_efficiency)["splash"]
    >>> flops = 4 * 12 * 4096**2 * 128
    >>> round((t - params.kernel_overhead_s) * chip.bf16_flops_per_s * eff / flops, 6)
    1.0
    """
    return chip.compute_model().time_s(opaque_work(node))


def algorithm_for(algorithm: str | Mapping[str, str] | None, kind: str) -> str | None:
    """The algorithm name ``algorithm`` (one name, ``{kind: name}`` or None) gives ``kind``."""
    if algorithm is None or isinstance(algorithm, str):
        return algorithm
    return algorithm.get(kind)


def collective_plan(
    collective: Collective,
    coords: Sequence[Coord],
    *,
    slice_: Slice,
    algorithm: str | Mapping[str, str] | None = None,
    id_prefix: str,
    after: tuple[str, ...] = (),
) -> CollectivePlan:
    """The simulator's flows for ``collective`` with logical id ``i`` on chip ``coords[i]``.

    The one place a compiled collective becomes flows: the full replay, the
    planner's exact shortcuts and its lower bounds all build them here.
    """
    kind = sim_kind(collective)
    if kind == "collective-permute":
        return collective_flows(
            kind,
            (),
            pairs=[(coords[a], coords[b]) for a, b in collective.pairs],
            buffer_bytes=float(collective.buffer_bytes),
            algorithm=algorithm_for(algorithm, kind),
            id_prefix=id_prefix,
            after=after,
            slice_=slice_,
        )
    return collective_flows(
        kind,
        [[coords[d] for d in g] for g in collective.groups],
        buffer_bytes=float(collective.buffer_bytes),
        algorithm=algorithm_for(algorithm, kind),
        id_prefix=id_prefix,
        after=after,
        slice_=slice_,
    )


def step_delays_s(graph: CollectiveGraph, chip: Chip) -> dict[tuple[int, int], float]:
    """The duration of every compute segment and opaque call, by (region, step index)."""
    out: dict[tuple[int, int], float] = {}
    for region in graph.regions:
        for i, step in enumerate(region.steps):
            if isinstance(step, ComputeSegment):
                out[(region.id, i)] = segment_s(step.kernels, chip)
            elif isinstance(step, OpaqueCall):
                out[(region.id, i)] = opaque_cost_s(graph.opaques[step.opaque], chip)
    return out


class _RegionSim:
    """Builds and runs one region's DAG.

    A collective in ``stand_ins`` is not simulated: a chip-less delay of the
    given duration stands in for it (the planner's exact shortcut, when it has
    proved the collective runs as it would alone).
    """

    def __init__(
        self,
        graph: CollectiveGraph,
        slice_: Slice,
        order: DeviceOrder,
        algorithm: str | Mapping[str, str] | None,
        region_times: dict[int, float],
        stand_ins: Mapping[int, float] | None = None,
        node_times: NodeTimesFn | None = None,
        columns: bool = False,
    ) -> None:
        self.graph = graph
        self.compact = columns and node_times is not None
        self.slice = slice_
        self.order = order
        self.algorithm = algorithm
        self.region_times = region_times
        self.stand_ins = stand_ins or {}
        self.node_times = node_times
        self.chip = slice_.chip.per_device()  # one device runs the program (tpu7x: half a chip)
        self.rep = order.coord_of(0)
        self.spans: dict[int, tuple[float, float]] = {}  # collective -> (release, end), last run

    def run(
        self, region_id: int
    ) -> tuple[SimResult | None, float, list[tuple[int, float, float]], float]:
        region = self.graph.regions[region_id]
        nodes: list[Node] = []
        prev: tuple[str, ...] = ()
        compute_s = 0.0
        done_ids: dict[int, str] = {}
        flow_ids: dict[int, list[str]] = {}
        waits: dict[int, str] = {}  # collective -> the timeline node before its done
        starts: dict[int, str] = {}  # collective -> the timeline node before its start
        for i, step in enumerate(region.steps):
            if isinstance(step, ComputeSegment):
                duration = segment_s(step.kernels, self.chip)
                compute_s += duration
                nodes.append(Compute(f"s{i}", self.rep, duration, after=prev))
                prev = (f"s{i}",)
            elif isinstance(step, CollectiveStart):
                c = self.graph.collectives[step.collective]
                starts[c.id] = prev[0] if prev else ""
                if c.id in self.stand_ins:
                    stand_in = Compute(f"c{c.id}/done", None, self.stand_ins[c.id], after=prev)
                    nodes.append(stand_in)
                    done_ids[c.id] = stand_in.id
                    flow_ids[c.id] = []
                    continue
                compact = self._columns(c, prev) if self.compact else None
                if compact is not None:  # a ring or all-to-all kept as columns
                    nodes.extend(compact.nodes)
                    done_ids[c.id] = compact.join.id
                    flow_ids[c.id] = [compact.columns.id]
                    continue
                plan = collective_plan(
                    c,
                    self.order.coords,
                    slice_=self.slice,
                    algorithm=self.algorithm,
                    id_prefix=f"c{c.id}",
                    after=prev,
                )
                nodes.extend(plan.nodes)
                done_ids[c.id] = plan.done_id
                flow_ids[c.id] = [f.id for f in plan.flows]
            elif isinstance(step, CollectiveDone):
                cid = step.collective
                waits[cid] = prev[0] if prev else ""
                nodes.append(Compute(f"d{i}", None, 0.0, after=prev + (done_ids[cid],)))
                prev = (f"d{i}",)
            elif isinstance(step, OpaqueCall):
                duration = opaque_cost_s(self.graph.opaques[step.opaque], self.chip)
                compute_s += duration
                nodes.append(Compute(f"o{i}", self.rep, duration, after=prev))
                prev = (f"o{i}",)
            elif isinstance(step, SubRegion):
                times = [self.region_times[r] for r in step.regions]
                duration = max(times, default=0.0) * step.trip_count
                nodes.append(Compute(f"r{i}", self.rep, duration, after=prev))
                prev = (f"r{i}",)
        result, release, finish = self._simulate(nodes)
        timings: list[tuple[int, float, float]] = []
        self.spans = {
            cid: (finish[starts[cid]] if starts[cid] else 0.0, finish[done])
            for cid, done in done_ids.items()
        }
        for cid, done in done_ids.items():
            end = finish[done]
            ids = flow_ids[cid]
            begin = min((release[f] for f in ids), default=end)
            before = waits.get(cid, "")
            ready = finish.get(before, 0.0) if before else 0.0
            timings.append((cid, end - begin, max(0.0, end - ready)))
        return result, max(finish.values(), default=0.0), timings, compute_s

    def _columns(self, c: Collective, prev: tuple[str, ...]) -> ColumnPlan | None:
        kind = sim_kind(c)
        if kind == "collective-permute":
            return None
        return collective_columns(
            kind,
            [[self.order.coords[d] for d in g] for g in c.groups],
            buffer_bytes=float(c.buffer_bytes),
            algorithm=algorithm_for(self.algorithm, kind),
            id_prefix=f"c{c.id}",
            after=prev,
            slice_=self.slice,
        )

    def _simulate(
        self, nodes: Sequence[Node]
    ) -> tuple[SimResult | None, dict[str, float], dict[str, float]]:
        """The engine's run (or ``node_times``'): the result, releases and finishes by id."""
        if self.node_times is not None:
            release_s, finish_s = self.node_times(self.slice, nodes)
            ids = [nd.id for nd in nodes]
            released = dict(zip(ids, release_s, strict=True))
            return None, released, dict(zip(ids, finish_s, strict=True))
        result = simulate(self.slice, [nd for nd in nodes if not isinstance(nd, FlowColumns)])
        finish: dict[str, float] = {c.id: c.finish_s for c in result.computes}
        release: dict[str, float] = {f.id: f.release_s for f in result.flows}
        finish.update({f.id: f.finish_s for f in result.flows})
        return result, release, finish


def simulate_region(
    graph: CollectiveGraph,
    slice_: Slice,
    order: DeviceOrder,
    region_id: int,
    region_times: Mapping[int, float],
    *,
    algorithm: str | Mapping[str, str] | None = None,
    stand_ins: Mapping[int, float] | None = None,
    node_times: NodeTimesFn | None = None,
    columns: bool = False,
) -> tuple[float, dict[int, tuple[float, float]]]:
    """One region's simulated time and each collective's (release, end) in it.

    ``region_times`` gives the time of every region this one calls or loops
    over; collectives in ``stand_ins`` become delays of the given duration.
    ``node_times(slice_, nodes)`` -> (releases, finishes), in node order, runs
    the DAG instead of the engine: it must give the engine's times (the
    planner passes :func:`aoizora.rank.lumped.lumped_times`). With ``columns`` it
    gets rings and all-to-alls as :class:`~sim.columns.FlowColumns` (for
    :func:`aoizora.rank.compact.mixed_times`), never as their flows.
    """
    args = (graph, slice_, order, algorithm, dict(region_times), stand_ins, node_times, columns)
    runner = _RegionSim(*args)
    _, makespan, _, _ = runner.run(region_id)
    return makespan, runner.spans


def _signature(
    graph: CollectiveGraph, region_id: int, region_times: Mapping[int, float]
) -> tuple[object, ...]:
    """Everything the simulation of a region depends on, given the placement."""
    parts: list[object] = []
    local: dict[int, int] = {}
    for step in graph.regions[region_id].steps:
        if isinstance(step, ComputeSegment):
            parts.append(("s", step.kernels))
        elif isinstance(step, CollectiveStart):
            c = graph.collectives[step.collective]
            local[c.id] = len(local)
            parts.append(("c", sim_kind(c), c.groups, c.pairs, c.buffer_bytes))
        elif isinstance(step, CollectiveDone):
            parts.append(("d", local[step.collective]))
        elif isinstance(step, OpaqueCall):
            o = graph.opaques[step.opaque]
            parts.append(("o", o.name, o.target, o.op_name, o.operand_shapes, o.result_shape))
        elif isinstance(step, SubRegion):
            parts.append(("r", tuple(region_times[r] for r in step.regions), step.trip_count))
    return tuple(parts)


def replay(
    graph: CollectiveGraph,
    slice_: Slice,
    order: DeviceOrder,
    *,
    algorithm: str | Mapping[str, str] | None = None,
) -> ReplayResult:
    """Simulate one step of ``graph`` on ``slice_`` with logical ids placed by ``order``.

    ``algorithm`` picks the collective algorithm (one name for every kind, or
    ``{kind: name}``; default: the simulator's defaults). Raises
    :class:`PlacementError` if ``order`` does not have the module's device count.
    """
    if order.num_devices != graph.num_devices:
        raise PlacementError(
            f"the HLO module runs on {graph.num_devices} devices "
            f"(num_partitions={graph.num_partitions}) but the device order places "
            f"{order.num_devices} on {order.slice_name}; replay it on a slice with "
            f"{graph.num_devices} chips (e.g. --slice v5e:2x4 for 8) and an order of "
            f"{graph.num_devices} ids"
        )
    if order.slice_name != slice_.name:
        raise PlacementError(
            f"the device order is for {order.slice_name} but the replay is on {slice_.name}; "
            f"build the order with slice_=load_slice({slice_.name!r})"
        )
    runner = _RegionSim(graph, slice_, order, algorithm, {})
    sims: dict[int, SimResult] = {}
    timings: dict[int, tuple[float, float]] = {}
    compute: dict[int, float] = {}
    # Identical regions (XLA emits one windowed-einsum loop per matmul, many alike)
    # give identical runs: simulate each distinct one once.
    seen: dict[tuple[object, ...], int] = {}
    order_in_region: dict[int, list[int]] = {}
    # Children are numbered after their parents: simulate the deepest first.
    for region in sorted(graph.regions, key=lambda r: -r.id):
        key = _signature(graph, region.id, runner.region_times)
        cids = [st.collective for st in region.steps if isinstance(st, CollectiveStart)]
        order_in_region[region.id] = cids
        twin = seen.get(key)
        if twin is not None:
            sims[region.id] = sims[twin]
            runner.region_times[region.id] = runner.region_times[twin]
            compute[region.id] = compute[twin]
            for cid, twin_cid in zip(cids, order_in_region[twin], strict=True):
                timings[cid] = timings[twin_cid]
            continue
        seen[key] = region.id
        result, makespan, region_timings, compute_s = runner.run(region.id)
        if result is None:  # the engine always runs here (no node_times)
            raise RuntimeError("the full replay ran without the engine")
        sims[region.id] = result
        runner.region_times[region.id] = makespan
        compute[region.id] = compute_s
        for cid, duration, exposed in region_timings:
            timings[cid] = (duration, exposed)
    breakdown = tuple(
        CollectiveTiming(
            collective=c.id,
            kind=c.kind,
            count=c.count,
            buffer_bytes=c.buffer_bytes,
            duration_s=timings.get(c.id, (0.0, 0.0))[0],
            exposed_s=timings.get(c.id, (0.0, 0.0))[1],
        )
        for c in graph.collectives
    )
    compute_total = sum(compute[r.id] * r.count for r in graph.regions)
    return ReplayResult(
        step_time_s=runner.region_times[0],
        collectives=breakdown,
        region_times_s=tuple(runner.region_times[r.id] for r in graph.regions),
        compute_s=compute_total,
        sim=sims[0],
        region_sims=tuple(sims[r.id] for r in graph.regions),
    )


@dataclass(frozen=True)
class LinkTotal:
    """One directed link over a whole step: every region's run times its run count."""

    src: Coord
    dst: Coord
    dim: int
    wrap: bool
    bandwidth_bytes_per_s: float
    bytes_carried: float
    busy_s: float


def step_link_totals(result: ReplayResult, graph: CollectiveGraph) -> tuple[LinkTotal, ...]:
    """Bytes and busy time of every link over the whole step of ``result``.

    ``result.region_sims[i]`` is one run of region ``i``; a region runs
    ``graph.regions[i].count`` times per step (a loop body once per trip), so its
    link records count that often. (Both branches of a ``conditional`` count, as
    the replay lists each branch's collectives.) The link's utilisation over the
    step is ``busy_s / result.step_time_s``.
    """
    totals: dict[tuple[Coord, Coord, int, bool], list[float]] = {}
    for region, sim in zip(graph.regions, result.region_sims, strict=True):
        for rec in sim.links:
            key = (tuple(rec.src), tuple(rec.dst), rec.dim, rec.wrap)
            acc = totals.setdefault(key, [rec.bandwidth_bytes_per_s, 0.0, 0.0])
            acc[1] += rec.bytes_carried * region.count
            acc[2] += rec.busy_s * region.count
    return tuple(
        LinkTotal(src, dst, dim, wrap, bw, carried, busy)
        for (src, dst, dim, wrap), (bw, carried, busy) in sorted(totals.items())
    )


def collective_link_bytes(
    graph: CollectiveGraph, slice_: Slice, order: DeviceOrder
) -> dict[tuple[Coord, Coord], float]:
    """Per directed link (src, dst): every collective's flow bytes x its runs per step,
    on each link its route crosses -- from the graph and the routing function alone,
    not the engine: the independent side of the check on :func:`step_link_totals`."""
    out: dict[tuple[Coord, Coord], float] = {}
    for c in graph.collectives:
        plan = collective_plan(c, order.coords, slice_=slice_, id_prefix=f"c{c.id}")
        for flow in plan.flows:
            for link in route(slice_, flow.src, flow.dst):
                key = (tuple(link.src), tuple(link.dst))
                out[key] = out.get(key, 0.0) + flow.size_bytes * c.count
    return out


def network_footprint(graph: CollectiveGraph, order: DeviceOrder) -> tuple[object, ...]:
    """What a placement changes in a replay: every collective's chip groups.

    Two placements with equal footprints replay to the same step time: compute
    runs on one timeline whose chip does not matter (every chip is alike), and
    each collective produces the same flows. The groups of one collective run at
    once, so their order is irrelevant (they are sorted); the order *within* a
    group is kept, since ring algorithms follow it. This is exact, and it merges
    placements that differ only along mesh axes no collective spans.
    """
    key: list[object] = []
    for c in graph.collectives:
        if c.pairs:
            key.append(tuple(sorted((order.coord_of(a), order.coord_of(b)) for a, b in c.pairs)))
        else:
            key.append(tuple(sorted(tuple(order.coord_of(i) for i in g) for g in c.groups)))
    return tuple(key)
