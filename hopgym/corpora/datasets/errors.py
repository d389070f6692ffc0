"""Errors of the dataset loaders: :class:`DatasetFormatError` and :class:`DatasetUnavailableError`."""

from __future__ import annotations

from hopgym.errors import HopgymError

__all__ = ["DatasetFormatError", "DatasetUnavailableError"]


class DatasetFormatError(HopgymError, ValueError):
    """A file or record does not have the layout its loader expects.

    The message names the file, the line (when known) and the field; fields in angle brackets
    (``<file>``, ``<json>``, ``<record>``) are the file, its JSON text and a whole record.

    Attributes:
        path: the file (or hub name) being read.
        line: 1-based line of the record (row number for hub datasets; ``0`` when unknown).
        field: the offending field, as a path such as ``context[3][1]``.
        reason: what is wrong, without the location.

    Example:
        >>> str(DatasetFormatError("dev.json", 3, "context[1]", "expected [title, [sentences]]"))
        "dev.json, line 3, field 'context[1]': expected [title, [sentences]]"
        >>> str(DatasetFormatError("dev.json", 7, "<json>", "invalid JSON"))
        'dev.json, line 7: invalid JSON'
    """

    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        self.path, self.line, self.field, self.reason = path, line, field, reason
        where = f"{path}, line {line}" if line > 0 else path
        if not field.startswith("<"):
            where += f", field {field!r}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, int, str, str]]:
        return (type(self), (self.path, self.line, self.field, self.reason))


class DatasetUnavailableError(HopgymError, RuntimeError):
    """A hub dataset could not be fetched (offline, unknown name, no ``datasets`` library)."""
