"""The video clip a workload is built for and a plan is made for.

One :class:`Clip` serves the whole pipeline: the CLI parses it
(:func:`aoizora.workloads.wan.parse_resolution`), the workload is built for it
and the plan file records it. Only what holds for any clip is checked here
(positive integer sizes); a model's own rules -- Wan's multiples of 16 and
``4k+1`` frames, its latent and token grid -- live with the model
(:func:`aoizora.workloads.wan.check_wan_clip`).

    >>> clip = Clip(832, 480, 81)
    >>> clip, clip.label
    (Clip(width=832, height=480, frames=81), '832x480x81')
    >>> Clip(832, 0, 81)
    Traceback (most recent call last):
    ...
    aoizora.errors.WorkloadError: clip.height is 0; it must be a positive integer, e.g. ...
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.errors import WorkloadError

__all__ = ["Clip"]


@dataclass(frozen=True)
class Clip:
    """A video clip in pixels: ``width`` x ``height``, ``frames`` frames (positive integers)."""

    width: int
    height: int
    frames: int

    def __post_init__(self) -> None:
        for name in ("width", "height", "frames"):
            value = getattr(self, name)
            # bool is an int subclass; a plan file's `true` is not a size.
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise WorkloadError(
                    f"clip.{name} is {value!r}; it must be a positive integer, "
                    f"e.g. width 832, height 480, frames 81"
                )

    @property
    def label(self) -> str:
        """``WIDTHxHEIGHTxFRAMES``, as workload names show the clip."""
        return f"{self.width}x{self.height}x{self.frames}"
