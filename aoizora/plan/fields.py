"""The values a plan file is made of, and the checks its fields share.

* :class:`PredictedLatencies` -- the winner's and the baselines' simulated step times;
* :class:`Provenance` -- the versions a plan was made with;
* :class:`PlanInput` -- one abstract input of the workload (name, shape, dtype, logical
  axes), so a plan says what it shards;
* ``check_*`` / ``json_*`` -- field checks that raise :class:`PlanError` naming the
  field, the value and what is allowed.

    >>> PlanInput("arg1", (8, 256), "bfloat16", ("batch", None)).to_json()
    {'name': 'arg1', 'shape': [8, 256], 'dtype': 'bfloat16', 'logical_axes': ['batch', None]}
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp

from aoizora.errors import PlanError, WorkloadError
from aoizora.placement.device_order import Coord
from aoizora.software import aoizora_commit, aoizora_version, package_version
from aoizora.workloads.base import Workload
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import is_logical_axes, rule_pair_from_json
from sim.topology import Chip, Slice, topologies_dir

__all__ = [
    "PlanInput",
    "PredictedLatencies",
    "Provenance",
    "WorkloadSource",
    "check_device_order",
    "check_keys",
    "check_latency",
    "check_positive_int",
    "check_text",
    "compute_model_json",
    "json_clip",
    "json_list",
    "json_object",
    "json_rules",
    "json_text",
    "length_of",
    "plan_inputs",
]

# "simulated": Q2 of a compiled program; "stage1": Stage 1's Q1 of a program not compiled
# (a clip's VAE decoder, aoizora/request/vae_rank.py).
_PREDICTION_SOURCES = ("simulated", "stage1")
_COMMIT = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")  # docs/plan.schema.json, aoizora_commit


@dataclass(frozen=True)
class WorkloadSource:
    """Where a ``--workload`` plan's program came from: the ``spec`` it was loaded from
    (``FILE.py:FACTORY`` or ``package.module:FACTORY``, as given) and the ``program``
    fingerprint of what it built (:attr:`~aoizora.workloads.base.Workload.program_fingerprint`),
    so ``aoizora measure`` can rebuild it and check it is the same program."""

    spec: str
    program: str

    def __post_init__(self) -> None:
        check_text(self.spec, "workload_source.spec", "e.g. 'examples/tiny_block.py:make'")
        check_text(self.program, "workload_source.program", "the workload's program fingerprint")

    def to_json(self) -> dict[str, str]:
        return {"spec": self.spec, "program": self.program}

    @classmethod
    def from_json(cls, value: Any) -> WorkloadSource:
        data = json_object(value, "workload_source", ("spec", "program"))
        return cls(json_text(data["spec"], "workload_source.spec"),
                   json_text(data["program"], "workload_source.program"))  # fmt: skip


@dataclass(frozen=True)
class PredictedLatencies:
    """Predicted step latency of the winner and of each baseline, by name.

    ``source`` says where the numbers come from: ``"simulated"`` (Q2), or ``"stage1"``
    (Q1, for a VAE decoder ranked without a compile).
    ``baselines_s`` is kept sorted by name.
    """

    winner_s: float
    baselines_s: tuple[tuple[str, float], ...] = ()
    source: str = _PREDICTION_SOURCES[0]

    def __post_init__(self) -> None:
        if self.source not in _PREDICTION_SOURCES:
            raise PlanError(
                f"predicted_latency_s.source is {self.source!r}; allowed: "
                f"{list(_PREDICTION_SOURCES)}, e.g. 'simulated' (plans carry predictions only)"
            )
        object.__setattr__(
            self, "winner_s", check_latency(self.winner_s, "predicted_latency_s.winner")
        )
        pairs: list[tuple[str, float]] = []
        for pair in self.baselines_s:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise PlanError(
                    f"predicted_latency_s.baselines entry {pair!r} must be a (name, seconds) "
                    "pair, e.g. ('existing deployment', 0.61)"
                )
            name, value = pair
            check_text(name, "predicted_latency_s.baselines name", "e.g. 'existing deployment'")
            pairs.append((name, check_latency(value, f"predicted_latency_s.baselines[{name!r}]")))
        names = [n for n, _ in pairs]
        if len(set(names)) != len(names):
            raise PlanError(
                f"predicted_latency_s.baselines names repeat: {names}; give each baseline once"
            )
        object.__setattr__(self, "baselines_s", tuple(sorted(pairs)))

    @property
    def speedups(self) -> dict[str, float]:
        """Baseline latency / winner latency, per baseline (simulated)."""
        return {name: value / self.winner_s for name, value in self.baselines_s}


@dataclass(frozen=True)
class Provenance:
    """Versions the plan was made with (``None`` when a package is not installed), and the
    git commit of the AoiZora checkout it was made from (``None`` for an installed copy;
    ``+dirty`` when the checkout was modified; :mod:`aoizora.software`)."""

    aoizora: str | None
    jax: str | None
    jaxlib: str | None
    libtpu: str | None
    aoizora_commit: str | None = None

    def __post_init__(self) -> None:
        for name in ("aoizora", "jax", "jaxlib", "libtpu"):
            value = getattr(self, name)
            if value is not None:
                check_text(value, f"provenance.{name}", "a version string such as '0.10.2' or null")
        commit = self.aoizora_commit
        if commit is not None and not (isinstance(commit, str) and _COMMIT.fullmatch(commit)):
            raise PlanError(
                f"provenance.aoizora_commit is {commit!r}; allowed: a git commit of 7-40 "
                "lower-case hex digits, '+dirty' when the checkout was modified, e.g. "
                "'032b454e1f0a+dirty' (or leave it out)"
            )

    @classmethod
    def current(cls) -> Provenance:
        """The running versions: AoiZora's (its checkout's when run from one, with the
        commit) and jax/jaxlib/libtpu's (:func:`aoizora.software.package_version`: the
        libtpu that compiles)."""
        return cls(
            aoizora=aoizora_version(),
            jax=_version("jax"),
            jaxlib=_version("jaxlib"),
            libtpu=_version("libtpu"),
            aoizora_commit=aoizora_commit(),
        )

    def versions(self) -> dict[str, str | None]:
        """The versions of the packages that compile the program (jax, jaxlib, libtpu)."""
        return {"jax": self.jax, "jaxlib": self.jaxlib, "libtpu": self.libtpu}

    def to_json(self) -> dict[str, str | None]:
        """The plan's ``provenance`` object (``aoizora_commit`` only when known)."""
        out = {"aoizora": self.aoizora, **self.versions()}
        if self.aoizora_commit is not None:
            out["aoizora_commit"] = self.aoizora_commit
        return out


def _version(package: str) -> str | None:
    return package_version(package)  # the libtpu that compiles (aoizora.software)


@dataclass(frozen=True)
class PlanInput:
    """One array the planned step takes: its pytree path name, shape, dtype and logical axes.

    ``name`` is ``arg{i}`` plus the leaf's key path (``jax.tree_util.keystr``), e.g.
    ``arg0['wq']``; inputs are listed in ``jax.tree.leaves`` order of the arguments.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    logical_axes: tuple[str | None, ...]

    def __post_init__(self) -> None:
        where = f"inputs[{self.name!r}]"
        check_text(self.name, "inputs[].name", "e.g. \"arg0['w1']\"")
        if not isinstance(self.shape, tuple):
            raise PlanError(f"{where}.shape is {self.shape!r}; it must be a list of sizes")
        for i, size in enumerate(self.shape):
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise PlanError(
                    f"{where}.shape[{i}] is {size!r}; it must be a non-negative integer, e.g. 128"
                )
        try:
            jnp.dtype(self.dtype)
        except TypeError:
            raise PlanError(
                f"{where}.dtype {self.dtype!r} is not a dtype name; e.g. 'bfloat16' or 'float32'"
            ) from None
        if not is_logical_axes(self.logical_axes) or len(self.logical_axes) != len(self.shape):
            example = ["batch", *[None] * (len(self.shape) - 1)]
            raise PlanError(
                f"{where}.logical_axes {self.logical_axes!r} must give one name (or null) per "
                f"dimension of shape {list(self.shape)}, e.g. {example}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "logical_axes": list(self.logical_axes),
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> PlanInput:
        data = json_object(value, where, ("dtype", "logical_axes", "name", "shape"))
        return cls(
            name=json_text(data["name"], f"{where}.name"),
            shape=tuple(json_list(data["shape"], f"{where}.shape")),
            dtype=json_text(data["dtype"], f"{where}.dtype"),
            logical_axes=tuple(json_list(data["logical_axes"], f"{where}.logical_axes")),
        )


def plan_inputs(workload: Workload) -> tuple[PlanInput, ...]:
    """Every array argument of ``workload``, in ``jax.tree.leaves`` order of its arguments."""
    return tuple(
        PlanInput(name, tuple(int(d) for d in leaf.shape), str(leaf.dtype), ax)
        for name, leaf, ax in workload.arg_leaves()
    )


def length_of(value: object) -> object:
    return len(value) if isinstance(value, tuple | list) else repr(value)


def check_text(value: object, field: str, example: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{field} is {value!r}; it must be a non-empty string, {example}")


def check_positive_int(value: object, field: str, example: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{field} is {value!r}; it must be a positive integer, {example}")


def check_latency(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{field} is {value!r}; it must be a number of seconds, e.g. 0.42")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise PlanError(f"{field} is {value!r}; it must be a positive finite number of seconds")
    return seconds


def check_keys(
    data: Mapping[str, Any], allowed: Sequence[str], where: str, optional: Sequence[str] = ()
) -> None:
    """Every key of ``allowed`` is in ``data``; ``optional`` keys may be, nothing else."""
    missing = sorted(set(allowed) - set(data))
    unknown = sorted(set(data) - set(allowed) - set(optional))
    if missing:
        raise PlanError(f"{where} lacks field(s) {missing}; a plan has {sorted(allowed)}")
    if unknown:
        raise PlanError(f"{where} has unknown field(s) {unknown}; allowed: {sorted(allowed)}")


def json_clip(value: Any, *, required: bool) -> Clip | None:
    """A plan's ``clip`` object (None where the plan may have none)."""
    if value is None and not required:
        return None
    clip = json_object(value, "clip", ("frames", "height", "width"))
    try:
        return Clip(width=clip["width"], height=clip["height"], frames=clip["frames"])
    except WorkloadError as exc:  # a bad field of the plan file, reported as such
        raise PlanError(str(exc)) from None


def json_object(value: Any, field: str, keys: Sequence[str] | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PlanError(f"{field} is {value!r}; it must be a JSON object")
    if keys is not None:
        check_keys(value, keys, field)
    return value


def json_list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"{field} is {value!r}; it must be a JSON list")
    return value


def json_text(value: Any, field: str) -> str:
    check_text(value, field, "see the plan schema")
    return str(value)


def json_rules(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for i, item in enumerate(json_list(value, "rules")):
        pair = rule_pair_from_json(item)
        if pair is None:
            raise PlanError(
                f"rules[{i}] is {item!r}; each rule is [logical name, [mesh axes...]], e.g. "
                "['activation_length', ['context']]"
            )
        out.append(pair)
    return tuple(out)


def compute_model_json(chip: Chip) -> dict[str, Any]:
    """``compute_model``: the compute model a prediction used and where its numbers come from.

    ``parameter_file`` is the topology file the chip was read from (relative to the
    repository for the shipped ones; ``$AOIZORA_TOPOLOGIES_DIR`` points elsewhere,
    e.g. at calibrated files), ``parameter_file_sha256`` its exact contents.
    """
    p = chip.compute
    path = topologies_dir() / f"{chip.generation}.toml"
    shipped = not os.environ.get("AOIZORA_TOPOLOGIES_DIR")
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        digest = None
    return {
        "model": (
            "sim.compute: MXU-tile padding, achieved matmul, attention, HBM and on-chip "
            "rates, kernel launch, the host's launch of a call"
        ),
        "generation": chip.generation,
        "parameter_file": f"topologies/{path.name}" if shipped else str(path),
        "parameter_file_sha256": digest,
        "attention_kernel": p.attention_kernel,
        "mxu_tile": p.mxu_tile,
        "matmul_efficiency": p.matmul_efficiency,
        "hbm_efficiency": p.hbm_efficiency,
        # a matmul kernel's reads beyond its writes; null where unmeasured (hbm_efficiency)
        "hbm_read_efficiency": p.hbm_read_efficiency or None,
        # a matmul kernel with nothing fused but dtype conversions; null where unmeasured
        # (matmul_efficiency)
        "bare_matmul_efficiency": p.bare_matmul_efficiency or None,
        # what each element-wise op fused into a matmul kernel adds to its inverse
        # efficiency; null where unmeasured (such kernels at matmul_efficiency)
        "matmul_fused_op_cost": p.matmul_fused_op_cost or None,
        # seconds per cycle of the compiler's estimate, priced beside ours for a kernel whose
        # convolution slides a window; null where unmeasured (our price alone)
        "compiler_cycle_s": p.compiler_cycle_s or None,
        "attention_efficiency": dict(p.attention_efficiency),
        # Measured on v5e (docs/simulator.md, "Compute model"); neutral elsewhere: 0 s,
        # and null for an on-chip rate the generation has not measured (bytes as HBM).
        "kernel_overhead_s": p.kernel_overhead_s,
        # the host's launch and wait of one call, in every step and decode figure
        "program_launch_s": p.program_launch_s,
        "onchip_bandwidth_bytes_per_s": _finite_or_none(p.onchip_bandwidth_bytes_per_s),
        "onchip_copy_bandwidth_bytes_per_s": _finite_or_none(p.onchip_copy_bandwidth_bytes_per_s),
        # a kernel in VMEM's fixed cost, relayouts between 8-row tiles, re-tiling copies into
        # HBM: null where unmeasured (kernel_overhead_s, the copy rate, hbm_efficiency)
        "vmem_kernel_overhead_s": p.vmem_kernel_overhead_s,
        "onchip_full_tile_copy_bandwidth_bytes_per_s": (
            p.onchip_full_tile_copy_bandwidth_bytes_per_s
        ),
        "hbm_retile_copy_efficiency": p.hbm_retile_copy_efficiency or None,
        # a relayout in VMEM that moves another dimension onto the lanes, per padded
        # element; null where unmeasured (its bytes at the copy rate alone)
        "lane_transpose_s_per_element": p.lane_transpose_s_per_element or None,
        "attention_grid": {
            name: {"step_overhead_s": step_s, "q_block_overhead_s": q_block_s}
            for name, step_s, q_block_s in p.attention_grid
        },
        "sources": dict(p.sources),
    }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def check_device_order(coords: Any, physical_ids: Any, slice_: Slice, slice_name: str) -> None:
    """``device_order``: one chip coordinate and one libtpu device id per device of
    ``slice_`` (named ``slice_name``), mesh-flat; every device exactly once (a tpu7x chip
    once per core)."""
    n = slice_.num_devices
    if not isinstance(coords, tuple) or len(coords) != n:
        raise PlanError(
            f"device_order.coords has {length_of(coords)} entries; slice "
            f"{slice_name} needs exactly {n} (one per device, mesh-flat order)"
        )
    if not isinstance(physical_ids, tuple) or len(physical_ids) != n:
        raise PlanError(
            f"device_order.physical_ids has {length_of(physical_ids)} entries; slice "
            f"{slice_name} needs exactly {n}"
        )
    seen: dict[int, int] = {}
    times: dict[Coord, int] = {}
    for i, (coord, pid) in enumerate(zip(coords, physical_ids, strict=True)):
        where = f"device_order.coords[{i}]"
        if not (
            isinstance(coord, tuple)
            and all(isinstance(c, int) and not isinstance(c, bool) for c in coord)
            and slice_.contains(coord)
        ):
            raise PlanError(
                f"{where} is {coord!r}; it must be {slice_.num_dims} integer coordinates on "
                f"{slice_name} (shape {list(slice_.shape)}), e.g. "
                f"{list(slice_.coords[-1])}"
            )
        # A chip of several devices (tpu7x) appears once per device: its ids are
        # devices_per_chip * chip id + core (docs/facts.md, Ironwood (TPU7x)).
        per_chip = slice_.chip.devices_per_chip
        times[coord] = times.get(coord, 0) + 1
        if times[coord] > per_chip:
            raise PlanError(
                f"{where} {list(coord)} repeats an earlier entry; every chip of "
                f"{slice_name} must appear exactly {per_chip} time(s)"
            )
        chip_id = slice_.physical_id(coord)
        bad = isinstance(pid, bool) or not isinstance(pid, int) or pid in seen
        if bad or pid // per_chip != chip_id:
            raise PlanError(
                f"device_order.physical_ids[{i}] is {pid!r} but chip {list(coord)} of "
                f"{slice_name} hosts the unused device ids "
                f"{[chip_id * per_chip + c for c in range(per_chip)]} (x fastest: chip id "
                f"= x + X*y; every device exactly once)"
            )
        seen[pid] = i
