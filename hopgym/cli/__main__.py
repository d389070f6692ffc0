"""``python -m hopgym.cli``: the ``hopgym`` command."""

from __future__ import annotations

import sys

from hopgym.cli import main

if __name__ == "__main__":  # not when a tool imports every module
    sys.exit(main())
