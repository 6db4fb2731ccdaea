"""The examples in sim's docstrings are real: run them."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "sim",
    "sim.topology",
    "sim.routing",
    "sim.engine",
    "sim.collectives",
    "sim.records",
    "sim.flowfile",
    "sim.demo",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
