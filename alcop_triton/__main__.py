"""``python -m alcop_triton`` runs the ``alcop-tune`` command line."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
