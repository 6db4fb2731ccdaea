"""The ``aoizora`` command line: one subcommand per module in :mod:`aoizora.commands`.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` to a callable taking the parsed namespace and returning an exit
code. Errors of the :class:`~aoizora.errors.AoizoraError` family (and the
simulator's :class:`~sim.errors.SimError`) become one line on stderr and exit
code 2 (3 for a :class:`~aoizora.errors.ResourceError`: a worker that died, a memory
bound); so does a ``MemoryError`` of this process, with exit code 3, naming the phase
it ran out in. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Sequence

from aoizora.errors import AoizoraError, ResourceError
from aoizora.interrupts import Interrupted, finished, install_handlers
from aoizora.resources import memory_bound, memory_guard, out_of_memory_line
from aoizora.software import version_line
from sim.errors import SimError

__all__ = [
    "COMMANDS",
    "DEVICE_COMMANDS",
    "build_parser",
    "keep_off_accelerators",
    "main",
    "quiet_tpu_runtime_warning",
]

# Command modules, in the order `aoizora --help` lists them. Each module is
# imported lazily, and a run imports only its own command's module, so that
# `aoizora hlo` does not pay for importing JAX and `aoizora plan --slice v5e:3x3`
# is refused before JAX starts.
COMMANDS: tuple[str, ...] = (
    "plan",
    "export",
    "measure",
    "explain",
    "whatif",
    "serve",
    "validate",
    "calibrate",
    "hlo",
)


# Commands that run programs on the attached accelerator. Every other command only compiles
# ahead of time for libtpu's AOT topologies and simulates, so it keeps JAX on the CPU: on a
# TPU VM it must neither take the chip from a server running there nor plan differently.
DEVICE_COMMANDS: frozenset[str] = frozenset({"measure"})


def keep_off_accelerators(command: str | None) -> None:
    """Set ``JAX_PLATFORMS=cpu`` for a command that runs nothing on devices, before jax
    starts (a user's own ``JAX_PLATFORMS`` is kept).

    >>> import os; saved = os.environ.pop("JAX_PLATFORMS", None)
    >>> keep_off_accelerators("plan"); os.environ["JAX_PLATFORMS"]
    'cpu'
    >>> _ = os.environ.pop("JAX_PLATFORMS"); keep_off_accelerators("measure")
    >>> "JAX_PLATFORMS" in os.environ
    False
    >>> if saved is not None: os.environ["JAX_PLATFORMS"] = saved
    """
    if command is not None and command not in DEVICE_COMMANDS:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        quiet_tpu_runtime_warning()


# jax warns at start-up on a TPU VM without transparent hugepages (jax/_src/cloud_tpu_init.py)
# even when it then runs on the CPU: about the TPU runtime's start, which a command off the
# accelerator never does. The filter is also put in PYTHONWARNINGS for the worker processes.
_HUGEPAGES_FILTER = "ignore:Transparent hugepages are not enabled:UserWarning"


def quiet_tpu_runtime_warning() -> None:
    """Silence jax's transparent-hugepages warning here and in the processes started later.

    >>> import os, warnings; saved = os.environ.get("PYTHONWARNINGS")
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     quiet_tpu_runtime_warning()
    ...     warnings.warn("Transparent hugepages are not enabled. TPU runtime ...")
    >>> seen, _HUGEPAGES_FILTER in os.environ["PYTHONWARNINGS"]
    ([], True)
    >>> if saved is None: del os.environ["PYTHONWARNINGS"]
    ... else: os.environ["PYTHONWARNINGS"] = saved
    """
    warnings.filterwarnings(
        "ignore", message="Transparent hugepages are not enabled", category=UserWarning
    )
    known = os.environ.get("PYTHONWARNINGS", "")
    if _HUGEPAGES_FILTER not in known:
        os.environ["PYTHONWARNINGS"] = ",".join(f for f in (known, _HUGEPAGES_FILTER) if f)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand (or just ``only``)."""
    parser = argparse.ArgumentParser(
        prog="aoizora",
        description=(
            "Topology-aware auto-parallel planning for diffusion transformers on TPU slices."
        ),
    )
    parser.add_argument(
        "--version",
        action="version",
        version=version_line(),
        help="print the version (and the commit it was built from) and exit",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"aoizora.commands.{name}")
        module.register(subparsers)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs, when its first word names one (top-level options such
    as ``--help`` come before it and need the full parser)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None, *, as_program: bool | None = None) -> int:
    """Run the CLI; returns the process exit code.

    Run as the program (``argv`` None, or ``as_program=True``), SIGINT and SIGTERM end
    any command with one line on stderr and exit code 130 or 143
    (:mod:`aoizora.interrupts`); called with ``argv`` (tests, scripts) the caller's
    signal handling is left alone."""
    as_program = argv is None if as_program is None else as_program
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:  # without the parser, which imports every command
        print(version_line())
        return 0
    command = _named_command(argv)
    if as_program:  # first thing, before jax or libtpu start (libtpu installs its own)
        install_handlers(f"aoizora {command or ''}".strip())
    keep_off_accelerators(command)
    try:
        parser = build_parser(command)
        args = parser.parse_args(argv)
        # a command that plans (--max-memory-gb) runs under its memory bound
        planning = hasattr(args, "max_memory_gb")
        bound = memory_bound(args.max_memory_gb) if planning else None
        with memory_guard(bound, prog=f"aoizora {command}"):
            code: int = args.func(args)
    except (AoizoraError, SimError) as exc:
        # One line, whatever the message holds (a user's exception may span several).
        print(f"aoizora {command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except MemoryError as exc:  # this process's own allocation failed (e.g. ulimit -v)
        print(f"aoizora {command}: error: {out_of_memory_line(exc)}", file=sys.stderr)
        return ResourceError.exit_code
    except Interrupted as exc:
        finished(exc.signum)
        return exc.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
