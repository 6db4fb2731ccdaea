"""The named baselines a plan is compared with, ranked by the same Q2 as every candidate.

Every workload gets a baseline by one documented rule, and Wan keeps maxdiffusion's:

* ``"default deployment"`` (every workload but Wan) -- what one deploys without a
  planner: the workload's **first rule set on its natural mesh**, with its first
  attention kind, in ``jax.experimental.mesh_utils.create_device_mesh``'s device
  order. The *natural mesh* of a rule set is, among the meshes over the workload's
  axes where that sharding is legal (:func:`~aoizora.candidates.space.check_candidate`),
  the one with the **fewest mesh axes larger than 1**, ties broken by giving the
  **most chips to the axis the rule set names first**, then to the one it names
  second, and so on -- "all chips on the first axis that can take them". When the
  first rule set has no legal mesh on the slice, the next one that has is used, and
  the note says so (:func:`default_deployment`).
* Wan (``info["kind"] == "wan"``) keeps maxdiffusion's two:
  ``"existing deployment"`` -- maxdiffusion's defaults: ``context`` = all chips, its
  rules, K/V all-gathered (``gather_kv``), ``mesh_utils.create_device_mesh`` order
  (maxdiffusion ``max_utils.create_device_mesh`` with ``allow_split_physical_axes:
  False``); and ``"maxdiffusion recipe"`` -- ``data`` = 2 (the CFG pair) x ``context``
  = the rest, same rules, attention and device-order function (one that is illegal on
  the slice -- ``context`` = 8,192 devices divides neither the model nor the sequence --
  is left out of the comparison and :func:`illegal_baselines` says why). The natural-mesh rule
  applied to Wan gives exactly the existing deployment on 4 chips or more (a test
  checks it; on 2 chips it puts the CFG pair on ``data``).
* The Wan VAE decoder (``info["kind"] == "vae"``) keeps maxdiffusion's two VAE
  deployments: ``"maxdiffusion spatial"`` -- its rules with ``width`` (maxdiffusion's
  ``vae_spatial: -1``) = all devices; and ``"replicated"`` -- every device decodes the
  whole clip (maxdiffusion ``replicate_vae: True``), a mesh whose axes shard nothing,
  which the candidate space rejects as idle but a deployment may still choose.

The planner adds *logical search* (the best-Q1 sharding in the default order) for
every workload (:mod:`aoizora.planner`).

    >>> import jax, jax.numpy as jnp
    >>> from aoizora.workloads.base import user_workload
    >>> from aoizora.workloads.rules import Rules
    >>> mlp = user_workload(
    ...     "mlp", lambda w, x: x @ w,
    ...     (jax.ShapeDtypeStruct((64, 256), jnp.float32),
    ...      jax.ShapeDtypeStruct((4, 64), jnp.float32)),
    ...     (("embed", "mlp"), ("batch", "embed")), out_logical_axes=("batch", "mlp"),
    ...     rule_sets=(Rules.of("dp_tp", [("batch", "dp"), ("mlp", "tp")]),))
    >>> natural_mesh(mlp, mlp.rule_sets[0], 4).id   # batch 4: all chips on dp
    'dp4.tp1/dp_tp/none'
    >>> natural_mesh(mlp, mlp.rule_sets[0], 8).id   # dp cannot take 8, tp can: still one axis
    'dp1.tp8/dp_tp/none'
    >>> natural_mesh(mlp, mlp.rule_sets[0], 512).id  # neither alone: two axes, dp first
    'dp4.tp128/dp_tp/none'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from aoizora.candidates.space import Candidate, check_candidate, make_candidate, mesh_shapes
from aoizora.tpu import default_device_order
from aoizora.workloads.base import Workload
from aoizora.workloads.rules import Rules, mesh_axes_of
from sim.topology import Slice

__all__ = [
    "BASELINE_NAMES",
    "DEFAULT_DEPLOYMENT",
    "VAE_BASELINE_NAMES",
    "WAN_BASELINE_NAMES",
    "Baseline",
    "baseline_candidates",
    "default_deployment",
    "illegal_baselines",
    "natural_mesh",
]

DEFAULT_DEPLOYMENT = "default deployment"
WAN_BASELINE_NAMES: tuple[str, ...] = ("existing deployment", "maxdiffusion recipe")
VAE_BASELINE_NAMES: tuple[str, ...] = ("maxdiffusion spatial", "replicated")
# Every name a baseline may have (the planner adds "logical search").
BASELINE_NAMES: tuple[str, ...] = (DEFAULT_DEPLOYMENT, *WAN_BASELINE_NAMES, *VAE_BASELINE_NAMES)


@dataclass(frozen=True)
class Baseline:
    """A named deployment to compare with: its candidate and its default device order.

    ``device_order`` lists libtpu device ids (``x + X*y`` on v5e; ``2 x chip id + core``
    on tpu7x) in mesh-flat (row-major) order; ``note`` says which sharding it is and how
    the order was obtained.
    """

    name: str
    candidate: Candidate
    device_order: tuple[int, ...]
    note: str


def natural_mesh(workload: Workload, rules: Rules, num_devices: int) -> Candidate | None:
    """``rules`` on its natural mesh of ``num_devices`` (module docstring), or None if no mesh
    of ``num_devices`` makes it legal. Uses the workload's first attention kind."""
    names = workload.mesh_axis_names
    first_named = mesh_axes_of([rules])
    preference = (*first_named, *(n for n in names if n not in first_named))

    def key(shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        sizes = dict(zip(names, shape, strict=True))
        return sum(1 for s in shape if s > 1), tuple(-sizes[n] for n in preference)

    attention = workload.attention_kinds[0]
    for shape in sorted(mesh_shapes(num_devices, len(names)), key=key):
        cand = make_candidate(workload, shape, rules.name, attention)
        if not check_candidate(workload, cand):
            return cand
    return None


def default_deployment(workload: Workload, num_devices: int) -> tuple[Candidate, str] | None:
    """The default deployment's sharding and a note saying which it is (None if no rule set
    of the workload is legal on ``num_devices``)."""
    skipped: list[str] = []
    for rules in workload.rule_sets:
        cand = natural_mesh(workload, rules, num_devices)
        if cand is not None:
            mesh = ".".join(
                f"{n}{s}" for n, s in zip(cand.mesh_axis_names, cand.mesh_shape, strict=True)
            )
            note = f"rule set {rules.name!r} on its natural mesh {mesh}"
            if skipped:
                note += f" (the first rule set {skipped[0]!r} has no legal mesh of {num_devices})"
            return cand, note
        skipped.append(rules.name)
    return None


def _wan_named(
    workload: Workload, num_devices: int
) -> list[tuple[str, Candidate, tuple[str, ...]]]:
    """Each Wan baseline that has a mesh on ``num_devices``, with why it is illegal (if so)."""
    out: list[tuple[str, Candidate, tuple[str, ...]]] = []
    meshes = {
        "existing deployment": {"context": num_devices},
        "maxdiffusion recipe": {"data": 2, "context": num_devices // 2},
    }
    for name in WAN_BASELINE_NAMES:
        sizes = meshes[name]
        if math.prod(sizes.values()) != num_devices:
            continue  # one chip: no recipe with data = 2
        cand = make_candidate(workload, sizes, "maxdiffusion", "gather_kv")
        out.append((name, cand, check_candidate(workload, cand)))
    return out


def _wan_baselines(workload: Workload, num_devices: int) -> list[tuple[str, Candidate, str]]:
    # An illegal one (context over 8,192 devices does not divide the model) is left out
    # of the comparison, never the plan (illegal_baselines says why).
    return [
        (name, cand, "maxdiffusion's " + ("defaults" if "existing" in name else "recipe"))
        for name, cand, reasons in _wan_named(workload, num_devices)
        if not reasons
    ]


def illegal_baselines(workload: Workload, slice_: Slice) -> tuple[str, ...]:
    """One line per named baseline that is illegal on ``slice_`` and left out, saying why."""
    if str(workload.info.get("kind")) != "wan":
        return ()
    return tuple(
        f"baseline {name!r} ({cand.id}) is illegal on {slice_.name}, left out of the "
        f"comparison: {'; '.join(reasons)}"
        for name, cand, reasons in _wan_named(workload, slice_.num_devices)
        if reasons
    )


def _vae_baselines(workload: Workload, num_devices: int) -> list[tuple[str, Candidate, str]]:
    spatial = make_candidate(workload, {"width": num_devices}, "maxdiffusion", "none")
    out: list[tuple[str, Candidate, str]] = []
    if not check_candidate(workload, spatial):  # e.g. a width the devices do not divide
        out.append(("maxdiffusion spatial", spatial, "maxdiffusion's vae_spatial = all devices"))
    replicated = make_candidate(workload, {"height": num_devices}, "replicated", "none")
    out.append(("replicated", replicated, "maxdiffusion's replicate_vae: every device decodes"))
    return out


def _generic_baselines(workload: Workload, num_devices: int) -> list[tuple[str, Candidate, str]]:
    found = default_deployment(workload, num_devices)
    return [] if found is None else [(DEFAULT_DEPLOYMENT, found[0], found[1])]


# Workload kinds (``info["kind"]``) with baselines of their own; all others get the rule.
_NAMED: dict[str, Callable[[Workload, int], list[tuple[str, Candidate, str]]]] = {
    "wan": _wan_baselines,
    "vae": _vae_baselines,
}


def baseline_candidates(workload: Workload, slice_: Slice) -> tuple[Baseline, ...]:
    """The named baselines of ``workload`` on ``slice_`` (module docstring).

    Device orders come from ``mesh_utils.create_device_mesh`` on the slice's libtpu
    devices (see :func:`aoizora.tpu.default_device_order`). A workload with no legal
    sharding at all has no baseline (``()``).
    """
    named = _NAMED.get(str(workload.info.get("kind")), _generic_baselines)
    out: list[Baseline] = []
    # The mesh spans devices (two per tpu7x chip).
    for name, cand, what in named(workload, slice_.num_devices):
        order, order_note = default_device_order(cand.mesh_shape, slice_)
        note = f"{what}; {order_note}"
        out.append(Baseline(name=name, candidate=cand, device_order=order, note=note))
    return tuple(out)
