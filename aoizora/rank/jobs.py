"""The planner's side of the placement search: one job per compiled sharding, the totals.

:func:`placement_job` gives a compiled candidate's placement tree, its mesh
axes placed in the order of the traffic they carry (so bounds bite early), and
jax's default device order as a forced leaf (the baselines need its Q2).
:class:`SearchSummary` is what ``aoizora plan --json`` reports under
``"search"``: how many placements were simulated, proven worse by a bound or
left open, and the bound and gap the search proved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aoizora.candidates.space import Candidate
from aoizora.hlo.graph import CollectiveGraph
from aoizora.placement.device_order import DeviceOrder
from aoizora.placement.enumerate import enumerate_placements
from aoizora.placement.space import PlacementSpace
from aoizora.rank.bounds_of_nodes import collective_shapes, traffic_order
from aoizora.rank.search import Job, SearchBudget, SearchReport, relative_gap
from aoizora.tpu import default_device_order
from sim.topology import Slice

__all__ = ["SearchSummary", "mesh_job", "placement_job"]


def placement_job(
    cand: Candidate,
    graph: CollectiveGraph,
    slice_: Slice,
    *,
    max_placements: int | None = None,
    default_label: str = "default order",
) -> Job:
    """The search's job for one compiled candidate: its tree (axes by traffic), jax's order."""
    return mesh_job(
        cand.id, graph, slice_, mesh_shape=cand.mesh_shape,
        mesh_axis_names=cand.mesh_axis_names, max_placements=max_placements,
        default_label=default_label,
    )  # fmt: skip


def mesh_job(
    name: str,
    graph: CollectiveGraph,
    slice_: Slice,
    *,
    mesh_shape: tuple[int, ...],
    mesh_axis_names: tuple[str, ...],
    max_placements: int | None = None,
    default_label: str = "default order",
) -> Job:
    """:func:`placement_job` for a program on a mesh (benchmarks replay cached compiles)."""
    default_ids, _ = default_device_order(mesh_shape, slice_)
    default = DeviceOrder.from_physical_ids(default_ids, mesh_shape=mesh_shape, slice_=slice_)
    order = traffic_order(collective_shapes(graph, mesh_shape), mesh_shape)
    space = PlacementSpace(mesh_shape, slice_, mesh_axis_names=mesh_axis_names, axis_order=order)
    extras: list[tuple[str, DeviceOrder]] = []
    if max_placements is not None:  # the simplest classes only, as listed
        listed = enumerate_placements(
            mesh_shape, slice_, mesh_axis_names=mesh_axis_names, max_placements=max_placements
        )
        extras = [(p.id, p.order) for p in listed]
    extras.append((default_label, default))
    return Job(
        name, graph, space, tuple(extras), forced=(default_label,),
        tree=max_placements is None,
    )  # fmt: skip


@dataclass(frozen=True)
class SearchSummary:
    """How the placement search ended: the bound under every placement left, the gap.

    ``gap`` = (winner Q2 - ``bound_s``) / winner Q2: 0 when the search proved
    the winner optimal over every compiled sharding's placement family.
    ``cached``: the report was read from the ``search/`` cache
    (:mod:`aoizora.rank.search_cache`); ``seconds`` is then the search's that
    stored it. ``work`` is what the search spent of its ``budget`` (work units,
    :class:`~aoizora.rank.search.SearchBudget`; ``None``: unlimited) and
    ``stopped_by`` what ended it before the optimum was proven (``"budget"``,
    ``"deadline"``, ``"gap"``; ``None`` when it was proven).
    """

    num_placements: int
    simulated: int
    repeats: int
    proven_worse: int
    open: int
    bound_s: float
    gap: float
    seconds: float
    nodes_bounded: int
    fan_out: str
    cached: bool = False
    work: int = 0
    budget: int | None = None
    stopped_by: str | None = None

    @classmethod
    def of(
        cls,
        report: SearchReport,
        *,
        fan_out: str,
        budget: SearchBudget | None = None,
        launch_s: float = 0.0,
    ) -> SearchSummary:
        """The totals of a :class:`~aoizora.rank.search.SearchReport`; ``launch_s`` (the
        host's launch of a call, the same for every placement) is added to the bound and
        the winner the gap is taken over, as to every figure of a plan."""
        jobs = report.jobs
        bound = report.bound_s + launch_s
        return cls(
            num_placements=sum(j.num_placements for j in jobs),
            simulated=sum(j.simulated for j in jobs),
            repeats=sum(j.repeats for j in jobs),
            proven_worse=sum(j.proven_worse for j in jobs),
            open=sum(j.open for j in jobs),
            bound_s=bound, gap=relative_gap(report.winner.q2_s + launch_s, bound),
            seconds=report.seconds, nodes_bounded=report.nodes_bounded, fan_out=fan_out,
            cached=report.cached, work=report.work,
            budget=None if budget is None else budget.work, stopped_by=report.stopped_by,
        )  # fmt: skip

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "placements": self.num_placements,
            "simulated": self.simulated,
            "repeats": self.repeats,
            "proven_worse": self.proven_worse,
            "open": self.open,
            "bound_s": self.bound_s,
            "gap": self.gap,
            "seconds": self.seconds,
            "nodes_bounded": self.nodes_bounded,
            "fan_out": self.fan_out,
            "cached": self.cached,
            "work": self.work,
            "budget": self.budget,
            "stopped_by": self.stopped_by,
        }
