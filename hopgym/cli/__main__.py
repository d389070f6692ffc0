"""``python -m hopgym.cli``: the ``hopgym`` command."""

from __future__ import annotations

import sys

from hopgym.cli import main

sys.exit(main())
