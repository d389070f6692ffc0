"""The size of the turn code: before ``hopgym/turns`` (commit 59f03b1) and now, in source lines.

    python benchmarks/turn_code_size.py

A source line is a line that holds code: blank lines, comments and docstrings are not counted
(a statement over several lines counts each line). The baseline is read from git
(``git show 59f03b1:<path>``): the modules that held the turn format then, and the functions of
other modules that read or rendered turns then and whose work ``hopgym/turns`` does now (named
below: the second step path of the ``tools`` protocol in the env, among others). Now: ``hopgym/turns``
and the same modules, where they still exist. Prints each file's count, the totals and the
ratio of now to before.
"""

from __future__ import annotations

import ast
import io
import subprocess
import textwrap
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "59f03b1"
#: The modules of the turn format at the baseline, read whole.
BASE_FILES = (
    "hopgym/envs/protocols.py",
    "hopgym/envs/tool_protocol.py",
    "hopgym/envs/actions.py",
    "hopgym/agents/prompts.py",
    "hopgym/backends/stops.py",
    "hopgym/rewards/trl.py",
)
#: Functions (and classes) of other baseline modules that read or rendered turns and whose work
#: ``hopgym/turns`` does now: the env's second step path for ``tools`` (``_read_tools``,
#: ``_step_tools``), its reading of a text turn (``_read``: now ``Protocol.read``) and its text
#: rendering of a transcript (``render``: now ``Protocol.render_transcript``); the trajectory
#: files' reader of documents out of an observation (now ``Protocol.documents_of``) and their
#: any-source container (now ``ANY_SOURCE``).
BASE_FUNCTIONS = {
    "hopgym/envs/multihop_qa.py": ("_read_tools", "_step_tools", "_read", "render"),
    "hopgym/agents/trajectories.py": ("_docs_from_observation", "_AnySource"),
}
#: The turn code now: the package, and the baseline's modules that are left.
NOW_GLOBS = ("hopgym/turns/*.py", *BASE_FILES)
_SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}
_DOC_HOLDERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def sloc(source: str) -> int:
    """The source lines of ``source``: lines with a token that is not a comment or a docstring."""
    docs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, _DOC_HOLDERS) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docs.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _SKIP:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def _functions(source: str, names: tuple[str, ...]) -> str:
    """The source of the named functions and classes (methods too) of ``source``, dedented, one
    after another."""
    lines = source.splitlines(keepends=True)
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            out.append(textwrap.dedent("".join(lines[start - 1 : node.end_lineno])))
    return "".join(out)


def _git_show(path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{BASELINE}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    before: list[tuple[str, int]] = [(p, sloc(_git_show(p))) for p in BASE_FILES]
    for path, names in BASE_FUNCTIONS.items():
        before.append((f"{path}: {', '.join(names)}", sloc(_functions(_git_show(path), names))))
    now_paths = sorted({p for pattern in NOW_GLOBS for p in ROOT.glob(pattern)})
    now = [(str(p.relative_to(ROOT)), sloc(p.read_text(encoding="utf-8"))) for p in now_paths]
    for title, rows in ((f"before ({BASELINE})", before), ("now", now)):
        print(title)
        for name, n in rows:
            print(f"  {n:>5}  {name}")
        print(f"  {sum(n for _, n in rows):>5}  total")
    total_before, total_now = sum(n for _, n in before), sum(n for _, n in now)
    print(f"now / before: {total_now} / {total_before} = {total_now / total_before:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
