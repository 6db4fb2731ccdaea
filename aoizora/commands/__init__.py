"""Subcommands of the ``aoizora`` CLI, one module each (see :mod:`aoizora.cli`)."""
