"""Export a plan to maxdiffusion: the four files of the export directory, or the refusal.

:func:`export_maxdiffusion` writes ``maxdiffusion.yml``, ``maxdiffusion.args``,
``mesh.py`` and ``README.md`` into a directory (created if missing; those four files
overwritten, nothing else touched), or raises the one-line refusal
(:func:`aoizora.export.nearest.refusal_line`) and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aoizora.errors import ExportError
from aoizora.export.maxdiffusion import MaxdiffusionExport, maxdiffusion_export, refusal_reason
from aoizora.export.mesh_hook import mesh_hook_source
from aoizora.export.nearest import Alternative, nearest_expressible, refusal_line
from aoizora.export.readme import readme_text
from aoizora.plan.file import Plan

__all__ = ["EXPORT_FILES", "export_maxdiffusion", "write_maxdiffusion_dir"]

EXPORT_FILES: tuple[str, ...] = ("maxdiffusion.yml", "maxdiffusion.args", "mesh.py", "README.md")


def write_maxdiffusion_dir(export: MaxdiffusionExport, directory: Path) -> tuple[Path, ...]:
    """Write the four files of ``export`` into ``directory``; returns their paths."""
    texts = {
        "maxdiffusion.yml": export.yaml_text(),
        "maxdiffusion.args": "\n".join(export.args()) + "\n",
        "mesh.py": mesh_hook_source(export.plan, config_path=export.config.path),
        "README.md": readme_text(export),
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name in EXPORT_FILES:
            (directory / name).write_text(texts[name], encoding="utf-8")
    except OSError as exc:
        raise ExportError(
            f"cannot write the export into {str(directory)!r}: {exc.strerror or exc}; "
            "give a directory you can write, e.g. out/"
        ) from None
    return tuple(directory / name for name in EXPORT_FILES)


def export_maxdiffusion(
    plan: Plan,
    directory: Path,
    *,
    alternatives: Sequence[Alternative],
    among: str,
    config_file: str | None = None,
) -> tuple[Path, ...]:
    """Write ``plan``'s export, or raise the refusal naming the nearest of ``alternatives``
    maxdiffusion can express (``among`` says what they are, for the message)."""
    reason = refusal_reason(plan, config_file=config_file)
    if reason is not None:

        def expressible(candidate: Plan) -> bool:
            return refusal_reason(candidate, config_file=config_file) is None

        raise refusal_line(
            plan, reason, nearest_expressible(alternatives, expressible), among=among
        )
    return write_maxdiffusion_dir(maxdiffusion_export(plan, config_file=config_file), directory)
