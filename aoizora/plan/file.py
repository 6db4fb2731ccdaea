"""The plan file: what the planner chose, in a form that builds the mesh on real TPUs.

A plan is a versioned JSON document (schema ``"aoizora.plan/2"``) holding the
model and workload it was made for, the clip (``null`` for workloads that are not
video), the abstract inputs (name, shape, dtype and logical axes of every array the
step takes), the slice, the logical mesh (the workload's own axis names and sizes),
the logical axis rules, the attention kind, the chosen candidate and placement, the
device order (chip coordinates *and* libtpu physical ids, in mesh-flat order, i.e.
the order of ``mesh.devices.flat``; a tpu7x chip appears once per device, its ids
``2 x chip id + core``), the predicted step latencies of the winner and
the baselines (labelled ``"simulated"``: they come from the simulator, not from a
TPU) and the versions it was made with. Every workload's plan has the same fields.
Plan files of schema ``"aoizora.plan/1"`` (Wan only, no inputs) still load. Optional
top-level fields: ``alternatives`` (the runners-up and baselines with their configurations,
:mod:`aoizora.plan.alternatives`; ``aoizora measure`` times them), a whole clip's latency
(``clip_s``, ``text_encoder_s``, ``denoise_s``, ``vae_decode_s``:
:class:`~aoizora.plan.clip_latency.ClipLatency`), the VAE decoder's own plan (``vae``, a
plan of the same schema for the same slice) and ``compute_model`` (the compute model the
predictions used).

On the TPU host::

    plan = aoizora.load_plan("plan.json")
    mesh = plan.mesh(jax.devices())          # placed by chip coordinates (and core)
    specs = plan.partition_specs()           # one PartitionSpec per input, in order
    spec = logical_to_pspec(("batch", "length", None), plan.rules, plan.mesh_axis_names)

:meth:`Plan.to_json` is canonical: sorted keys, two-space indent, floats in
Python's shortest round-trip form, a trailing newline; the same plan always
gives the same bytes. :func:`load_plan` checks every field and raises
:class:`~aoizora.errors.PlanError` naming the field, the value and what is
allowed.

Example:
    >>> from sim.topology import load_slice
    >>> from aoizora.placement.device_order import DeviceOrder
    >>> from aoizora.workloads.rules import Rules
    >>> order = DeviceOrder.from_physical_ids((0, 1, 3, 2), mesh_shape=(2, 2),
    ...                                       slice_=load_slice("v5e:2x2"))
    >>> plan = Plan.create(model="wan2.1-1.3b", clip=Clip(832, 480, 81),
    ...                    mesh_axis_names=("data", "context"), order=order,
    ...                    rules=Rules.of("seq", [("length", "context")]),
    ...                    attention="gather_kv", candidate_id="data2.context2/seq/gather_kv",
    ...                    placement_id="flat<-y*x(ring)",
    ...                    predicted=PredictedLatencies(
    ...                        winner_s=0.5, baselines_s=(("existing deployment", 0.6),)),
    ...                    provenance=Provenance("0.1.0", "0.10.2", "0.10.2", None))
    >>> plan.coords
    ((0, 0), (1, 0), (1, 1), (0, 1))
    >>> Plan.from_json(plan.to_json()) == plan
    True
    >>> plan.workload, plan.inputs    # no workload given: the model; no inputs recorded
    ('wan2.1-1.3b', ())
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from aoizora.atomic import write_atomic
from aoizora.errors import AoizoraError, PlanError
from aoizora.placement.device_order import Coord, DeviceOrder
from aoizora.plan.alternatives import PlanAlternative
from aoizora.plan.clip_latency import CLIP_KEYS, ClipLatency
from aoizora.plan.fields import (
    PlanInput,
    PredictedLatencies,
    Provenance,
    WorkloadSource,
    check_device_order,
    check_keys,
    check_positive_int,
    check_text,
    json_clip,
    json_list,
    json_object,
    json_rules,
    json_text,
)
from aoizora.plan.memory import PlanMemory
from aoizora.plan.schema import cite_schema
from aoizora.plan.splash import SPLASH_KEYS, check_splash, splash_from_json, splash_json
from aoizora.workloads.attention import ATTENTION_KINDS, usp_degree
from aoizora.workloads.clip import Clip
from aoizora.workloads.rules import Rules, logical_to_pspec, rule_pairs_to_json
from sim.errors import TopologyError
from sim.topology import Slice, load_slice

__all__ = [
    "PLAN_SCHEMA",
    "ALLOWED_ATTENTION",
    "Clip",
    "Plan",
    "load_plan",
]

PLAN_SCHEMA = "aoizora.plan/2"
# Older schemas load_plan still reads: /1 had no workload and inputs, and a clip always.
_OLD_SCHEMA = "aoizora.plan/1"
# "none" is what workloads without attention report (aoizora.workloads.base.Workload).
ALLOWED_ATTENTION: tuple[str, ...] = (*ATTENTION_KINDS, "none")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_KEYS = (
    "attention",
    "candidate",
    "clip",
    "device_order",
    "mesh",
    "model",
    "placement",
    "predicted_latency_s",
    "provenance",
    "rules",
    "rules_name",
    "schema",
    "slice",
)
_TOP_KEYS_V2 = (*_TOP_KEYS, "inputs", "workload")
_PROVENANCE_KEYS = ("aoizora", "jax", "jaxlib", "libtpu")  # and optionally aoizora_commit
# Keys a plan may hold or leave out (docs/plan.schema.json): the runners-up and baselines
# with their configurations (aoizora.plan.alternatives), a clip's latency, the VAE's plan,
# the compute model.
_OPTIONAL_KEYS = ("alternatives", *CLIP_KEYS, "compute_model", "memory", "vae", "workload_source",
                  *SPLASH_KEYS)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """A chosen (sharding, placement) for one workload and slice.

    ``coords[i]`` / ``physical_ids[i]`` host mesh-flat position ``i``
    (``mesh.devices.flat[i]``). ``workload`` defaults to ``model``; ``clip`` is None
    for workloads that are not video. Construction validates every field against
    the slice; see the module docstring for the file format.
    """

    model: str
    clip: Clip | None
    slice_name: str
    mesh_axis_names: tuple[str, ...]
    mesh_shape: tuple[int, ...]
    rules_name: str
    logical_rules: tuple[tuple[str, tuple[str, ...]], ...]
    attention: str
    candidate_id: str
    placement_id: str
    coords: tuple[Coord, ...]
    physical_ids: tuple[int, ...]
    predicted: PredictedLatencies
    provenance: Provenance
    workload: str = ""
    inputs: tuple[PlanInput, ...] = ()
    alternatives: tuple[PlanAlternative, ...] = ()
    # The compute model the predictions used, as canonical JSON (fields.compute_model_json).
    compute_model: str = ""
    latency: ClipLatency | None = None
    vae: Plan | None = None
    memory: PlanMemory | None = None  # the winner's per-device HBM (aoizora.plan.memory)
    source: WorkloadSource | None = None  # a --workload plan's spec and program fingerprint
    splash_blocks: tuple[int, int, int] | None = None  # the planned splash tiles (None: 512)
    scoped_vmem_kib: int | None = None  # the VMEM limit they need (None: the default)

    def __post_init__(self) -> None:
        self._check_optional()
        check_text(self.model, "model", "e.g. 'wan2.1-1.3b'")
        object.__setattr__(self, "workload", self.workload or self.model)
        check_text(self.workload, "workload", "e.g. 'wan2.1-1.3b@832x480x81'")
        if not isinstance(self.inputs, tuple) or not all(
            isinstance(i, PlanInput) for i in self.inputs
        ):
            raise PlanError(f"inputs must be a tuple of PlanInput, got {self.inputs!r}")
        check_text(self.candidate_id, "candidate", "e.g. 'data2.context4/seq/gather_kv'")
        check_text(self.placement_id, "placement", "e.g. 'data<-x, context<-y'")
        check_text(self.rules_name, "rules_name", "e.g. 'maxdiffusion'")
        if self.clip is not None and not isinstance(self.clip, Clip):
            raise PlanError(f"clip must be a Clip or None, got {self.clip!r}")
        if not isinstance(self.predicted, PredictedLatencies):
            raise PlanError(
                f"predicted_latency_s must be PredictedLatencies, got {self.predicted!r}"
            )
        if not isinstance(self.provenance, Provenance):
            raise PlanError(f"provenance must be a Provenance, got {self.provenance!r}")
        if self.attention not in ALLOWED_ATTENTION and usp_degree(self.attention) is None:
            raise PlanError(
                f"attention {self.attention!r} is not a known attention kind; allowed: "
                f"{list(ALLOWED_ATTENTION)} or usp_uU (Ulysses degree U >= 2, e.g. usp_u2)"
            )
        slice_ = self.slice
        self._check_mesh(slice_)
        self._check_rules()
        check_device_order(self.coords, self.physical_ids, slice_, self.slice_name)
        self._check_alternatives()

    # --- validation -------------------------------------------------------

    def _check_optional(self) -> None:
        if self.memory is not None and not isinstance(self.memory, PlanMemory):
            raise PlanError(f"memory must be a PlanMemory, got {self.memory!r}")
        if self.source is not None and not isinstance(self.source, WorkloadSource):
            raise PlanError(f"workload_source must be a WorkloadSource, got {self.source!r}")
        if self.latency is not None and not isinstance(self.latency, ClipLatency):
            raise PlanError(f"the clip latency must be a ClipLatency, got {self.latency!r}")
        check_splash(self.splash_blocks, self.scoped_vmem_kib, "")
        if self.vae is None:
            return
        if not isinstance(self.vae, Plan) or self.vae.vae is not None:
            raise PlanError(f"vae must be a plan without a vae of its own, got {self.vae!r}")
        if self.vae.slice_name != self.slice_name:
            raise PlanError(
                f"vae.slice is {self.vae.slice_name!r} but the plan is for {self.slice_name!r}; "
                "the VAE decodes on the slice that denoised"
            )

    def _check_mesh(self, slice_: Slice) -> None:
        names = self.mesh_axis_names
        if (
            not isinstance(names, tuple)
            or not names
            or not all(isinstance(n, str) and _NAME_RE.match(n) for n in names)
            or len(set(names)) != len(names)
        ):
            raise PlanError(
                f"mesh.axis_names {names!r} must be distinct identifiers, e.g. "
                "['data', 'fsdp', 'context', 'tensor']"
            )
        shape = self.mesh_shape
        if not isinstance(shape, tuple) or len(shape) != len(names):
            raise PlanError(
                f"mesh.shape {shape!r} must give one size per axis name {list(names)}, "
                f"e.g. {[1] * (len(names) - 1) + [slice_.num_devices]}"
            )
        for i, size in enumerate(shape):
            check_positive_int(size, f"mesh.shape[{i}]", "e.g. 2")
        if math.prod(shape) != slice_.num_devices:
            raise PlanError(
                f"mesh.shape {list(shape)} has {math.prod(shape)} devices but slice "
                f"{self.slice_name} has {slice_.num_devices}; the sizes must multiply to "
                f"{slice_.num_devices}, e.g. {[slice_.num_devices]}"
            )

    def _check_rules(self) -> None:
        if not isinstance(self.logical_rules, tuple):
            raise PlanError(f"rules {self.logical_rules!r} must be a list of pairs")
        for i, pair in enumerate(self.logical_rules):
            where = f"rules[{i}]"
            if not (
                isinstance(pair, tuple)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and pair[0]
                and isinstance(pair[1], tuple)
            ):
                raise PlanError(
                    f"{where} is {pair!r}; each rule is [logical name, [mesh axes...]], "
                    "e.g. ['activation_length', ['context']]"
                )
            logical, axes = pair
            for axis in axes:
                if axis not in self.mesh_axis_names:
                    raise PlanError(
                        f"{where} ({logical!r}) names mesh axis {axis!r}, which is not in "
                        f"mesh.axis_names {list(self.mesh_axis_names)}; use one of those"
                    )
            if len(set(axes)) != len(axes):
                raise PlanError(
                    f"{where} ({logical!r}) names a mesh axis twice: {list(axes)}; "
                    "e.g. ['embed', ['context', 'fsdp']]"
                )

    def _check_alternatives(self) -> None:
        if not isinstance(self.alternatives, tuple) or not all(
            isinstance(a, PlanAlternative) for a in self.alternatives
        ):
            raise PlanError(
                f"alternatives must be a tuple of PlanAlternative, got {self.alternatives!r}"
            )
        for i, alt in enumerate(self.alternatives):
            try:
                self.alternative_plan(alt)
            except PlanError as exc:  # its mesh, rules or order do not fit the slice
                raise PlanError(f"alternatives[{i}] ({alt.role} {alt.name!r}): {exc}") from None

    def alternative_plan(self, alternative: PlanAlternative) -> Plan:
        """``alternative`` (a runner-up or baseline) as a plan of its own on this slice, its
        predicted step as the winner's: :meth:`mesh` places it as planned."""
        slice_ = self.slice
        try:
            order = DeviceOrder.from_physical_ids(
                alternative.physical_ids, mesh_shape=alternative.mesh_shape, slice_=slice_
            )
        except AoizoraError as exc:  # the mesh shape or the device order (PlacementError)
            raise PlanError(str(exc)) from None
        return dataclasses.replace(
            self,
            mesh_axis_names=alternative.mesh_axis_names,
            mesh_shape=alternative.mesh_shape,
            rules_name=alternative.rules_name,
            logical_rules=alternative.logical_rules,
            attention=alternative.attention,
            candidate_id=alternative.candidate_id,
            placement_id=alternative.placement_id,
            coords=tuple(tuple(c) for c in order.coords),
            physical_ids=tuple(order.physical_ids),
            predicted=PredictedLatencies(winner_s=alternative.step_s),
            alternatives=(),
            splash_blocks=alternative.splash_blocks,
            scoped_vmem_kib=alternative.scoped_vmem_kib,
        )

    # --- views --------------------------------------------------------------

    @property
    def slice(self) -> Slice:
        """The slice, resolved by name (raises :class:`PlanError` for a bad name)."""
        if not isinstance(self.slice_name, str):
            raise PlanError(f"slice must be a string such as 'v5e:2x4', got {self.slice_name!r}")
        try:
            return load_slice(self.slice_name)
        except TopologyError as exc:
            raise PlanError(f"slice {self.slice_name!r} is not a valid slice: {exc}") from None

    @property
    def rules(self) -> Rules:
        """The logical axis rules to apply (:func:`aoizora.workloads.rules.logical_to_pspec`)."""
        return Rules(name=self.rules_name, pairs=self.logical_rules)

    @property
    def num_devices(self) -> int:
        return len(self.coords)

    def device_order(self) -> DeviceOrder:
        """The plan's placement as a :class:`DeviceOrder`."""
        return DeviceOrder.from_physical_ids(
            self.physical_ids, mesh_shape=self.mesh_shape, slice_=self.slice
        )

    @classmethod
    def create(
        cls,
        *,
        model: str,
        mesh_axis_names: Sequence[str],
        order: DeviceOrder,
        rules: Rules,
        attention: str,
        candidate_id: str,
        placement_id: str,
        predicted: PredictedLatencies,
        clip: Clip | None = None,
        workload: str = "",
        inputs: Sequence[PlanInput] = (),
        provenance: Provenance | None = None,
        alternatives: Sequence[PlanAlternative] = (),
        compute_model: Mapping[str, Any] | None = None,
        memory: PlanMemory | None = None,
        splash_blocks: tuple[int, int, int] | None = None,
        scoped_vmem_kib: int | None = None,
    ) -> Plan:
        """A plan from planner values; ``provenance`` defaults to the installed versions."""
        return cls(
            model=model,
            clip=clip,
            workload=workload,
            inputs=tuple(inputs),
            slice_name=order.slice_name,
            mesh_axis_names=tuple(mesh_axis_names),
            mesh_shape=tuple(order.mesh_shape),
            rules_name=rules.name,
            logical_rules=tuple((name, tuple(axes)) for name, axes in rules.pairs),
            attention=attention,
            candidate_id=candidate_id,
            placement_id=placement_id,
            coords=tuple(tuple(c) for c in order.coords),
            physical_ids=tuple(order.physical_ids),
            predicted=predicted,
            provenance=Provenance.current() if provenance is None else provenance,
            alternatives=tuple(alternatives),
            compute_model=_canonical(compute_model),
            memory=memory,
            splash_blocks=splash_blocks,
            scoped_vmem_kib=scoped_vmem_kib,
        )

    # --- the mesh -------------------------------------------------------------

    def mesh(self, devices: Sequence[Any]) -> jax.sharding.Mesh:
        """A :class:`jax.sharding.Mesh` with every device on its planned chip.

        Each device is matched by its chip coordinates (``device.coords``; the
        first ``num_dims`` entries, any further entries must be 0 -- libtpu v5e
        devices report ``(x, y, 0)``). Raises :class:`PlanError` when the
        devices do not form exactly this slice: wrong count, missing,
        out-of-range or duplicated coordinates.
        """
        slice_ = self.slice
        devices = list(devices)
        per_chip = slice_.chip.devices_per_chip
        if len(devices) != slice_.num_devices:
            extra = f"{slice_.num_devices} devices on " if per_chip > 1 else ""
            raise PlanError(
                f"the plan is for {self.slice_name} ({extra}{slice_.num_chips} chips) but "
                f"{len(devices)} devices were given; pass all devices of a {self.slice_name} "
                "slice, e.g. jax.devices()"
            )
        by_key: dict[tuple[Coord, int], Any] = {}
        for device in devices:
            coord = _device_coord(device, slice_, self.slice_name)
            core = int(getattr(device, "core_on_chip", 0)) if per_chip > 1 else 0
            if (coord, core) in by_key or not 0 <= core < per_chip:
                raise PlanError(
                    f"devices {_device_name(by_key.get((coord, core)))} and "
                    f"{_device_name(device)} both report chip coordinates {list(coord)} core "
                    f"{core}; the plan needs every device of {self.slice_name} once "
                    f"({per_chip} per chip)"
                )
            by_key[(coord, core)] = device
        grid = np.empty(len(self.coords), dtype=object)
        for i, (coord, pid) in enumerate(zip(self.coords, self.physical_ids, strict=True)):
            grid[i] = by_key[(coord, pid % per_chip)]  # count and uniqueness make this total
        return jax.sharding.Mesh(grid.reshape(self.mesh_shape), self.mesh_axis_names)

    def partition_specs(self) -> tuple[PartitionSpec, ...]:
        """The :class:`~jax.sharding.PartitionSpec` of every recorded input, in order.

        Inputs are listed in ``jax.tree.leaves`` order of the step's arguments, so
        ``jax.tree.unflatten(jax.tree.structure(args), plan.partition_specs())`` gives
        the specs in your arguments' structure; pair each with the plan's mesh as
        ``NamedSharding(mesh, spec)``. Size-1 mesh axes are left out of the specs.
        """
        sizes = dict(zip(self.mesh_axis_names, self.mesh_shape, strict=True))
        return tuple(
            logical_to_pspec(i.logical_axes, self.rules, self.mesh_axis_names, sizes)
            for i in self.inputs
        )

    # --- JSON -----------------------------------------------------------------------

    def to_json_dict(self) -> dict[str, Any]:
        optional = {
            "alternatives": [a.to_json() for a in self.alternatives],
            "compute_model": json.loads(self.compute_model) if self.compute_model else None,
            "memory": None if self.memory is None else self.memory.to_json(),
            "workload_source": None if self.source is None else self.source.to_json(),
        }
        return {k: v for k, v in optional.items() if v} | {
            **splash_json(self.splash_blocks, self.scoped_vmem_kib),
            "schema": PLAN_SCHEMA,
            "model": self.model,
            "workload": self.workload,
            "clip": None
            if self.clip is None
            else {"width": self.clip.width, "height": self.clip.height, "frames": self.clip.frames},
            "inputs": [i.to_json() for i in self.inputs],
            "slice": self.slice_name,
            "mesh": {"axis_names": list(self.mesh_axis_names), "shape": list(self.mesh_shape)},
            "rules_name": self.rules_name,
            "rules": rule_pairs_to_json(self.logical_rules),
            "attention": self.attention,
            "candidate": self.candidate_id,
            "placement": self.placement_id,
            "device_order": {
                "coords": [list(c) for c in self.coords],
                "physical_ids": list(self.physical_ids),
            },
            "predicted_latency_s": {
                "source": self.predicted.source,
                "winner": self.predicted.winner_s,
                "baselines": dict(self.predicted.baselines_s),
            },
            "provenance": self.provenance.to_json(),
            **({} if self.latency is None else self.latency.to_json()),
            **({} if self.vae is None else {"vae": self.vae.to_json_dict()}),
        }

    def to_json(self) -> str:
        """Canonical JSON text: sorted keys, 2-space indent, trailing newline."""
        # json writes floats with repr(): the shortest text that round-trips,
        # identical on every platform, so equal plans give equal bytes.
        return json.dumps(self.to_json_dict(), sort_keys=True, indent=2, allow_nan=False) + "\n"

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` (UTF-8)."""
        write_atomic(path, self.to_json())  # a kill leaves the old plan or the new one

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """Parse and validate plan JSON text (see :func:`load_plan`)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(
                f"plan is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        return cls.from_json_dict(data)

    @classmethod
    def from_json_dict(cls, data: Any) -> Plan:
        """Validate a decoded plan document field by field and build the :class:`Plan`;
        an error cites the schema location of the field it rejects (docs/plan.schema.json)."""
        try:
            return cls._from_json_dict(data)
        except PlanError as exc:
            raise PlanError(cite_schema(str(exc))) from None

    @classmethod
    def _from_json_dict(cls, data: Any, optional_keys: Sequence[str] = _OPTIONAL_KEYS) -> Plan:
        if not isinstance(data, dict):
            raise PlanError(f"a plan must be a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema not in (PLAN_SCHEMA, _OLD_SCHEMA):
            raise PlanError(
                f"schema {schema!r} is not supported; allowed: {PLAN_SCHEMA!r} or "
                f"{_OLD_SCHEMA!r} (re-run `aoizora plan` with this version to write a plan it "
                "can read)"
            )
        old = schema == _OLD_SCHEMA
        check_keys(data, _TOP_KEYS if old else _TOP_KEYS_V2, "plan", optional_keys)
        mesh = json_object(data["mesh"], "mesh", ("axis_names", "shape"))
        order = json_object(data["device_order"], "device_order", ("coords", "physical_ids"))
        predicted = json_object(
            data["predicted_latency_s"], "predicted_latency_s", ("baselines", "source", "winner")
        )
        provenance = json_object(data["provenance"], "provenance", None)
        check_keys(provenance, _PROVENANCE_KEYS, "provenance", ("aoizora_commit",))
        baselines = json_object(predicted["baselines"], "predicted_latency_s.baselines", None)
        model = json_text(data["model"], "model")
        inputs = () if old else json_list(data["inputs"], "inputs")
        return cls(
            model=model,
            workload=model if old else json_text(data["workload"], "workload"),
            clip=json_clip(data["clip"], required=old),
            inputs=tuple(PlanInput.from_json(v, f"inputs[{i}]") for i, v in enumerate(inputs)),
            slice_name=json_text(data["slice"], "slice"),
            mesh_axis_names=tuple(json_list(mesh["axis_names"], "mesh.axis_names")),
            mesh_shape=tuple(json_list(mesh["shape"], "mesh.shape")),
            rules_name=json_text(data["rules_name"], "rules_name"),
            logical_rules=json_rules(data["rules"]),
            attention=json_text(data["attention"], "attention"),
            candidate_id=json_text(data["candidate"], "candidate"),
            placement_id=json_text(data["placement"], "placement"),
            coords=tuple(
                tuple(json_list(c, f"device_order.coords[{i}]"))
                for i, c in enumerate(json_list(order["coords"], "device_order.coords"))
            ),
            physical_ids=tuple(json_list(order["physical_ids"], "device_order.physical_ids")),
            predicted=PredictedLatencies(
                winner_s=predicted["winner"],
                baselines_s=tuple(baselines.items()),
                source=predicted["source"],
            ),
            provenance=Provenance(**provenance),
            alternatives=tuple(
                PlanAlternative.from_json(v, f"alternatives[{i}]")
                for i, v in enumerate(json_list(data.get("alternatives", []), "alternatives"))
            ),
            compute_model=_canonical(
                json_object(data["compute_model"], "compute_model", None)
                if "compute_model" in data
                else None
            ),
            memory=PlanMemory.from_json(data["memory"], "memory") if "memory" in data else None,
            source=WorkloadSource.from_json(data["workload_source"])
            if "workload_source" in data
            else None,
            **splash_from_json(data, ""),
            **_clip_fields(cls, data),
        )


def _canonical(value: Mapping[str, Any] | None) -> str:
    """A JSON object as canonical text (sorted keys), so plans compare and hash stably."""
    return "" if not value else json.dumps(dict(value), sort_keys=True, separators=(",", ":"))


def _clip_fields(cls: type[Plan], data: dict[str, Any]) -> dict[str, Any]:
    """A plan's clip latency and VAE plan, when it has them (keys already checked)."""
    out: dict[str, Any] = {}
    if any(k in data for k in CLIP_KEYS):
        out["latency"] = ClipLatency.from_json(data, "plan")
    if "vae" in data:
        try:
            out["vae"] = cls._from_json_dict(data["vae"], [k for k in _OPTIONAL_KEYS if k != "vae"])
        except PlanError as exc:
            raise PlanError(f"vae: {exc}") from None
    return out


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file written by :meth:`Plan.save`.

    Raises :class:`PlanError` for a missing or unreadable file, invalid JSON, an
    unknown schema version, a missing/unknown/ill-typed field, or values that do
    not fit the slice (naming the field, the value and what is allowed).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read plan file {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise PlanError(f"plan file {str(path)!r} is not UTF-8 text (line {line})") from None
    try:
        return Plan.from_json(text)
    except PlanError as exc:  # what is wrong, and in which file
        raise PlanError(f"plan file {str(path)!r}: {exc}") from None


def _device_name(device: Any) -> str:
    return f"id {getattr(device, 'id', '?')}"


def _device_coord(device: Any, slice_: Slice, slice_name: str) -> Coord:
    raw = getattr(device, "coords", None)
    if raw is None:
        raise PlanError(
            f"device {_device_name(device)} ({device!r}) has no chip coordinates (.coords); "
            "pass TPU devices (jax.devices() on a TPU host, or "
            "jax.experimental.topologies.get_topology_desc(...).devices)"
        )
    try:
        values = tuple(operator.index(c) for c in raw)
    except TypeError:
        raise PlanError(
            f"device {_device_name(device)} reports non-integer chip coordinates {raw!r}; "
            "TPU devices report integers such as [1, 2, 0]"
        ) from None
    head, tail = values[: slice_.num_dims], values[slice_.num_dims :]
    if len(head) != slice_.num_dims or any(tail) or not slice_.contains(head):
        raise PlanError(
            f"device {_device_name(device)} reports chip coordinates {list(values)}, which are "
            f"not on {slice_name} (shape {list(slice_.shape)}, coordinates like "
            f"{list(slice_.coords[-1]) + [0] * len(tail)}); pass the devices of a {slice_name} "
            "slice"
        )
    return head
