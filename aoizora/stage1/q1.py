"""Q1, the placement-oblivious step-time bound of Stage 1, and the top-K pruning.

``Q1`` (seconds per step, lower is better) is the makespan of the two-stream
overlap schedule of :mod:`aoizora.stage1.schedule` over these durations:

* compute nodes -- each kernel's :class:`sim.compute.Work` priced by the chip's
  compute model (:mod:`sim.compute`: a roofline with MXU tile padding and the
  achieved matmul, attention and HBM rates), the model the replay of the compiled
  step uses (Q2). Matmuls, convolutions, kernels and the relayout copies around all-to-alls
  (:data:`aoizora.stage1.prediction.RELAYOUT_PASSES`); other elementwise work is
  not counted, so this side is a lower bound.
* communication nodes -- ideal per-axis bandwidth, no contention between axes
  (placement-oblivious). Each mesh axis is costed as a line of ``n`` chips (a
  sub-slice of v5e/v6e has no wrap-around, docs/facts.md, TPU chips) with
  full-duplex links of one-way bandwidth ``W`` (``chip.link_bandwidth_bytes_per_s``). See
  :func:`collective_time_s`.

Async collectives overlap independent compute, synchronous all-to-alls block
it, so ``max(compute_s, comm_s) <= q1_s <= compute_s + comm_s``;
``compute_s``/``comm_s`` are the plain sums. Stage 2 replaces Q1 with the
simulated, placement-aware latency.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class C:
...     bf16_flops_per_s: float = 1.97e14
...     hbm_bytes: float = 16e9
...     hbm_bandwidth_bytes_per_s: float = 8.1e11
...     link_bandwidth_bytes_per_s: float = 4.5e10
...     hop_latency_s: float = 1e-6
>>> round(collective_time_s("all-gather", group_size=4, bytes_per_device=4.5e6, chip=C()) * 1e6)
78
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from aoizora.stage1.dag import build_dag
from aoizora.stage1.memory import MEMORY_MARGIN
from aoizora.stage1.prediction import Node, PredictionDag
from aoizora.stage1.schedule import makespan_s
from aoizora.stage1.shardy import ShardyModule, Stage1Error, read_lowered
from aoizora.stage1.tiles import SplashCall, best_tile
from aoizora.stage1.windowed import DotTimes
from sim.compute import ComputeModel, compute_model_of
from sim.costs import COLLECTIVE_KINDS, best_box
from sim.costs import collective_time_s as sim_collective_time_s
from sim.topology import Slice

__all__ = [
    "ChipLike",
    "Stage1Estimate",
    "Stage1Ranking",
    "axis_phases",
    "collective_time_s",
    "conv_relayout_s",
    "estimate",
    "estimate_from_json",
    "estimate_module",
    "estimate_to_json",
    "human_bytes",
    "rank_stage1",
]


class ChipLike(Protocol):
    """The chip numbers Stage 1 needs (``sim.topology.Chip`` satisfies it)."""

    @property
    def bf16_flops_per_s(self) -> float: ...
    @property
    def hbm_bytes(self) -> float: ...
    @property
    def hbm_bandwidth_bytes_per_s(self) -> float: ...
    @property
    def link_bandwidth_bytes_per_s(self) -> float: ...  # one-way, per link
    @property
    def hop_latency_s(self) -> float: ...


def collective_time_s(
    collective: str,
    *,
    group_size: int,
    bytes_per_device: float,
    chip: ChipLike,
    slice_: Slice | None = None,
) -> float:
    """Time of one collective over ``group_size`` chips, alone on its links.

    :func:`sim.costs.collective_time_s` (the simulator's algorithms on a ring,
    or the no-wrap ideal on a line) on the best box of that many chips
    ``slice_`` offers (:func:`sim.costs.best_box`; placement-oblivious:
    every group gets its best box). Without ``slice_`` the group is a line.

    >>> from types import SimpleNamespace
    >>> from sim.topology import load_slice
    >>> c = SimpleNamespace(link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    >>> [collective_time_s(k, group_size=4, bytes_per_device=8.0, chip=c)
    ...  for k in ("all-gather", "all-reduce", "all-to-all", "collective-permute")]
    [6.0, 12.0, 8.0, 8.0]
    >>> collective_time_s("all-gather", group_size=4, bytes_per_device=8.0, chip=c,
    ...                   slice_=load_slice("v5e:2x2"))  # a ring of 4: 3 steps of 8/8
    3.0
    """
    if collective not in COLLECTIVE_KINDS:
        raise Stage1Error(
            f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVE_KINDS)}"
        )
    n = int(group_size)
    if n <= 1 or bytes_per_device <= 0:
        return 0.0
    ring, box = False, None
    if slice_ is not None and n <= slice_.num_chips:
        layout = best_box(n, slice_)
        ring, box = layout.ring, (layout.shape, layout.wraparound)
    return sim_collective_time_s(
        collective,
        group_size=n,
        bytes_per_device=bytes_per_device,
        link_bandwidth_bytes_per_s=chip.link_bandwidth_bytes_per_s,
        hop_latency_s=chip.hop_latency_s,
        ring=ring,
        box=box,
    )


def axis_phases(node: Node) -> list[tuple[str, int, float]]:
    """Split a (possibly multi-axis) communication node into per-axis phases.

    Returns ``(axis, chips along it, bytes per device of that phase)``. A
    collective over axes ``a_1..a_m`` (mesh order) runs hierarchically, one axis
    at a time: all-gather, reduce-scatter and all-reduce shrink the buffer by
    each earlier axis' size (phase ``j`` moves ``V / prod(n_1..n_{j-1})``);
    all-to-all and collective-permute move the whole buffer along every axis.

    >>> n = Node(0, "implicit", "all-gather", ("a", "b"), (2, 4), 8, 800, 0.0, 0.0, 1, (), "", "")
    >>> axis_phases(n)
    [('a', 2, 800.0), ('b', 4, 400.0)]
    """
    phases: list[tuple[str, int, float]] = []
    shrink = node.collective in ("all-gather", "reduce-scatter", "all-reduce")
    done = 1
    for axis, size in zip(node.axes, node.axis_sizes, strict=True):
        v = node.bytes_per_device / done if shrink else float(node.bytes_per_device)
        phases.append((axis, size, v))
        done *= size
    return phases


@dataclass(frozen=True)
class Stage1Estimate:
    """Stage 1's prediction for one candidate (all per chip, per step)."""

    candidate_id: str
    q1_s: float
    compute_s: float
    comm_s: float
    flops_per_chip: float
    comm_bytes_per_axis: tuple[tuple[str, float], ...]
    memory_bytes_per_chip: int
    nodes: tuple[Node, ...]
    comm_s_per_axis: tuple[tuple[str, float], ...] = ()
    hbm_traffic_bytes_per_chip: float = 0.0
    argument_bytes_per_chip: int = 0
    warnings: tuple[str, ...] = field(default=())
    # The splash tile Stage 1 plans (aoizora.stage1.tiles), None: the 512 tile; q1_s and
    # compute_s are at that tile.
    splash_blocks: tuple[int, int, int] | None = None
    splash_gain_s: float = 0.0  # that tile's seconds over the 512 tile's (<= 0)
    splash_calls: tuple[SplashCall, ...] = ()  # the program's splash call shapes

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "candidate_id": self.candidate_id,
            "q1_s": self.q1_s,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "flops_per_chip": self.flops_per_chip,
            "comm_bytes_per_axis": [[a, b] for a, b in self.comm_bytes_per_axis],
            "comm_s_per_axis": [[a, t] for a, t in self.comm_s_per_axis],
            "memory_bytes_per_chip": self.memory_bytes_per_chip,
            "argument_bytes_per_chip": self.argument_bytes_per_chip,
            "hbm_traffic_bytes_per_chip": self.hbm_traffic_bytes_per_chip,
            "warnings": list(self.warnings),
            "splash_blocks": None if self.splash_blocks is None else list(self.splash_blocks),
            "splash_gain_s": self.splash_gain_s,
            "splash_calls": [list(c) for c in self.splash_calls],
            "nodes": [n.to_json_dict() for n in self.nodes],
        }


def estimate_to_json(estimate: Stage1Estimate) -> dict[str, Any]:
    """An estimate as JSON data for the Stage-1 cache, without its DAG nodes.

    >>> e = Stage1Estimate("c", 1.0, 0.5, 0.5, 10.0, (("x", 2.0),), 64, ())
    >>> estimate_from_json(estimate_to_json(e)) == e
    True
    """
    # Without the nodes before asdict: its deep copy of every node was most of the call.
    data = asdict(replace(estimate, nodes=()))
    data["nodes"] = []
    return data


def estimate_from_json(data: Mapping[str, Any]) -> Stage1Estimate:
    """Inverse of :func:`estimate_to_json` (``nodes=()``)."""
    return Stage1Estimate(
        candidate_id=data["candidate_id"],
        q1_s=data["q1_s"],
        compute_s=data["compute_s"],
        comm_s=data["comm_s"],
        flops_per_chip=data["flops_per_chip"],
        comm_bytes_per_axis=tuple((a, b) for a, b in data["comm_bytes_per_axis"]),
        memory_bytes_per_chip=data["memory_bytes_per_chip"],
        nodes=(),
        comm_s_per_axis=tuple((a, t) for a, t in data["comm_s_per_axis"]),
        hbm_traffic_bytes_per_chip=data["hbm_traffic_bytes_per_chip"],
        argument_bytes_per_chip=data["argument_bytes_per_chip"],
        warnings=tuple(data["warnings"]),
        splash_blocks=None if data.get("splash_blocks") is None
        else tuple(data["splash_blocks"]),
        splash_gain_s=float(data.get("splash_gain_s", 0.0)),
        splash_calls=tuple(
            (int(a), int(b), int(c), int(d), int(e), float(n))
            for a, b, c, d, e, n in data.get("splash_calls", ())
        ),
    )  # fmt: skip


def _check_axes(module: ShardyModule, mesh_axis_sizes: Mapping[str, int]) -> None:
    have = dict(module.mesh_axes)
    for name, size in sorted(have.items()):
        if mesh_axis_sizes.get(name) != size:
            raise Stage1Error(
                f"the lowered program's mesh has axis {name!r} of size {size}, but "
                f"mesh_axis_sizes={dict(mesh_axis_sizes)}; pass the sizes of the mesh the "
                f"program was lowered with, e.g. {have}"
            )
    for name, size in sorted(mesh_axis_sizes.items()):
        if name not in have and size != 1:
            raise Stage1Error(
                f"mesh_axis_sizes names axis {name!r} (size {size}) that the lowered program's "
                f"mesh {have} does not have; lower over the same jax.sharding.Mesh"
            )


def estimate_module(
    module: ShardyModule,
    *,
    mesh_axis_sizes: Mapping[str, int],
    chip: ChipLike,
    candidate_id: str,
    slice_: Slice | None = None,
) -> Stage1Estimate:
    """:func:`estimate` on an already read module."""
    _check_axes(module, mesh_axis_sizes)
    # XLA's windowed-einsum cost rule, priced with the same kernel and collective
    # times as every other node, less the kernel's launch: XLA estimates the dot from
    # its FLOPs and bytes alone (dot_handler.cc), and on v5e the measured launch
    # (0.7 us) would otherwise keep loops libtpu does not build (stage1/test_windowed.py).
    model = compute_model_of(chip)
    launch_s = model.params.kernel_overhead_s
    times = DotTimes(
        compute_s=lambda work: model.time_s(work) - launch_s,
        gather_s=lambda n, nbytes: collective_time_s(
            "all-gather", group_size=n, bytes_per_device=nbytes, chip=chip, slice_=slice_
        ),
    )
    dag: PredictionDag = build_dag(module, times=times)
    compute_s = 0.0
    flops = 0.0
    traffic = 0.0
    bytes_axis: dict[str, float] = {}
    time_axis: dict[str, float] = {}
    durations: dict[int, float] = {}
    for n in dag.nodes:
        if n.kind == "compute":
            # The compute model, as the replay prices a compiled kernel, and the relayouts
            # XLA puts around a convolution (conv_relayout_s).
            t_node = model.time_s(n.work) + conv_relayout_s(n, model)
            durations[n.node_id] = t_node
            compute_s += n.count * t_node
            flops += n.count * n.flops_per_chip
            traffic += n.count * n.hbm_bytes_per_chip
            continue
        # One collective over the whole group, as the compiled program runs it.
        t_node = collective_time_s(
            n.collective, group_size=n.group_size, bytes_per_device=n.bytes_per_device,
            chip=chip, slice_=slice_,
        )  # fmt: skip
        phases = axis_phases(n)
        total = sum(v for _, _, v in phases) or 1.0
        for axis, _, v in phases:
            bytes_axis[axis] = bytes_axis.get(axis, 0.0) + n.count * v
            # The group's time is shared among its axes by the bytes each phase moves.
            time_axis[axis] = time_axis.get(axis, 0.0) + n.count * t_node * v / total
        durations[n.node_id] = t_node
    comm_s = sum(time_axis.values())
    # Overlap: async collectives run under independent compute (schedule.py).
    q1_s = makespan_s(dag.nodes, durations, regions=dag.regions)
    # The tile changes only the splash calls' time, which runs on the compute path.
    calls = _splash_calls(dag.nodes)
    tile, tile_gain_s = best_tile(calls, model)
    return Stage1Estimate(
        candidate_id=candidate_id,
        q1_s=q1_s + tile_gain_s,
        compute_s=compute_s + tile_gain_s,
        splash_blocks=tile,
        splash_gain_s=tile_gain_s,
        splash_calls=calls,
        comm_s=comm_s,
        flops_per_chip=flops,
        comm_bytes_per_axis=tuple(sorted(bytes_axis.items())),
        memory_bytes_per_chip=dag.memory_bytes_per_chip,
        nodes=dag.nodes,
        comm_s_per_axis=tuple(sorted(time_axis.items())),
        hbm_traffic_bytes_per_chip=traffic,
        argument_bytes_per_chip=dag.argument_bytes_per_chip,
        warnings=dag.warnings,
    )


def conv_relayout_s(node: Node, model: ComputeModel) -> float:
    """The relayouts XLA adds around a convolution, for one execution of ``node``.

    The compiled programs of the Wan VAE decoders (validation/v5e/profiles/*-vae.hlo)
    split every convolution's W axis into 8 tiles: a ``pad`` of its input to the tiles'
    halo, a ``copy`` into the tiled layout and a ``copy`` of its (f32) result back --
    about a fifth of a decode on v5e (0.40 s of 1.44 s at 832x480x21). Layouts are
    assigned after Stage 1 reads the program, so it prices them as ``conv_relayout_passes``
    more HBM passes over the convolution's bytes (fitted to measured decodes:
    ``aoizora calibrate ROWS --generation G --conv-relayout``, aoizora/studies/vae_fit.py).
    """
    passes = model.params.conv_relayout_passes
    if not passes or not node.op.endswith("convolution"):
        return 0.0
    return (
        passes
        * node.hbm_bytes_per_chip
        / (model.hbm_bandwidth_bytes_per_s * model.params.hbm_efficiency)
    )


def _splash_calls(nodes: Sequence[Node]) -> tuple[SplashCall, ...]:
    """Every splash kernel call shape of the DAG and its executions per step (sorted)."""
    count: dict[tuple[int, int, int, int, int], float] = {}
    for n in nodes:
        if n.kind == "compute" and "splash" in n.reason:
            for a in n.work.attention:
                key = (int(a.lead), a.q_length, a.kv_length, a.head_dim, a.value_dim)
                count[key] = count.get(key, 0.0) + n.count
    return tuple((*k, v) for k, v in sorted(count.items()))


def estimate(
    lowered: Any,
    *,
    mesh_axis_sizes: Mapping[str, int],
    chip: ChipLike,
    candidate_id: str,
    slice_: Slice | None = None,
) -> Stage1Estimate:
    """Stage-1 estimate of a ``jax.stages.Lowered`` (no XLA compile).

    Runs Shardy propagation on a copy of the lowered StableHLO, builds the
    prediction DAG and scores Q1 (see the module docstring).

    >>> import jax, jax.numpy as jnp
    >>> from types import SimpleNamespace
    >>> from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
    >>> mesh = AbstractMesh((2,), ("m",), axis_types=(AxisType.Auto,))
    >>> a = jax.ShapeDtypeStruct((4, 8), jnp.float32)
    >>> low = jax.jit(lambda x, y: x @ y.T, in_shardings=NamedSharding(mesh, P(None, "m")),
    ...               out_shardings=NamedSharding(mesh, P())).trace(a, a).lower(
    ...     lowering_platforms=("tpu",))
    >>> chip = SimpleNamespace(bf16_flops_per_s=1e12, hbm_bytes=1e9, hop_latency_s=0.0,
    ...                        hbm_bandwidth_bytes_per_s=1e12, link_bandwidth_bytes_per_s=1e9)
    >>> e = estimate(low, mesh_axis_sizes={"m": 2}, chip=chip, candidate_id="row")
    >>> e.flops_per_chip, e.comm_bytes_per_axis
    (128.0, (('m', 64.0),))
    """
    return estimate_module(
        read_lowered(lowered),
        mesh_axis_sizes=mesh_axis_sizes,
        chip=chip,
        candidate_id=candidate_id,
        slice_=slice_,
    )


@dataclass(frozen=True)
class Stage1Ranking:
    """The outcome of Stage-1 pruning.

    ``kept`` is the top-K by Q1 (ties by candidate id), best first; ``dropped_weak``
    the other feasible candidates in the same order; ``dropped_infeasible`` the
    ``(candidate_id, reason)`` of those over the HBM budget, by candidate id, and
    ``infeasible`` their estimates in the same order.
    """

    kept: tuple[Stage1Estimate, ...]
    dropped_weak: tuple[Stage1Estimate, ...]
    dropped_infeasible: tuple[tuple[str, str], ...]
    k: int
    hbm_bytes: float
    infeasible: tuple[Stage1Estimate, ...] = ()

    @property
    def kept_ids(self) -> tuple[str, ...]:
        return tuple(e.candidate_id for e in self.kept)

    @property
    def estimates(self) -> tuple[Stage1Estimate, ...]:
        """Every estimate: the feasible ones by ``(q1_s, candidate_id)``, then the infeasible."""
        return (*self.kept, *self.dropped_weak, *self.infeasible)

    def to_json_dict(self) -> dict[str, Any]:
        def row(e: Stage1Estimate) -> dict[str, Any]:
            return {
                "candidate_id": e.candidate_id,
                "q1_s": e.q1_s,
                "compute_s": e.compute_s,
                "comm_s": e.comm_s,
                "memory_bytes_per_chip": e.memory_bytes_per_chip,
            }

        return {
            "k": self.k,
            "hbm_bytes": self.hbm_bytes,
            "kept": [row(e) for e in self.kept],
            "dropped_weak": [row(e) for e in self.dropped_weak],
            "dropped_infeasible": [
                {"candidate_id": c, "reason": r} for c, r in self.dropped_infeasible
            ],
        }


def rank_stage1(
    estimates: Iterable[Stage1Estimate],
    *,
    k: int,
    hbm_bytes: float,
    over_hbm: Iterable[tuple[str, str]] = (),
    margin: float = MEMORY_MARGIN,
) -> Stage1Ranking:
    """Drop memory-infeasible candidates, keep the top-``k`` by Q1.

    A candidate is infeasible when its arguments alone exceed ``hbm_bytes`` (their size is
    exact) or ``memory_bytes_per_chip > margin * hbm_bytes``: Stage
    1's estimate may exceed what XLA allocates by up to :data:`MEMORY_MARGIN`
    (:mod:`aoizora.stage1.memory`), so only a clear overflow is refused here; one nearer
    the budget is compiled and its compiled memory decides. Order is ``(q1_s,
    candidate_id)`` so equal scores are broken deterministically.
    ``over_hbm`` adds ``(candidate id, reason)`` of candidates proven over the
    budget without an estimate (:mod:`aoizora.stage1.sweep`) to
    ``dropped_infeasible``.

    >>> def est(cid, q1, mem):
    ...     return Stage1Estimate(cid, q1, q1, 0.0, 0.0, (), mem, ())
    >>> ests = [est("b", 1.0, 10), est("a", 1.0, 10), est("c", 0.5, 99)]
    >>> r = rank_stage1(ests, k=1, hbm_bytes=50, margin=1.5)
    >>> r.kept_ids, [e.candidate_id for e in r.dropped_weak], r.dropped_infeasible[0][1][:60]
    (('a',), ['b'], 'Stage 1 estimates 99 B per chip (99.0 B), over 1.5 x the 50 ')
    >>> rank_stage1(ests, k=3, hbm_bytes=70, margin=1.5).kept_ids  # 99 <= 1.5 x 70: compiled
    ('c', 'a', 'b')
    """
    if not isinstance(k, int) or k < 1:
        raise Stage1Error(f"k={k!r} must be a positive integer, e.g. k=3 (option --top-k)")
    if not hbm_bytes > 0:
        raise Stage1Error(f"hbm_bytes={hbm_bytes!r} must be positive, e.g. 16e9 for a v5e chip")
    items: Sequence[Stage1Estimate] = list(estimates)
    proven = list(over_hbm)
    ids = [e.candidate_id for e in items] + [c for c, _ in proven]
    dup = sorted({c for c in ids if ids.count(c) > 1})
    if dup:
        raise Stage1Error(f"candidate ids must be unique; repeated: {dup}")
    feasible = []
    infeasible = list(proven)
    over = []
    for e in items:
        need = e.memory_bytes_per_chip
        if e.argument_bytes_per_chip > hbm_bytes:  # the arguments' bytes are exact
            reason = (
                f"its arguments alone need {e.argument_bytes_per_chip} B per chip "
                f"({human_bytes(e.argument_bytes_per_chip)}), over the {hbm_bytes:.0f} B HBM "
                f"budget ({human_bytes(hbm_bytes)})"
            )
        elif need > margin * hbm_bytes:
            reason = (
                f"Stage 1 estimates {need} B per chip ({human_bytes(need)}), over {margin:g} x "
                f"the {hbm_bytes:.0f} B HBM budget ({human_bytes(hbm_bytes)}; {margin:g} is the "
                "most Stage 1 has overestimated a compiled program by)"
            )
        else:
            reason = ""
        if reason:
            infeasible.append((e.candidate_id, reason))
            over.append(e)
        else:
            feasible.append(e)
    kept = _top_k(feasible, k, hbm_bytes)
    weak = sorted((e for e in feasible if e not in kept), key=lambda e: (e.q1_s, e.candidate_id))
    return Stage1Ranking(
        kept=kept,
        dropped_weak=tuple(weak),
        dropped_infeasible=tuple(sorted(infeasible)),
        k=k,
        hbm_bytes=float(hbm_bytes),
        infeasible=tuple(sorted(over, key=lambda e: e.candidate_id)),
    )


def _top_k(
    feasible: Sequence[Stage1Estimate], k: int, hbm_bytes: float
) -> tuple[Stage1Estimate, ...]:
    """The top ``k`` by Q1 of the candidates Stage 1 finds within the budget, plus every
    candidate over the budget but within the margin that would rank among them: those
    are compiled too, and their compile decides, without taking a place from a candidate
    that fits (where none fits by Stage 1, the top ``k`` of the others).

    >>> def est(cid, q1, mem):
    ...     return Stage1Estimate(cid, q1, q1, 0.0, 0.0, (), mem, ())
    >>> ests = [est("a", 1.0, 10), est("b", 2.0, 10), est("c", 3.0, 10), est("near", 1.5, 60)]
    >>> [e.candidate_id for e in _top_k(ests, 2, 50)]  # near ranks 2nd: compiled as well
    ['a', 'near', 'b']
    """
    order = sorted(feasible, key=lambda e: (e.q1_s, e.candidate_id))
    within = [e for e in order if e.memory_bytes_per_chip <= hbm_bytes][:k]
    if not within:
        return tuple(order[:k])
    last = (within[-1].q1_s, within[-1].candidate_id)
    if len(within) < k:
        last = (math.inf, "")
    near = [e for e in order if e.memory_bytes_per_chip > hbm_bytes
            and (e.q1_s, e.candidate_id) < last]  # fmt: skip
    return tuple(sorted([*within, *near], key=lambda e: (e.q1_s, e.candidate_id)))


def human_bytes(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{float(nbytes):.1f} B"
