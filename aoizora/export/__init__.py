"""Plans as serving stacks take them: maxdiffusion overrides, a device-order hook, a README.

* :mod:`aoizora.export.maxdiffusion_table` -- what maxdiffusion's Wan configs accept (sourced);
* :mod:`aoizora.export.maxdiffusion` -- a plan as overrides, or why it cannot be one;
* :mod:`aoizora.export.nearest` -- the nearest expressible plan and the one-line refusal;
* :mod:`aoizora.export.mesh_hook` -- ``mesh.py``, the planned device order in plain jax;
* :mod:`aoizora.export.readme` -- the export directory's README;
* :mod:`aoizora.export.directory` -- :func:`export_maxdiffusion`, the four files.
"""

from __future__ import annotations

from aoizora.export.directory import EXPORT_FILES, export_maxdiffusion, write_maxdiffusion_dir
from aoizora.export.maxdiffusion import MaxdiffusionExport, maxdiffusion_export, refusal_reason
from aoizora.export.nearest import outcome_alternatives, plan_alternatives

__all__ = [
    "EXPORT_FILES",
    "MaxdiffusionExport",
    "export_maxdiffusion",
    "maxdiffusion_export",
    "outcome_alternatives",
    "plan_alternatives",
    "refusal_reason",
    "write_maxdiffusion_dir",
]
