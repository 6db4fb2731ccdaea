"""The splash kernel a plan's configuration runs: its tiles and the compiler's VMEM limit.

A plan (and each of its alternatives) may record ``splash_blocks``, the splash attention
tiles ``[block_q, block_kv, block_kv_compute]`` Stage 1 planned (absent: maxdiffusion's
512 each), and with them ``scoped_vmem_kib``, the scoped VMEM limit (KiB) the compiler
needs for those tiles (XLA's ``--xla_tpu_scoped_vmem_limit_kib``, as maxdiffusion's Wan
recipes raise it; absent: the compiler's default). ``aoizora measure`` and ``validate``
compile with it (:func:`aoizora.compile.compiler_options`); the maxdiffusion export
passes it in ``LIBTPU_INIT_ARGS``.

    >>> check_splash((512, 8192, 512), 32768, "")
    >>> splash_json((512, 8192, 512), 32768)
    {'splash_blocks': [512, 8192, 512], 'scoped_vmem_kib': 32768}
    >>> splash_from_json({"splash_blocks": [512, 8192, 512], "scoped_vmem_kib": 32768}, "")
    {'splash_blocks': (512, 8192, 512), 'scoped_vmem_kib': 32768}
    >>> try:
    ...     check_splash(None, 32768, "")
    ... except PlanError as exc:
    ...     print(str(exc).split(":")[0])
    scoped_vmem_kib 32768 is given without splash_blocks
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aoizora.errors import PlanError
from aoizora.plan.fields import json_list
from sim.splash_tiles import tile_problem

__all__ = [
    "LIBTPU_VMEM_FLAG",
    "SPLASH_KEYS",
    "check_splash",
    "libtpu_flags",
    "splash_from_json",
    "splash_json",
]

# The optional keys of a configuration that say how its splash kernel runs.
SPLASH_KEYS: tuple[str, ...] = ("splash_blocks", "scoped_vmem_kib")
# The XLA flag of the limit (aoizora.compile.compiler_options passes the same option).
LIBTPU_VMEM_FLAG = "--xla_tpu_scoped_vmem_limit_kib"
_EXAMPLE = '"splash_blocks": [512, 8192, 512], "scoped_vmem_kib": 65536'


def check_splash(tiles: Any, scoped_vmem_kib: Any, prefix: str) -> None:
    """Raise :class:`PlanError` (its message starting with ``prefix``) unless ``tiles`` are
    tiles the splash kernel runs (or None) and ``scoped_vmem_kib`` is None or a positive
    whole number of KiB given with tiles."""
    if tiles is not None and tile_problem(tuple(tiles)):
        raise PlanError(f"{prefix}splash_blocks {tiles!r}: {tile_problem(tuple(tiles))}")
    if scoped_vmem_kib is None:
        return
    if isinstance(scoped_vmem_kib, bool) or not isinstance(scoped_vmem_kib, int):
        problem = "a whole number of KiB"
    elif scoped_vmem_kib < 1:
        problem = "a positive number of KiB"
    else:
        problem = ""
    if problem:
        raise PlanError(
            f"{prefix}scoped_vmem_kib {scoped_vmem_kib!r}: the scoped VMEM limit must be "
            f"{problem} (--xla_tpu_scoped_vmem_limit_kib), e.g. 65536 (64 MiB); leave it out "
            "for the compiler's default"
        )
    if tiles is None:
        raise PlanError(
            f"{prefix}scoped_vmem_kib {scoped_vmem_kib!r} is given without splash_blocks: the "
            f"limit is what planned splash tiles need, so it comes with them, e.g. {_EXAMPLE} "
            "(or leave both out: the 512 tiles at the compiler's default)"
        )


def splash_json(tiles: tuple[int, ...] | None, scoped_vmem_kib: int | None) -> dict[str, Any]:
    """The configuration's splash keys as a plan file writes them (none when absent)."""
    out: dict[str, Any] = {}
    if tiles is not None:
        out["splash_blocks"] = list(tiles)
    if scoped_vmem_kib is not None:
        out["scoped_vmem_kib"] = scoped_vmem_kib
    return out


def splash_from_json(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``splash_blocks`` and ``scoped_vmem_kib`` of a decoded configuration (None where
    absent; ``where`` prefixes the field names in errors), checked by the caller's
    constructor (:func:`check_splash`)."""
    dot = f"{where}." if where else ""
    return {
        "splash_blocks": tuple(json_list(data["splash_blocks"], f"{dot}splash_blocks"))
        if "splash_blocks" in data
        else None,
        "scoped_vmem_kib": data.get("scoped_vmem_kib"),
    }


def libtpu_flags(scoped_vmem_kib: int | None) -> tuple[str, ...]:
    """The libtpu flags (``LIBTPU_INIT_ARGS``) that run a configuration as planned.

    >>> libtpu_flags(65536), libtpu_flags(None)
    (('--xla_tpu_scoped_vmem_limit_kib=65536',), ())
    """
    return () if scoped_vmem_kib is None else (f"{LIBTPU_VMEM_FLAG}={scoped_vmem_kib}",)
