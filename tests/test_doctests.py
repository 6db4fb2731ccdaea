"""The examples in every docstring of aoizora and sim are real: run them all.

Modules are discovered, not listed, so a new module's examples run without
anyone remembering to add it here.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import aoizora
import sim


def _modules() -> list[str]:
    names: list[str] = []
    for package in (aoizora, sim):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue  # running it would start the CLI
            names.append(info.name)
    return sorted(names)


MODULES = _modules()


def test_every_package_module_is_collected() -> None:
    assert "sim.engine" in MODULES and "aoizora.planner" in MODULES
    assert "aoizora.hlo.graph" in MODULES and "aoizora.stage1.q1" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
