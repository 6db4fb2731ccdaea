"""What the planner plans: a JAX function, its abstract arguments and logical axis names.

A :class:`Workload` is a value: a ``build`` callable that, given a
:class:`BuildContext` (the mesh, the sharding rules and the attention kind of
one candidate), returns the function to ``jax.jit``; the abstract arguments
(pytrees of :class:`jax.ShapeDtypeStruct`); and a logical axis name for every
dimension of every argument and result. Shardings come only from rules applied
to those names, so the model code never changes between candidates.

Two ways to get one:

* :func:`aoizora.workloads.wan.wan_workload` -- the Wan 2.1 DiT denoising step;
* :func:`user_workload` -- any JAX function of yours, without touching its code:

    >>> import jax, jax.numpy as jnp
    >>> from aoizora.workloads.rules import Rules
    >>> def mlp(w1, w2, x):
    ...     return jax.nn.gelu(x @ w1) @ w2
    >>> wl = user_workload(
    ...     "mlp", mlp,
    ...     (jax.ShapeDtypeStruct((512, 2048), jnp.bfloat16),
    ...      jax.ShapeDtypeStruct((2048, 512), jnp.bfloat16),
    ...      jax.ShapeDtypeStruct((8, 1024, 512), jnp.bfloat16)),
    ...     (("embed", "mlp"), ("mlp", "embed"), ("batch", "length", "embed")),
    ...     out_logical_axes=("batch", "length", "embed"),
    ...     rule_sets=(Rules.of("dp_tp", [("batch", "data"), ("mlp", "tensor")]),))
    >>> wl.name, wl.attention_kinds
    ('mlp', ('none',))
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax

from aoizora.errors import WorkloadError
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import LogicalAxes, Rules, is_logical_axes, mesh_axes_of

__all__ = [
    "Backend",
    "BuildContext",
    "Probe",
    "Workload",
    "user_workload",
    "check_logical_tree",
    "expert_steps",
    "experts_summary",
]

Backend = Literal["tpu", "cpu"]
# Mesh axis names go into candidate ids ("dp2.tp4/rules/none") and plan files.
_AXIS_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class BuildContext:
    """Everything a workload builder may depend on for one candidate.

    ``mesh`` is the :class:`jax.sharding.Mesh` the step will be compiled for (its
    axis names are the candidate's); ``attention`` the candidate's attention kind
    (``"none"`` for workloads without attention); ``backend`` the compile target:
    ``"tpu"`` uses Pallas kernels, ``"cpu"`` plain XLA ops. ``kernel_bodies=False``
    lowers Pallas kernels without their bodies (:mod:`aoizora.workloads.opaque`): a
    program to read (Stage 1), not to compile. ``splash_blocks``: the attention kernel's
    tiles, which a builder that runs splash attention passes on (Wan's does).
    """

    mesh: jax.sharding.Mesh
    rules: Rules
    attention: str
    backend: Backend
    kernel_bodies: bool = True
    # The splash kernel's (block_q, block_kv, block_kv_compute) the candidate runs with;
    # None: maxdiffusion's 512 (aoizora.workloads.splash.DEFAULT_BLOCKS).
    splash_blocks: tuple[int, int, int] | None = None

    @property
    def mesh_sizes(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.mesh.shape.items()}


@dataclass(frozen=True)
class Probe:
    """An intermediate array whose sharding legality the candidate checker verifies.

    ``paddable`` lists logical axis names the workload pads itself (e.g. the token
    sequence): a non-divisible degree there costs padding instead of being illegal.
    """

    name: str
    shape: tuple[int, ...]
    logical_axes: LogicalAxes
    paddable: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    """A plannable step: builder, abstract args and logical axes (see module docstring).

    Fields:
      name: stable id (goes into reports and plan files).
      build: ``BuildContext -> function``; the function takes ``*abstract_args``.
      abstract_args: tuple of pytrees of :class:`jax.ShapeDtypeStruct`.
      arg_logical_axes: same structure, a :data:`~aoizora.workloads.rules.LogicalAxes` per leaf.
      out_logical_axes: logical axes of the result pytree.
      abstract_out: the result pytree of :class:`jax.ShapeDtypeStruct`.
      rule_sets: the candidate rule sets to enumerate (first = the default deployment's).
      attention_kinds: attention kinds the builder implements (``("none",)`` if none).
      probes: intermediates for legality checks (see :class:`Probe`).
      check: extra workload-specific legality check, ``(mesh sizes, rules, attention)
        -> reasons`` (empty = legal).
      info: free-form facts for reports (model, tokens, ...), JSON-ready values.
      mesh_axis_names: the mesh axes candidates are built over, in mesh order; ``()``
        (the default) means every axis the rule sets name, in order of first mention
        (:func:`~aoizora.workloads.rules.mesh_axes_of`).
      model: the model the plan file names (default: ``name``).
      clip: the video clip, for video workloads (recorded in the plan file).
      program_fingerprint: what identifies the program beyond its shapes, names and
        rules, for the planner's caches (user workloads: a hash of the jaxpr; ``""``
        when the code that builds it is fingerprinted by the cache itself, as Wan's is).
    """

    name: str
    build: Callable[[BuildContext], Callable[..., Any]]
    abstract_args: tuple[Any, ...]
    arg_logical_axes: tuple[Any, ...]
    out_logical_axes: Any
    abstract_out: Any
    rule_sets: tuple[Rules, ...]
    attention_kinds: tuple[str, ...] = ("none",)
    probes: tuple[Probe, ...] = ()
    check: Callable[[Mapping[str, int], Rules, str], tuple[str, ...]] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    mesh_axis_names: tuple[str, ...] = ()
    model: str = ""
    clip: Clip | None = None
    program_fingerprint: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise WorkloadError(
                f"workload name {self.name!r} must be a non-empty string, e.g. 'my-mlp'"
            )
        if len(self.abstract_args) != len(self.arg_logical_axes):
            raise WorkloadError(
                f"workload {self.name!r}: {len(self.abstract_args)} abstract args but "
                f"{len(self.arg_logical_axes)} logical-axes entries; give one per argument"
            )
        for i, (arg, axes) in enumerate(
            zip(self.abstract_args, self.arg_logical_axes, strict=True)
        ):
            check_logical_tree(arg, axes, where=f"workload {self.name!r} argument {i}")
        check_logical_tree(
            self.abstract_out, self.out_logical_axes, where=f"workload {self.name!r} result"
        )
        if not self.rule_sets or not all(isinstance(r, Rules) for r in self.rule_sets):
            raise WorkloadError(
                f"workload {self.name!r}: rule_sets {self.rule_sets!r} must be one or more "
                f"Rules values, e.g. (Rules.of('dp', [('batch', 'dp')]),)"
            )
        names = [r.name for r in self.rule_sets]
        if len(set(names)) != len(names):
            raise WorkloadError(f"workload {self.name!r}: rule set names repeat: {names}")
        if self.clip is not None and not isinstance(self.clip, Clip):
            raise WorkloadError(f"workload {self.name!r}: clip {self.clip!r} is not a Clip")
        object.__setattr__(self, "mesh_axis_names", self._mesh_axes())
        object.__setattr__(self, "model", self.model or self.name)

    def _mesh_axes(self) -> tuple[str, ...]:
        used = mesh_axes_of(self.rule_sets)
        names = tuple(self.mesh_axis_names) or used
        if not names:
            raise WorkloadError(
                f"workload {self.name!r}: its rule sets {[r.name for r in self.rule_sets]} name "
                f"no mesh axis, so nothing can be sharded; map a logical axis to a mesh axis, "
                f"e.g. Rules.of('dp', [('batch', 'dp')])"
            )
        bad = [n for n in names if not isinstance(n, str) or not _AXIS_NAME_RE.match(n)]
        bad += sorted({n for n in names if names.count(n) > 1})
        if bad:
            raise WorkloadError(
                f"workload {self.name!r}: mesh axis names {list(names)} must be distinct "
                f"identifiers (letters, digits, '_'; not starting with a digit), e.g. "
                f"['dp', 'sp', 'tp']; offending: {bad}"
            )
        missing = [a for a in used if a not in names]
        if missing:
            raise WorkloadError(
                f"workload {self.name!r}: its rule sets name mesh axes {missing} that are not in "
                f"mesh_axis_names {list(names)}; add them, or leave mesh_axis_names empty to "
                f"use every axis the rules name ({list(used)})"
            )
        return names

    def arg_leaves(self) -> tuple[tuple[str, jax.ShapeDtypeStruct, LogicalAxes], ...]:
        """``(label, leaf, logical axes)`` of every array argument, in ``jax.tree.leaves``
        order; labels read ``arg{i}{path}`` (e.g. ``arg0['x']``), as plan files name them."""
        out = []
        for i, (arg, axes) in enumerate(
            zip(self.abstract_args, self.arg_logical_axes, strict=True)
        ):
            ax_leaves = jax.tree.leaves(axes, is_leaf=is_logical_axes)
            for (path, leaf), ax in zip(jax.tree.leaves_with_path(arg), ax_leaves, strict=True):
                out.append((f"arg{i}{jax.tree_util.keystr(path)}", leaf, ax))
        return tuple(out)

    @functools.cached_property
    def fingerprint(self) -> str:
        """sha256 of what decides the compiled programs besides the code: the program
        fingerprint, argument shapes/dtypes and logical axes, rules, probes, mesh axes."""

        def leaves(tree: Any, axes: Any) -> list[Any]:
            flat = jax.tree.leaves_with_path(tree)
            ax = jax.tree.leaves(axes, is_leaf=is_logical_axes)
            return [
                [jax.tree_util.keystr(path), list(leaf.shape), str(leaf.dtype), list(a)]
                for (path, leaf), a in zip(flat, ax, strict=True)
            ]

        payload = {
            "program": self.program_fingerprint,
            "args": leaves(self.abstract_args, self.arg_logical_axes),
            "out": leaves(self.abstract_out, self.out_logical_axes),
            "rules": [[r.name, [[n, list(a)] for n, a in r.pairs]] for r in self.rule_sets],
            "attention": list(self.attention_kinds),
            "probes": [
                [p.name, list(p.shape), list(p.logical_axes), list(p.paddable)] for p in self.probes
            ],
            "mesh": list(self.mesh_axis_names),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    @property
    def cache_id(self) -> str:
        """``name#fingerprint``: what the planner's caches key this workload by."""
        return f"{self.name}#{self.fingerprint[:32]}"

    @property
    def arg_bytes(self) -> int:
        """Total bytes of all arguments (unsharded)."""
        leaves = jax.tree.leaves(self.abstract_args)
        return sum(math.prod(x.shape) * x.dtype.itemsize for x in leaves)

    def rules(self, rules_id: str) -> Rules:
        """The rule set named ``rules_id``."""
        for r in self.rule_sets:
            if r.name == rules_id:
                return r
        raise WorkloadError(
            f"workload {self.name!r} has no rule set {rules_id!r}; "
            f"choose one of {[r.name for r in self.rule_sets]}"
        )


def check_logical_tree(abstract: Any, logical: Any, *, where: str) -> None:
    """Raise :class:`WorkloadError` unless ``logical`` names every dimension of ``abstract``."""
    arg_leaves, arg_tree = jax.tree.flatten(abstract)
    ax_leaves, ax_tree = jax.tree.flatten(logical, is_leaf=is_logical_axes)
    if str(arg_tree) != str(ax_tree):
        raise WorkloadError(
            f"{where}: logical axes structure {ax_tree} does not match the argument "
            f"structure {arg_tree}; give a tuple of names per array, e.g. ('batch', 'embed')"
        )
    for leaf, axes in zip(arg_leaves, ax_leaves, strict=True):
        shape = getattr(leaf, "shape", None)
        if shape is None or not hasattr(leaf, "dtype"):
            raise WorkloadError(
                f"{where}: {leaf!r} is not an abstract array; use "
                f"jax.ShapeDtypeStruct(shape, dtype)"
            )
        if not is_logical_axes(axes) or len(axes) != len(shape):
            raise WorkloadError(
                f"{where}: logical axes {axes!r} do not name the {len(shape)} dimensions of "
                f"shape {tuple(shape)}; give one name (or None) per dimension"
            )


def user_workload(
    name: str,
    fn: Callable[..., Any],
    abstract_args: Sequence[Any],
    arg_logical_axes: Sequence[Any],
    *,
    out_logical_axes: Any,
    rule_sets: Sequence[Rules] | Rules,
    probes: Sequence[Probe] = (),
    mesh_axis_names: Sequence[str] = (),
) -> Workload:
    """Wrap your own JAX function for planning, without changing its code.

    ``fn(*abstract_args)`` is jitted with in/out shardings from ``rule_sets``
    applied to your logical names; XLA's propagation shards the inside. The mesh
    axes are yours: candidates are built over every mesh axis the rule sets name
    (or ``mesh_axis_names``, in that order). The first rule set is the default
    deployment's (see :mod:`aoizora.candidates.baselines`). See the module
    docstring for an example.

    ``fn`` is traced once here (:func:`jax.make_jaxpr`): the result's shapes come
    from it, and a hash of the jaxpr keys the planner's caches, so editing ``fn``
    invalidates them. A function that fails to trace raises :class:`WorkloadError`.
    """
    if not callable(fn):
        raise WorkloadError(
            f"user workload {name!r}: fn {fn!r} is not callable; pass the function to plan, "
            f"e.g. user_workload('mlp', mlp, ...)"
        )
    args = tuple(abstract_args)
    axes = tuple(arg_logical_axes)
    sets = (rule_sets,) if isinstance(rule_sets, Rules) else tuple(rule_sets)
    try:
        jaxpr, out_struct = jax.make_jaxpr(fn, return_shape=True)(*args)
    except Exception as exc:
        raise WorkloadError(
            f"user workload {name!r}: tracing fn(*abstract_args) failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc

    def build(ctx: BuildContext) -> Callable[..., Any]:
        del ctx
        return fn

    return Workload(
        name=name,
        build=build,
        abstract_args=args,
        arg_logical_axes=axes,
        out_logical_axes=out_logical_axes,
        abstract_out=out_struct,
        rule_sets=sets,
        attention_kinds=("none",),
        probes=tuple(probes),
        info={"kind": "user"},
        mesh_axis_names=tuple(mesh_axis_names),
        program_fingerprint=hashlib.sha256(str(jaxpr).encode()).hexdigest(),
    )


def expert_steps(workload: Workload) -> tuple[tuple[str, int], ...]:
    """(expert, denoising steps) of a model with experts (Wan 2.2 A14B); ``()`` otherwise.

    Such a workload's step takes the active expert's weights as its first argument and
    holds the others resident (unread), so every expert's step is the same compiled
    program: the winner's (sharding, placement) serves each expert, each at the
    winner's simulated step time, with every expert in HBM.
    """
    experts = workload.info.get("experts", ())
    return tuple((str(e["name"]), int(e["steps"])) for e in experts)


def experts_summary(workload: Workload, step_s: float) -> dict[str, Any]:
    """The JSON fields a model with experts adds to a plan summary (``{}`` otherwise):
    each expert's steps and step time, that one plan serves them all, the denoising time."""
    experts = expert_steps(workload)
    if not experts:
        return {}
    return {
        "experts": [{"name": name, "steps": n, "step_s": step_s} for name, n in experts],
        "experts_share_plan": True,
        "denoise_s": sum(n for _, n in experts) * step_s,
    }
