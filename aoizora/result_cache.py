"""Persistent caches of the planner's results, so a repeated plan skips the work.

Two kinds of entry, both small JSON files written atomically under one directory:

* **Stage-1 estimates** (``stage1/``). Stage 1 lowers every legal candidate
  (about half a second each for Wan 2.1). An estimate depends only on the
  workload, the candidate, the chip numbers and the code that lowers and reads
  it, so :func:`stage1_key` hashes exactly those: the workload name (model and
  clip), the candidate id, the chip numbers, the jax/jaxlib/libtpu versions and
  the source of every module that shapes the lowered program or reads it. The
  cached estimate keeps every number but not the DAG's nodes (``nodes=()``).
* **Q2 step times** (``q2/``). A replay depends on the compiled program, the
  slice (shape, wrap-around, chip and link numbers) and the placement's network
  footprint (:func:`aoizora.planner.network_footprint`), and on the replay and
  simulator code; :func:`q2_key` hashes those.

Compile results have their own cache in :mod:`aoizora.compile`.

    >>> import tempfile
    >>> from aoizora.stage1.q1 import Stage1Estimate
    >>> cache = JsonCache(tempfile.mkdtemp())
    >>> e = Stage1Estimate("c", 1.0, 0.5, 0.5, 10.0, (("x", 2.0),), 64, ())
    >>> cache.put("key", estimate_to_json(e)); estimate_from_json(cache.get("key")) == e
    True
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from aoizora.stage1.q1 import ChipLike, Stage1Estimate
from sim.topology import Slice

__all__ = [
    "JsonCache",
    "code_fingerprint",
    "estimate_from_json",
    "estimate_to_json",
    "q2_key",
    "stage1_key",
]

_FORMAT = "aoizora.result-cache/1"
_PACKAGE_DIR = Path(__file__).resolve().parent
_ROOT = _PACKAGE_DIR.parent
# Sources (relative to the repository root) whose code decides each kind of result.
STAGE1_SOURCES = (
    "aoizora/workloads",
    "aoizora/stage1",
    "aoizora/rules.py",
    "aoizora/workload.py",
    "aoizora/candidates.py",
    "aoizora/compile.py",
)
Q2_SOURCES = ("aoizora/hlo", "aoizora/replay.py", "sim")


@cache
def code_fingerprint(sources: tuple[str, ...]) -> str:
    """Hash of the given source files/folders and of the jax/jaxlib/libtpu versions."""
    digest = hashlib.sha256()
    for name in sources:
        path = _ROOT / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            digest.update(str(f.relative_to(_ROOT)).encode())
            digest.update(f.read_bytes())
    for package in ("jax", "jaxlib", "libtpu"):
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "none"
        digest.update(f"{package}={version}".encode())
    return digest.hexdigest()


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def stage1_key(*, workload_name: str, candidate_id: str, slice_name: str, chip: ChipLike) -> str:
    """The cache key of one candidate's estimate (hex sha256)."""
    payload = {
        "code": code_fingerprint(STAGE1_SOURCES),
        "workload": workload_name,
        "candidate": candidate_id,
        "slice": slice_name,
        "chip": [
            chip.bf16_flops_per_s,
            chip.hbm_bytes,
            chip.hbm_bandwidth_bytes_per_s,
            chip.link_bandwidth_bytes_per_s,
            chip.hop_latency_s,
        ],
    }
    return _digest(payload)


def q2_key(*, hlo_text: str, slice_: Slice, footprint: tuple[object, ...]) -> str:
    """The cache key of one replay: program, network and placement footprint (hex sha256)."""
    chip = slice_.chip
    payload = {
        "code": code_fingerprint(Q2_SOURCES),
        "hlo": hashlib.sha256(hlo_text.encode()).hexdigest(),
        "slice": [list(slice_.shape), list(slice_.wraparound)],
        "chip": [
            chip.bf16_flops_per_s,
            chip.hbm_bandwidth_bytes_per_s,
            slice_.link_bandwidth_bytes_per_s,
            slice_.hop_latency_s,
        ],
        "footprint": repr(footprint),
    }
    return _digest(payload)


def estimate_to_json(estimate: Stage1Estimate) -> dict[str, Any]:
    """An estimate as JSON data, without its DAG nodes."""
    data = asdict(estimate)
    data["nodes"] = []
    return data


def estimate_from_json(data: dict[str, Any]) -> Stage1Estimate:
    """Inverse of :func:`estimate_to_json` (``nodes=()``)."""
    return Stage1Estimate(
        candidate_id=data["candidate_id"],
        q1_s=data["q1_s"],
        compute_s=data["compute_s"],
        comm_s=data["comm_s"],
        flops_per_chip=data["flops_per_chip"],
        comm_bytes_per_axis=tuple((a, b) for a, b in data["comm_bytes_per_axis"]),
        memory_bytes_per_chip=data["memory_bytes_per_chip"],
        nodes=(),
        comm_s_per_axis=tuple((a, t) for a, t in data["comm_s_per_axis"]),
        hbm_traffic_bytes_per_chip=data["hbm_traffic_bytes_per_chip"],
        argument_bytes_per_chip=data["argument_bytes_per_chip"],
        warnings=tuple(data["warnings"]),
    )


class JsonCache:
    """JSON values on disk under ``directory`` (created on first write), one file a key."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored value, or None (missing, unreadable or another format)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            return None
        value = data.get("value")
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Store ``value`` atomically (a concurrent planner never reads half a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"format": _FORMAT, "value": value}, sort_keys=True))
        tmp.replace(path)
