"""``fast_init``: the turn objects' faster ``__init__`` keeps what a frozen dataclass promises."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from hopgym.turns.actions import Answer, Search, Think, fast_init
from hopgym.turns.base import ParsedTurn


def test_same_signature_defaults_and_frozen_behaviour():
    assert (
        str(inspect.signature(Search))
        == "(query: 'str', think: 'str' = '', source: 'str | None' = None) -> None"
    )
    s = Search("capital of France", source="wiki")
    assert (s.query, s.think, s.source) == ("capital of France", "", "wiki")
    assert s == Search(query="capital of France", think="", source="wiki") and hash(s) == hash(
        Search("capital of France", source="wiki")
    )
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.query = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Think()  # type: ignore[call-arg]
    turn = ParsedTurn(Answer("Paris"))
    assert turn.action == Answer("Paris") and turn.error is None and turn.issues == ()


def test_refuses_what_it_would_skip():
    with pytest.raises(TypeError, match="default_factory"):

        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class WithFactory:
            items: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="__post_init__"):

        @fast_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class WithPostInit:
            x: int

            def __post_init__(self) -> None:
                pass
