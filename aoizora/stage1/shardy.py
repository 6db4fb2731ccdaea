"""Read a lowered JAX program, after Shardy propagation, into typed Python values.

Stage 1 never compiles. It takes the StableHLO module of a ``jax.stages.Lowered``,
runs Shardy's own propagation on a *copy* of it, asks Shardy to attach its
per-op sharding rules (``sdy-populate-op-sharding-rules``), and converts the
result into the frozen dataclasses of this module: a :class:`ShardyModule` of
:class:`Function` bodies made of :class:`Op` values over numbered values with
their :class:`TensorType` and propagated :class:`Sharding`.

Why the MLIR Python bindings and not the printed text: the bindings give exact
SSA def-use identity across nested regions (``while`` bodies, ``shard_map``
bodies, called functions), shapes from ``RankedTensorType``, and the ``sdy``
attributes (shardings, sharding rules, meshes) through Shardy's own attribute
classes. The printed text mixes pretty and generic op syntaxes and would need a
second implementation of the ``sdy`` attribute grammar. The only attribute read
from its printed form is ``manual_axes`` (it has no Python accessor).

>>> import jax, jax.numpy as jnp
>>> from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec as P
>>> mesh = AbstractMesh((1,), ("x",), axis_types=(AxisType.Auto,))
>>> low = jax.jit(lambda a: a * 2, in_shardings=NamedSharding(mesh, P("x"))).trace(
...     jax.ShapeDtypeStruct((8,), jnp.float32)).lower(lowering_platforms=("tpu",))
>>> m = read_lowered(low)
>>> m.mesh_axes
(('x', 1),)
>>> [op.name for op in m.functions[m.main].body.ops]
['sdy.constant', 'stablehlo.broadcast_in_dim', 'stablehlo.multiply', 'func.return']
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.errors import AoizoraError

__all__ = [
    "Stage1Error",
    "AxisRef",
    "Sharding",
    "TensorType",
    "ShardingRule",
    "Block",
    "Op",
    "Function",
    "ShardyModule",
    "PROPAGATION_PIPELINE",
    "read_lowered",
    "read_mlir_module",
]

# Shardy's propagation (the same pipeline XLA runs before partitioning), then
# the per-op factor rules the partitioner would use to decide on reshards.
PROPAGATION_PIPELINE = (
    "builtin.module(sdy-propagation-pipeline,func.func(sdy-populate-op-sharding-rules))"
)


class Stage1Error(AoizoraError):
    """The lowered program could not be read or estimated by Stage 1."""


@dataclass(frozen=True, order=True)
class AxisRef:
    """One mesh axis (or sub-axis ``name:(pre_size)size``) that shards a dimension.

    >>> AxisRef("fsdp", 4).label, AxisRef("fsdp", 2, pre_size=2, is_sub_axis=True).label
    ('fsdp', 'fsdp:(2)2')
    """

    name: str
    size: int
    pre_size: int = 1
    is_sub_axis: bool = False

    @property
    def label(self) -> str:
        return f"{self.name}:({self.pre_size}){self.size}" if self.is_sub_axis else self.name


@dataclass(frozen=True)
class Sharding:
    """A tensor's sharding: for each dimension, the axes that split it (major first).

    >>> s = Sharding(((AxisRef("data", 2),), ()))
    >>> s.num_shards, s.axis_names
    (2, ('data',))
    """

    dims: tuple[tuple[AxisRef, ...], ...]

    @property
    def num_shards(self) -> int:
        return math.prod(a.size for d in self.dims for a in d)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for d in self.dims for a in d)

    def without(self, axis_names: Iterable[str]) -> Sharding:
        """The same sharding with the given axes dropped (e.g. manual axes)."""
        drop = set(axis_names)
        return Sharding(tuple(tuple(a for a in d if a.name not in drop) for d in self.dims))

    @staticmethod
    def replicated(rank: int) -> Sharding:
        return Sharding(tuple(() for _ in range(rank)))

    def label(self) -> str:
        return "[" + ", ".join("{" + ",".join(a.label for a in d) + "}" for d in self.dims) + "]"


@dataclass(frozen=True)
class TensorType:
    """Shape and element width of a value (tokens and tuples have rank 0, 0 bytes).

    >>> TensorType((16, 256), 2).size_bytes
    8192
    """

    shape: tuple[int, ...]
    element_bytes: int

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        return self.num_elements * self.element_bytes

    def shard_bytes(self, sharding: Sharding | None) -> int:
        """Bytes of one device's shard (ceil per dimension, as the partitioner pads).

        >>> TensorType((10, 4), 4).shard_bytes(Sharding(((AxisRef("x", 4),), ())))
        48
        """
        if sharding is None or len(sharding.dims) != len(self.shape):
            return self.size_bytes
        elems = 1
        for size, axes in zip(self.shape, sharding.dims, strict=True):
            elems *= -(-size // math.prod(a.size for a in axes)) if axes else size
        return elems * self.element_bytes


@dataclass(frozen=True)
class ShardingRule:
    """Shardy's ``#sdy.op_sharding_rule``: each tensor dimension as a list of factors.

    ``operand_factors[i][d]`` are the factor indices of operand ``i``'s dimension
    ``d``, major to minor; ``reduction`` factors are contracted (a sharded one
    leaves partial sums); ``need_replication`` factors cannot stay sharded.
    """

    factor_sizes: tuple[int, ...]
    operand_factors: tuple[tuple[tuple[int, ...], ...], ...]
    result_factors: tuple[tuple[tuple[int, ...], ...], ...]
    reduction: tuple[int, ...] = ()
    need_replication: tuple[int, ...] = ()
    permutation: tuple[int, ...] = ()
    is_custom: bool = False


@dataclass(frozen=True)
class Block:
    """A region's single block: argument value ids and its ops in program order."""

    args: tuple[int, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Op:
    """One operation with the attributes Stage 1 needs (others are not kept).

    Only the fields meaningful for ``name`` are set; the rest keep their defaults.
    """

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    rule: ShardingRule | None = None
    regions: tuple[Block, ...] = ()
    # Explicit collectives (stablehlo.all_gather, ...): device ids per group.
    replica_groups: tuple[tuple[int, ...], ...] = ()
    source_target_pairs: tuple[tuple[int, int], ...] = ()
    # sdy.manual_computation
    manual_axes: tuple[str, ...] = ()
    in_shardings: tuple[Sharding, ...] = ()
    out_shardings: tuple[Sharding, ...] = ()
    # sdy.reshard / sdy.sharding_constraint / sdy collectives: the wanted sharding.
    target_sharding: Sharding | None = None
    # sdy.all_reduce / sdy.reduce_scatter
    reduction_axes: tuple[str, ...] = ()
    # func.call
    callee: str = ""
    # stablehlo.custom_call
    call_target: str = ""
    kernel_name: str = ""
    cost_estimate_flops: float | None = None
    cost_estimate_bytes: float | None = None
    # constants (scalar integers only) and stablehlo.compare
    int_value: int | None = None
    compare_direction: str = ""
    # stablehlo.convolution
    kernel_output_feature_dim: int = -1
    location: str = ""


@dataclass(frozen=True)
class Function:
    """A ``func.func``: its body and the shardings on its arguments and results."""

    name: str
    body: Block
    arg_shardings: tuple[Sharding | None, ...]
    result_shardings: tuple[Sharding | None, ...]


@dataclass(frozen=True)
class ShardyModule:
    """The whole propagated program.

    ``value_types[v]`` and ``value_shardings[v]`` describe value ``v``. Inside a
    ``shard_map`` body types are per-device along the manual axes and shardings
    mention only the remaining free axes. ``None`` means no sharding attached
    (replicated). ``device_ids`` is the mesh's explicit device order, ``()`` for
    the default iota order.
    """

    main: str
    functions: Mapping[str, Function]
    mesh_axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]
    value_types: tuple[TensorType, ...]
    value_shardings: tuple[Sharding | None, ...]
    value_defs: tuple[int, ...] = field(default=(), repr=False)

    @property
    def mesh_axis_sizes(self) -> dict[str, int]:
        return dict(self.mesh_axes)


# --------------------------------------------------------------------------- reading


_ELEMENT_BITS = re.compile(r"^(?:[a-z]*?)(\d+)")


def _element_bytes(element_type: str) -> int:
    """Bytes per element from an MLIR element type name (``bf16``, ``i1``, ``f8E4M3FN``)."""
    if element_type.startswith("complex<"):
        return 2 * _element_bytes(element_type[len("complex<") : -1])
    if element_type == "index":
        return 8
    m = _ELEMENT_BITS.match(element_type)
    if m is None:
        return 0
    # Predicates (i1) and 4-bit types still occupy a byte each in HBM on TPU.
    return max(1, int(m.group(1)) // 8)


class _Reader:
    """Converts one propagated MLIR module into :class:`ShardyModule` values."""

    def __init__(self, *, ir: Any, sdy: Any, stablehlo: Any) -> None:
        self.ir = ir
        self.sdy = sdy
        self.stablehlo = stablehlo
        self.value_ids: dict[Any, int] = {}
        self.types: list[TensorType] = []
        self.shardings: list[Sharding | None] = []
        self.defs: list[int] = []
        self.mesh_axes: tuple[tuple[str, int], ...] = ()
        self.device_ids: tuple[int, ...] = ()
        self.meshes: dict[str, tuple[tuple[str, int], ...]] = {}
        self.functions: dict[str, Function] = {}
        self.op_counter = 0

    # ---- attributes
    def _axis(self, attr: Any) -> AxisRef:
        a = self.sdy.AxisRefAttr(attr)
        sizes = dict(self.mesh_axes)
        name = str(a.name)
        if name not in sizes:
            raise Stage1Error(
                f"sharding names mesh axis {name!r}, not one of {sorted(sizes)}; Stage 1 "
                "reads programs over a single mesh (e.g. Mesh(devices, ('data', 'fsdp')))"
            )
        if a.sub_axis_info is not None:
            sub = self.sdy.SubAxisInfoAttr(a.sub_axis_info)
            return AxisRef(name, int(sub.size), pre_size=int(sub.pre_size), is_sub_axis=True)
        return AxisRef(name, sizes[name])

    def _sharding(self, attr: Any) -> Sharding:
        s = self.sdy.TensorShardingAttr(attr)
        dims = []
        for d in s.dimension_shardings:
            dim = self.sdy.DimensionShardingAttr(d)
            dims.append(tuple(self._axis(a) for a in dim.axes))
        return Sharding(tuple(dims))

    def _per_value(self, attr: Any) -> list[Sharding]:
        return [self._sharding(s) for s in self.sdy.TensorShardingPerValueAttr(attr).shardings]

    def _rule(self, attr: Any) -> ShardingRule:
        r = self.sdy.OpShardingRuleAttr(attr)

        def mappings(ms: Any) -> tuple[tuple[tuple[int, ...], ...], ...]:
            out = []
            for m in ms:
                tm = self.sdy.TensorMappingAttr(m)
                out.append(
                    tuple(
                        tuple(int(i) for i in self.sdy.DimMappingAttr(d).factor_indices)
                        for d in tm.dim_mappings
                    )
                )
            return tuple(out)

        return ShardingRule(
            factor_sizes=tuple(int(x) for x in r.factor_sizes),
            operand_factors=mappings(r.operand_mappings),
            result_factors=mappings(r.result_mappings),
            reduction=tuple(int(x) for x in r.reduction_factors),
            need_replication=tuple(int(x) for x in r.need_replication_factors),
            permutation=tuple(int(x) for x in r.permutation_factors),
            is_custom=bool(r.is_custom),
        )

    def _type(self, t: Any) -> TensorType:
        ir = self.ir
        rt = _cast(ir.RankedTensorType, t)
        if rt is not None:
            return TensorType(tuple(int(d) for d in rt.shape), _element_bytes(str(rt.element_type)))
        return TensorType((), 0)

    def _new_value(self, v: Any, sharding: Sharding | None, def_op: int) -> int:
        vid = len(self.types)
        self.value_ids[v] = vid
        self.types.append(self._type(v.type))
        self.shardings.append(sharding)
        self.defs.append(def_op)
        return vid

    def _value(self, v: Any) -> int:
        try:
            return self.value_ids[v]
        except KeyError:
            raise Stage1Error(
                f"value {v.get_name()} is used before Stage 1 saw its definition; the module "
                "must be in SSA order (a jax.stages.Lowered module always is)"
            ) from None

    # ---- module structure
    def read(self, module_op: Any) -> ShardyModule:
        body = module_op.regions[0].blocks[0]
        funcs = []
        for op in body.operations:
            o = op.operation
            if o.name == "sdy.mesh":
                mesh = self.sdy.MeshAttr(o.attributes["mesh"])
                name = self.ir.StringAttr(o.attributes["sym_name"]).value
                axes = tuple(
                    (str(self.sdy.MeshAxisAttr(a).name), int(self.sdy.MeshAxisAttr(a).size))
                    for a in mesh.axes
                )
                self.meshes[name] = axes
                if axes and self.mesh_axes and axes != self.mesh_axes:
                    raise Stage1Error(
                        f"the program uses two meshes, {self.mesh_axes} and {axes}; Stage 1 "
                        "estimates programs over one mesh (build every NamedSharding on the same "
                        "jax.sharding.Mesh)"
                    )
                if axes:
                    self.mesh_axes = axes
                    self.device_ids = tuple(int(i) for i in mesh.device_ids)
            elif o.name == "func.func":
                funcs.append(o)
        main = ""
        for f in funcs:
            fn = self._function(f)
            self.functions[fn.name] = fn
            if fn.name == "main" or (
                not main and "sym_visibility" not in f.attributes
            ):  # the public entry point
                main = fn.name
        if not main:
            raise Stage1Error("the module has no public function; expected @main from jax.jit")
        return ShardyModule(
            main=main,
            functions=dict(sorted(self.functions.items())),
            mesh_axes=self.mesh_axes,
            device_ids=self.device_ids,
            value_types=tuple(self.types),
            value_shardings=tuple(self.shardings),
            value_defs=tuple(self.defs),
        )

    def _arg_result_shardings(self, f: Any, key: str, n: int) -> tuple[Sharding | None, ...]:
        if key not in f.attributes:
            return tuple(None for _ in range(n))
        out: list[Sharding | None] = []
        for a in self.ir.ArrayAttr(f.attributes[key]):
            d = self.ir.DictAttr(a)
            out.append(self._sharding(d["sdy.sharding"]) if "sdy.sharding" in d else None)
        return tuple(out)

    def _function(self, f: Any) -> Function:
        name = self.ir.StringAttr(f.attributes["sym_name"]).value
        block = f.regions[0].blocks[0]
        n_args = len(block.arguments)
        arg_sh = self._arg_result_shardings(f, "arg_attrs", n_args)
        ftype = self.ir.FunctionType(self.ir.TypeAttr(f.attributes["function_type"]).value)
        res_sh = self._arg_result_shardings(f, "res_attrs", len(ftype.results))
        body = self._block(block, list(arg_sh), manual=())
        return Function(name=name, body=body, arg_shardings=arg_sh, result_shardings=res_sh)

    def _block(
        self, block: Any, arg_shardings: list[Sharding | None], manual: tuple[str, ...]
    ) -> Block:
        args = tuple(
            self._new_value(a, arg_shardings[i] if i < len(arg_shardings) else None, -1)
            for i, a in enumerate(block.arguments)
        )
        ops = tuple(self._op(op.operation, manual) for op in block.operations)
        return Block(args=args, ops=ops)

    def _op(self, o: Any, manual: tuple[str, ...]) -> Op:
        ir = self.ir
        attrs = o.attributes
        name = str(o.name)
        op_index = self.op_counter
        self.op_counter += 1
        operands = tuple(self._value(v) for v in o.operands)
        kw: dict[str, Any] = {}
        result_sh: list[Sharding | None] = [None] * len(o.results)
        if "sdy.sharding" in attrs:
            per = self._per_value(attrs["sdy.sharding"])
            result_sh = [s.without(manual) if manual else s for s in per]
        if "sdy.sharding_rule" in attrs:
            kw["rule"] = self._rule(attrs["sdy.sharding_rule"])

        regions: list[Block] = []
        if name == "sdy.manual_computation":
            ins = self._per_value(attrs["in_shardings"])
            outs = self._per_value(attrs["out_shardings"])
            axes = tuple(sorted(set(re.findall(r'"([^"]+)"', str(attrs["manual_axes"])))))
            inner = tuple(sorted(set(manual) | set(axes)))
            kw.update(manual_axes=axes, in_shardings=tuple(ins), out_shardings=tuple(outs))
            body_sh: list[Sharding | None] = [s.without(inner) for s in ins]
            regions.append(self._block(o.regions[0].blocks[0], body_sh, inner))
            result_sh = [s.without(manual) if manual else s for s in outs]
        elif name == "stablehlo.while":
            # Block arguments of cond and body carry the loop's (result) shardings.
            for r in o.regions:
                regions.append(self._block(r.blocks[0], list(result_sh), manual))
        else:
            for r in o.regions:
                if len(r.blocks):
                    regions.append(self._block(r.blocks[0], [], manual))

        if name in ("sdy.reshard", "sdy.sharding_constraint"):
            kw["target_sharding"] = self._sharding(attrs["sharding"]).without(manual)
            result_sh = [kw["target_sharding"]]
        elif name.startswith("sdy.") and "out_sharding" in attrs:
            kw["target_sharding"] = self._sharding(attrs["out_sharding"]).without(manual)
            result_sh = [kw["target_sharding"]]
            if "reduction_axes" in attrs:
                kw["reduction_axes"] = tuple(re.findall(r'"([^"]+)"', str(attrs["reduction_axes"])))
        if "replica_groups" in attrs:
            groups = np.asarray(attrs["replica_groups"]).astype(np.int64)
            kw["replica_groups"] = tuple(tuple(int(x) for x in g if x >= 0) for g in groups)
        if "source_target_pairs" in attrs:
            pairs = np.asarray(attrs["source_target_pairs"]).astype(np.int64).reshape(-1, 2)
            kw["source_target_pairs"] = tuple((int(a), int(b)) for a, b in pairs)
        if name in ("func.call", "call"):
            kw["callee"] = ir.FlatSymbolRefAttr(attrs["callee"]).value
        if name == "stablehlo.custom_call":
            kw["call_target"] = ir.StringAttr(attrs["call_target_name"]).value
            if "kernel_name" in attrs:
                kw["kernel_name"] = ir.StringAttr(attrs["kernel_name"]).value
            config = (
                _cast(ir.StringAttr, attrs["backend_config"]) if "backend_config" in attrs else None
            )
            if config is not None:
                flops, nbytes = _cost_estimate(config.value)
                kw["cost_estimate_flops"] = flops
                kw["cost_estimate_bytes"] = nbytes
        if name in ("stablehlo.constant", "sdy.constant", "arith.constant") and "value" in attrs:
            t = self._type(o.results[0].type)
            if t.shape == () and _cast(ir.DenseIntElementsAttr, attrs["value"]) is not None:
                kw["int_value"] = int(np.asarray(attrs["value"]).reshape(()))
        if name == "stablehlo.compare":
            m = re.search(r"comparison_direction\s+(\w+)", str(attrs["comparison_direction"]))
            kw["compare_direction"] = m.group(1) if m else ""
        if name == "stablehlo.convolution":
            dn = self.stablehlo.ConvDimensionNumbers(attrs["dimension_numbers"])
            kw["kernel_output_feature_dim"] = int(dn.kernel_output_feature_dimension)
        results = tuple(self._new_value(r, result_sh[i], op_index) for i, r in enumerate(o.results))
        return Op(
            name=name,
            operands=operands,
            results=results,
            regions=tuple(regions),
            location=_location(o),
            **kw,
        )


def _cast(cls: Any, obj: Any) -> Any:
    """``cls(obj)`` if ``obj`` is of that MLIR kind, else None (the bindings raise ValueError)."""
    try:
        return cls(obj)
    except (ValueError, TypeError):
        return None


_COST_ESTIMATE = re.compile(r'"cost_estimate"\s*:\s*(\{[^{}]*\})')


def _cost_estimate(backend_config: str) -> tuple[float | None, float | None]:
    """``flops`` and ``bytes_accessed`` of a Pallas kernel's ``CostEstimate``, if it has one.

    Pallas writes ``"cost_estimate": {"flops": ..., "transcendentals": ...,
    "bytes_accessed": ...}`` into the ``tpu_custom_call`` backend config
    (jax ``_src/tpu_custom_call.py``, ``CustomCallBackendConfig.to_json``).
    """
    m = _COST_ESTIMATE.search(backend_config)
    if m is None:
        return None, None
    try:
        est = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None, None
    flops = est.get("flops")
    nbytes = est.get("bytes_accessed")
    return (
        float(flops) if isinstance(flops, int | float) else None,
        float(nbytes) if isinstance(nbytes, int | float) else None,
    )


def _location(o: Any) -> str:
    """The op's ``NameLoc`` (jax puts e.g. ``jit(f)/dot_general`` there), else ''."""
    try:
        text = str(o.location)
    except Exception:  # noqa: BLE001 - locations are only used in messages
        return ""
    m = re.match(r'loc\("([^"]*)"', text)
    return m.group(1) if m else ""


def read_mlir_module(module: Any) -> ShardyModule:
    """Convert an already propagated MLIR module (``ir.Module``) into a :class:`ShardyModule`."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import sdy, stablehlo

    with module.context:
        op = module.operation if hasattr(module, "operation") else module
        return _Reader(ir=ir, sdy=sdy, stablehlo=stablehlo).read(op)


def read_lowered(lowered: Any) -> ShardyModule:
    """Propagate shardings on a copy of ``lowered``'s StableHLO and read it.

    ``lowered.compiler_ir("stablehlo")`` returns the *same* module object every
    call (checked with jax 0.10.2; docs/facts.md, Shardy from Python) and the passes
    mutate in place, so we clone it first: a later ``lowered.compile()`` must see the
    user's module untouched.
    """
    from jaxlib.mlir import ir, passmanager
    from jaxlib.mlir.dialects import sdy, stablehlo

    try:
        module = lowered.compiler_ir("stablehlo")
    except Exception as e:  # noqa: BLE001 - jax raises many types here
        raise Stage1Error(
            f"could not get StableHLO from {type(lowered).__name__}: {e}; pass a "
            "jax.stages.Lowered, e.g. jax.jit(f, in_shardings=...).trace(*args).lower()"
        ) from e
    with module.context:
        copy = module.operation.clone()
        try:
            passmanager.PassManager.parse(PROPAGATION_PIPELINE).run(copy.operation)
        except Exception as e:  # noqa: BLE001 - MLIR raises a generic error
            raise Stage1Error(f"Shardy propagation failed on the lowered module: {e}") from e
        return _Reader(ir=ir, sdy=sdy, stablehlo=stablehlo).read(copy.operation)
