"""Griffe extension: a Google-style ``Example:`` section is read as ``Examples:``.

hopgym's docstrings head their doctests ``Example:`` (the Google style guide's singular); griffe
reads only the plural as an examples section and would render the singular as prose, where
``>>> [p.doc_id for p in ...]`` reads as a Markdown link.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class SingularExample(Extension):
    """Renames every ``Example:`` section header to ``Examples:`` before docstrings are parsed."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        """Griffe's event for every loaded object."""
        if obj.docstring is not None:
            obj.docstring.value = SINGULAR.sub(r"\1Examples:", obj.docstring.value)
