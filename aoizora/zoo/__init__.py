"""A program zoo: JAX programs of the families users bring, at sizes drawn from a seed.

Every program is a workload: ``aoizora plan --workload aoizora.zoo:p017 --slice v5e:1x1``
plans the zoo's program 17 (:data:`~aoizora.zoo.draw.DEFAULT_SEED`). The zoo exists to test
the compute model on programs it was never fitted on: the rows measured on a chip are split
once by :func:`~aoizora.zoo.draw.split` into a fit half and a held-out half
(validation/README.md, "The program zoo").

    >>> from aoizora.zoo import program
    >>> program(17).family in {"dit", "decoder", "mlp", "conv", "hybrid"}
    True
"""

from __future__ import annotations

import re

from aoizora.workloads.base import Workload
from aoizora.zoo.draw import DEFAULT_SEED, SPLIT_SEED, Program, catalog, program, split
from aoizora.zoo.families import build

__all__ = ["DEFAULT_SEED", "SPLIT_SEED", "Program", "catalog", "program", "split", "workload"]

_ID = re.compile(r"p(\d{3,})")


def workload(item: Program) -> Workload:
    """The workload of the zoo's program ``item``."""
    return build(item.family, item.config())


def __getattr__(name: str) -> object:
    """``aoizora.zoo.p017``: a factory of program 17's workload (``--workload`` calls it)."""
    match = _ID.fullmatch(name)
    if match is None:
        raise AttributeError(f"module 'aoizora.zoo' has no attribute {name!r}")
    item = program(int(match.group(1)))

    def factory() -> Workload:
        return workload(item)

    factory.__name__ = name
    factory.__doc__ = f"The zoo's {item.family} program {item.id}: {dict(item.params)}"
    return factory
