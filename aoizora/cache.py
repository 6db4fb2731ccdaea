"""Every persistent cache of the planner, with one key scheme, so a repeated plan skips work.

Six kinds of entry live under one cache directory (``--cache-dir``), one JSON file
a key, written atomically:

* ``stage1/`` -- Stage-1 estimates. An estimate depends on the workload (model and
  clip), the candidate, the slice and its chip numbers, and the code that lowers and
  reads the program (:data:`SOURCES` ``["stage1"]``).
* ``compiled/`` -- compile results (HLO text, costs, memory; gzipped). A compile
  depends on the StableHLO (read :func:`install_neutral`: not where the packages are
  installed), the target, the device order and the jax/jaxlib/libtpu versions. jax's
  own persistent cache (``jax_compilation_cache_dir``) cannot serve libtpu AOT
  compiles: reading an entry back fails with "PjRtCompiler must be constructed with a
  Client to call DeserializeLoadedExecutable" (checked with jax 0.10.2 + libtpu
  0.0.52; docs/facts.md, libtpu AOT topologies), and the planner needs only the
  compile's products.
* ``q2/`` -- simulated step times. A replay depends on the compiled program, the
  slice (shape, wrap-around, chip and link numbers), the placement's network
  footprint (:func:`aoizora.replay.network_footprint`) and the replay and simulator
  code (:data:`SOURCES` ``["q2"]``, its C event core included).
* ``links/`` -- the link utilisation of a what-if winner's full replay
  (:mod:`aoizora.studies.whatif`): the same inputs as a replay, keyed by the
  device order itself, and the code that reads the simulator's link records.
* ``shardy/`` -- a candidate's program after Shardy's passes, as MLIR bytecode:
  what Stage 1 reads. It depends on the workload, the candidate, what the lowering
  depends on in the target (:func:`shardy_key`) and the code that lowers and runs
  the passes (:data:`SOURCES` ``["shardy"]``), not on Q1's code or the chip's
  numbers: a v6e slice reads what a v5e slice of its shape stored, and a change to
  Q1 re-scores without lowering again.
* ``search/`` -- placement-search reports (:mod:`aoizora.rank.search_cache`). A
  report depends on every job searched (its program, mesh, placement tree and
  given orders), the slice, the search's switches and the code that bounds,
  walks and replays (:data:`SOURCES` ``["search"]``); the deadline it ran under
  is stored beside it, not in the key, so a longer deadline can resume it.

The one key scheme: :func:`cache_key` hashes the kind's format tag, the versions,
the fingerprint of the kind's source files and the kind's own parts.

    >>> import tempfile
    >>> cache = JsonCache(tempfile.mkdtemp())
    >>> key = cache_key("q2", "some program", "some footprint")
    >>> cache.put(key, {"step_time_s": 0.5}); cache.get(key)
    {'step_time_s': 0.5}
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from aoizora.atomic import write_atomic
from aoizora.software import package_version
from sim.topology import Slice

__all__ = [
    "SOURCES",
    "JsonCache",
    "PlanCaches",
    "cache_key",
    "code_fingerprint",
    "compile_key",
    "links_key",
    "lowered_key",
    "plan_caches",
    "q2_key",
    "search_key",
    "shardy_key",
    "stage1_key",
    "versions",
]

_FORMAT = "aoizora.result-cache/1"
_ROOT = Path(__file__).resolve().parent.parent
# Format tag of each kind; bump one to invalidate that kind's entries.
_KINDS = {
    "stage1": "aoizora.stage1-cache/3",
    "compiled": "aoizora.compile-cache/1",
    "q2": "aoizora.q2-cache/2",
    "lowered": "aoizora.lowered-index/1",
    "shardy": "aoizora.shardy-module/1",
    "search": "aoizora.search-cache/1",
    "links": "aoizora.link-utilisation/2",
}
# Sources (relative to the repository root) whose code decides each kind of result.
# A compile result depends only on the StableHLO and the versions, not on our code.
SOURCES: dict[str, tuple[str, ...]] = {
    "stage1": (
        "aoizora/workloads",
        "aoizora/candidates",
        "aoizora/stage1",
        "aoizora/tpu.py",
        "aoizora/compile.py",
        # Q1 prices collectives with the simulator's closed forms on the best box,
        # and kernels with its compute model.
        "sim/costs.py",
        "sim/compute.py",
        "sim/routing.py",
        "sim/topology.py",
    ),
    "compiled": (),
    "q2": ("aoizora/hlo", "aoizora/replay.py", "aoizora/rank/exact.py", "sim"),
    # What a candidate lowers to: the workload code, the candidate and mesh building.
    "lowered": ("aoizora/workloads", "aoizora/candidates", "aoizora/tpu.py", "aoizora/compile.py"),
    # What Stage 1 reads: that lowering after Shardy's passes (aoizora/stage1/shardy.py).
    "shardy": (
        "aoizora/workloads",
        "aoizora/candidates",
        "aoizora/tpu.py",
        "aoizora/compile.py",
        "aoizora/stage1/shardy.py",
    ),
    # What a search finds: its tree and bounds, the replays it asks for, the simulator.
    "search": ("aoizora/rank", "aoizora/placement", "aoizora/hlo", "aoizora/replay.py", "sim"),
    "links": ("aoizora/hlo", "aoizora/replay.py", "aoizora/studies/whatif.py", "sim"),
}


@cache
def versions() -> str:
    """``jax=...,jaxlib=...,libtpu=...``: compiled programs change between releases."""
    import jax

    parts = [f"jax={jax.__version__}"]
    for dist in ("jaxlib", "libtpu"):  # libtpu: the library jax loads (aoizora.software)
        parts.append(f"{dist}={package_version(dist) or 'none'}")
    return ",".join(parts)


# Python, and the C of sim's compiled event core (sim/_flowcore.c): a change to
# either may change a simulated step time.
_SOURCE_SUFFIXES = (".py", ".c", ".h")


@cache
def code_fingerprint(sources: tuple[str, ...]) -> str:
    """Hash of the given source files/folders (``""`` for no sources)."""
    if not sources:
        return ""
    digest = hashlib.sha256()
    for name in sources:
        path = _ROOT / name
        files = (
            sorted(f for f in path.rglob("*") if f.suffix in _SOURCE_SUFFIXES)
            if path.is_dir()
            else [path]
        )
        for f in files:
            digest.update(str(f.relative_to(_ROOT)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()


def cache_key(kind: str, *parts: str) -> str:
    """The key of one entry of ``kind``: sha256 over the format tag, the versions, the
    code fingerprint of ``SOURCES[kind]`` (when not empty) and ``parts``, NUL-separated."""
    if kind not in _KINDS:
        raise ValueError(f"unknown cache kind {kind!r}; one of {sorted(_KINDS)}")
    head = [_KINDS[kind], versions()]
    fingerprint = code_fingerprint(SOURCES[kind])
    if fingerprint:
        head.append(fingerprint)
    return hashlib.sha256("\0".join((*head, *parts)).encode()).hexdigest()


def _chip_numbers(slice_: Slice) -> str:
    chip = slice_.chip
    return json.dumps(
        [
            chip.bf16_flops_per_s,
            chip.hbm_bytes,
            chip.memory_budget_bytes,
            chip.hbm_bandwidth_bytes_per_s,
            slice_.link_bandwidth_bytes_per_s,
            slice_.hop_latency_s,
            # how kernels run: MXU tile, efficiencies, the attention kernel (sim.compute)
            list(map(str, chip.compute.key())),
        ]
    )


def stage1_key(*, workload_name: str, candidate_id: str, slice_: Slice) -> str:
    """The key of one candidate's Stage-1 estimate."""
    return cache_key("stage1", workload_name, candidate_id, slice_.name, _chip_numbers(slice_))


# A Pallas kernel's Mosaic module rides in its custom call's backend_config as base64 MLIR
# bytecode (jax ``_src/tpu_custom_call.py``), and the bytecode's debug locations name the
# kernel's source file: the site-packages of the environment that traced it.
_KERNEL_BODY = re.compile(r"(\\22body\\22: \\22)([A-Za-z0-9+/=]+)(\\22)")
# The same body in compiled HLO text: the custom call's backend_config printed as JSON.
_COMPILED_KERNEL_BODY = re.compile(r'("body":")([A-Za-z0-9+/=]+)(")')


def install_neutral(lowered_text: str) -> str:
    """``lowered_text`` with each Pallas kernel body replaced by the digest of the kernel
    printed without debug locations (in lowered StableHLO, and in compiled HLO text, whose
    custom calls carry the same bytecode).

    Two environments (a venv moved, another checkout) lower one program to text that
    differs only in the source paths inside the kernels' bytecode, so a compile key
    over the raw text missed every cached compile. The key needs only to tell programs
    apart; the compile itself uses the raw text. A body MLIR cannot read is kept as is.

    >>> install_neutral("no kernel here")
    'no kernel here'
    """
    from jaxlib.mlir import ir
    from jaxlib.mosaic.python import tpu  # Mosaic's dialect (its memory spaces)

    def neutral(m: re.Match[str]) -> str:
        try:
            ctx = ir.Context()
            tpu.register_dialect(ctx)
            ctx.allow_unregistered_dialects = True
            with ctx:
                module = ir.Module.parse(base64.b64decode(m.group(2), validate=True))
                asm = str(module.operation.get_asm(enable_debug_info=False))
        except Exception:  # noqa: BLE001 - not bytecode MLIR reads: keep the raw body
            return m.group(0)
        return m.group(1) + "sha256:" + hashlib.sha256(asm.encode()).hexdigest() + m.group(3)

    return _COMPILED_KERNEL_BODY.sub(neutral, _KERNEL_BODY.sub(neutral, lowered_text))


def compile_key(
    *,
    lowered_text: str,
    slice_name: str,
    backend: str,
    order: Sequence[int],
    legacy: bool = False,
) -> str:
    """The key of one compile: the target, the device order and the StableHLO (made
    :func:`install_neutral`; ``legacy=True`` gives the raw-text key of caches filled
    before, which the compile step still reads)."""
    text = lowered_text if legacy else install_neutral(lowered_text)
    return cache_key("compiled", slice_name, backend, ",".join(map(str, order)), text)


def lowered_key(
    *, workload: str, candidate: str, slice_name: str, backend: str, order: Sequence[int]
) -> str:
    """The key of a candidate's entry in the lowered-program index: which
    :func:`compile_key` its lowering gives, so a warm run need not lower it again.

    ``workload`` is its ``cache_id`` (name, shapes, rules, program fingerprint),
    ``candidate`` its JSON; the code that lowers is in the code fingerprint.
    """
    return cache_key("lowered", workload, candidate, slice_name, backend, ",".join(map(str, order)))


def shardy_key(*, workload: str, candidate: str, target: str) -> str:
    """The key of a candidate's module after Shardy's passes (``shardy/``).

    ``workload`` is its ``cache_id``, ``candidate`` its JSON, ``target`` what the
    lowering depends on besides them (:func:`aoizora.compile.lowering_target`: the
    backend, the lowering family of the chip and the mesh's device order). Not the
    slice's name: v5e and v6e slices of one shape share the entry, because jax lowers
    a program alike for them (docs/facts.md, Shardy from Python).
    """
    return cache_key("shardy", workload, candidate, target)


def _network(slice_: Slice) -> tuple[str, str, str]:
    """Shape and wrap-around, chip and link numbers, the per-collective overhead."""
    network = json.dumps([list(slice_.shape), list(slice_.wraparound)])
    overhead = repr(slice_.chip.collective_overhead_s)  # sim.collectives pays it per collective
    return network, _chip_numbers(slice_), overhead


def q2_key(*, hlo_text: str, slice_: Slice, footprint: tuple[object, ...]) -> str:
    """The key of one replay: program, network and placement footprint."""
    network, chips, overhead = _network(slice_)
    program = hashlib.sha256(hlo_text.encode()).hexdigest()
    return cache_key("q2", program, network, chips, overhead, repr(footprint))


def links_key(*, hlo_text: str, slice_: Slice, physical_ids: Sequence[int]) -> str:
    """The key of one full replay's link utilisation: program, network, device order."""
    program = hashlib.sha256(hlo_text.encode()).hexdigest()
    return cache_key("links", program, *_network(slice_), ",".join(map(str, physical_ids)))


def search_key(
    *,
    jobs: Sequence[str],
    slice_: Slice,
    per_job: bool,
    batch_size: int,
    algorithm: str | Mapping[str, str] | None,
    probes: int = 64,
    budget: int | None = None,
) -> str:
    """The key of one placement search: each job's identity (a string naming its
    program digest, mesh, tree and given orders: :func:`aoizora.rank.search_cache.job_identity`),
    the slice's network and the search's switches, its work budget (``None``: none)
    included. The deadline is not part of it."""
    switches = json.dumps(
        {
            "per_job": per_job, "batch_size": batch_size, "algorithm": algorithm,
            "probes": probes, "budget": budget,
        },
        sort_keys=True,
    )  # fmt: skip
    return cache_key("search", *_network(slice_), switches, *jobs)


class JsonCache:
    """JSON values on disk under ``directory`` (created on first write), one file a key.

    ``compress=True`` gzips the files (compile results carry the HLO text).
    """

    def __init__(self, directory: str | os.PathLike[str], *, compress: bool = False) -> None:
        self.directory = Path(directory)
        self.compress = compress

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / (f"{key}.json.gz" if self.compress else f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value, or None (missing, unreadable or another format)."""
        path = self._path(key)
        try:
            raw = gzip.decompress(path.read_bytes()) if self.compress else path.read_bytes()
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError, EOFError):
            return None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return None
        value = data.get("value")
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` atomically (a concurrent planner never reads half a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = json.dumps({"format": _FORMAT, "value": value}, sort_keys=True).encode("utf-8")
        # mtime=0: the same value gives the same bytes.
        write_atomic(path, gzip.compress(raw, mtime=0) if self.compress else raw)


@dataclass(frozen=True)
class PlanCaches:
    """The caches of one cache directory."""

    stage1: JsonCache
    compiled: JsonCache
    q2: JsonCache
    search: JsonCache
    links: JsonCache
    shardy: JsonCache
    buffers: JsonCache


def plan_caches(cache_dir: str | os.PathLike[str]) -> PlanCaches:
    """``stage1/``, ``compiled/`` (gzipped), ``q2/``, ``search/`` (gzipped: a
    report lists every placement it replayed), ``links/``, ``shardy/`` (gzipped) and
    ``buffers/`` (XLA's buffer assignments, :mod:`aoizora.buffer_assignment`) under
    ``cache_dir``."""
    root = Path(cache_dir)
    return PlanCaches(
        stage1=JsonCache(root / "stage1"),
        compiled=JsonCache(root / "compiled", compress=True),
        q2=JsonCache(root / "q2"),
        search=JsonCache(root / "search", compress=True),
        links=JsonCache(root / "links"),
        shardy=JsonCache(root / "shardy", compress=True),
        buffers=JsonCache(root / "buffers"),
    )
