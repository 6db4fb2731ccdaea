"""The planner's one error hierarchy.

Every error raised on bad user input is an :class:`AoizoraError`; the CLI turns
them into one clear line on stderr and exit code 2 -- 3 for a :class:`ResourceError`
(the machine's memory or a worker process gave out, not the input).
"""

from __future__ import annotations

__all__ = [
    "AoizoraError",
    "HloParseError",
    "WorkloadError",
    "CandidateError",
    "CompileError",
    "ExportError",
    "MeasureError",
    "PlacementError",
    "PlanError",
    "DoesNotFit",
    "ResourceError",
    "MemoryBoundExceeded",
    "WorkerDied",
    "ServingError",
    "ValidationError",
    "PackageClash",
]


class AoizoraError(Exception):
    """Base class of every error the planner raises on bad input."""

    exit_code = 2  # what the CLI exits with


class ResourceError(AoizoraError):
    """The machine gave out, not the input: a phase would exceed the memory bound, or a
    worker process died. The message names the phase, the slice and what to change."""

    exit_code = 3


class MemoryBoundExceeded(ResourceError):
    """The command's processes together reached the memory bound (``--max-memory-gb``)."""


class WorkerDied(ResourceError):
    """A worker process of a fan-out pool died (a signal, e.g. the kernel's OOM killer's
    SIGKILL; an exit; a MemoryError) before it returned its task's result."""


class HloParseError(AoizoraError):
    """Compiled HLO text could not be read; the message names the line."""


class WorkloadError(AoizoraError):
    """A model config, clip shape or user workload is invalid."""


class CandidateError(AoizoraError):
    """A sharding candidate is illegal (the message gives the reason)."""


class CompileError(AoizoraError):
    """Lowering or compiling a candidate failed."""


class PlacementError(AoizoraError):
    """A device order or placement does not fit the slice or the mesh."""


class PlanError(AoizoraError):
    """A plan file is malformed or does not match the given devices."""


class DoesNotFit(PlanError):
    """No sharding of a program fits the slice's memory. ``fits`` names what would (a
    bigger slice, a setting), or is empty when nothing tried does."""

    def __init__(self, message: str, *, fits: str = "") -> None:
        super().__init__(message)
        self.fits = fits


class ExportError(AoizoraError):
    """A plan cannot be exported to a serving stack (the message names the nearest that can)."""


class ValidationError(AoizoraError):
    """A measurement file is malformed."""


class MeasureError(AoizoraError):
    """A measurement on devices cannot run as asked (no TPU, devices that are not the plan's)."""


class ServingError(AoizoraError):
    """A serving question cannot be answered as asked (a rate, trace, price or objective)."""


class PackageClash(AoizoraError, ImportError):
    """Another package of the same top-level name (``sim``) shadows one of AoiZora's; the
    message names both locations. An ImportError too: importing AoiZora fails."""
