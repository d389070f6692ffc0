from __future__ import annotations

import importlib.util

import pytest

from hopgym.errors import DependencyNotInstalled


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed")
def test_missing_verl_names_the_extra():
    with pytest.raises(DependencyNotInstalled, match=r"hopgym\[verl\]"):
        import hopgym.integrations.verl  # noqa: F401


def test_integrations_package_imports_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, hopgym.integrations; "
        "print(sorted(m for m in ('verifiers', 'skyrl_gym', 'gem', 'verl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
