"""The reward wrappers read the step ``info`` through :class:`hopgym.turns.info.StepInfo`.

Every hook of ``hopgym/rewards`` takes the info as a ``StepInfo``: mypy checks its ``info["key"]``
reads and the types of what they hold. mypy types ``info.get("key")`` of an unknown key as
``object`` without a word, so this test checks every literal key a ``StepInfo`` is read with, in
either form, against the one TypedDict.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hopgym.turns.info import StepInfo

REWARDS = Path(__file__).resolve().parents[2] / "hopgym" / "rewards"
KEYS = StepInfo.__required_keys__ | StepInfo.__optional_keys__


def _keys_read(source: str) -> list[tuple[int, str]]:
    """``(line, key)`` of each literal key read from a parameter annotated ``StepInfo``."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = {
            a.arg
            for a in fn.args.args
            if isinstance(a.annotation, ast.Name) and a.annotation.id == "StepInfo"
        }
        for node in ast.walk(fn):
            target, key = None, None
            if isinstance(node, ast.Subscript):
                target, key = node.value, node.slice
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
            ):
                target, key = node.func.value, node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id in names and isinstance(key, ast.Constant):
                out.append((node.lineno, key.value))
    return out


def test_every_hook_takes_a_step_info_and_reads_only_its_keys():
    hooks, unknown = 0, []
    for path in sorted(REWARDS.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        hooks += source.count("info: StepInfo")
        unknown += [f"{path.name}:{line}: {key!r}" for line, key in _keys_read(source) if key not in KEYS]
    assert hooks >= 10, "the reward hooks no longer take a StepInfo"
    assert not unknown, "keys that StepInfo does not document:\n" + "\n".join(unknown)


def test_the_checker_finds_an_unknown_key():
    bad = 'def _step_terms(self, info: StepInfo):\n    return info.get("answr"), info["turn"], other["x"]\n'
    assert [k for _, k in _keys_read(bad)] == ["answr", "turn"]
