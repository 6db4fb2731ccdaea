"""What one device of a plan's configuration holds: ``memory`` in a plan file.

Every configuration a plan records (its winner, each alternative, the VAE's plan) may
carry its per-device HBM beside its time, under the same three fields:

* ``hbm_bytes_per_chip`` -- arguments + outputs + the peak of temporaries + generated
  code - what outputs alias, in bytes, on one device (one TensorCore chiplet of a tpu7x
  chip; one chip elsewhere);
* ``budget_bytes`` -- what the runtime lets one device's programs hold (the generation's
  ``usable_hbm_bytes``, measured where a chip was, else its nominal HBM);
* ``source`` -- ``"compiled"``: the compiled program's own memory analysis (libtpu AOT,
  no TPU needed); ``"buffer_assignment"``: XLA's buffer assignment of the program, read
  before code generation (:mod:`aoizora.buffer_assignment`: arguments + outputs +
  temporaries, exactly as the compile allocates them, without the generated code);
  ``"stage1"``: Stage 1's estimate of the lowered program (its schedule and buffer live
  ranges, docs/stage1.md "Memory"), for programs neither compiled nor assigned.

    >>> m = PlanMemory(hbm_bytes_per_chip=8_000_000_000, budget_bytes=16_909_336_064,
    ...                source="stage1")
    >>> PlanMemory.from_json(m.to_json(), "memory") == m, round(m.fraction, 3)
    (True, 0.473)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aoizora.errors import PlanError
from aoizora.plan.fields import json_object

__all__ = ["MEMORY_SOURCES", "PlanMemory"]

# Where a memory figure comes from: the compiled program's analysis or Stage 1's estimate.
MEMORY_SOURCES: tuple[str, ...] = ("compiled", "buffer_assignment", "stage1")
_KEYS = ("budget_bytes", "hbm_bytes_per_chip", "source")


@dataclass(frozen=True)
class PlanMemory:
    """One configuration's per-device HBM, the budget it is held against, and its source."""

    hbm_bytes_per_chip: int
    budget_bytes: int
    source: str

    def __post_init__(self) -> None:
        for name in ("hbm_bytes_per_chip", "budget_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(
                    f"memory.{name} is {value!r}; it must be a whole number of bytes >= 0, "
                    "e.g. 8000000000"
                )
        if self.source not in MEMORY_SOURCES:
            raise PlanError(f"memory.source is {self.source!r}; allowed: {list(MEMORY_SOURCES)}")

    @property
    def fraction(self) -> float:
        """``hbm_bytes_per_chip / budget_bytes`` (infinite for a zero budget)."""
        return self.hbm_bytes_per_chip / self.budget_bytes if self.budget_bytes else float("inf")

    @property
    def fits(self) -> bool:
        return self.hbm_bytes_per_chip <= self.budget_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "hbm_bytes_per_chip": self.hbm_bytes_per_chip,
            "budget_bytes": self.budget_bytes,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, value: Any, where: str) -> PlanMemory:
        data = json_object(value, where, _KEYS)
        try:
            return cls(
                hbm_bytes_per_chip=data["hbm_bytes_per_chip"],
                budget_bytes=data["budget_bytes"],
                source=data["source"],
            )
        except PlanError as exc:
            raise PlanError(f"{where}: {exc}") from None

    @classmethod
    def compiled(cls, total_bytes: float, budget_bytes: float) -> PlanMemory:
        """A compiled program's figure (``MemoryUsage.total_bytes``) against a budget."""
        return cls(int(total_bytes), int(budget_bytes), "compiled")

    def cell(self) -> str:
        """``7.45 GiB (47 %)``: the tables' memory column.

        >>> PlanMemory(8_000_000_000, 16_909_336_064, "compiled").cell()
        '7.45 GiB (47 %)'
        """
        return f"{self.hbm_bytes_per_chip / 2**30:.2f} GiB ({100 * self.fraction:.0f} %)"

    def line(self) -> str:
        """``7.45 GiB of 15.75 GiB per device (47 %, stage1)``: the reports' memory text.

        >>> PlanMemory(8_000_000_000, 16_909_336_064, "stage1").line()
        '7.45 GiB of 15.75 GiB per device (47 %, stage1)'
        """
        return (
            f"{self.hbm_bytes_per_chip / 2**30:.2f} GiB of {self.budget_bytes / 2**30:.2f} GiB "
            f"per device ({100 * self.fraction:.0f} %, {self.source})"
        )
