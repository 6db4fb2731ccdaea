"""``python -m aoizora`` runs the CLI."""

from __future__ import annotations

import sys

from aoizora.cli import main

sys.exit(main())
