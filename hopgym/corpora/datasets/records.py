"""Reading dataset files record by record: :func:`iter_records` and the record loop.

A dataset file is JSON lines (one record a line) or one JSON array of records, optionally
gzip-compressed (detected from its first bytes, whatever its name). Neither is read whole: lines
are decoded one at a time, an array element by element (:func:`_iter_json_array`). Everything
that can go wrong names the file and the line: bytes that are not UTF-8, a binary file (Parquet,
zip, an Arrow cache file, ...), truncated or invalid JSON, a corrupt gzip stream.

:func:`records` is the loop every loader runs: it parses ``(line, record)`` pairs with a format's
parser and, with ``lenient=True``, skips and counts the malformed ones (:class:`LoadReport`).
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from hopgym.corpora.datasets.errors import DatasetFormatError

__all__ = ["iter_records", "records", "LoadReport", "BadLine"]

_BOM = b"\xef\xbb\xbf"
_WHITESPACE = b" \t\r\n"
# First bytes of files people pass by mistake, and what to say about them.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (
        b"PAR1",
        "a Parquet file: convert it to JSON lines (e.g. pandas.read_parquet(...)"
        ".to_json(out, orient='records', lines=True))",
    ),
    (b"PK\x03\x04", "a zip archive: unzip it and pass the JSON or JSON-lines file inside"),
    (b"BZh", "bzip2-compressed: decompress it (bunzip2) first"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it (unxz) first"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it (unzstd) first"),
    (
        b"\xff\xff\xff\xff",
        "an Arrow stream (a `datasets` cache file?): pass the hub name or "
        "export JSON lines with Dataset.to_json",
    ),
    (b"ARROW1", "an Arrow file: export JSON lines with Dataset.to_json"),
    (b"\xff\xfe", "UTF-16 text: convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (b"\xfe\xff", "UTF-16 text: convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"),
    (b"\x93NUMPY", "a NumPy array file"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


@dataclass(frozen=True)
class BadLine:
    """A line that did not parse; turned into an error (or a skip) by the record loop."""

    reason: str


@dataclass
class LoadReport:
    """What happened while reading a file: skipped records and the first error messages."""

    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def skip(self, err: DatasetFormatError) -> None:
        self.skipped += 1
        if len(self.errors) < 20:
            self.errors.append(str(err))

    def warn(self, what: str) -> None:
        """Emit one warning summarising the skipped records (nothing when none were skipped)."""
        if self.skipped:
            warnings.warn(
                f"skipped {self.skipped} malformed record(s) in {what} (lenient=True); "
                f"first: {self.errors[0]}",
                stacklevel=3,
            )


def _not_utf8(exc: UnicodeDecodeError, column: int | None = None) -> str:
    if exc.reason == "unexpected end of data":
        return "not UTF-8 text: a truncated character at the end (a truncated file?)"
    at = f" at column {column}" if column is not None else ""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x}{at}): is it a binary or compressed file?"


def _msg(exc: json.JSONDecodeError) -> str:
    return exc.msg.removesuffix(" starting at")  # "Unterminated string starting at"


class _Utf8Text:
    """A binary stream read as UTF-8 text in chunks; bad bytes raise with their line."""

    def __init__(self, raw: IO[bytes], where: str) -> None:
        self.raw, self.where = raw, where
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.lines = 0  # newlines in the text returned so far
        self.eof = False

    def read(self, n: int) -> str:
        while not self.eof:
            data = self.raw.read(n)
            self.eof = not data
            try:
                text = self.decoder.decode(data, final=self.eof)
            except UnicodeDecodeError as exc:
                # exc.object is the decoder's pending bytes (never a newline) plus ``data``.
                line = self.lines + exc.object[: exc.start].count(b"\n") + 1
                raise DatasetFormatError(self.where, line, "<file>", _not_utf8(exc)) from None
            if text:
                self.lines += text.count("\n")
                return text
        return ""


def _iter_json_array(f: Any, path: str, chunk: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """Decode a top-level JSON array element by element without reading the whole file.

    ``f`` is a text stream (anything with ``read(n) -> str``) positioned before the ``[``.
    """
    dec = json.JSONDecoder()
    buf = f.read(chunk)
    pos = 0
    line = 1
    eof = False

    def fill() -> None:
        nonlocal buf, pos, eof
        more = f.read(chunk)
        if not more:
            eof = True
        buf = buf[pos:] + more
        pos = 0

    def skip_ws() -> None:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf) or eof:
                return
            fill()

    skip_ws()
    if pos >= len(buf) or buf[pos] != "[":
        raise DatasetFormatError(path, line, "<file>", "expected a JSON array or JSON lines")
    pos += 1
    first = True
    while True:
        skip_ws()
        if pos >= len(buf):
            raise DatasetFormatError(path, line, "<file>", "the JSON array is not closed (a truncated file?)")
        if buf[pos] == "]":
            return
        if not first:
            if buf[pos] != ",":
                raise DatasetFormatError(path, line, "<file>", "expected ',' between records")
            pos += 1
            skip_ws()
        first = False
        while True:
            try:
                obj, end = dec.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if eof:
                    where = line + buf.count("\n", pos, exc.pos)
                    column = exc.pos - buf.rfind("\n", 0, exc.pos)
                    reason = f"invalid JSON: {_msg(exc)} at column {column}"
                    if not buf.rstrip().endswith("]"):
                        reason += " (the file ends before the array is closed: truncated?)"
                    raise DatasetFormatError(path, where, "<json>", reason) from None
                fill()
                continue
            if end == len(buf) and not eof:
                # A number or literal may continue in the next chunk; decode again with more text.
                fill()
                continue
            break
        start_line = line
        line += buf.count("\n", pos, end)
        pos = end
        yield start_line, obj


def _iter_json_lines(raw: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """``(line, record)`` of a JSON-lines stream; a bad line yields a :class:`BadLine`."""
    first = True
    for lineno, data in enumerate(raw, 1):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield lineno, BadLine(_not_utf8(exc, column=exc.start + 1))
            first = False
            continue
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            reason = f"invalid JSON: {_msg(exc)} at column {exc.colno}"
            if "\x00" in text:
                reason += " (the line holds NUL bytes: is it a binary file?)"
            elif first and text.strip().endswith(("{", "[", ",", ":")):
                reason += (
                    " (is the file one JSON object? hopgym reads JSON lines, one record a "
                    "line, or a JSON array of records)"
                )
            rec = BadLine(reason)
        first = False
        yield lineno, rec


def _open(path: str | os.PathLike[str], where: str) -> tuple[IO[bytes], bool]:
    """The file as a binary stream (decompressed when gzip) and whether it is gzip."""
    try:
        raw: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by iter_records
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {where}") from None
    except IsADirectoryError:
        raise DatasetFormatError(
            where, 0, "<file>", "is a directory, not a JSON or JSON-lines file"
        ) from None
    head = raw.read(16)
    if head.startswith(b"\x1f\x8b"):
        raw.close()
        return gzip.open(path, "rb"), True  # type: ignore[return-value]
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raw.close()
            raise DatasetFormatError(where, 1, "<file>", f"not JSON or JSON lines: this is {what}")
    raw.seek(0)
    return raw, False


def _first_byte(raw: IO[bytes]) -> bytes:
    """The first non-whitespace byte (``b""`` for an empty file); leaves ``raw`` after the BOM."""
    start = 3 if raw.read(3) == _BOM else 0
    raw.seek(start)
    found = b""
    while block := raw.read(1 << 16):
        rest = block.lstrip(_WHITESPACE)
        if rest:
            found = rest[:1]
            break
    raw.seek(start)
    return found


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, record)`` from a JSON-lines file or a file holding one JSON array.

    JSON lines are read one line at a time; an array is decoded incrementally, so neither loads
    the whole file. Blank lines are skipped. A gzip-compressed file is read through gzip. A line
    that is not JSON (or not UTF-8) yields a :class:`BadLine` that the record loop reports (or
    skips, when lenient); a file that is not JSON at all, a broken array or a corrupt gzip
    stream raises :class:`DatasetFormatError` naming the file and the line.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
        >>> _ = p.write_text('[{"x": 1},\\n {"x": 2}]')
        >>> list(iter_records(p))
        [(1, {'x': 1}), (2, {'x': 2})]
    """
    where = os.fspath(path)
    raw, gz = _open(path, where)
    line = 0
    text: _Utf8Text | None = None
    with raw:
        try:
            if _first_byte(raw) == b"[":
                text = _Utf8Text(raw, where)
                pairs = _iter_json_array(text, where)
            else:
                pairs = _iter_json_lines(raw)
            for line, rec in pairs:
                yield line, rec
        except _GZIP_ERRORS as exc:
            if not gz:
                raise
            at = text.lines + 1 if text is not None else line + 1
            raise DatasetFormatError(where, at, "<file>", f"corrupt or truncated gzip data ({exc})") from None


def records(
    pairs: Iterable[tuple[int, Any]],
    where: str,
    report: LoadReport,
    lenient: bool,
    parse: Callable[[Any, str, int], Any],
    limit: int | None,
) -> Iterator[tuple[int, Any]]:
    """Parse ``(line, record)`` pairs one by one into ``(line, parsed)``.

    A record ``parse`` returns ``None`` for is left out; a malformed one raises, or is skipped
    and counted in ``report`` when ``lenient``. Stops after ``limit`` parsed records.
    """
    n = 0
    for line, rec in pairs:
        if limit is not None and n >= limit:
            return
        try:
            if isinstance(rec, BadLine):
                raise DatasetFormatError(where, line, "<json>", rec.reason)
            out = parse(rec, where, line)
        except DatasetFormatError as err:
            if not lenient:
                raise
            report.skip(err)
            continue
        if out is None:
            continue
        n += 1
        yield line, out
