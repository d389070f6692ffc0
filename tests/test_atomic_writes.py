"""Every file hopgym's package, benchmarks and examples write goes through ``hopgym._atomic``
(written whole or not at all), except the writes allowed below by name.

Every ``.py`` under ``hopgym/``, ``benchmarks/`` and ``examples/`` is parsed (not imported) and
these calls are refused, naming file:line: ``X.write_text(...)``, ``X.write_bytes(...)``,
``json.dump(...)``, and an ``open`` that writes: ``open(path, "w")`` (and ``io.open``,
``os.fdopen``, ``gzip.open``, ...; modes with ``w``, ``a``, ``x`` or ``+``, or a mode that is not
a literal) and ``path.open("w")``; and the writers that take a path: ``fig.savefig(...)``,
``np.save`` / ``np.savez`` / ``np.savez_compressed``, ``array.tofile(...)`` and FAISS's
``write_index``, unless they write into the file of a ``with atomic_write(...) as fh``.
``hopgym/_atomic.py``, where the helpers live, is not checked; examples in docstrings are
strings, not calls.

Write through ``hopgym._atomic`` instead (``write_text``, ``write_json``, ``save_figure``,
``atomic_write``, ``atomic_directory``), or, where a raw write is right (a progress log appended
a row at a time, a file in a build folder renamed into place afterwards, ``/proc``), add the
file and the function it is in to ``ALLOWED`` with the reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("hopgym", "benchmarks", "examples")
HELPERS = "hopgym/_atomic.py"

#: (file, enclosing function as ``Class.method`` / ``outer.inner``, "<module>" at the top) -> why
#: its raw writes are right.
ALLOWED: dict[tuple[str, str], str] = {
    ("hopgym/agents/grpo.py", "make_curve_callback._Curve.on_log"): (
        "log.jsonl, a progress log appended a row per logged step (a cut last line is one row lost)"
    ),
    ("hopgym/agents/rft.py", "train_rft"): "log.jsonl, a progress log appended a row per round",
    ("hopgym/agents/rft.py", "_save_round"): (
        "rft_state.json inside the .round-N.tmp folder, renamed onto round-N when complete"
    ),
    ("hopgym/agents/trajectories.py", "TrajectoryWriter.__init__"): (
        "a mkstemp .partial file beside the destination, renamed onto it when closed"
    ),
    ("hopgym/retrieval/index_store.py", "save_index"): (
        "passages.jsonl inside the index folder (build_index builds it in atomic_directory's build "
        "folder); the manifest, written last through its .tmp and os.replace, makes it an index"
    ),
    ("hopgym/retrieval/index_store.py", "_save_dense"): (
        "dense.faiss inside the index folder, which build_index builds in atomic_directory's build "
        "folder and save_index's manifest, written last, makes an index"
    ),
    ("hopgym/retrieval/dense.py", "DenseRetriever._build_compressed"): (
        "the .part file of vectors streamed while building (too large to hold in memory), "
        "renamed into the index folder by save_index"
    ),
    ("benchmarks/suite_memory.py", "_reset_peak"): "/proc/self/clear_refs, a kernel control file",
    ("benchmarks/retrieval_scale.py", "reset_peak"): "/proc/self/clear_refs, a kernel control file",
    ("benchmarks/retrieval_scale.py", "ray_replicas"): (
        "the log stream of the hopgym serve --ray subprocess (its stdout and stderr)"
    ),
}

#: Modules whose ``open(file, mode, ...)`` takes the mode second, as the builtin does.
OPEN_MODULES = {"io", "os", "gzip", "bz2", "lzma", "codecs", "builtins"}
#: Writers given a path or a file first: a method of any object (a figure, an array) or a
#: function of NumPy / FAISS.
PATH_METHODS = {"savefig", "tofile"}
PATH_FUNCTIONS = {
    "numpy": {"save", "savez", "savez_compressed"},
    "faiss": {"write_index", "write_index_binary"},
}
MODE = re.compile(r"^[rwxabtU+]+$")


def _files() -> list[Path]:
    return sorted(
        p for top in SCANNED for p in (ROOT / top).rglob("*.py") if p.relative_to(ROOT).as_posix() != HELPERS
    )


class _Writes(ast.NodeVisitor):
    """The raw writes of one module: (line, enclosing function, what)."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: list[tuple[int, str, str]] = []
        self.json_names = {"json"}  # names bound to the json module
        self.dump_names: set[str] = set()  # names bound to json.dump
        self.atomic_names: set[str] = set()  # names bound to hopgym._atomic
        self.modules = {"np": "numpy", "numpy": "numpy", "faiss": "faiss"}  # name -> module
        self.handles: list[str] = []  # files of the enclosing `with atomic_write(...) as fh`

    # -- names that imports bind
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "json":
                self.json_names.add(alias.asname or "json")
            elif alias.name == "hopgym._atomic" and alias.asname:
                self.atomic_names.add(alias.asname)
            elif alias.name in PATH_FUNCTIONS:
                self.modules[alias.asname or alias.name] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if node.module == "json" and alias.name == "dump":
                self.dump_names.add(alias.asname or "dump")
            elif node.module == "hopgym" and alias.name == "_atomic":
                self.atomic_names.add(alias.asname or "_atomic")

    # -- where we are
    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_With(self, node: ast.With) -> None:
        bound = [
            item.optional_vars.id
            for item in node.items
            if isinstance(item.optional_vars, ast.Name) and _is_atomic_write(item.context_expr)
        ]
        self.handles += bound
        self.generic_visit(node)
        del self.handles[len(self.handles) - len(bound) :]

    # -- the calls
    def visit_Call(self, node: ast.Call) -> None:
        what = self._write(node)
        if what is not None:
            self.found.append((node.lineno, ".".join(self.scope) or "<module>", what))
        self.generic_visit(node)

    def _write(self, node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in self.dump_names:
                return "json.dump(...)"
            if func.id == "open":
                return _open_mode(node, 1, literal_only=False)
            return None
        if not isinstance(func, ast.Attribute):
            return None
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if owner is not None and owner in self.atomic_names:
            return None  # _atomic.write_text(...): the helper
        if func.attr in ("write_text", "write_bytes"):
            return f".{func.attr}(...)"
        if func.attr in PATH_METHODS or func.attr in PATH_FUNCTIONS.get(self.modules.get(owner or ""), ()):
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id in self.handles:
                return None  # into the file of a `with atomic_write(...) as fh`
            return f".{func.attr}(...)"
        if func.attr == "dump" and owner in self.json_names:
            return "json.dump(...)"
        if func.attr == "fdopen" and owner == "os":
            return _open_mode(node, 1, literal_only=False)
        if func.attr == "open":
            if owner == "os":
                return None  # os.open takes flags, not a mode
            if owner in OPEN_MODULES:
                return _open_mode(node, 1, literal_only=False)
            return _open_mode(node, 0, literal_only=True)  # path.open("w")
        return None


def _is_atomic_write(expr: ast.expr) -> bool:
    """``atomic_write(...)`` or ``<module>.atomic_write(...)``."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name == "atomic_write"


def _open_mode(node: ast.Call, position: int, *, literal_only: bool) -> str | None:
    """``open(..., MODE)`` when MODE writes; a mode that is not a literal counts too, unless
    ``literal_only`` (a method named ``open`` on some other object: ``sessions.open("ws")``)."""
    mode: ast.expr | None = next((kw.value for kw in node.keywords if kw.arg == "mode"), None)
    if mode is None and len(node.args) > position:
        mode = node.args[position]
    if mode is None:
        return None  # read, the default
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        if MODE.match(mode.value) and set(mode.value) & set("wax+"):
            return f"open(..., {mode.value!r})"
        return None
    return None if literal_only else "open(..., <a mode that is not a literal>)"


def _writes(path: Path) -> Iterator[tuple[str, int, str, str]]:
    rel = path.relative_to(ROOT).as_posix()
    visitor = _Writes()
    visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    for line, scope, what in visitor.found:
        yield rel, line, scope, what


def _all_writes() -> list[tuple[str, int, str, str]]:
    return [w for path in _files() for w in _writes(path)]


def test_every_output_write_is_atomic_or_allowed() -> None:
    raw = [
        f"{rel}:{line}: {what} in {scope}"
        for rel, line, scope, what in _all_writes()
        if (rel, scope) not in ALLOWED
    ]
    assert not raw, (
        "raw file writes (write through hopgym._atomic: write_text, write_json, atomic_write; or "
        "allow the function in tests/test_atomic_writes.py ALLOWED, with the reason):\n  " + "\n  ".join(raw)
    )


def test_every_allowed_entry_still_writes() -> None:
    """An entry whose function no longer writes (renamed, moved, converted) is removed, so that
    the list never allows more than it names."""
    used = {(rel, scope) for rel, _, scope, _ in _all_writes()}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED entries with no raw write any more: {stale}"


@pytest.mark.parametrize(
    "source, found",
    [
        ("from pathlib import Path\ndef main(args):\n    Path(args.json).write_text('x')\n", ["main"]),
        ("def f(p):\n    p.write_bytes(b'x')\n", ["f"]),
        ("import json\ndef f(d, fh):\n    json.dump(d, fh)\n", ["f"]),
        ("from json import dump as d\nd({}, fh)\n", ["<module>"]),
        ("def f(p):\n    with open(p, 'w', encoding='utf-8') as fh:\n        pass\n", ["f"]),
        ("def f(p):\n    open(p, mode='ab')\n", ["f"]),
        ("def f(p, m):\n    open(p, m)\n", ["f"]),
        ("class C:\n    def g(self, p):\n        p.open('w')\n", ["C.g"]),
        ("import gzip\ndef f(p):\n    gzip.open(p, 'wt')\n", ["f"]),
        ("import os\ndef f(fd):\n    os.fdopen(fd, 'wb')\n", ["f"]),
        ("def f(fig, p):\n    fig.savefig(p, dpi=90)\n", ["f"]),
        ("import numpy as np\ndef f(p, x):\n    np.save(p, x)\n    x.tofile(p)\n", ["f", "f"]),
        ("import numpy as onp\ndef f(p, x):\n    onp.savez_compressed(p, x=x)\n", ["f"]),
        ("import faiss\ndef f(i, p):\n    faiss.write_index(i, str(p))\n", ["f"]),
        # the same writers into the file of an atomic write (only inside its block)
        (
            "def f(fig, p, x):\n    with atomic_write(p, 'wb') as fh:\n        fig.savefig(fh)\n"
            "        np.save(fh, x)\n    np.save(fh, x)\n",
            ["f"],
        ),
        (  # the atomic write's file is `out`, not `fh`
            "def f(p, x):\n    with _atomic.atomic_write(p, 'wb') as out, open(p) as fh:\n"
            "        np.save(fh, x)\n",
            ["f"],
        ),
        # reads, flags, helpers and look-alikes are not writes
        ("def f(p):\n    open(p)\n    open(p, 'rb')\n    p.open()\n    p.open('r')\n", []),
        ("import os\ndef f(p):\n    os.open(p, os.O_WRONLY)\n", []),
        ("async def f(s):\n    await s.open('ws')\n", []),
        ("from hopgym._atomic import write_text\ndef f(p):\n    write_text(p, 'x')\n", []),
        ("from hopgym import _atomic\ndef f(p):\n    _atomic.write_text(p, 'x')\n", []),
        (  # an object's own save(path) is not NumPy's
            "def f(p, x, ws):\n    with atomic_write(p, 'wb') as fh:\n        np.save(fh, x)\n"
            "    ws.save(p)\n",
            [],
        ),
        ('def f():\n    """>>> p.write_text("x")"""\n', []),
    ],
)
def test_the_scan_finds_raw_writes(source: str, found: list[str]) -> None:
    visitor = _Writes()
    visitor.visit(ast.parse(source))
    assert [scope for _, scope, _ in visitor.found] == found
