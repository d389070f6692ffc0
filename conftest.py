"""Doctest collection over ``hopgym/``: leave out the adapters whose framework is not installed.

``pytest --doctest-modules`` imports every module; an adapter in ``hopgym/integrations/`` raises
``DependencyNotInstalled`` on import without its framework (verl is not part of ``[all]``).
"""

from __future__ import annotations

import importlib.util

_FRAMEWORKS = {"verifiers.py": "verifiers", "skyrl.py": "skyrl_gym", "gem.py": "gem", "verl.py": "verl"}

collect_ignore = [
    f"hopgym/integrations/{module}"
    for module, package in _FRAMEWORKS.items()
    if importlib.util.find_spec(package) is None
]
