"""The Stage-1 prediction DAG's values: :class:`Node` and :class:`PredictionDag`.

:func:`aoizora.stage1.dag.build_dag` builds them from a propagated module; the
module docstring there says what each node kind means and how bytes are counted
(the compiled-HLO convention: all-gather = its output per device, reduce-scatter
= its input, all-reduce / all-to-all / collective-permute = the buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.compute import Work

__all__ = ["COLLECTIVES", "RELAYOUT_PASSES", "Node", "PredictionDag"]

COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")

# An all-to-all costs two transposes (before and after), each reading and writing
# the buffer once: 4 x V bytes of HBM traffic (see ``aoizora.stage1.dag``).
RELAYOUT_PASSES = 4


@dataclass(frozen=True)
class Node:
    """One node of the prediction DAG (one execution costs this; it runs ``count`` times).

    ``axes`` are mesh axis names in mesh order, ``axis_sizes`` the extent of one
    replica group along each (a sub-axis gives less than the axis size),
    ``group_size`` their product; ``bytes_per_device`` is the payload of one
    execution on one chip (HLO convention, see the module docstring). A compute
    node's ``work`` is what the compute model prices (``flops_per_chip`` and
    ``hbm_bytes_per_chip`` are its totals).
    """

    node_id: int
    kind: str  # "compute" | "explicit" | "implicit"
    collective: str  # one of COLLECTIVES, "" for compute
    axes: tuple[str, ...]
    axis_sizes: tuple[int, ...]  # chips of one group along each of ``axes``
    group_size: int
    bytes_per_device: int
    flops_per_chip: float
    hbm_bytes_per_chip: float
    count: int
    deps: tuple[int, ...]
    op: str
    reason: str
    # The loop body this node runs in (0 = not in a loop); see PredictionDag.regions.
    region: int = 0
    work: Work = field(default=Work(), compare=False)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "kind": self.kind,
            "collective": self.collective,
            "axes": list(self.axes),
            "axis_sizes": list(self.axis_sizes),
            "group_size": self.group_size,
            "bytes_per_device": self.bytes_per_device,
            "flops_per_chip": self.flops_per_chip,
            "hbm_bytes_per_chip": self.hbm_bytes_per_chip,
            "count": self.count,
            "deps": list(self.deps),
            "op": self.op,
            "reason": self.reason,
            "region": self.region,
        }


@dataclass(frozen=True)
class PredictionDag:
    """The DAG plus the per-chip memory estimate of the same program.

    ``memory_bytes_per_chip = argument_bytes_per_chip + peak_temp_bytes_per_chip``:
    arguments (sharded parameters and inputs) stay live for the whole step; the
    temporary peak is a liveness scan of the entry function in program order
    (a value lives from its definition to its last use; a loop, ``shard_map`` or
    call adds its body's own peak at that point, counted once, not per trip;
    each op adds the resharded copies of its operands, e.g. all-gathered
    weights). XLA's scheduler may do better or worse; this is an estimate.
    """

    nodes: tuple[Node, ...]
    mesh_axes: tuple[tuple[str, int], ...]
    argument_bytes_per_chip: int
    peak_temp_bytes_per_chip: int
    warnings: tuple[str, ...] = field(default=())
    # (region, parent region, trip count) of every stablehlo.while body (and its
    # condition), in program order; region 0, the step itself, is implicit. A node
    # of region r runs trip(r) times per execution of its parent.
    regions: tuple[tuple[int, int, int], ...] = field(default=())

    @property
    def memory_bytes_per_chip(self) -> int:
        return self.argument_bytes_per_chip + self.peak_temp_bytes_per_chip

    @property
    def comm_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind != "compute")

    @property
    def flops_per_chip(self) -> float:
        return sum(n.flops_per_chip * n.count for n in self.nodes)
