"""Which AoiZora is running, and whether jax/jaxlib/libtpu are the ones a plan was made with.

* :func:`aoizora_version` -- the version in the ``pyproject.toml`` beside the package when
  AoiZora runs from a source tree (``PYTHONPATH=tree`` on a TPU VM: a git checkout, or an
  unpacked ``git archive`` with no ``.git``), else the installed distribution's; ``None``
  when neither says.
* :func:`aoizora_commit` -- the checkout's git commit (12 hex digits, ``+dirty`` when a
  tracked file is modified); for an installed copy, the commit its wheel or sdist was built
  from (``aoizora/_build_commit.txt``, written by setup.py), so a plan or row made with it
  says the same as one made in that checkout; ``None`` for an unpacked archive, a package
  built without git, or without git here: rows then say "no commit"
  (:mod:`aoizora.measure.environment`).
* :func:`version_line` -- what ``aoizora --version`` prints: the version and that commit.
* :data:`PINNED` -- the versions ``pyproject.toml`` pins (a test keeps them equal): compiled
  HLO text, and so every prediction, is checked against these.
* :func:`version_drift` / :func:`warn_version_drift` -- one line naming the packages whose
  running version differs from a plan's provenance (or from the pin) and what may differ.

Nothing here imports jax: it runs before jax starts, and git runs at most once a process.

    >>> print(version_drift({"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"},
    ...       {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.52"},
    ...       against="the plan was made with"))  # doctest: +NORMALIZE_WHITESPACE
    libtpu 0.0.42.1 runs here but the plan was made with 0.0.52: the compiled HLO, and so
    the prediction, may differ
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "BUILD_COMMIT_FILE",
    "LIBTPU_PATH_VARIABLE",
    "PINNED",
    "TRACKED",
    "aoizora_commit",
    "aoizora_version",
    "package_version",
    "running_versions",
    "version_drift",
    "version_line",
    "warn_version_drift",
]

# pyproject.toml's exact pins of the packages that compile the HLO (tests/test_software.py).
PINNED: Mapping[str, str] = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.52"}
# The packages whose versions change the compiled program, in the order they are named.
TRACKED: tuple[str, ...] = ("jax", "jaxlib", "libtpu")
_GIT_TIMEOUT_S = 10.0
_SHORT = 12  # hex digits of a commit: unique in any repository of this size
# The commit a built package records (setup.py writes it; a checkout has none).
BUILD_COMMIT_FILE = "_build_commit.txt"
_BUILD_COMMIT = Path(__file__).with_name(BUILD_COMMIT_FILE)
_COMMIT = re.compile(r"[0-9a-f]{7,40}(\+dirty)?")  # as a plan's provenance.aoizora_commit


def _root() -> Path:
    """The folder above the package: a source tree's root when AoiZora runs from one."""
    return Path(__file__).resolve().parent.parent


def _checkout() -> Path | None:
    """The git checkout AoiZora is imported from (the parent of the package), if any."""
    root = _root()
    return root if (root / ".git").exists() and (root / "pyproject.toml").is_file() else None


def _tree_version(root: Path) -> str | None:
    """The version in ``root/pyproject.toml`` when that file is AoiZora's, else ``None``."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None  # none, or unreadable: not a source tree of ours
    table = project.get("project", {})
    version = table.get("version")
    if table.get("name") != "aoizora" or not isinstance(version, str) or not version.strip():
        return None  # the package vendored inside another project: not its version
    return version.strip()


@functools.cache
def aoizora_version() -> str | None:
    """AoiZora's version: the source tree's ``pyproject.toml``, else the installed metadata.

    The tree comes first, .git or not: the code that runs is the tree's, while the
    metadata may be another copy's (an environment with AoiZora installed from elsewhere,
    running an unpacked archive on ``PYTHONPATH``)."""
    version = _tree_version(_root())
    if version is not None:
        return version
    try:
        return importlib.metadata.version("aoizora")
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git here, or a repository too slow to ask: no commit is claimed
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def aoizora_commit() -> str | None:
    """The checkout's commit, ``+dirty`` when tracked files differ from it; outside a
    checkout, the one a built package recorded (module docstring).

    A plan or row made from a modified tree says so: its numbers may not be the commit's.
    """
    root = _checkout()
    if root is None:
        return _recorded_commit()
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit[:_SHORT] + ("+dirty" if status else "")


def _recorded_commit() -> str | None:
    """The commit setup.py recorded in a built package, ``None`` when it recorded none (or
    the file is not a commit: a damaged install claims nothing)."""
    try:
        text = _BUILD_COMMIT.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _COMMIT.fullmatch(text) else None


def version_line() -> str:
    """``aoizora --version``: the version, and the commit when one is known.

    >>> version_line().startswith("aoizora ")
    True
    """
    line = f"aoizora {aoizora_version() or 'unknown version'}"
    commit = aoizora_commit()
    return f"{line} (commit {commit})" if commit is not None else line


# jax loads the libtpu this names instead of the installed package's (jax's
# _src/cloud_tpu_init.py and the PJRT plugin read it); `aoizora validate --libtpu` sets it
LIBTPU_PATH_VARIABLE = "TPU_LIBRARY_PATH"


def _libtpu_at(path: str) -> str:
    """The version of the libtpu library file ``path``: its wheel's ``.dist-info`` beside
    the package folder holding it (``DIR/libtpu/libtpu.so`` -> ``DIR/libtpu-X.dist-info``),
    else ``"custom (PATH)"``: a library no wheel describes is still not the pin."""
    folder = Path(path).resolve().parent
    for info in sorted(folder.parent.glob("libtpu-*.dist-info")):
        return info.name[len("libtpu-") : -len(".dist-info")]
    return f"custom ({path})"


def package_version(name: str) -> str | None:
    """The running version of ``name`` (one of :data:`TRACKED`; ``None`` when not
    installed). For libtpu, the library jax will load: the one ``$TPU_LIBRARY_PATH`` names
    when set, else the installed package's."""
    if name == "libtpu":
        path = os.environ.get(LIBTPU_PATH_VARIABLE)
        if path:
            return _libtpu_at(path)
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def running_versions() -> dict[str, str | None]:
    """The running versions of :data:`TRACKED` (:func:`package_version`)."""
    return {name: package_version(name) for name in TRACKED}


def version_drift(
    running: Mapping[str, str | None], expected: Mapping[str, str | None], *, against: str
) -> str | None:
    """One line naming each of :data:`TRACKED` whose ``running`` version differs from
    ``expected`` (``against`` says whose they are: "the plan was made with", "AoiZora
    pins"), or ``None`` when all agree. A package ``expected`` lacks is not compared."""
    differ = [
        (name, running.get(name), expected[name])
        for name in TRACKED
        if expected.get(name) is not None and running.get(name) != expected[name]
    ]
    if not differ:
        return None
    have = ", ".join(f"{name} {version or 'missing'}" for name, version, _ in differ)
    want = ", ".join(str(version) for _, _, version in differ)
    verb = "runs" if len(differ) == 1 else "run"
    return (
        f"{have} {verb} here but {against} {want}: the compiled HLO, and so the prediction, "
        f"may differ"
    )


def warn_version_drift(
    command: str, plan_versions: Mapping[str, str | None] | None = None
) -> str | None:
    """Print (stderr) and return :func:`version_drift`'s line for this process: against the
    plan's provenance when given, else against :data:`PINNED`."""
    if plan_versions is not None:
        line = version_drift(running_versions(), plan_versions, against="the plan was made with")
    else:
        line = version_drift(running_versions(), PINNED, against="AoiZora pins")
    if line is not None:
        print(f"aoizora {command}: warning: {line}", file=sys.stderr)
    return line
