"""TPU chip generations: their numbers, read from ``topologies/<generation>.toml``.

A :class:`Chip` holds one generation's compute, memory and link numbers, its
wrap-around rule and its compute model's parameters (:mod:`sim.compute`), each read
from the generation's topology file with a ``source`` beside every number.
:mod:`sim.topology` builds slices of them.

Files are looked up in ``$AOIZORA_TOPOLOGIES_DIR`` first (e.g. a directory of
calibrated files, ``aoizora ... --topology-dir DIR``), then in the shipped files
(:func:`shipped_topologies_dir`): the top-level ``topologies/`` of the source tree the
``sim`` package is imported from (a checkout, an editable install), else the copy an
installed wheel carries in ``sim/_topologies/`` (setup.py puts it there). A directory that
holds only ``tpu7x.toml`` overrides Ironwood and leaves every other generation shipped.

>>> c = load_chip("v5e")
>>> c.ports, c.num_dims, c.link_bandwidth_bytes_per_s, c.devices_per_chip
(4, 2, 45000000000.0, 1)
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.chipfile import MAX_COUNT, check_value, is_count, key_lines
from sim.compute import IDEAL, ComputeModel, ComputeParams
from sim.compute_table import parse_compute_params, sourced_value
from sim.errors import TopologyError

__all__ = ["Chip", "generations", "load_chip", "shipped_topologies_dir", "topologies_dir"]

# Environment override for the data directory (e.g. calibrated files). A source checkout,
# an editable install and an installed wheel find the shipped files without it.
_TOPOLOGIES_ENV = "AOIZORA_TOPOLOGIES_DIR"
# The folder inside the ``sim`` package where a built package carries the top-level
# topologies/ (setup.py copies it there at build time; git holds only topologies/).
_PACKAGED_TOPOLOGIES = "_topologies"
_WRAP_KINDS = ("full_axis", "cube_multiple")


@dataclass(frozen=True)
class Chip:
    """One TPU chip generation's numbers (see ``topologies/<generation>.toml``).

    ``link_bandwidth_bytes_per_s`` is ONE-WAY per link; a link pair (both
    directions) carries twice that. ``wrap_rule`` is ``"full_axis"`` (an axis
    wraps when its length equals ``wrap_length``, v5e/v6e) or
    ``"cube_multiple"`` (every axis wraps when every length is a multiple of
    ``wrap_length``, v4/v5p/tpu7x).

    Compute, HBM and HBM bandwidth are per chip. ``devices_per_chip`` is how many
    devices libtpu and JAX expose per chip (two TensorCore chiplets on tpu7x);
    :meth:`per_device` gives one device's share. The network is chips: the
    devices of one chip share its links.

    >>> c = load_chip("v5e")
    >>> c.ports, c.num_dims, c.link_bandwidth_bytes_per_s, c.devices_per_chip
    (4, 2, 45000000000.0, 1)
    """

    generation: str
    bf16_flops_per_s: float
    hbm_bytes: float
    hbm_bandwidth_bytes_per_s: float
    link_bandwidth_bytes_per_s: float
    hop_latency_s: float
    ports: int
    num_dims: int
    pod_shape: tuple[int, ...]
    wrap_rule: str
    wrap_length: int
    devices_per_chip: int = 1
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    # Fixed start-up cost of one collective (sim.collectives), fitted to
    # measurements where there are any (topologies/<generation>.toml).
    collective_overhead_s: float = 0.0
    # How kernels run: MXU tile and efficiencies (sim.compute; [compute] of the file).
    compute: ComputeParams = IDEAL
    # The HBM a program may use on one chip: the runtime's allocator limit, measured where
    # a chip was (``memory_stats()["bytes_limit"]``); 0 where never measured (then the
    # nominal hbm_bytes stands in: :attr:`memory_budget_bytes`).
    usable_hbm_bytes: float = 0.0

    @property
    def memory_budget_bytes(self) -> float:
        """What one chip's (or, after :meth:`per_device`, one device's) programs may hold:
        the measured allocator limit, else the nominal HBM.

        >>> load_chip("v5e").memory_budget_bytes  # the runtime's limit on a v5e chip
        16909336064.0
        >>> load_chip("v6e").memory_budget_bytes == load_chip("v6e").hbm_bytes  # unmeasured
        True
        """
        return self.usable_hbm_bytes if self.usable_hbm_bytes > 0 else self.hbm_bytes

    def compute_model(self) -> ComputeModel:
        """The compute model of one device of this chip (call on :meth:`per_device`)."""
        return ComputeModel(self.bf16_flops_per_s, self.hbm_bandwidth_bytes_per_s, self.compute)

    def per_device(self) -> Chip:
        """One device's numbers: compute, HBM and HBM bandwidth split between the devices.

        Compiled programs and their memory are per device; links stay the chip's.

        >>> d = load_chip("tpu7x").per_device()
        >>> d.bf16_flops_per_s, d.hbm_bytes / 2**30, d.devices_per_chip
        (1153500000000000.0, 96.0, 1)
        >>> load_chip("v5e").per_device() == load_chip("v5e")
        True
        """
        n = self.devices_per_chip
        if n == 1:
            return self
        return dataclasses.replace(
            self,
            bf16_flops_per_s=self.bf16_flops_per_s / n,
            hbm_bytes=self.hbm_bytes / n,
            usable_hbm_bytes=self.usable_hbm_bytes / n,
            hbm_bandwidth_bytes_per_s=self.hbm_bandwidth_bytes_per_s / n,
            devices_per_chip=1,
        )

    def default_wraparound(self, shape: Sequence[int]) -> tuple[bool, ...]:
        """The wrap-around a real slice of this ``shape`` has, per dimension.

        >>> load_chip("v5e").default_wraparound((8, 16))
        (False, True)
        >>> load_chip("v5p").default_wraparound((4, 4, 8))
        (True, True, True)
        >>> load_chip("v5p").default_wraparound((2, 2, 4))
        (False, False, False)
        """
        if self.wrap_rule == "full_axis":
            return tuple(n == self.wrap_length for n in shape)
        whole_cubes = all(n % self.wrap_length == 0 for n in shape)
        return tuple(whole_cubes for _ in shape)


def shipped_topologies_dir() -> Path:
    """The shipped chip files: ``topologies/`` of the source tree above the ``sim`` package
    (a checkout, an editable install), else the installed package's ``sim/_topologies/``."""
    root = Path(__file__).resolve().parent.parent
    tree = root / "topologies"
    if tree.is_dir() and (root / "pyproject.toml").is_file():
        return tree
    packaged = Path(str(resources.files(__package__ or "sim") / _PACKAGED_TOPOLOGIES))
    if packaged.is_dir():
        return packaged
    raise TopologyError(
        f"chip data directory not found: neither {str(tree)!r} (a source tree's) nor "
        f"{str(packaged)!r} (an installed package's) exists; the package must ship its "
        f"topologies/: reinstall it (e.g. pip install --force-reinstall aoizora), run from a "
        f"checkout, or set ${_TOPOLOGIES_ENV} to a folder of <generation>.toml files"
    )


def _override_dir() -> Path | None:
    override = os.environ.get(_TOPOLOGIES_ENV)
    if not override:
        return None
    path = Path(override)
    if not path.is_dir():
        raise TopologyError(
            f"${_TOPOLOGIES_ENV}={override!r} is not a directory; point it at a folder of "
            "<generation>.toml files (e.g. calibrated ones) or unset it"
        )
    return path


def topologies_dir(generation: str | None = None) -> Path:
    """The directory a generation's file is read from (without one: the override, else
    the shipped folder).

    ``$AOIZORA_TOPOLOGIES_DIR`` wins for the generations it has a file for.
    """
    override = _override_dir()
    if override is not None and (generation is None or (override / f"{generation}.toml").is_file()):
        return override
    return shipped_topologies_dir()


def generations() -> tuple[str, ...]:
    """Chip generations with a data file (shipped or in the override directory), sorted.

    >>> generations()
    ('tpu7x', 'v4', 'v5e', 'v5p', 'v6e')
    """
    names = {p.stem for p in shipped_topologies_dir().glob("*.toml")}
    override = _override_dir()
    if override is not None:
        names |= {p.stem for p in override.glob("*.toml") if "." not in p.stem}
    return tuple(sorted(names))


def _number(
    data: Mapping[str, Any], key: str, path: Path, line: int | None = None
) -> tuple[Any, str]:
    value, source = sourced_value(data, key, path)
    check_value(key, value, f"{path}:{line}" if line else str(path))  # type, finite, counts
    return value, source


@cache
def _load_chip_cached(generation: str, directory: str) -> Chip:
    path = Path(directory) / f"{generation}.toml"
    try:
        text = path.read_bytes().decode("utf-8")
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TopologyError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise TopologyError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    sources: list[tuple[str, str]] = []
    lines = key_lines(text)

    def num(key: str) -> Any:
        value, source = _number(data, key, path, lines.get(key))
        sources.append((key, source))
        return value

    bf16 = float(num("bf16_flops_per_s"))
    hbm = float(num("hbm_bytes"))
    hbm_bw = float(num("hbm_bandwidth_bytes_per_s"))
    link_bw = float(num("link_bandwidth_bytes_per_s"))
    latency = float(num("hop_latency_s"))
    overhead = float(num("collective_overhead_s"))
    ports = int(num("ports"))
    num_dims = int(num("num_dims"))
    pod_shape = tuple(int(n) for n in num("pod_shape"))
    # Optional: generations without the key have one device per chip.
    devices = int(num("devices_per_chip")) if "devices_per_chip" in data else 1
    # Optional: where a chip was measured, what its runtime lets programs allocate.
    usable = float(num("usable_hbm_bytes")) if "usable_hbm_bytes" in data else 0.0
    if usable < 0 or usable > hbm:
        raise TopologyError(
            f"{path}: usable_hbm_bytes = {usable!r} must lie in (0, hbm_bytes = {hbm!r}], "
            "e.g. the memory_stats()['bytes_limit'] a chip's runtime reports"
        )
    rule = data.get("wrap_rule")
    if (
        not isinstance(rule, dict)
        or rule.get("kind") not in _WRAP_KINDS
        or not is_count(rule.get("length"))
    ):
        at = lines.get("kind") or lines.get("length")
        raise TopologyError(
            f"{path}{f':{at}' if at else ''}: [wrap_rule] needs kind one of {_WRAP_KINDS}, "
            f"a length (a whole number from 1 to {MAX_COUNT}) and a source; got {rule!r}"
        )
    sources.append(("wrap_rule", str(rule.get("source", ""))))
    if (
        min(bf16, hbm, hbm_bw, link_bw, devices) <= 0
        or min(latency, overhead) < 0
        or len(pod_shape) != num_dims
    ):
        raise TopologyError(f"{path}: numbers must be positive and pod_shape must have num_dims")
    return Chip(
        generation=str(data.get("generation", generation)),
        bf16_flops_per_s=bf16,
        hbm_bytes=hbm,
        hbm_bandwidth_bytes_per_s=hbm_bw,
        link_bandwidth_bytes_per_s=link_bw,
        hop_latency_s=latency,
        ports=ports,
        num_dims=num_dims,
        pod_shape=pod_shape,
        wrap_rule=str(rule["kind"]),
        wrap_length=int(rule["length"]),
        devices_per_chip=devices,
        sources=tuple(sources),
        collective_overhead_s=overhead,
        compute=parse_compute_params(data.get("compute"), path),
        usable_hbm_bytes=usable,
    )


def load_chip(generation: str) -> Chip:
    """Load one chip generation's numbers from its ``<generation>.toml``.

    >>> load_chip("v6e").link_bandwidth_bytes_per_s
    90000000000.0
    >>> load_chip("v9")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.TopologyError: unknown chip generation 'v9'; valid generations: tpu7x, v4, ...
    """
    known = generations()
    if generation not in known:
        raise TopologyError(
            f"unknown chip generation {generation!r}; valid generations: {', '.join(known)}"
        )
    return _load_chip_cached(generation, str(topologies_dir(generation)))
