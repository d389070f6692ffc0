"""Files written whole or not at all, and destinations checked before the long work.

Every file a hopgym command writes (metrics JSON, reports, trajectories, downloaded data, an
index) goes through here:

- :func:`check_writable` is the preflight: run it before a run of hours so that a mistyped or
  read-only path is refused at once, naming the file;
- :func:`check_folder` does the same for a folder that files will be written in;
- :func:`check_distinct` refuses two outputs given the same path (one would overwrite the other);
- :func:`atomic_write` (and :func:`write_text`, :func:`write_json`, :func:`save_figure`) writes
  to a temporary file in the destination's own folder, flushes and ``fsync``\\ s it, then
  renames it over the destination with ``os.replace``: a reader sees the old file or the new
  one, never a cut one, and a full disk or a kill mid-write leaves the old file (or none) plus no
  temporary file behind;
- :func:`sole_writer` keeps a second process from writing a file that one updates over a long
  run (a results file saved after every chunk and read back to resume): each would save over the
  other's rows;
- :func:`atomic_directory` does the same for a folder (an index): it is built beside the old one
  and swapped in only when complete.

Failures raise :class:`OutputFileError` (an ``OSError`` and a
:class:`~hopgym.errors.HopgymError`) whose message names the file and the reason.

This module is on the lowest floor: it imports nothing from hopgym but :mod:`hopgym.errors`.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> path = check_writable(folder / "runs" / "metrics.json")
    >>> write_json(path, {"em": 0.5})
    >>> path.read_text()
    '{\\n  "em": 0.5\\n}\\n'
    >>> try:
    ...     check_distinct({"--json": path, "--trajectories": str(path)})
    ... except OutputFileError as err:
    ...     print(err.reason)
    the same file as another output
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from hopgym.errors import HopgymError, InvalidOptionError

__all__ = [
    "OutputFileError",
    "OutputFileHeldError",
    "check_writable",
    "check_folder",
    "check_distinct",
    "atomic_write",
    "write_text",
    "write_json",
    "save_figure",
    "sole_writer",
    "atomic_directory",
    "publish_file",
    "reason_of",
]


class OutputFileError(HopgymError, OSError):
    """An output file cannot be written; the message names the file and why."""

    def __init__(self, path: str | os.PathLike[str], reason: str, message: str | None = None) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        self.message = message or f"{self.path}: {reason}"
        super().__init__(self.message)

    def __str__(self) -> str:  # OSError's own __str__ would print the args tuple
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason, self.message))


class OutputFileHeldError(OutputFileError):
    """Another command holds the output file's :func:`sole_writer` lock: ``holder`` is its
    process id (as the lock file says), ``lock`` the lock file."""

    def __init__(self, path: str | os.PathLike[str], holder: str, lock: str | os.PathLike[str]) -> None:
        self.holder, self.lock = holder, os.fspath(lock)
        super().__init__(
            path,
            f"another command is writing it (process {holder}, {self.lock}); wait for it to end, "
            "or write another file",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.holder, self.lock))


def reason_of(exc: BaseException) -> str:
    """What went wrong, in words, for an error message that already names the file.

    Example:
        >>> reason_of(OSError(28, "No space left on device"))
        'no space left on the device (nothing was written; the old file, if any, is kept)'
    """
    if isinstance(exc, OutputFileError):
        return exc.reason
    if isinstance(exc, OSError) and exc.strerror:
        if exc.errno == errno.ENOSPC:
            return "no space left on the device (nothing was written; the old file, if any, is kept)"
        return exc.strerror
    return str(exc) or type(exc).__name__


def check_writable(path: str | os.PathLike[str], *, create_parent: bool = True) -> Path:
    """Check, before any long work, that ``path`` can be written; return it as a ``Path``.

    The folder is created when ``create_parent`` (as the writers do) and a probe file is created
    and removed in it, which finds a read-only file system or a folder without write permission.
    A path that is a folder, or an existing file that may not be written, is refused.

    Raises:
        OutputFileError: naming the file and the reason.
    """
    out = Path(path)
    if out.is_dir():
        raise OutputFileError(out, "is a folder, not a file")
    if out.exists() and not os.access(out, os.W_OK):
        raise OutputFileError(out, "the file exists and may not be written")
    parent = out.parent
    try:
        if create_parent:
            parent.mkdir(parents=True, exist_ok=True)
        elif not parent.is_dir():
            raise OutputFileError(out, f"the folder {parent} does not exist")
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OutputFileError:
        raise
    except OSError as exc:
        raise OutputFileError(out, f"cannot be written ({reason_of(exc)})") from exc
    return out


def check_folder(path: str | os.PathLike[str]) -> Path:
    """Check, before any long work, that files can be written in the folder ``path`` (made if
    missing); return it as a ``Path``.

    Raises:
        OutputFileError: naming the folder and the reason.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputFileError(out, "is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hopgym-", suffix=".probe", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputFileError(out, f"cannot be written in ({reason_of(exc)})") from exc
    return out


def check_distinct(outputs: Mapping[str, str | os.PathLike[str] | None]) -> None:
    """Refuse two outputs (``{"--json": path, ...}``) that name the same file.

    ``None`` entries (outputs not asked for) are skipped; paths are compared after resolving
    links and ``..``.
    """
    seen: dict[Path, str] = {}
    for name, path in outputs.items():
        if path is None:
            continue
        key = Path(path).expanduser().resolve()
        if key in seen:
            reason = "the same file as another output"
            raise OutputFileError(
                path,
                reason,
                f"{seen[key]} and {name} are the same file ({path}): give each output its own path",
            )
        seen[key] = name


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    mode: str = "w",
    *,
    encoding: str | None = "utf-8",
    create_parent: bool = True,
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` and rename it onto ``path`` when the block ends.

    On success the file is flushed, ``fsync``\\ ed and renamed (``os.replace``); if the block
    raises (a full disk, an interrupt, an error in the caller) the temporary file is removed and
    ``path`` is left as it was. ``OSError``\\ s are raised as :class:`OutputFileError` naming
    ``path``.

    Args:
        path: The destination.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        encoding: The text encoding (ignored for ``"wb"``).
        create_parent: Create the destination's folder first.
    """
    if mode not in ("w", "wb"):
        raise InvalidOptionError(f"atomic_write: mode must be 'w' or 'wb', got {mode!r}")
    out = Path(path)
    try:
        if create_parent:
            out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:
        raise OutputFileError(out, f"cannot be written ({reason_of(exc)})") from exc
    done = False
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        publish_file(tmp, out)
        done = True
    except OutputFileError:
        raise
    except OSError as exc:
        raise OutputFileError(out, reason_of(exc)) from exc
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def publish_file(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename a complete, ``fsync``\\ ed temporary file onto ``path`` (same folder).

    The file gets the permissions of the file it replaces, or those ``open()`` would give a new
    one (``mkstemp`` makes it 0600); the folder is ``fsync``\\ ed so that the rename lasts.
    ``OSError``\\ s propagate (callers name the file).
    """
    out = Path(path)
    if out.exists():  # keep the permissions the user gave the old file
        with contextlib.suppress(OSError):
            shutil.copymode(out, tmp)
    else:
        os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, out)
    _fsync_folder(out.parent)


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (``os.umask`` sets it:
    another thread creating a file meanwhile would get mode 0666)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_write`)."""
    with atomic_write(path, "w", encoding=encoding) as fh:
        fh.write(text)


def write_json(
    path: str | os.PathLike[str],
    data: Any,
    *,
    indent: int | None = 2,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """Write ``data`` as JSON (full precision, a final newline) to ``path`` atomically.

    The JSON is made before the file is opened, so a value that cannot be encoded leaves the
    destination untouched. ``default`` is :func:`json.dumps`' (e.g. ``str`` for paths).
    """
    text = json.dumps(data, indent=indent, default=default) + "\n"
    write_text(path, text)


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """Save a matplotlib figure to ``path`` atomically (:func:`atomic_write`); its format is the
    file's suffix (``.png``, ``.svg``, ``.pdf``). ``savefig``: more of ``Figure.savefig``'s
    options (``dpi``, ``bbox_inches``)."""
    out = Path(path)
    with atomic_write(out, "wb") as fh:
        fig.savefig(fh, format=out.suffix.lstrip(".") or "png", **savefig)
    return out


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Build a folder beside ``path`` and swap it in for ``path`` only when the block succeeds.

    Yields the empty build folder (``.NAME.build-XXXX`` in the same parent, so the final rename
    stays on one file system). On success the old ``path`` (if any) is moved aside, the new folder
    renamed onto ``path`` and the old one deleted; if the block raises, the build folder is deleted
    and ``path`` is untouched. Between the two renames a crash leaves the old folder under
    ``.NAME.old-XXXX`` beside it (a rename of a folder onto a non-empty folder is not possible
    in one step on POSIX).
    """
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    except OSError as exc:
        raise OutputFileError(out, f"cannot be written ({reason_of(exc)})") from exc
    try:
        yield build
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    old: Path | None = None
    try:
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "old")
        os.replace(build, out)
    except OSError as exc:
        if old is not None and not out.exists():  # put the old folder back
            with contextlib.suppress(OSError):
                os.replace(old / "old", out)
        shutil.rmtree(build, ignore_errors=True)
        raise OutputFileError(out, f"could not swap in the new folder ({reason_of(exc)})") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _fsync_folder(out.parent)


@contextlib.contextmanager
def sole_writer(path: str | os.PathLike[str], *, wait: bool = False) -> Iterator[Path]:
    """Hold, for the block, the right to write ``path``: a command that reads a file back to
    resume and saves it again after every chunk of work takes this first, so that a second
    command on the same file is refused at once instead of saving over the first one's rows.
    With ``wait``, a held lock is waited for instead (for a short read-merge-write that other
    commands do too).

    The lock is an exclusive ``flock`` on ``.NAME.lock`` beside ``path`` (the kernel lets it go
    when the process ends, however it ends); the file holds the holder's process id, named in the
    refusal. POSIX only.

    Raises:
        OutputFileHeldError: another command (or block) holds ``path`` (without ``wait``).
        OutputFileError: the lock file cannot be made or locked.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "results.json"
        >>> with sole_writer(path):
        ...     try:
        ...         with sole_writer(path):
        ...             pass
        ...     except OutputFileError as err:
        ...         print(err.reason.split(" (")[0])
        another command is writing it
    """
    import fcntl

    out = Path(path)
    lock = out.with_name(f".{out.name}.lock")
    while True:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise OutputFileError(out, f"cannot be written ({reason_of(exc)}: {lock})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise OutputFileError(out, f"cannot be locked ({reason_of(exc)}: {lock})") from exc
            raise OutputFileHeldError(out, holder, lock) from exc
        # Held; but the holder before may have removed the lock file as it let go (between our
        # open and flock): then this lock guards nothing, and we start again on the new file.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield out
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)
