"""Load a workload of your own from ``FILE.py:FACTORY`` or ``package.module:FACTORY``.

This is what ``aoizora plan --workload SPEC`` and ``aoizora whatif --workload SPEC``
do: import the file (or module), look up ``FACTORY`` and call it with no arguments;
it must return the :class:`~aoizora.workloads.base.Workload` that
:func:`aoizora.user_workload` builds (``FACTORY`` may also name such a value).

* ``FILE.py`` is run as a module of its own (not ``__main__``, so an
  ``if __name__ == "__main__":`` block does not run); its folder is appended to
  ``sys.path``, so it can import the modules beside it (appended, not prepended: a
  file there named like an installed package does not shadow it).
* ``package.module`` is imported normally; the current directory is appended to
  ``sys.path`` first, so a package in it is found as ``python -m`` would.
* Every failure is a :class:`~aoizora.errors.WorkloadError` naming the spec, what
  went wrong and where in your code (file, line, function), e.g. a missing file, a
  syntax error, an exception while importing or in ``FACTORY()``, a ``FACTORY`` that
  needs arguments, or a ``FACTORY`` that returns something else.

    >>> load_workload("my_model.py")
    Traceback (most recent call last):
    ...
    aoizora.errors.WorkloadError: --workload 'my_model.py' is not FILE.py:FACTORY or ...
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle

from aoizora.errors import WorkloadError
from aoizora.workloads.base import Workload

__all__ = ["EXAMPLE_FACTORY", "load_workload"]

EXAMPLE_FACTORY = (
    "def make(): return user_workload('mlp', mlp, (w, x), (('embed', 'mlp'), "
    "('batch', 'embed')), out_logical_axes=('batch', 'mlp'), "
    "rule_sets=(Rules.of('dp_tp', [('batch', 'dp'), ('mlp', 'tp')]),))"
)
_SPEC_EXAMPLE = "e.g. --workload my_model.py:make or --workload mypkg.models:make"


def _where(exc: BaseException, path: Path | None) -> str:
    """`` (file, line N, in f)`` of the deepest frame in ``path`` (else outside Python's own)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({Path(exc.filename).name}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path is not None and Path(f.filename) == path]
    theirs = [f for f in frames if not f.filename.startswith("<") and "importlib" not in f.filename]
    chosen = (mine or theirs or frames)[-1:] if frames else []
    return "".join(f" ({Path(f.filename).name}, line {f.lineno}, in {f.name})" for f in chosen)


def _failure(spec: str, doing: str, exc: BaseException, path: Path | None) -> WorkloadError:
    return WorkloadError(
        f"--workload {spec!r}: {doing} failed: {type(exc).__name__}: {exc}{_where(exc, path)}"
    )


def _load_file(spec: str, target: str) -> tuple[ModuleType, Path]:
    path = Path(target).expanduser()
    if path.suffix != ".py" or not path.is_file():
        what = "is not a .py file" if path.is_file() else "does not exist"
        raise WorkloadError(
            f"--workload {spec!r}: {target!r} {what} (looked in {os.getcwd()}); {_SPEC_EXAMPLE}"
        )
    path = path.resolve()
    # A name of its own (the file's stem may be any name, even one of jax's modules).
    name = f"_aoizora_workload_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise WorkloadError(f"--workload {spec!r}: Python cannot load {str(path)!r} as a module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # sys.exit() in the file is a failure too
        del sys.modules[name]
        raise _failure(spec, f"running {path.name}", exc, path) from exc
    # Fan-out workers (a spawned process pool, Ray) cannot import this module
    # by its made-up name: cloudpickle sends its functions and classes by value.
    cloudpickle.register_pickle_by_value(module)
    return module, path


def _import_module(spec: str, target: str) -> tuple[ModuleType, Path | None]:
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            raise WorkloadError(
                f"--workload {spec!r}: no module named {exc.name!r} (looked in the current "
                f"directory and sys.path); give a file instead, {_SPEC_EXAMPLE}"
            ) from None
        raise _failure(spec, f"importing {target}", exc, None) from exc
    except (Exception, SystemExit) as exc:
        raise _failure(spec, f"importing {target}", exc, None) from exc
    file = getattr(module, "__file__", None)
    return module, Path(file).resolve() if file else None


def _attribute(spec: str, module: ModuleType, attr: str) -> Any:
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            defined = sorted(
                n
                for n, v in vars(module).items()
                if callable(v)
                and not n.startswith("_")
                and getattr(v, "__module__", None) in (module.__name__, None)
            )
            raise WorkloadError(
                f"--workload {spec!r}: {attr!r} is not defined there; functions it defines: "
                f"{defined or 'none'}"
            )
        value = getattr(value, part)
    return value


def _call(spec: str, factory: Any, path: Path | None) -> Any:
    if isinstance(factory, Workload):
        return factory
    if not callable(factory):
        raise WorkloadError(
            f"--workload {spec!r} names {type(factory).__name__} {factory!r}, not a function; "
            f"FACTORY must be a function returning aoizora.user_workload(...), e.g. "
            f"{EXAMPLE_FACTORY}"
        )
    try:
        inspect.signature(factory).bind()
    except TypeError as exc:
        raise WorkloadError(
            f"--workload {spec!r}: FACTORY is called with no arguments, but {exc}; give its "
            f"parameters defaults or wrap it, e.g. def make(): return build(size=64)"
        ) from None
    except ValueError:
        pass  # no signature (a builtin): just call it
    try:
        return factory()
    except (Exception, SystemExit) as exc:  # sys.exit() in FACTORY is a failure too
        raise _failure(spec, "calling FACTORY()", exc, path) from exc


def load_workload(spec: str) -> Workload:
    """The workload ``FACTORY()`` returns for ``spec`` = ``FILE.py:FACTORY`` or
    ``package.module:FACTORY`` (see the module docstring)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target.strip() or not attr.strip():
        raise WorkloadError(
            f"--workload {spec!r} is not FILE.py:FACTORY or package.module:FACTORY; {_SPEC_EXAMPLE}"
        )
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    # Warnings about the user's code (a SyntaxWarning when the file compiles) are shown
    # once it has given a workload: a failure stays one line, the error.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("default")
        module, path = _load_file(spec, target) if is_file else _import_module(spec, target)
        value = _call(spec, _attribute(spec, module, attr), path)
    if not isinstance(value, Workload):
        shown = repr(value)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise WorkloadError(
            f"--workload {spec!r}: {attr}() returned {type(value).__name__} {shown}, not a "
            f"workload; it must return what aoizora.user_workload(name, fn, abstract_args, "
            f"arg_logical_axes, out_logical_axes=..., rule_sets=...) returns, e.g. "
            f"{EXAMPLE_FACTORY}"
        )
    for w in said:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return value
