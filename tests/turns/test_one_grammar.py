"""The turn grammar lives in one place: no module outside ``hopgym/turns`` reads a turn.

Every module of ``hopgym`` outside ``hopgym/turns`` is parsed (not imported); a regular
expression or a string search (``find``, ``index``, ``split``, ``partition``, ``count``,
``startswith``...) whose pattern holds a protocol's marker (a tag such as ``<answer>``, a tool
call's ``<tool_call>`` or ``"tool_calls"``, an R3 label) is a second reader of turns, and fails
this test. Writing markers (prompts, renderings) is not reading them and is not looked at.

Nor does any module outside ``hopgym/turns`` treat the ``tools`` protocol as a special case: it
asks the protocol (``chat_tools``, ``tool_specs``, ``assistant_text``, ``route_action``...)
instead of comparing its name with ``"tools"``, importing ``ToolProtocol`` or getting it by name.
A default or a choice that is only the name (``protocol="tools"``) is not a special case.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "hopgym"
MARKERS = (
    "think>",
    "answer>",
    "search>",
    "route>",
    "information>",
    "tool_call",
    "tool_response",
    "final answer:",
    "retrieval query:",
    "problem analysis:",
    "retrieval documents:",
    "[tool_calls]",
    "python_tag",
    "\\boxed",
)
REGEX_FUNCS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
STR_METHODS = {"find", "rfind", "index", "rindex", "split", "rsplit", "partition", "rpartition", "count"}


def _readers_of_turns(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or not node.args:
            continue
        func = node.func
        is_re = isinstance(func.value, ast.Name) and func.value.id == "re" and func.attr in REGEX_FUNCS
        if not (is_re or func.attr in STR_METHODS):
            continue
        pattern = node.args[0]
        if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str):
            text = pattern.value.lower()
            if any(m in text for m in MARKERS):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _special_cases_of_tools(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare):  # protocol.name == "tools", != "tools", is "tools"
            operands = [node.left, *node.comparators]
            hit = any(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in node.ops) and any(
                isinstance(o, ast.Constant) and o.value == "tools" for o in operands
            )
        elif isinstance(node, ast.Call):  # get_protocol("tools")
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            hit = name == "get_protocol" and any(
                isinstance(a, ast.Constant) and a.value == "tools" for a in node.args
            )
        elif isinstance(node, (ast.Name, ast.Attribute)):
            hit = (node.id if isinstance(node, ast.Name) else node.attr) == "ToolProtocol"
        elif isinstance(node, ast.ImportFrom):
            hit = any(a.name == "ToolProtocol" for a in node.names)
        if hit:
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _outside_turns() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if "turns" not in p.relative_to(PACKAGE).parts]


def test_no_module_outside_turns_names_the_tools_protocol():
    offenders = [hit for path in _outside_turns() for hit in _special_cases_of_tools(path)]
    assert not offenders, "the tools protocol special-cased outside hopgym/turns:\n" + "\n".join(offenders)


def test_the_checker_finds_a_special_case(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from hopgym.turns.tools import ToolProtocol\n"
        'a = env.protocol.name == "tools"\n'
        'b = get_protocol("tools")\n'
        'c = {"protocol": "tools"}\n'  # a default: not a special case
        'd = "tools" in template\n'  # a chat template's word: not the protocol
    )
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path
    try:
        assert len(_special_cases_of_tools(bad)) == 3
    finally:
        PACKAGE = saved


def test_no_module_outside_turns_reads_a_turn():
    offenders = [hit for path in _outside_turns() for hit in _readers_of_turns(path)]
    assert not offenders, "turn parsing outside hopgym/turns:\n" + "\n".join(offenders)


def test_the_checker_finds_a_reader(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('import re\nANSWER = re.compile(r"<answer>(.*?)</answer>")\nx = "a".find("<think>")\n')
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path
    try:
        assert len(_readers_of_turns(bad)) == 2
    finally:
        PACKAGE = saved
