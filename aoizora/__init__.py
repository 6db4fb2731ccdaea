"""AoiZora: topology-aware auto-parallel planning for diffusion transformers on TPU slices.

The public API: :func:`user_workload` and :class:`Rules` describe a model of your
own for the planner; :func:`load_plan` reads a plan file and builds its Mesh.

They load on first use (PEP 562): importing the package, as the command line does,
does not start jax, so bad input (an unknown generation, a slice libtpu cannot
describe) is refused in well under a second.

AoiZora ships two top-level packages, ``aoizora`` and its simulator ``sim``: a generic
name that other distributions use too. Importing ``aoizora`` checks, without importing
it, that ``sim`` is the one installed beside it, and raises :class:`~aoizora.errors.
PackageClash` naming both folders when another shadows it.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoizora.errors import AoizoraError, PackageClash

if TYPE_CHECKING:
    from aoizora.plan import load_plan
    from aoizora.workloads.base import user_workload
    from aoizora.workloads.rules import Rules

__all__ = ["AoizoraError", "Rules", "load_plan", "user_workload"]


def _check_sim_is_ours() -> None:
    """Raise :class:`PackageClash` when the top-level ``sim`` is another folder than the
    one beside us (a missing ``sim`` is left to the import that needs it)."""
    ours = (Path(__file__).resolve().parent.parent / "sim").resolve()
    try:
        spec = importlib.util.find_spec("sim")
    except (ImportError, ValueError):  # ValueError: a sys.modules["sim"] without a spec
        return
    if spec is None:
        return
    origin = spec.origin
    if origin is not None and Path(origin).resolve().parent == ours:
        return
    found = origin or ", ".join(spec.submodule_search_locations or ())
    raise PackageClash(
        f"'import sim' finds {found!r}, not AoiZora's simulator at {str(ours)!r}: another "
        "package named 'sim' shadows it (AoiZora's sim must come first on sys.path). "
        "Uninstall that package or take its folder off PYTHONPATH, e.g. 'pip uninstall "
        "<its name>'; then 'python -c \"import sim; print(sim.__file__)\"' prints "
        f"{str(ours / '__init__.py')!r}"
    )


_check_sim_is_ours()

# Public name -> the module that defines it.
_LAZY = {
    "Rules": "aoizora.workloads.rules",
    "load_plan": "aoizora.plan",
    "user_workload": "aoizora.workloads.base",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'aoizora' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
