"""Programs whose Pallas kernels lower without their bodies: for reading, not compiling.

Stage 1 reads a lowered program's Pallas kernels as opaque calls: their target,
kernel name, operand and result types (``aoizora.stage1.dag``). Lowering a Pallas
call builds its Mosaic body and serialises it into the call's ``backend_config``
(docs/facts.md, Splash attention): most of the cost of lowering splash
attention, and nothing Stage 1 reads.

:func:`trace_without_kernel_bodies` traces a function once, for given shapes and
dtypes, and replaces every ``pallas_call`` in it (nested calls included) by
:data:`opaque_kernel_p`: the same operands and results, lowered to a
``stablehlo.custom_call @tpu_custom_call`` with the kernel's name and no
``backend_config``. Calling the :class:`KernelFree` program it returns binds the
rest of the traced program into the caller's trace unchanged, so the lowered
module equals the real one except for the kernels' attributes
(``tests/aoizora/workload/test_splash.py`` compares the two texts).

Such a program cannot be compiled: XLA has no kernel to run.

>>> import jax.numpy as jnp
>>> program = trace_without_kernel_bodies(
...     lambda x: jnp.sin(x) * 2, jax.ShapeDtypeStruct((4,), jnp.float32)
... )
>>> program(jnp.ones(4)).shape
(4,)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex
from jax.interpreters import mlir
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import stablehlo

__all__ = ["KernelFree", "opaque_kernel_p", "trace_without_kernel_bodies"]

# The call target jax gives every Mosaic (Pallas TPU) kernel.
_TPU_CUSTOM_CALL = "tpu_custom_call"

opaque_kernel_p = jex.Primitive("aoizora_opaque_kernel")
opaque_kernel_p.multiple_results = True


def _abstract_eval(
    *operands: Any, out_types: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...], kernel_name: str
) -> list[jax.core.ShapedArray]:
    del operands, kernel_name
    # Shapes and dtypes only: the caller's trace supplies its mesh context.
    return [jax.core.ShapedArray(shape, dtype) for shape, dtype in out_types]


def _lowering(
    ctx: Any,
    *operands: Any,
    out_types: tuple[tuple[tuple[int, ...], np.dtype[Any]], ...],
    kernel_name: str,
) -> Sequence[Any]:
    del out_types
    results = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    op = stablehlo.CustomCallOp(
        results, list(operands), call_target_name=ir.StringAttr.get(_TPU_CUSTOM_CALL)
    )
    op.attributes["kernel_name"] = ir.StringAttr.get(kernel_name)
    return list(op.results)


opaque_kernel_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(opaque_kernel_p, _lowering)


def _kernel_name(eqn: jex.JaxprEqn) -> str:
    """The name jax's lowering gives the kernel: the call's ``name``, else its function's."""
    name = eqn.params.get("name")
    return str(name) if name else str(eqn.params["jaxpr"].debug_info.func_name)


def _shape_dtype(aval: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    return tuple(aval.shape), np.dtype(aval.dtype)


def _without_bodies(jaxpr: jex.Jaxpr) -> jex.Jaxpr:
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            out_types = tuple(_shape_dtype(v.aval) for v in eqn.outvars)
            eqn = eqn.replace(
                primitive=opaque_kernel_p,
                params={"out_types": out_types, "kernel_name": _kernel_name(eqn)},
            )
        else:
            # Nested programs (jit, custom_vjp_call, ...): rewrite them in place, so
            # the call structure jax lowers stays the same.
            inner = {}
            for key, param in eqn.params.items():
                if (new := _rewritten(param)) is not param:
                    inner[key] = new
            if inner:
                eqn = eqn.replace(params={**eqn.params, **inner})
        eqns.append(eqn)
    return jaxpr.replace(eqns=eqns)


def _closed_without_bodies(closed: jex.ClosedJaxpr) -> jex.ClosedJaxpr:
    return closed.replace(jaxpr=_without_bodies(closed.jaxpr))


def _rewritten(param: Any) -> Any:
    """A parameter that is a program, rewritten; any other parameter itself."""
    if isinstance(param, jex.ClosedJaxpr):
        return _closed_without_bodies(param)
    if isinstance(param, jex.Jaxpr):
        return _without_bodies(param)
    return param


@dataclass(frozen=True)
class KernelFree:
    """A traced program with opaque kernels; call it like the function it came from."""

    program: jex.ClosedJaxpr
    in_tree: Any
    out_tree: Any

    def __call__(self, *args: Any) -> Any:
        flat, tree = jax.tree.flatten(args)
        if tree != self.in_tree:
            raise TypeError(f"arguments {tree} differ from the traced ones {self.in_tree}")
        outs = jax.core.eval_jaxpr(self.program.jaxpr, self.program.consts, *flat)
        return jax.tree.unflatten(self.out_tree, outs)


def trace_without_kernel_bodies(fn: Callable[..., Any], *args: Any) -> KernelFree:
    """``fn`` traced for ``args`` (arrays or :class:`jax.ShapeDtypeStruct`), with every
    Pallas call in it an opaque kernel (see the module docstring).

    The trace runs outside the caller's mesh context, so the program serves any
    mesh whose local shapes match. Arrays ``fn`` must see as constants of the
    caller's program are best passed as arguments: constants captured here become
    constants of this program, which jax may hoist into extra program arguments.
    """
    empty = jax.sharding.AbstractMesh((), ())
    with jax.sharding.use_abstract_mesh(empty):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    return KernelFree(
        program=_closed_without_bodies(closed),
        in_tree=jax.tree.structure(args),
        out_tree=jax.tree.structure(out_shape),
    )
