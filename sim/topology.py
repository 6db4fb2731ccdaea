"""TPU chips and slices: the physical network the simulator runs on.

A :class:`Slice` is a rectangle (2D) or box (3D) of chips with one directed
:class:`Link` per neighbour pair and direction, plus wrap-around links on the
dimensions that have them. Chip data (bandwidth, latency, FLOP/s, HBM, the
wrap-around rule) lives in ``topologies/<generation>.toml`` with a source beside
every number.

Coordinates are tuples ``(x, y)`` or ``(x, y, z)``; chips are numbered the way
libtpu numbers v5e chips, x fastest: ``physical_id = x + X*y (+ X*Y*z)``.

Examples
--------
>>> s = load_slice("v5e:2x4")
>>> s.shape, s.num_chips, s.wraparound
((2, 4), 8, (False, False))
>>> s.physical_id((1, 2)), s.coord_of(5)
(5, (1, 2))
>>> len(s.links)  # 2 directions x (1*4 x-pairs + 2*3 y-pairs)
20
>>> load_slice("v5e:8x16").wraparound  # only the full-length (16) axis wraps
(False, True)
>>> m = make_slice((4, 4), wraparound=True, link_bandwidth_bytes_per_s=4.5e10, hop_latency_s=1e-6)
>>> len(m.links)
64
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.chipfile import MAX_CHIPS
from sim.chips import Chip, generations, load_chip, shipped_topologies_dir, topologies_dir
from sim.coords import on_shape
from sim.errors import TopologyError

__all__ = [
    "Chip",
    "Link",
    "Slice",
    "generations",
    "load_chip",
    "load_slice",
    "make_slice",
    "parse_slice_spec",
    "shipped_topologies_dir",
    "topologies_dir",
]

Coord = tuple[int, ...]


@dataclass(frozen=True)
class Link:
    """One directed ICI link from chip ``src`` to neighbour ``dst`` along ``dim``.

    ``wrap`` is True for the wrap-around link that joins the two ends of a
    dimension (coordinate ``n-1`` to ``0`` or back).
    """

    src: Coord
    dst: Coord
    dim: int
    wrap: bool


@dataclass(frozen=True)
class Slice:
    """A frozen slice: shape, per-dimension wrap-around, chips and directed links.

    Build one with :func:`load_slice` or :func:`make_slice`. ``coords`` lists
    every chip in canonical order (x fastest); ``links`` lists every directed
    link, sorted by (src physical id, dim, direction). Equality and hashing
    use (name, chip, shape, wraparound) only; coords and links follow from them.
    """

    name: str
    chip: Chip
    shape: tuple[int, ...]
    wraparound: tuple[bool, ...]
    coords: tuple[Coord, ...] = field(compare=False, repr=False)
    links: tuple[Link, ...] = field(compare=False, repr=False)
    # Lookup tables built once in make_slice; not part of the value.
    _link_ids: dict[Link, int] = field(compare=False, repr=False, default_factory=dict)
    _cache: dict[Any, Any] = field(compare=False, repr=False, default_factory=dict)

    @property
    def num_chips(self) -> int:
        """Number of chips, the product of ``shape``."""
        return len(self.coords)

    def with_chip(self, chip: Chip) -> Slice:
        """The same slice with ``chip``'s numbers (e.g. another attention kernel selected)."""
        return make_slice(self.shape, wraparound=list(self.wraparound), chip=chip, name=self.name)

    @property
    def num_devices(self) -> int:
        """Number of devices libtpu exposes: chips times ``chip.devices_per_chip``.

        >>> load_slice("tpu7x:2x2x1").num_devices, load_slice("v5e:2x4").num_devices
        (8, 8)
        """
        return self.num_chips * self.chip.devices_per_chip

    @property
    def num_dims(self) -> int:
        """2 for a 2D mesh/torus, 3 for a 3D one."""
        return len(self.shape)

    @property
    def link_bandwidth_bytes_per_s(self) -> float:
        """One-way bandwidth of every link (all links are equal)."""
        return self.chip.link_bandwidth_bytes_per_s

    @property
    def hop_latency_s(self) -> float:
        """Latency paid per hop before a flow's bytes start to drain."""
        return self.chip.hop_latency_s

    @property
    def spec(self) -> str:
        """The slice spec :func:`parse_slice_spec` reads back into this slice.

        >>> load_slice("v5e:4x4", wraparound=[True, False]).spec
        'v5e:4x4+wrap=10'
        >>> load_slice("v5e:8x16").spec  # the generation's own wrap-around
        'v5e:8x16'
        """
        if self.wraparound == self.chip.default_wraparound(self.shape):
            return self.name
        if all(self.wraparound):
            return f"{self.name}+wrap"
        return f"{self.name}+wrap=" + "".join("1" if w else "0" for w in self.wraparound)

    def contains(self, coord: Sequence[int]) -> bool:
        """True when ``coord`` names a chip of this slice."""
        return on_shape(coord, self.shape)

    def physical_id(self, coord: Sequence[int]) -> int:
        """Chip number of ``coord``, x fastest (libtpu's v5e numbering).

        >>> load_slice("v5e:4x4").physical_id((1, 2))
        9
        """
        if not self.contains(coord):
            raise TopologyError(
                f"coordinate {tuple(coord)!r} is not on slice {self.name} of shape "
                f"{self.shape}; each entry must satisfy 0 <= c < n, e.g. {self.coords[-1]!r}"
            )
        pid = 0
        stride = 1
        for c, n in zip(coord, self.shape, strict=True):
            pid += c * stride
            stride *= n
        return pid

    def coord_of(self, physical_id: int) -> Coord:
        """Coordinate of chip number ``physical_id`` (inverse of :meth:`physical_id`).

        >>> load_slice("v5e:4x4").coord_of(9)
        (1, 2)
        """
        if not isinstance(physical_id, int) or not 0 <= physical_id < self.num_chips:
            raise TopologyError(
                f"physical id {physical_id!r} is not on slice {self.name}; valid ids are "
                f"0..{self.num_chips - 1}"
            )
        return self.coords[physical_id]

    def device_coord(self, device_id: int) -> Coord:
        """Coordinate of the chip hosting libtpu device ``device_id``.

        libtpu numbers the devices of a chip consecutively: ``device id =
        devices_per_chip * chip id + core`` (docs/facts.md, libtpu AOT topologies).
        With one device per chip this is :meth:`coord_of`.

        >>> s = load_slice("tpu7x:2x2x1")
        >>> [s.device_coord(i) for i in (0, 1, 2, 7)]
        [(0, 0, 0), (0, 0, 0), (1, 0, 0), (1, 1, 0)]
        """
        if not isinstance(device_id, int) or not 0 <= device_id < self.num_devices:
            raise TopologyError(
                f"device id {device_id!r} is not on slice {self.name}; valid ids are "
                f"0..{self.num_devices - 1} ({self.chip.devices_per_chip} per chip)"
            )
        return self.coords[device_id // self.chip.devices_per_chip]

    def link_id(self, link: Link) -> int:
        """Position of ``link`` in :attr:`links` (the engine indexes links by it)."""
        try:
            return self._link_ids[link]
        except KeyError:
            raise TopologyError(f"{link!r} is not a link of slice {self.name}") from None


_SHAPE_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")


def _parse_name(name: str) -> tuple[str, tuple[int, ...]]:
    known = generations()
    if not isinstance(name, str) or ":" not in name:
        raise TopologyError(
            f"slice name {name!r} must look like '<generation>:<shape>', e.g. 'v5e:2x4' or "
            f"'v5p:2x2x4'; generations: {', '.join(known)}"
        )
    generation, shape_text = name.split(":", 1)
    if generation not in known:
        raise TopologyError(
            f"unknown chip generation {generation!r} in slice name {name!r}; valid "
            f"generations: {', '.join(known)}"
        )
    if not _SHAPE_RE.match(shape_text):
        raise TopologyError(
            f"malformed shape {shape_text!r} in slice name {name!r}; write positive "
            "dimensions joined by 'x', e.g. 'v5e:2x4', 'v5e:6x6' or 'v5p:2x2x4'"
        )
    return generation, tuple(int(n) for n in shape_text.split("x"))


def _normalise_wrap(
    shape: tuple[int, ...], wraparound: bool | Sequence[bool], *, where: str
) -> tuple[bool, ...]:
    if isinstance(wraparound, bool):
        flags = tuple(wraparound for _ in shape)
    else:
        flags = tuple(wraparound)
        if len(flags) != len(shape) or not all(isinstance(f, bool) for f in flags):
            raise TopologyError(
                f"{where}: wraparound {wraparound!r} must be one bool or one bool per "
                f"dimension of shape {shape}, e.g. {[False] * len(shape)!r}"
            )
    # A wrap link on a length-1 dimension would be a self-loop; there is none.
    return tuple(f and n > 1 for f, n in zip(flags, shape, strict=True))


def load_slice(name: str, *, wraparound: Sequence[bool] | bool | None = None) -> Slice:
    """Resolve a slice name such as ``"v5e:2x4"`` into a :class:`Slice`.

    Hypothetical shapes are allowed as long as the generation could hold them
    (right number of dimensions, within its pod). Wrap-around follows the
    generation's rule unless ``wraparound`` (one bool or one per dimension)
    overrides it.

    >>> load_slice("v5e:6x6").wraparound
    (False, False)
    >>> load_slice("v5e:4x4", wraparound=[True, False]).wraparound
    (True, False)
    >>> load_slice("v5p:2x2x4").num_chips
    16
    >>> load_slice("v5e:2x2x2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.TopologyError: shape (2, 2, 2) has 3 dimensions but v5e slices have 2 ...
    """
    generation, shape = _parse_name(name)
    chip = load_chip(generation)
    pod = "x".join(str(n) for n in chip.pod_shape)
    example = f"'{generation}:{'x'.join(['2'] * (chip.num_dims - 1) + ['4'])}'"
    if len(shape) != chip.num_dims:
        raise TopologyError(
            f"shape {shape} has {len(shape)} dimensions but {generation} slices have "
            f"{chip.num_dims} (pod {pod}); e.g. {example}"
        )
    # Orientation is free (a 16x24x16 v5p box is a 16x16x24 one turned), so
    # compare sorted dimensions.
    if any(a > b for a, b in zip(sorted(shape), sorted(chip.pod_shape), strict=True)):
        raise TopologyError(
            f"shape {shape} does not fit in a {generation} pod ({pod}); every dimension must "
            f"fit the pod's, e.g. {example}; use make_slice(...) for shapes beyond one pod"
        )
    wrap = (
        chip.default_wraparound(shape)
        if wraparound is None
        else _normalise_wrap(shape, wraparound, where=name)
    )
    return make_slice(
        shape,
        wraparound=list(wrap),
        link_bandwidth_bytes_per_s=chip.link_bandwidth_bytes_per_s,
        hop_latency_s=chip.hop_latency_s,
        chip=chip,
        name=name,
    )


_SPEC_RE = re.compile(r"^(?P<name>[^+]+?)(?:\+wrap(?:=(?P<flags>[01]+))?)?$")


def parse_slice_spec(spec: str) -> Slice:
    """A slice spec: ``NAME``, ``NAME+wrap`` (every dimension wrapped) or
    ``NAME+wrap=FLAGS`` (one 0/1 per dimension) -> :class:`Slice`.

    The what-if override: the same chips with (or without) wrap-around links.

    >>> parse_slice_spec("v5e:4x4+wrap=10").wraparound
    (True, False)
    >>> parse_slice_spec("v5e:4x4+wrap").wraparound
    (True, True)
    >>> parse_slice_spec("v5e:4x4+wrap=1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.TopologyError: v5e:4x4: wraparound [True] must be one bool or one bool ...
    """
    m = _SPEC_RE.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise TopologyError(
            f"slice spec {spec!r} is not NAME[+wrap[=FLAGS]]; e.g. 'v5e:4x4', 'v5e:4x4+wrap' "
            f"or 'v5e:4x4+wrap=10' (FLAGS: one 0/1 per dimension)"
        )
    name, flags = m.group("name"), m.group("flags")
    if "+wrap" not in spec:
        return load_slice(name)
    if flags is None:
        return load_slice(name, wraparound=True)
    return load_slice(name, wraparound=[f == "1" for f in flags])


def _adhoc_chip(num_dims: int, link_bandwidth_bytes_per_s: float, hop_latency_s: float) -> Chip:
    # A made-up chip for ad-hoc meshes: only the network numbers matter; the
    # compute/HBM numbers are NaN so nobody mistakes them for real data.
    nan = math.nan
    return Chip(
        generation="custom",
        bf16_flops_per_s=nan,
        hbm_bytes=nan,
        hbm_bandwidth_bytes_per_s=nan,
        link_bandwidth_bytes_per_s=link_bandwidth_bytes_per_s,
        hop_latency_s=hop_latency_s,
        ports=2 * num_dims,
        num_dims=num_dims,
        pod_shape=(),
        wrap_rule="full_axis",
        wrap_length=0,
    )


def make_slice(
    shape: Sequence[int],
    *,
    wraparound: bool | Sequence[bool] = False,
    link_bandwidth_bytes_per_s: float | None = None,
    hop_latency_s: float | None = None,
    chip: Chip | None = None,
    name: str | None = None,
) -> Slice:
    """Build an ad-hoc mesh/torus of any 1D-3D ``shape``.

    With ``chip`` given, its bandwidth and latency are the defaults; an
    explicit ``link_bandwidth_bytes_per_s`` / ``hop_latency_s`` overrides them.
    Without ``chip`` both are required.

    >>> s = make_slice([3, 2], link_bandwidth_bytes_per_s=1e9, hop_latency_s=0.0)
    >>> s.name, len(s.links)
    ('3x2', 14)
    """
    shp = tuple(shape)
    if not 1 <= len(shp) <= 3 or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in shp
    ):
        raise TopologyError(
            f"shape {tuple(shape)!r} must be 1 to 3 positive integers, e.g. [4, 4] or [2, 2, 4]"
        )
    if math.prod(shp) > MAX_CHIPS:  # every chip and link is built: a typo must not hang
        raise TopologyError(
            f"shape {shp} has {math.prod(shp)} chips; at most {MAX_CHIPS} are simulated"
        )
    wrap = _normalise_wrap(shp, wraparound, where=f"shape {shp}")
    if chip is None:
        if link_bandwidth_bytes_per_s is None or hop_latency_s is None:
            raise TopologyError(
                "make_slice without chip= needs link_bandwidth_bytes_per_s and hop_latency_s, "
                "e.g. make_slice([4, 4], link_bandwidth_bytes_per_s=4.5e10, hop_latency_s=1e-6)"
            )
        base = _adhoc_chip(len(shp), float(link_bandwidth_bytes_per_s), float(hop_latency_s))
    else:
        base = chip
    bandwidth = (
        base.link_bandwidth_bytes_per_s
        if link_bandwidth_bytes_per_s is None
        else float(link_bandwidth_bytes_per_s)
    )
    latency = base.hop_latency_s if hop_latency_s is None else float(hop_latency_s)
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise TopologyError(
            f"link_bandwidth_bytes_per_s={bandwidth!r} must be a positive finite number, "
            "e.g. 4.5e10"
        )
    if not (math.isfinite(latency) and latency >= 0):
        raise TopologyError(
            f"hop_latency_s={latency!r} must be a non-negative finite number, e.g. 1e-6"
        )
    if (bandwidth, latency) != (base.link_bandwidth_bytes_per_s, base.hop_latency_s):
        base = dataclasses.replace(
            base, link_bandwidth_bytes_per_s=bandwidth, hop_latency_s=latency
        )
    coords = _canonical_coords(shp)
    links = _build_links(shp, wrap, coords)
    return Slice(
        name=name if name is not None else "x".join(str(n) for n in shp),
        chip=base,
        shape=shp,
        wraparound=wrap,
        coords=coords,
        links=links,
        _link_ids={link: i for i, link in enumerate(links)},
    )


def _canonical_coords(shape: tuple[int, ...]) -> tuple[Coord, ...]:
    # x fastest: physical id = x + X*y + X*Y*z.
    out: list[Coord] = []
    total = math.prod(shape)
    for pid in range(total):
        coord = []
        rest = pid
        for n in shape:
            coord.append(rest % n)
            rest //= n
        out.append(tuple(coord))
    return tuple(out)


def _build_links(
    shape: tuple[int, ...], wrap: tuple[bool, ...], coords: tuple[Coord, ...]
) -> tuple[Link, ...]:
    links: list[Link] = []
    for src in coords:
        for dim, n in enumerate(shape):
            for step in (+1, -1):
                pos = src[dim] + step
                crosses = pos < 0 or pos >= n
                if crosses and not wrap[dim]:
                    continue
                if n == 1:
                    continue
                dst = src[:dim] + (pos % n,) + src[dim + 1 :]
                links.append(Link(src=src, dst=dst, dim=dim, wrap=crosses))
    return tuple(links)
