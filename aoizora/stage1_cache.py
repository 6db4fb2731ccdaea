"""A persistent cache of Stage-1 estimates, so a repeated plan skips lowering.

Stage 1 lowers every legal candidate (about half a second each for Wan 2.1), which
dominates a warm ``aoizora plan`` once compile results are cached
(:mod:`aoizora.compile`). An estimate depends only on the workload, the candidate,
the chip numbers and the code that lowers and reads it, so the key is a hash of:

* the workload name (model and clip) and the candidate id (mesh, rules, attention),
* the chip numbers Stage 1 uses,
* the installed jax / jaxlib / libtpu versions,
* the source text of every module that shapes the lowered program or reads it
  (``aoizora/workloads``, ``aoizora/stage1``, rules, workload, candidates, compile).

Entries are small JSON files written atomically. The cached estimate keeps every
number but not the prediction DAG's nodes (``nodes=()``): the planner ranks by the
numbers only.

    >>> import tempfile
    >>> from aoizora.stage1.q1 import Stage1Estimate
    >>> cache = Stage1Cache(tempfile.mkdtemp())
    >>> e = Stage1Estimate("c", 1.0, 0.5, 0.5, 10.0, (("x", 2.0),), 64, ())
    >>> cache.put("key", e); cache.get("key") == e
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

__all__ = ["Stage1Cache", "stage1_key"]

_FORMAT = "aoizora.stage1-cache/1"
_PACKAGE_DIR = Path(__file__).resolve().parent
# Modules whose source decides the lowered program or how Stage 1 reads it.
_SOURCES = ("workloads", "stage1", "rules.py", "workload.py", "candidates.py", "compile.py")


@cache
def _code_fingerprint() -> str:
    digest = hashlib.sha256()
    for name in _SOURCES:
        path = _PACKAGE_DIR / name
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            digest.update(str(f.relative_to(_PACKAGE_DIR)).encode())
            digest.update(f.read_bytes())
    for package in ("jax", "jaxlib", "libtpu"):
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "none"
        digest.update(f"{package}={version}".encode())
    return digest.hexdigest()


def stage1_key(*, workload_name: str, candidate_id: str, slice_name: str, chip: ChipLike) -> str:
    """The cache key of one candidate's estimate (hex sha256)."""
    payload = {
        "code": _code_fingerprint(),
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
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _to_json(estimate: Stage1Estimate) -> dict[str, Any]:
    data = asdict(estimate)
    data["nodes"] = []
    data["format"] = _FORMAT
    return data


def _from_json(data: dict[str, Any]) -> Stage1Estimate:
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


class Stage1Cache:
    """Stage-1 estimates on disk under ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Stage1Estimate | None:
        """The cached estimate, or None (missing, unreadable or another format)."""
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") != _FORMAT:
                return None
            return _from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, estimate: Stage1Estimate) -> None:
        """Store ``estimate`` (without its DAG nodes) atomically."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(_to_json(estimate), sort_keys=True), encoding="utf-8")
        tmp.replace(path)  # atomic: a concurrent planner never reads half a file
