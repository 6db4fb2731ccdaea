"""Predictors: one callable per row kind, ``Measurement -> predicted seconds``.

- ``collective`` rows: :func:`predict_collective` replays the collective in
  :mod:`sim` (:func:`collective_nodes` builds its flows, with the ``dimwise``
  algorithm composed here from sim's one-dimensional collectives);
- ``step`` rows: :func:`aoizora.studies.validation.step.predict_step` compiles the
  model's step and replays it for the row's device order; ``vae`` rows the same with
  the clip's VAE decode.

:func:`default_predictors` gives both, as ``aoizora validate`` uses them.

Example
-------
>>> from aoizora.studies.validation.format import parse_measurements
>>> (row,) = parse_measurements(
...     "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source\\n"
...     "a,collective,v5e:1x2,all-gather,ids:0 1,2000000,1e-5,unreported,x\\n")
>>> round(predict_collective(row) * 1e6, 3)  # 1 us hop + 1 MB at 45 GB/s one way
23.222
>>> sorted(default_predictors())
['collective', 'step', 'vae']
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from aoizora.errors import ValidationError
from aoizora.studies.validation.format import Measurement, parse_group_spec, row_slice
from aoizora.studies.validation.step import predict_step
from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.topology import Slice

__all__ = [
    "DIMWISE",
    "Predictor",
    "collective_nodes",
    "default_predictors",
    "predict_collective",
]

# A predictor takes one row and returns the predicted latency in seconds.
Predictor = Callable[[Measurement], float]


# The one extra algorithm name this module understands on top of sim's: a
# multi-dimensional collective done one slice dimension at a time.
DIMWISE = "dimwise"


def _spec_dims(spec: str, num_dims: int) -> tuple[int, ...] | None:
    if spec == "all":
        return tuple(range(num_dims))
    if spec.startswith("dims:"):
        return tuple(int(d) for d in spec[5:].split("+"))
    return None


def _dimwise_phases(
    kind: str, dims: tuple[int, ...], size: float, slice_: Slice
) -> list[tuple[str, int, float]]:
    """(kind, dim, buffer bytes) per phase: reduce-scatters shrink the buffer, all-gathers
    regrow it (collective_nodes' docstring)."""
    phases: list[tuple[str, int, float]] = []
    held = size
    if kind in ("reduce-scatter", "all-reduce"):
        for d in dims:
            phases.append(("reduce-scatter", d, held))
            held /= slice_.shape[d]
    if kind in ("all-gather", "all-reduce"):
        gathered: list[tuple[str, int, float]] = []
        out = size
        for d in dims:
            gathered.append(("all-gather", d, out))
            out /= slice_.shape[d]
        phases.extend(reversed(gathered))
    return phases


def collective_nodes(
    row: Measurement,
    slice_: Slice,
    *,
    id_prefix: str | None = None,
    overhead_s: float | None = None,
) -> tuple[tuple[Flow | Compute, ...], str]:
    """The simulator nodes of a ``collective`` row and the id of the node that ends it.

    ``algorithm`` empty: sim's ``auto`` (from the groups' layout on ``slice_``);
    the per-collective overhead (default: the chip's) is paid once. ``dimwise``
    (all-gather, reduce-scatter, all-reduce over ``dims:``/``all`` groups): one
    phase per slice dimension, each waiting for the previous one -- reduce-scatter
    over the first dimension on the whole buffer, then over the next on the
    already-scattered ``1/n``, and so on; all-gather runs them in reverse;
    all-reduce is the reduce-scatter phases, then the all-gather phases. A
    ``collective-permute`` row shifts the whole buffer cyclically in each group.
    """
    case = row.collective
    if case is None:
        raise ValidationError(f"row {row.row_id!r} is a {row.kind!r} row, not a collective row")
    overhead = slice_.chip.collective_overhead_s if overhead_s is None else overhead_s
    prefix = id_prefix if id_prefix is not None else row.row_id
    groups = parse_group_spec(
        case.groups, shape=slice_.shape, devices_per_chip=slice_.chip.devices_per_chip
    )
    kind = case.collective
    size = float(case.size_bytes)
    if kind == "collective-permute":
        if case.algorithm not in (None, "direct"):
            raise ValidationError(
                f"row {row.row_id!r}: collective-permute only has algorithm 'direct' (or empty)"
            )
        pairs = [(g[i], g[(i + 1) % len(g)]) for g in groups for i in range(len(g))]
        plan = collective_flows(
            kind, (), pairs=pairs, buffer_bytes=size, id_prefix=prefix, overhead_s=overhead
        )
        return plan.nodes, plan.done_id
    if case.algorithm != DIMWISE:
        plan = collective_flows(
            kind, groups, buffer_bytes=size, algorithm=case.algorithm, id_prefix=prefix,
            slice_=slice_, overhead_s=overhead,
        )  # fmt: skip
        return plan.nodes, plan.done_id
    dims = _spec_dims(case.groups, slice_.num_dims)
    if dims is None or kind not in ("all-gather", "reduce-scatter", "all-reduce"):
        raise ValidationError(
            f"row {row.row_id!r}: algorithm 'dimwise' needs an all-gather, reduce-scatter or "
            f"all-reduce over 'all' or 'dims:' groups, got {kind} over {case.groups!r}; "
            "leave algorithm empty for the simulator's default"
        )
    nodes: list[Flow | Compute] = []
    after: tuple[str, ...] = ()
    done = ""
    for k, (phase_kind, d, buffer_bytes) in enumerate(_dimwise_phases(kind, dims, size, slice_)):
        plan = collective_flows(
            phase_kind,
            parse_group_spec(f"dims:{d}", shape=slice_.shape),
            buffer_bytes=buffer_bytes,
            id_prefix=f"{prefix}/ph{k}",
            after=after,
            slice_=slice_,
            overhead_s=overhead if k == 0 else 0.0,
        )
        nodes.extend(plan.nodes)
        after = (plan.done_id,)
        done = plan.done_id
    return tuple(nodes), done


def predict_collective(
    row: Measurement,
    *,
    link_bandwidth_bytes_per_s: float | None = None,
    hop_latency_s: float | None = None,
    overhead_s: float | None = None,
) -> float:
    """Simulated latency of a ``collective`` row: the finish of its last node.

    The keywords replace the generation's link numbers and per-collective
    overhead (calibration).
    """
    slice_ = row_slice(
        row, link_bandwidth_bytes_per_s=link_bandwidth_bytes_per_s, hop_latency_s=hop_latency_s
    )
    nodes, done = collective_nodes(row, slice_, overhead_s=overhead_s)
    return simulate(slice_, nodes).finish_s(done)


def default_predictors(*, cache_dir: str | None = None) -> dict[str, Predictor]:
    """The predictor of every row kind: collectives in :mod:`sim`, steps via the planner.

    ``cache_dir`` is the planner's cache (``aoizora plan --cache-dir``): step
    rows keep their compile results under ``<cache_dir>/compiled``.
    """
    return {
        "collective": predict_collective,
        "step": functools.partial(predict_step, cache_dir=cache_dir),
        "vae": functools.partial(predict_step, cache_dir=cache_dir),  # the decode, compiled
    }
