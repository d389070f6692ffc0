"""MkDocs hook: pages that ``mkdocs.yml``'s nav does not list join it, so none is left out.

Each page in :data:`PLACES` goes right after the page it extends, when it exists; any other page
of ``docs/`` missing from the nav goes into a last section, "More". A page's title is its first
``# `` heading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Pages that extend another one: ``{page: the page it follows in the nav}``.
PLACES = {
    "envs-versions.md": "environments.md",
    "tool-calls.md": "protocols.md",
    "serving-resilience.md": "serving.md",
    "eval-suites.md": "llm-agents.md",
    "training-config.md": "training.md",
    "failures.md": "development.md",
}


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return path.stem.replace("-", " ").capitalize()


def _files(nav: list[Any]) -> set[str]:
    found: set[str] = set()
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found |= _files(value)
        else:
            found.add(value)
    return found


def complete(nav: list[Any], docs: Path) -> list[Any]:
    """``nav`` with every page of ``docs`` that it lacks."""
    nav = list(nav)
    listed = _files(nav)
    for page, after in PLACES.items():
        if (docs / page).exists() and page not in listed:
            at = next((i for i, item in enumerate(nav) if after in item.values()), len(nav) - 1)
            nav.insert(at + 1, {_title(docs / page): page})
            listed.add(page)
    rest = sorted(p.name for p in docs.glob("*.md") if p.name not in listed)
    if rest:
        nav.append({"More": [{_title(docs / name): name} for name in rest]})
    return nav


def on_config(config: Any, **kwargs: Any) -> Any:
    """The MkDocs event: the completed nav."""
    config["nav"] = complete(config["nav"] or [], Path(config["docs_dir"]))
    return config
