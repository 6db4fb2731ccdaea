"""Plans as serving stacks take them: maxdiffusion overrides, a device-order hook, a README.

* :mod:`aoizora.export.maxdiffusion_table` -- what maxdiffusion's Wan configs accept (sourced);
* :mod:`aoizora.export.maxdiffusion` -- a plan as overrides, or why it cannot be one;
* :mod:`aoizora.export.nearest` -- the nearest expressible plan and the one-line refusal;
* :mod:`aoizora.export.mesh_hook` -- ``mesh.py``, the planned device order in plain jax;
* :mod:`aoizora.export.readme` -- the export directory's README;
* :mod:`aoizora.export.directory` -- :func:`~aoizora.export.directory.export_maxdiffusion`,
  the four files.

Import from the modules: this package is imported while the command line is built, before
jax starts, and its table (``maxdiffusion_table``) needs no jax.
"""
