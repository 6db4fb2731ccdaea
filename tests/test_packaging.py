"""An installed AoiZora runs outside the checkout (issue 57).

``python -m build --no-isolation`` writes the sdist and, built from that sdist, the wheel
(so the sdist holds everything a build needs: the C core's sources and ``topologies/``).
The wheel goes into one fresh venv and the sdist, built again by pip with no C compiler
(``CC=false``), into another; each venv reaches the dependencies this interpreter has
through a ``.pth`` naming its site-packages, so nothing is downloaded (``pip install
--no-index --no-deps``). From a folder outside the checkout each venv, and the checkout
itself, run ``aoizora --version``, a small ``aoizora plan`` (the tiny Wan on one chip,
its compile read from the suite's compile seed), ``aoizora validate`` on the collective
rows of ``validation/measurements.csv`` and ``python -m sim demo``; the plan files are the
same bytes, provenance included (the packages carry the commit they were built from).

On the 2-core development machine at load 5: 50 s (the build 9 s, each plan 5-6 s, each
validation 6-7 s, the sdist's install with its failed compile 4 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sim.engine import compiled_core
from tests.aoizora.compile_seed import seed_compiles
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
PLAN = ["plan", "--model", "wan-tiny", "--resolution", "384x384", "--frames", "9"]
PLAN += ["--slice", "v5e:1x1", "--no-clip", "--workers", "1", "--quiet"]
GATE = ["--min-spearman", "0.9", "--min-top1", "1", "--max-mape", "35"]
FALLBACK = "the compiled event core is unavailable"
PIP_INSTALL = ["install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
# The chip-file override would hide whether the package ships its own; the fallback note
# is printed once a process tree, and a parent's would silence the child's.
_DROPPED = ("AOIZORA_TOPOLOGIES_DIR", "SIM_CORE_FALLBACK_NOTED")
# Paths of one machine that nothing shipped may name (README, docs and what ships).
SHIPPED = ("aoizora", "sim", "topologies", "docs", "examples", "benchmarks", "README.md")
MACHINE_PATH = re.compile(r"(?<![\w.~])/(root|home|work|tmp|Users|mnt)/")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    """Run ``cmd``; its stdout, or a failure naming the command and its stderr."""
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def _outside_env(**overrides: str) -> dict[str, str]:
    """This environment without the checkout on PYTHONPATH nor a chip-file override."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    paths = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p]
    kept = [p for p in paths if Path(p).resolve() != ROOT]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    env.update(overrides)
    return env


def _fresh_venv(folder: Path) -> Path:
    """A venv without pip that sees this interpreter's site-packages after its own."""
    venv.EnvBuilder(with_pip=False).create(folder)
    python = folder / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        folder,
        _outside_env(),
    ).strip()
    Path(purelib, "aoizora-test-deps.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n", encoding="utf-8"
    )
    return python


def _install(python: Path, artifact: Path, **env: str) -> None:
    """pip (this interpreter's) installs ``artifact`` into ``python``'s venv, offline."""
    pip = [sys.executable, "-m", "pip", "--python", str(python), *PIP_INSTALL, str(artifact)]
    _run(pip, artifact.parent, _outside_env(**env))


_WHERE = (
    "import json, aoizora, sim, sim.chips, sim.engine; print(json.dumps([aoizora.__file__, "
    "sim.__file__, str(sim.chips.shipped_topologies_dir()), sim.engine.core_status()]))"
)


@dataclass
class Session:
    """What one install did from a folder outside the checkout."""

    package: Path  # aoizora/__init__.py
    simulator: Path  # sim/__init__.py
    chips: Path  # the shipped chip files' folder
    core: str  # sim.engine.core_status()
    version: str  # aoizora --version
    plan: bytes  # the plan file
    report: dict[str, Any]  # aoizora validate --json
    demo: str  # python -m sim demo: stdout
    demo_err: str  # and stderr


def _session(
    python: list[str], aoizora: list[str], folder: Path, env: dict[str, str], rows: Path
) -> Session:
    """Run the commands of the module docstring from ``folder`` (a new folder)."""
    folder.mkdir()
    cache = folder / "cache"
    seed_compiles(cache)  # libtpu's result for the plan's one compile
    package, simulator, chips, core = json.loads(_run([*python, "-c", _WHERE], folder, env))
    version = _run([*aoizora, "--version"], folder, env).strip()
    _run([*aoizora, *PLAN, "--cache-dir", str(cache), "--out", "plan.json"], folder, env)
    report = json.loads(
        _run(
            [*aoizora, "validate", str(rows), *GATE, "--json", "--cache-dir", str(cache)],
            folder,
            env,
        )
    )
    demo = subprocess.run(
        [*python, "-m", "sim", "demo"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return Session(
        Path(package),
        Path(simulator),
        Path(chips),
        core,
        version,
        (folder / "plan.json").read_bytes(),
        report,
        demo.stdout,
        demo.stderr,
    )


def _collective_rows(path: Path) -> Path:
    """The shipped set's collective rows (its step rows compile for minutes)."""
    from aoizora.studies.validation import format_measurements, read_measurements

    rows = read_measurements(ROOT / "validation" / "measurements.csv")
    path.write_text(format_measurements(r for r in rows if r.kind == "collective"))
    return path


def _build(out: Path) -> tuple[Path, Path]:
    """The sdist and, built from it, the wheel (``python -m build``, no download)."""
    assert importlib.util.find_spec("build"), "the dev extra installs build (make test)"
    _run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        ROOT,
        _outside_env(),
    )
    (sdist,) = out.glob("aoizora-*.tar.gz")
    (wheel,) = out.glob("aoizora-*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_built_packages_run_outside_the_checkout(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)
    rows = _collective_rows(outside / "collective-rows.csv")
    sdist, wheel = _build(tmp_path / "dist")
    checkout = _session(
        [sys.executable],
        [sys.executable, "-m", "aoizora"],
        outside / "checkout",
        child_env(drop=_DROPPED),
        rows,
    )
    assert checkout.chips == ROOT / "topologies"
    runs = {}
    for name, artifact, env in (("wheel", wheel, {}), ("sdist", sdist, {"CC": "false"})):
        python = _fresh_venv(tmp_path / f"venv-{name}")
        _install(python, artifact, **env)
        run = _session(
            [str(python)], [str(python.parent / "aoizora")], outside / name, _outside_env(), rows
        )
        for path in (run.package, run.simulator, run.chips):  # the installed copy's
            assert path.resolve().is_relative_to(python.parent.parent.resolve()), (name, path)
        assert run.chips.name == "_topologies"
        assert run.version == checkout.version and run.version.startswith("aoizora 0."), name
        assert run.plan == checkout.plan, (name, _plan_difference(run.plan, checkout.plan))
        assert run.report == checkout.report and run.report["passed"] is True, name
        assert run.demo == checkout.demo, name
        runs[name] = run
    # The wheel runs the compiled core where the checkout does; the sdist, built without
    # a compiler, runs the pure-Python core and says so in one line.
    compiled = compiled_core()[0] is not None
    assert ("compiled event core is built" in runs["wheel"].core) == compiled
    assert FALLBACK in runs["sdist"].core and runs["sdist"].demo_err.count(FALLBACK) == 1
    assert FALLBACK not in runs["wheel"].demo_err or not compiled


def _plan_difference(a: bytes, b: bytes) -> list[str]:
    """The top-level keys of two plan files whose values differ."""
    one, other = json.loads(a), json.loads(b)
    return sorted(k for k in one.keys() | other.keys() if one.get(k) != other.get(k))


_FAKE_SIM = "VERSION = 'not the simulator'\n"


def test_a_clashing_sim_package_fails_naming_both(tmp_path: Path) -> None:
    """Another top-level ``sim`` first on sys.path: importing aoizora names both folders."""
    fake = tmp_path / "site" / "sim"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(_FAKE_SIM, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "import aoizora.cli"],
        cwd=tmp_path,
        env=child_env(fake.parent),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("aoizora.errors.PackageClash: 'import sim' finds ")
    assert str(fake / "__init__.py") in last and str(ROOT / "sim") in last
    assert "pip uninstall" in last


def test_the_checkout_finds_its_sim() -> None:
    import aoizora
    import sim

    beside = Path(aoizora.__file__).resolve().parent.parent / "sim"
    assert Path(sim.__file__).resolve().parent == beside


_CHIPS = "import sim.chips as c; print(c.shipped_topologies_dir(), c.load_chip('v5e').ports)"


def test_the_chip_files_are_the_trees_else_the_packaged_copy(tmp_path: Path) -> None:
    """``sim`` beside a source tree reads its ``topologies/``; installed, it reads the copy
    setup.py put in ``sim/_topologies``; with neither, one line names both folders."""
    site_dir = tmp_path / "site"
    shutil.copytree(ROOT / "sim", site_dir / "sim", ignore=shutil.ignore_patterns("__pycache__"))
    env = child_env(site_dir, drop=_DROPPED)

    def chips() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _CHIPS], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    missing = chips()
    assert missing.returncode == 1
    assert "TopologyError: chip data directory not found: neither " in missing.stderr
    assert str(site_dir / "topologies") in missing.stderr
    assert str(site_dir / "sim" / "_topologies") in missing.stderr
    packaged = site_dir / "sim" / "_topologies"
    shutil.copytree(ROOT / "topologies", packaged)
    assert chips().stdout.split() == [str(packaged), "4"]
    shutil.copytree(ROOT / "topologies", site_dir / "topologies")
    (site_dir / "pyproject.toml").write_text("", encoding="utf-8")  # now a source tree
    assert chips().stdout.split() == [str(site_dir / "topologies"), "4"]


def test_version_prints_the_version_and_commit(capsys: pytest.CaptureFixture[str]) -> None:
    from aoizora.cli import main
    from aoizora.software import aoizora_commit, aoizora_version

    assert main(["--version"]) == 0
    line = capsys.readouterr().out.strip()
    commit = aoizora_commit()
    assert line == f"aoizora {aoizora_version()}" + (f" (commit {commit})" if commit else "")
    with pytest.raises(SystemExit) as done:  # the parser's option, after another one
        main(["--version", "--help"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == line


def test_shipped_files_name_no_path_of_one_machine() -> None:
    """What ships (and the docs) says commands and paths relative to the repository."""
    found = []
    for name in SHIPPED:
        base = ROOT / name
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for path in files:
            if path.suffix not in {".py", ".md", ".toml", ".json", ".c", ".h", ".txt"}:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if MACHINE_PATH.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)
