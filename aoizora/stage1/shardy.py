"""Read a lowered JAX program, after Shardy's propagation and reshard passes, into Python values.

Stage 1 never compiles. It takes the StableHLO module of a ``jax.stages.Lowered``,
and runs on a *copy* of it the passes Shardy's own partitioner runs
(:data:`PIPELINE`): propagation, then ``sdy-insert-explicit-reshards`` (full
version) and ``sdy-reshard-to-collectives``, each followed by the canonicalizer
patterns Shardy registers for it. After them every reshard the partitioner needs
is an explicit ``sdy`` collective (``sdy.all_gather``, ``sdy.all_slice``,
``sdy.all_to_all``, ``sdy.collective_permute``, ``sdy.all_reduce``,
``sdy.reduce_scatter``) and every other op computes in a sharding compatible
with its operands. The module is converted into the frozen dataclasses of this
module: a :class:`ShardyModule` of :class:`Function` bodies made of :class:`Op`
values over numbered values with their :class:`TensorType` and :class:`Sharding`.

Why the MLIR Python bindings and not the printed text: the bindings give exact
SSA def-use identity across nested regions (``while`` bodies, ``shard_map``
bodies, called functions), shapes from ``RankedTensorType``, and the ``sdy``
shardings and meshes through Shardy's own attribute classes. The attributes
without a Python class (``manual_axes``, the axes of a collective) are read
from their printed form, which is a flat list of quoted axis names.

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
import re
from typing import Any

import numpy as np

from aoizora.stage1.program import (
    AxisRef,
    Block,
    Convolution,
    Function,
    Op,
    Sharding,
    ShardyModule,
    Stage1Error,
    TensorType,
)

__all__ = [
    "Stage1Error",
    "AxisRef",
    "Sharding",
    "TensorType",
    "Block",
    "Convolution",
    "Op",
    "Function",
    "ShardyModule",
    "PIPELINE",
    "SDY_COLLECTIVES",
    "module_bytecode",
    "propagated_module",
    "read_bytecode",
    "read_lowered",
    "read_mlir_module",
]

# Shardy's propagation, then the two passes of Shardy's partitioner that make every
# reshard explicit and turn it into collectives. Without enable-full-version=true
# the explicit-reshards pass handles only a few ops and no collective appears.
# Shardy's own export pipeline runs its canonicalizer patterns ("sdy-reshard",
# "sdy-collective") between these passes; we do not: they cancel an all-gather
# that a sharding constraint asks for against the all-slice of its user, which
# XLA's SPMD partitioner (what the TPU compile runs after Shardy's propagation)
# does not, so the compiled program has that all-gather (measured on wan-tiny,
# docs/stage1.md).
PIPELINE = (
    "builtin.module(sdy-propagation-pipeline,"
    "func.func(sdy-insert-explicit-reshards{enable-full-version=true}),"
    "func.func(sdy-reshard-to-collectives))"
)

# Shardy's collectives and the attribute that names the axes each one works over.
SDY_COLLECTIVES = {
    "sdy.all_gather": "gathering_axes",
    "sdy.all_slice": "slicing_axes",
    "sdy.all_to_all": "params",
    "sdy.collective_permute": "",
    "sdy.all_reduce": "reduction_axes",
    "sdy.reduce_scatter": "reduce_scatter_axes",
}
# Ops whose source location Stage 1 keeps (it names kernels and collectives in
# reasons and warnings; reading a location costs as much as reading the op).
_LOCATED = frozenset(
    f"stablehlo.{n}"
    for n in (
        "dot_general", "dot", "convolution", "custom_call", "while", "reduce", "transpose",
        "pad", "gather", "scatter", "sort", "all_gather", "all_reduce", "all_to_all",
        "reduce_scatter", "collective_permute", "dynamic_update_slice", "reduce_window",
    )
)  # fmt: skip
_AXIS_TEXT = re.compile(r'"([^"]+)"(?::\((\d+)\)(\d+))?')


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
        # A module holds thousands of ops but few distinct shardings and types: read
        # each printed attribute once.
        self._shardings: dict[str, Sharding] = {}
        self._types: dict[str, TensorType] = {}

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

    def _axes_text(self, text: str) -> tuple[AxisRef, ...]:
        """Every axis named in a printed axis-list attribute, e.g. ``[{"x"}, {"y":(1)2}]``."""
        sizes = dict(self.mesh_axes)
        out = []
        for name, pre, size in _AXIS_TEXT.findall(text):
            if name not in sizes:
                raise Stage1Error(
                    f"a collective names mesh axis {name!r}, not one of {sorted(sizes)}"
                )
            if size:
                out.append(AxisRef(name, int(size), pre_size=int(pre), is_sub_axis=True))
            else:
                out.append(AxisRef(name, sizes[name]))
        return tuple(out)

    def _sharding(self, attr: Any) -> Sharding:
        key = str(attr)
        cached = self._shardings.get(key)
        if cached is None:
            s = self.sdy.TensorShardingAttr(attr)
            dims = []
            for d in s.dimension_shardings:
                dim = self.sdy.DimensionShardingAttr(d)
                dims.append(tuple(self._axis(a) for a in dim.axes))
            cached = self._shardings[key] = Sharding(tuple(dims))
        return cached

    def _per_value(self, attr: Any) -> list[Sharding]:
        return [self._sharding(s) for s in self.sdy.TensorShardingPerValueAttr(attr).shardings]

    def _convolution(self, attrs: Any) -> Convolution:
        dn = self.stablehlo.ConvDimensionNumbers(attrs["dimension_numbers"])
        spatial = tuple(
            zip(
                (int(d) for d in dn.input_spatial_dimensions),
                (int(d) for d in dn.kernel_spatial_dimensions),
                (int(d) for d in dn.output_spatial_dimensions),
                strict=True,
            )
        )
        n = len(spatial)

        def ints(key: str, default: int) -> tuple[int, ...]:
            return tuple(int(v) for v in attrs[key]) if key in attrs else (default,) * n

        padding = np.asarray(attrs["padding"]).reshape(-1, 2) if "padding" in attrs else None
        return Convolution(
            input_batch=int(dn.input_batch_dimension),
            kernel_input_feature=int(dn.kernel_input_feature_dimension),
            kernel_output_feature=int(dn.kernel_output_feature_dimension),
            spatial=spatial,
            strides=ints("window_strides", 1),
            padding_low=tuple(int(p) for p in padding[:, 0]) if padding is not None else (0,) * n,
            lhs_dilation=ints("lhs_dilation", 1),
            rhs_dilation=ints("rhs_dilation", 1),
        )

    def _type(self, t: Any) -> TensorType:
        key = str(t)
        cached = self._types.get(key)
        if cached is None:
            rt = _cast(self.ir.RankedTensorType, t)
            cached = (
                TensorType(tuple(int(d) for d in rt.shape), _element_bytes(str(rt.element_type)))
                if rt is not None
                else TensorType((), 0)
            )
            self._types[key] = cached
        return cached

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

    def _custom_call(self, attrs: Any) -> dict[str, Any]:
        """A custom call's target, kernel name and Pallas ``CostEstimate`` (if any)."""
        ir = self.ir
        kw: dict[str, Any] = {"call_target": ir.StringAttr(attrs["call_target_name"]).value}
        if "kernel_name" in attrs:
            kw["kernel_name"] = ir.StringAttr(attrs["kernel_name"]).value
        has_config = "backend_config" in attrs
        config = _cast(ir.StringAttr, attrs["backend_config"]) if has_config else None
        if config is not None:
            flops, nbytes = _cost_estimate(config.value)
            kw["cost_estimate_flops"] = flops
            kw["cost_estimate_bytes"] = nbytes
        return kw

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
            key = SDY_COLLECTIVES.get(name, "")
            if key and key in attrs:
                kw["collective_axes"] = self._axes_text(str(attrs[key]))
        if "replica_groups" in attrs:
            # tolist() gives Python ints in one C pass (a 256-chip group has 256 ids).
            groups = np.asarray(attrs["replica_groups"]).astype(np.int64).tolist()
            kw["replica_groups"] = tuple(tuple(x for x in g if x >= 0) for g in groups)
        if "source_target_pairs" in attrs:
            pairs = np.asarray(attrs["source_target_pairs"]).astype(np.int64).reshape(-1, 2)
            kw["source_target_pairs"] = tuple(map(tuple, pairs.tolist()))
        if name in ("func.call", "call"):
            kw["callee"] = ir.FlatSymbolRefAttr(attrs["callee"]).value
        if name == "stablehlo.custom_call":
            kw.update(self._custom_call(attrs))
        if name in ("stablehlo.constant", "sdy.constant", "arith.constant") and "value" in attrs:
            t = self._type(o.results[0].type)
            if t.shape == () and _cast(ir.DenseIntElementsAttr, attrs["value"]) is not None:
                kw["int_value"] = int(np.asarray(attrs["value"]).reshape(()))
        if name == "stablehlo.compare":
            m = re.search(r"comparison_direction\s+(\w+)", str(attrs["comparison_direction"]))
            kw["compare_direction"] = m.group(1) if m else ""
        if name == "stablehlo.dot_general":
            dn = self.stablehlo.DotDimensionNumbers(attrs["dot_dimension_numbers"])
            kw["contracting_dims"] = tuple(int(d) for d in dn.lhs_contracting_dimensions)
            kw["rhs_contracting_dims"] = tuple(int(d) for d in dn.rhs_contracting_dimensions)
            kw["lhs_batch_dims"] = tuple(int(d) for d in dn.lhs_batching_dimensions)
            kw["rhs_batch_dims"] = tuple(int(d) for d in dn.rhs_batching_dimensions)
        if name == "stablehlo.convolution":
            kw["convolution"] = self._convolution(attrs)
        results = tuple(self._new_value(r, result_sh[i], op_index) for i, r in enumerate(o.results))
        return Op(
            name=name,
            operands=operands,
            results=results,
            regions=tuple(regions),
            location=_location(o) if name in _LOCATED or name.startswith("sdy.") else "",
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
    """Read an MLIR module (``ir.Module``) that :data:`PIPELINE` ran on."""
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import sdy, stablehlo

    with module.context:
        op = module.operation if hasattr(module, "operation") else module
        return _Reader(ir=ir, sdy=sdy, stablehlo=stablehlo).read(op)


def propagated_module(lowered: Any, *, verify: bool = False) -> Any:
    """A copy of ``lowered``'s StableHLO module (``ir.Module``) after :data:`PIPELINE`.

    ``verify=True`` runs MLIR's verifier after every pass (slower, same result;
    for debugging a pass).

    ``lowered.compiler_ir("stablehlo")`` returns the *same* module object every
    call (checked with jax 0.10.2; docs/facts.md, Shardy from Python) and the passes
    mutate in place, so we clone it first: a later ``lowered.compile()`` must see the
    user's module untouched.
    """
    from jaxlib.mlir import passmanager

    try:
        module = lowered.compiler_ir("stablehlo")
    except Exception as e:  # noqa: BLE001 - jax raises many types here
        raise Stage1Error(
            f"could not get StableHLO from {type(lowered).__name__}: {e}; pass a "
            "jax.stages.Lowered, e.g. jax.jit(f, in_shardings=...).trace(*args).lower()"
        ) from e
    with module.context:
        copy = module.operation.clone()
        pm = passmanager.PassManager.parse(PIPELINE)
        # MLIR verifies the whole module after every pass by default: on a 256-chip
        # ring-attention step that is two thirds of the passes' time, and it changes
        # nothing in the output (the module Stage 1 reads is the same text; checked
        # in benchmarks/stage1_speed.py). jax verifies the module it lowers.
        pm.enable_verifier(verify)
        try:
            pm.run(copy.operation)
        except Exception as e:  # noqa: BLE001 - MLIR raises a generic error
            raise Stage1Error(f"Shardy's passes failed on the lowered module: {e}") from e
    return copy


def read_lowered(lowered: Any, *, verify: bool = False) -> ShardyModule:
    """Run :data:`PIPELINE` on a copy of ``lowered``'s StableHLO and read it
    (:func:`propagated_module`, then :func:`read_mlir_module`)."""
    return read_mlir_module(propagated_module(lowered, verify=verify))


def module_bytecode(module: Any) -> bytes:
    """``module`` (an ``ir.Module``, e.g. from :func:`propagated_module`) as MLIR
    bytecode: a tenth to a fiftieth of its text on Wan 2.1 14B (docs/stage1.md)."""
    import io

    out = io.BytesIO()
    with module.context:
        module.operation.write_bytecode(out)
    return out.getvalue()


def read_bytecode(data: bytes) -> ShardyModule:
    """Read a module stored by :func:`module_bytecode`: the same :class:`ShardyModule`
    as reading the module itself (``tests/aoizora/stage1/test_sweep.py``).

    Raises :class:`Stage1Error` if ``data`` is not MLIR bytecode MLIR can parse.
    """
    from jax.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir

    # jax's context registers every dialect its lowering emits (stablehlo, sdy, ...).
    with jax_mlir.make_ir_context():
        try:
            module = ir.Module.parse(data)
        except Exception as e:  # noqa: BLE001 - MLIR raises a generic error
            raise Stage1Error(f"stored module ({len(data)} B) is not MLIR bytecode: {e}") from e
        return read_mlir_module(module)
