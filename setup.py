"""The build steps pyproject.toml cannot declare: the compiled event core, and the data
and commit a built package carries.

``sim._flowcore`` (``sim/_flowcore.c`` and the units below it, :data:`CORE_UNITS`, in
layers: ``_flowcore.c`` comment) is plain C with no dependency beyond the Python headers;
``pip install -e .`` (``make bootstrap``) compiles it in place. It is
optional: without a C compiler the install still succeeds, ``make
bootstrap`` prints one line saying so (and ``make core`` retries),
:func:`sim.engine.simulate` runs the pure-Python reference core with the
same line on the ``sim`` logger (same results, slower), and
``tests/sim/test_compiled.py`` fails so that CI notices.
``-ffp-contract=off``: no fused multiply-add, or the doubles would stop
matching the Python reference bit for bit.

A wheel (and so an sdist, whose wheel is built from it) carries what a checkout reads
beside the packages: the chip files of the top-level ``topologies/`` (their one source;
MANIFEST.in puts them in the sdist) go to ``sim/_topologies/`` (:func:`sim.chips.
shipped_topologies_dir`), and the commit the package was built from to
``aoizora/_build_commit.txt`` (:func:`aoizora.software.aoizora_commit`): the checkout's,
or the one the sdist recorded. An editable install reads the checkout and needs neither.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# The core's C units, top layer first; each but _flowcore has a header (sim/_flow*.h).
CORE_UNITS = ("_flowcore", "_flowshare", "_flowclass", "_flowwhole", "_flowclock", "_flowvec")
TOPOLOGIES = "topologies"  # the chip files, at the top of the tree
PACKAGED_TOPOLOGIES = ("sim", "_topologies")  # where a built package carries them


def _software() -> ModuleType:
    """aoizora/software.py of this tree, loaded alone (it imports nothing of the package)."""
    spec = importlib.util.spec_from_file_location("_aoizora_software", HERE / "aoizora/software.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_commit(package: Path) -> None:
    """Record this tree's commit in the ``aoizora`` package folder ``package`` (nothing when
    there is none to record)."""
    software = _software()
    commit = software.aoizora_commit()
    target = package / software.BUILD_COMMIT_FILE
    target.unlink(missing_ok=True)  # an sdist's tree links its files to the source's
    if commit is not None:
        target.write_text(commit + "\n", encoding="utf-8")


class BuildPy(build_py):
    """build_py, then the chip files and the commit into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # the checkout's own topologies/ and git are read in place
        out = Path(self.build_lib)
        chips = out.joinpath(*PACKAGED_TOPOLOGIES)
        chips.mkdir(parents=True, exist_ok=True)
        for source in sorted((HERE / TOPOLOGIES).glob("*.toml")):
            shutil.copyfile(source, chips / source.name)
        _write_commit(out / "aoizora")


class Sdist(sdist):
    """sdist, recording the commit the tree came from (an sdist has no .git)."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        _write_commit(Path(base_dir) / "aoizora")


setup(
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
    ext_modules=[
        Extension(
            "sim._flowcore",
            sources=[f"sim/{unit}.c" for unit in CORE_UNITS],
            depends=[f"sim/{unit}.h" for unit in CORE_UNITS[1:]] + ["sim/_flownet.h"],
            extra_compile_args=["-ffp-contract=off"],
            optional=True,
        )
    ],
)
