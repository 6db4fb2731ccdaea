"""The ``[compute]`` table of a topology file, read into :class:`sim.compute.ComputeParams`.

Every value is an inline table with its source (``key = { value = ..., source = "..." }``);
what a generation has not measured is absent and prices as the bare roofline's term
(docs/simulator.md, "Compute model"). Errors name the file, the key, the value and a valid
example.

    >>> from pathlib import Path
    >>> table = {"mxu_tile": {"value": 128, "source": "s"},
    ...          "matmul_efficiency": {"value": 0.9, "source": "s"},
    ...          "hbm_efficiency": {"value": 0.8, "source": "s"},
    ...          "attention_kernel": {"value": "k", "source": "s"},
    ...          "attention_efficiency": {"k": {"value": 0.5, "source": "s"}}}
    >>> parse_compute_params(table, Path("x.toml")).hbm_efficiency
    0.8
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.compute import IDEAL, ComputeParams
from sim.errors import TopologyError
from sim.splash_kernel import parse_splash_kernel
from sim.splash_tiles import parse_splash_tiles
from sim.tile_gather import parse_tile_gather

__all__ = ["parse_compute_params", "sourced_value"]


def sourced_value(
    data: Mapping[str, Any], key: str, path: Path, *, table: str = ""
) -> tuple[Any, str]:
    """(value, source) of a topology file's ``key = { value = ..., source = "..." }``."""
    entry = data.get(key)
    if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
        where = f"[{table}] " if table else ""
        raise TopologyError(
            f"{path}: {where}'{key}' must be an inline table with a value and its source, "
            f'e.g. {key} = {{ value = 0.9, source = "https://..." }}'
        )
    return entry["value"], str(entry["source"])


def _entry(data: Mapping[str, Any], key: str, path: Path) -> tuple[Any, str]:
    return sourced_value(data, key, path, table="compute")


def _fraction(value: Any, key: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"{path}: [compute] {key} must be a number, got {value!r}")
    if not 0 < float(value) <= 2:
        raise TopologyError(
            f"{path}: [compute] {key} = {value!r} must be an efficiency in (0, 2], e.g. 0.9"
        )
    return float(value)


def parse_compute_params(data: Mapping[str, Any] | None, path: Path) -> ComputeParams:
    """The ``[compute]`` table of a topology file (None: the bare roofline, :data:`IDEAL`).

    Every number is an inline table with its ``source``; the attention kernels are
    a sub-table ``[compute.attention_efficiency]`` of the same form.
    """
    if data is None:
        return IDEAL
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: [compute] must be a table")
    sources: list[tuple[str, str]] = []

    def value(key: str) -> Any:
        v, s = _entry(data, key, path)
        sources.append((f"compute.{key}", s))
        return v

    tile = value("mxu_tile")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise TopologyError(f"{path}: [compute] mxu_tile must be a positive integer, e.g. 256")
    mm = _fraction(value("matmul_efficiency"), "matmul_efficiency", path)
    hbm = _fraction(value("hbm_efficiency"), "hbm_efficiency", path)
    kernel = str(value("attention_kernel"))
    table = data.get("attention_efficiency")
    if not isinstance(table, dict) or not table:
        raise TopologyError(
            f"{path}: [compute.attention_efficiency] must list kernel versions, e.g. "
            'custom = { value = 0.8, source = "..." }'
        )
    eff: list[tuple[str, float]] = []
    for name in table:
        v, s = _entry(table, name, path)
        eff.append((str(name), _fraction(v, f"attention_efficiency.{name}", path)))
        sources.append((f"compute.attention_efficiency.{name}", s))
    if kernel not in dict(eff):
        raise TopologyError(
            f"{path}: [compute] attention_kernel = {kernel!r} is not listed under "
            f"[compute.attention_efficiency] (listed: {', '.join(k for k, _ in eff)})"
        )
    measured = {
        key: _positive(value(key), key, path, allow_zero=key.endswith("kernel_overhead_s"))
        for key in _OPTIONAL_KEYS
        if key in data
    }
    grid = _attention_grid(data.get("attention_grid"), dict(eff), path, sources)
    tiles = parse_splash_tiles(data.get("splash_tiles"), tuple(dict(eff)), path, sources)
    gather = parse_tile_gather(data.get("tile_gather"), path, sources)
    kernel_model = parse_splash_kernel(data.get("splash_kernel"), path, sources)
    fractions = {key: _fraction(measured[key], key, path) for key in _FRACTIONS if key in measured}
    return ComputeParams(
        tile, mm, hbm, tuple(eff), kernel, tuple(sources),
        hbm_read_efficiency=fractions.get("hbm_read_efficiency", 0.0),
        hbm_retile_copy_efficiency=fractions.get("hbm_retile_copy_efficiency", 0.0),
        bare_matmul_efficiency=fractions.get("bare_matmul_efficiency", 0.0),
        kernel_overhead_s=measured.get("kernel_overhead_s", 0.0),
        vmem_kernel_overhead_s=measured.get("vmem_kernel_overhead_s"),
        conv_relayout_passes=measured.get("conv_relayout_passes", 0.0),
        matmul_fused_op_cost=measured.get("matmul_fused_op_cost", 0.0),
        row_window_slow_from=measured.get("row_window_slow_from", math.inf),
        row_window_tap_s=measured.get("row_window_tap_s", 0.0),
        row_window_tap_growth=measured.get("row_window_tap_growth", 0.0),
        row_window_stream_s=measured.get("row_window_stream_s", 0.0),
        program_launch_s=measured.get("program_launch_s", 0.0),
        onchip_bandwidth_bytes_per_s=measured.get("onchip_bandwidth_bytes_per_s", math.inf),
        onchip_copy_bandwidth_bytes_per_s=measured.get(
            "onchip_copy_bandwidth_bytes_per_s", math.inf
        ),
        onchip_full_tile_copy_bandwidth_bytes_per_s=measured.get(
            "onchip_full_tile_copy_bandwidth_bytes_per_s"
        ),
        lane_transpose_s_per_element=measured.get("lane_transpose_s_per_element", 0.0),
        compiler_cycle_s=measured.get("compiler_cycle_s", 0.0),
        attention_grid=grid,
        splash_tiles=tiles,
        splash_kernel=kernel_model,
        tile_gather=gather,
    )  # fmt: skip


# Optional [compute] keys that are fractions of a peak (0: unmeasured).
_FRACTIONS = ("hbm_read_efficiency", "hbm_retile_copy_efficiency", "bare_matmul_efficiency")

# Optional [compute] keys: what a chip measured with ``aoizora measure --kernels`` and
# profiled steps adds to the roofline (docs/simulator.md, "Compute model").
_OPTIONAL_KEYS = (
    "bare_matmul_efficiency",
    "conv_relayout_passes",
    "hbm_read_efficiency",
    "hbm_retile_copy_efficiency",
    "row_window_slow_from",
    "row_window_tap_s",
    "row_window_tap_growth",
    "row_window_stream_s",
    "program_launch_s",
    "kernel_overhead_s",
    "vmem_kernel_overhead_s",
    "onchip_bandwidth_bytes_per_s",
    "onchip_copy_bandwidth_bytes_per_s",
    "onchip_full_tile_copy_bandwidth_bytes_per_s",
    "lane_transpose_s_per_element",
    "matmul_fused_op_cost",
    "compiler_cycle_s",
)


def _positive(value: Any, key: str, path: Path, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TopologyError(f"{path}: [compute] {key} must be a finite number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        least = ">= 0" if allow_zero else "> 0"
        raise TopologyError(f"{path}: [compute] {key} = {value!r} must be {least}, e.g. 1e-06")
    return float(value)


def _attention_grid(
    table: Any, eff: Mapping[str, float], path: Path, sources: list[tuple[str, str]]
) -> tuple[tuple[str, float, float], ...]:
    """``[compute.attention_grid]``: per kernel, ``{ step_overhead_s = ..,
    q_block_overhead_s = .., source = ".." }`` -- a blocked kernel's cost per grid step
    and per q block beyond its FLOPs."""
    if table is None:
        return ()
    if not isinstance(table, dict):
        raise TopologyError(f"{path}: [compute.attention_grid] must be a table of kernels")
    out = []
    for name, entry in table.items():
        keys = ("step_overhead_s", "q_block_overhead_s", "source")
        if name not in eff or not isinstance(entry, dict) or set(entry) != set(keys):
            raise TopologyError(
                f"{path}: [compute.attention_grid] {name} must name a kernel of "
                f"[compute.attention_efficiency] ({', '.join(eff)}) and hold exactly "
                f"{', '.join(keys)}, e.g. splash = {{ step_overhead_s = 4e-07, "
                f'q_block_overhead_s = 2e-07, source = "..." }}'
            )
        step = _positive(entry["step_overhead_s"], f"attention_grid.{name}", path, allow_zero=True)
        qb = _positive(entry["q_block_overhead_s"], f"attention_grid.{name}", path, allow_zero=True)
        sources.append((f"compute.attention_grid.{name}", str(entry["source"])))
        out.append((str(name), step, qb))
    return tuple(out)
