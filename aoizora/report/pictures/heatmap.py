"""Link-load heatmap: bytes and busy fraction of every directed ICI link, drawn on the mesh.

:func:`link_loads` turns a :class:`sim.records.SimResult` into the numbers the
picture shows (one :class:`LinkLoad` per directed link, in the simulator's link
order); :func:`plot_link_heatmap` draws them: chips as circles at their
coordinates (x to the right, y upwards), one arrow per directed link -- the two
directions of a cable side by side -- coloured by bytes carried (left panel)
and by busy fraction (right panel). Wrap-around links are short arrows leaving
the edge chip, labelled "wrap". A 3D slice gets one row of panels per z plane;
its z links are listed in the panel title, not drawn.

>>> from sim.collectives import collective_flows
>>> from sim.engine import simulate
>>> from sim.topology import load_slice
>>> s = load_slice("v5e:2x2")
>>> plan = collective_flows("all-gather", [[(0, 0), (1, 0)]], buffer_bytes=2e6, id_prefix="ag")
>>> loads = link_loads(simulate(s, plan.nodes))
>>> [(lk.src, lk.dst, lk.bytes_carried) for lk in loads.links if lk.bytes_carried]
[((0, 0), (1, 0), 1000000.0), ((1, 0), (0, 0), 1000000.0)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import cm, colormaps, colors
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from aoizora.atomic import write_atomic_with
from sim.records import SimResult

__all__ = ["LinkLoad", "LinkLoadMap", "link_loads", "plot_link_heatmap"]

Coord = tuple[int, ...]

# Arrows of the two directions of one cable sit this far either side of the
# line joining the chips (in chip-pitch units), so both stay visible.
_SIDE_OFFSET = 0.09
_CHIP_RADIUS = 0.18
_WRAP_STUB = 0.42
# Fixed PNG metadata: no matplotlib version or timestamp, byte-identical output.
_PNG_METADATA: dict[str, str | None] = {"Software": None}


@dataclass(frozen=True)
class LinkLoad:
    """What the heatmap draws for one directed link.

    ``busy_fraction`` is ``busy_s / makespan_s`` (0 for an empty run).
    """

    src: Coord
    dst: Coord
    dim: int
    wrap: bool
    bytes_carried: float
    busy_s: float
    busy_fraction: float


@dataclass(frozen=True)
class LinkLoadMap:
    """Every directed link's load, in the simulator's link order."""

    slice_name: str
    shape: tuple[int, ...]
    wraparound: tuple[bool, ...]
    makespan_s: float
    links: tuple[LinkLoad, ...]

    @property
    def max_bytes(self) -> float:
        return max((lk.bytes_carried for lk in self.links), default=0.0)

    def to_json_dict(self) -> dict[str, object]:
        return {
            "slice": self.slice_name,
            "shape": list(self.shape),
            "wraparound": list(self.wraparound),
            "makespan_s": self.makespan_s,
            "links": [
                {
                    "src": list(lk.src),
                    "dst": list(lk.dst),
                    "dim": lk.dim,
                    "wrap": lk.wrap,
                    "bytes_carried": lk.bytes_carried,
                    "busy_s": lk.busy_s,
                    "busy_fraction": lk.busy_fraction,
                }
                for lk in self.links
            ],
        }


def link_loads(result: SimResult) -> LinkLoadMap:
    """The heatmap's numbers, straight from the simulator's link records."""
    span = result.makespan_s
    loads = tuple(
        LinkLoad(
            src=tuple(rec.src),
            dst=tuple(rec.dst),
            dim=rec.dim,
            wrap=rec.wrap,
            bytes_carried=rec.bytes_carried,
            busy_s=rec.busy_s,
            busy_fraction=rec.busy_s / span if span > 0 else 0.0,
        )
        for rec in result.links
    )
    return LinkLoadMap(
        slice_name=result.slice_name,
        shape=tuple(result.shape),
        wraparound=tuple(result.wraparound),
        makespan_s=span,
        links=loads,
    )


def _xy(coord: Coord) -> tuple[float, float]:
    x = float(coord[0])
    y = float(coord[1]) if len(coord) > 1 else 0.0
    return x, y


def _human_bytes(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


def _draw_plane(
    ax: Axes,
    loads: Sequence[LinkLoad],
    shape: tuple[int, ...],
    values: Sequence[float],
    norm: colors.Normalize,
    cmap: colors.Colormap,
) -> None:
    nx = shape[0]
    ny = shape[1] if len(shape) > 1 else 1
    for load, value in zip(loads, values, strict=True):
        (x0, y0), (x1, y1) = _xy(load.src), _xy(load.dst)
        # Direction of travel: towards larger coordinates, or across the wrap
        # link from n-1 to 0 (on a length-2 axis both tests are needed).
        forward = load.dst[load.dim] > load.src[load.dim]
        sign = 1.0 if forward != load.wrap else -1.0
        if load.wrap:
            # Leave the edge chip outwards, in the direction of travel.
            dx, dy = (sign * _WRAP_STUB, 0.0) if load.dim == 0 else (0.0, sign * _WRAP_STUB)
            x1, y1 = x0 + dx, y0 + dy
        # Offset perpendicular to the link; the sign of travel picks the side.
        ox, oy = (0.0, sign * _SIDE_OFFSET) if load.dim == 0 else (-sign * _SIDE_OFFSET, 0.0)
        colour = cmap(norm(value)) if value > 0 else (0.85, 0.85, 0.85, 1.0)
        shrink = _CHIP_RADIUS * 1.05
        length = ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5
        ux, uy = (x1 - x0) / length, (y1 - y0) / length
        start = (x0 + ox + ux * shrink, y0 + oy + uy * shrink)
        tip = 0.0 if load.wrap else shrink
        end = (x1 + ox - ux * tip, y1 + oy - uy * tip)
        ax.annotate(
            "",
            xy=end,
            xytext=start,
            arrowprops={
                "arrowstyle": "-|>",
                "color": colour,
                "lw": 1.0 + 3.0 * float(norm(value)) if value > 0 else 0.8,
                "shrinkA": 0,
                "shrinkB": 0,
                "mutation_scale": 10,
            },
        )
        if load.wrap:
            ax.text(end[0], end[1], "wrap", fontsize=5, ha="center", va="center", color="0.3")
    for x in range(nx):
        for y in range(ny):
            ax.add_patch(
                Circle((x, y), _CHIP_RADIUS, facecolor="white", edgecolor="0.2", lw=1.0, zorder=3)
            )
            ax.text(x, y, f"{x},{y}", fontsize=6, ha="center", va="center", zorder=4)
    pad = 0.7
    ax.set_xlim(-pad, nx - 1 + pad)
    ax.set_ylim(-pad, ny - 1 + pad)
    ax.set_aspect("equal")
    ax.set_xticks(range(nx))
    ax.set_yticks(range(ny))
    ax.set_xlabel("x")
    ax.set_ylabel("y")


def plot_link_heatmap(
    loads: LinkLoadMap, path: str | Path, *, title: str | None = None, dpi: int = 150
) -> Path:
    """Draw ``loads`` to a PNG at ``path`` (bytes | busy fraction, one row per z plane)."""
    out = Path(path)
    shape = loads.shape
    planes = shape[2] if len(shape) == 3 else 1
    nx = shape[0]
    ny = shape[1] if len(shape) > 1 else 1
    panel_w = max(3.2, 0.9 * nx + 1.6)
    panel_h = max(2.6, 0.9 * ny + 1.2)
    fig = Figure(figsize=(2 * panel_w + 1.2, planes * panel_h + 0.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(planes, 2, squeeze=False)
    cmap = colormaps["viridis"]
    metrics = (
        ("bytes carried", [lk.bytes_carried for lk in loads.links], loads.max_bytes),
        ("busy fraction", [lk.busy_fraction for lk in loads.links], 1.0),
    )
    for col, (label, values, vmax) in enumerate(metrics):
        norm = colors.Normalize(vmin=0.0, vmax=vmax if vmax > 0 else 1.0)
        for z in range(planes):
            ax = axes[z][col]
            keep = [
                i
                for i, lk in enumerate(loads.links)
                if lk.dim < 2 and (len(shape) < 3 or lk.src[2] == z)
            ]
            _draw_plane(
                ax,
                [loads.links[i] for i in keep],
                shape,
                [values[i] for i in keep],
                norm,
                cmap,
            )
            sub = label if planes == 1 else f"{label}, z={z}"
            if len(shape) == 3:
                zl = [i for i, lk in enumerate(loads.links) if lk.dim == 2 and lk.src[2] == z]
                top = max((values[i] for i in zl), default=0.0)
                shown = _human_bytes(top) if col == 0 else f"{top:.2f}"
                sub += f" (z links not drawn; max {shown})"
            ax.set_title(sub, fontsize=8)
            bar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.8)
            bar.ax.tick_params(labelsize=6)
    heading = title or f"link load on {loads.slice_name}"
    fig.suptitle(
        f"{heading} -- makespan {loads.makespan_s * 1e6:.4g} us, "
        f"busiest link {_human_bytes(loads.max_bytes)}",
        fontsize=9,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_with(
        out, lambda tmp: fig.savefig(tmp, dpi=dpi, metadata=_PNG_METADATA, format="png")
    )
    return out
