"""One exception root (hopgym.errors.HopgymError) and one version (hopgym/_version.py)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import re
from pathlib import Path

import gymnasium
import pytest

import hopgym
from hopgym import errors
from hopgym.errors import DependencyNotInstalled, HopgymError

ROOT = Path(__file__).resolve().parents[1]


def _hopgym_modules() -> list[str]:
    names = ["hopgym"]
    names += [m.name for m in pkgutil.walk_packages(hopgym.__path__, "hopgym.")]
    return sorted(names)


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for name in _hopgym_modules():
        try:
            module = importlib.import_module(name)
        except DependencyNotInstalled:  # an adapter whose framework is absent
            continue
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("hopgym")
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_hopgym_exception_derives_from_hopgym_error():
    classes = _exception_classes()
    assert len(classes) >= 12  # the eleven of hopgym 0.1, HTTPError and the root
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, HopgymError))
    assert not outside, f"exceptions that do not derive from hopgym.errors.HopgymError: {outside}"


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("hopgym.errors.RetrievalError", RuntimeError),
        ("hopgym.errors.DependencyNotInstalled", ImportError),
        ("hopgym.retrieval.index_store.IndexStoreError", RuntimeError),
        ("hopgym.retrieval.index_store.StaleIndexError", RuntimeError),
        ("hopgym.retrieval.index_store.ForeignIndexError", RuntimeError),
        ("hopgym.corpora.datasets.DatasetFormatError", ValueError),
        ("hopgym.corpora.datasets.DatasetUnavailableError", RuntimeError),
        ("hopgym.rewards.base.RewardTermError", ValueError),
        ("hopgym.rewards.base.RewardArgumentError", ValueError),
        ("hopgym.rewards.judges.JudgeError", RuntimeError),
        ("hopgym.agents.llm.BackendError", RuntimeError),
        ("hopgym.httpclient.HTTPError", RuntimeError),
    ],
)
def test_old_names_and_standard_bases_still_work(name, base):
    module, attr = name.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), attr)
    assert issubclass(cls, HopgymError) and issubclass(cls, base)


def test_dependency_not_installed_is_defined_and_exported_once():
    # One import path (hopgym keeps no shims before its first release): the class is defined in
    # hopgym.errors and only hopgym.errors lists it in __all__ or a lazy-import map.
    defined, exported = [], []
    for name in _hopgym_modules():
        try:
            module = importlib.import_module(name)
        except DependencyNotInstalled:  # an adapter whose framework is absent
            continue
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__name__ == "DependencyNotInstalled" and obj.__module__ == name:
                defined.append(name)
        lazy = getattr(module, "_LAZY", {})
        if "DependencyNotInstalled" in getattr(module, "__all__", ()) or "DependencyNotInstalled" in lazy:
            exported.append(name)
    assert defined == exported == ["hopgym.errors"]
    assert DependencyNotInstalled is errors.DependencyNotInstalled
    err = DependencyNotInstalled.for_extra("faiss", "dense")
    assert isinstance(err, gymnasium.error.DependencyNotInstalled)
    assert isinstance(err, ImportError) and "hopgym[dense]" in str(err)
    with pytest.raises(gymnasium.error.Error):
        raise err


def test_errors_pickle():
    http = errors.HTTPError(
        "GET u failed", method="GET", url="u", attempts=3, cause="x", status=503, transient=True
    )
    clone = pickle.loads(pickle.dumps(http))
    assert (str(clone), clone.url, clone.attempts, clone.status, clone.transient) == (
        "GET u failed",
        "u",
        3,
        503,
        True,
    )
    dep = pickle.loads(pickle.dumps(DependencyNotInstalled.for_extra("x", "y")))
    assert type(dep) is DependencyNotInstalled and "hopgym[y]" in str(dep)


def test_the_version_lives_in_one_place():
    from hopgym._version import __version__
    from hopgym.retrieval.index_store import _version

    assert hopgym.__version__ == __version__ == _version()
    assert re.fullmatch(r"\d+\.\d+\.\d+([a-z0-9.+-]*)?", __version__)
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hopgym._version.__version__"}


def test_the_facade_has_no_evaluate_alias():
    # hopgym has never been released: the harness has one name, hopgym.agents.evaluate.
    assert not hasattr(hopgym, "evaluate")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hopgym.nope  # noqa: B018


def test_a_bad_option_is_a_hopgym_error_and_a_value_error():
    import gymnasium as gym

    from hopgym.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match="top_k") as info:
        gym.make("hopgym/Tiny-v1", top_k=0)
    assert isinstance(info.value, HopgymError) and isinstance(info.value, ValueError)


def test_hopgym_raises_no_bare_value_or_type_error():
    # Every refusal is typed (InvalidOptionError / InvalidOptionTypeError keep the standard base),
    # so `except HopgymError` catches all of them. A bare `raise TypeError` (no message) that the
    # same function catches is control flow, not a refusal.
    import ast

    bad = []
    for path in sorted((ROOT / "hopgym").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and getattr(node.exc.func, "id", None) in ("ValueError", "TypeError")
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"raise InvalidOptionError / InvalidOptionTypeError instead: {bad}"
