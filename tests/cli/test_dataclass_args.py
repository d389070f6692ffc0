"""The option generator's rules, one field type at a time."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from hopgym.cli._dataclass_args import (
    ArgumentParser,
    ConfigError,
    ConfigSpec,
    add_config_arguments,
    changed,
    config_from_args,
    plain,
)


@dataclass
class Demo:
    """A config with one field of every kind."""

    name: str = field(metadata={"help": "Required: no default."})
    steps: int = field(default=3, metadata={"help": "An int.", "aliases": ["--n"]})
    rate: float = field(default=0.5, metadata={"help": "A float."})
    limit: int | None = field(default=None, metadata={"help": "An optional int."})
    label: str | None = field(default=None, metadata={"help": "An optional str."})
    plot: bool = field(default=True, metadata={"help": "A bool that is on."})
    bf16: bool | None = field(default=None, metadata={"help": "A bool that may be unset."})
    mode: Literal["a", "b"] = field(default="a", metadata={"help": "A Literal."})
    kind: str = field(default="x", metadata={"help": "Choices from metadata.", "choices": ("x", "y")})
    seeds: tuple[int, ...] = field(default=(0, 1), metadata={"help": "A tuple."})
    tags: list[str] = field(default_factory=list, metadata={"help": "A list."})
    kw: dict[str, Any] = field(default_factory=dict, metadata={"help": "A dict."})
    out: str | None = field(default=None, metadata={"help": "Optional value.", "nargs": "?", "const": "-"})

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def parser(*specs: ConfigSpec | type) -> argparse.ArgumentParser:
    p = ArgumentParser(prog="demo", exit_on_error=False)
    for spec in specs or (Demo,):
        add_config_arguments(p, spec)
    return p


def demo(*argv: str) -> Demo:
    return config_from_args(parser().parse_args(["--name", "n", *argv]), Demo)


def test_defaults_and_required():
    d = demo()
    assert (d.steps, d.rate, d.limit, d.plot, d.bf16, d.mode, d.seeds, d.tags, d.kw, d.out) == (
        3,
        0.5,
        None,
        True,
        None,
        "a",
        (0, 1),
        [],
        {},
        None,
    )
    with pytest.raises(SystemExit):
        parser().parse_args([])  # --name is required


def test_every_kind_of_field():
    d = demo(
        "--n",
        "4",
        "--rate",
        "1e-3",
        "--limit",
        "7",
        "--label",
        "none",
        "--no-plot",
        "--bf16",
        "--mode",
        "b",
        "--kind",
        "y",
        "--seeds",
        "5",
        "6,7",
        "--tags",
        "p",
        "--tags",
        "q",
        "--kw",
        "a=1",
        "b=(1,2)",
        "--kw",
        "c=text",
        "--out",
    )
    assert (d.steps, d.rate, d.limit, d.label, d.plot, d.bf16, d.mode, d.kind) == (
        4,
        1e-3,
        7,
        "none",
        False,
        True,
        "b",
        "y",
    )  # "none" stays a string for str fields
    assert d.seeds == (5, 6, 7) and d.tags == ["p", "q"]
    assert d.kw == {"a": 1, "b": (1, 2), "c": "text"} and d.out == "-"
    assert demo("--limit", "none", "--out", "f.json", "--no-bf16").limit is None
    assert demo("--steps=2").steps == 2


def test_bad_values_are_usage_errors():
    for argv in (["--steps", "x"], ["--mode", "c"], ["--kind", "z"], ["--seeds", "1,a"], ["--kw", "novalue"]):
        with pytest.raises((SystemExit, argparse.ArgumentError)):
            parser().parse_args(["--name", "n", *argv])


def test_the_config_checks_its_values():
    with pytest.raises(ConfigError, match="steps must be >= 0"):
        demo("--steps", "-1")


def test_help_is_plain_and_names_the_defaults():
    lines = [" ".join(line.split()) for line in parser().format_help().splitlines()]
    for line in (
        "--steps N, --n N An int (default: 3).",
        "--limit N An optional int.",
        "--plot, --no-plot A bool that is on (default: on).",
        "--bf16, --no-bf16 A bool that may be unset.",
        "--mode {a,b} A Literal (default: a).",
        "--kind {x,y} Choices from metadata (default: x).",
        "--seeds N [N ...] A tuple (default: 0,1).",
    ):
        assert line in lines
    assert plain("``a`` :class:`~x.Y` `b`") == "a x.Y b"

    @dataclass
    class NoHelp:
        x: int = 0

    with pytest.raises(TypeError, match="no metadata"):
        parser(NoHelp)

    @dataclass
    class Union:
        x: int | float = field(default=0, metadata={"help": "h"})

    with pytest.raises(TypeError, match="only X | None unions"):
        parser(Union)

    @dataclass
    class Named:  # str | SomeClass: the command line gives the name, as in HfArgumentParser
        x: int | str = field(default="a", metadata={"help": "h"})

    assert config_from_args(parser(Named).parse_args(["--x", "7"]), Named).x == "7"


@dataclass
class Inner:
    """A config passed through to a library."""

    depth: int = field(default=2, metadata={"help": "Depth."})
    wide: bool = field(default=False, metadata={"help": "Wide."})


def test_prefix_aliases_kv_flag_and_changed():
    spec = ConfigSpec(Inner, prefix="net", kv_flag="--net", aliases={"depth": ("--d",)})
    p = parser(spec)
    args = p.parse_args(["--net-depth", "5", "--net", "wide=True"])
    assert config_from_args(args, spec) == Inner(depth=5, wide=True)
    assert changed(args, spec) == ["--net-depth", "--net"]
    assert config_from_args(p.parse_args(["--d", "1"]), spec).depth == 1
    assert changed(p.parse_args([]), spec) == []
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_args(p.parse_args(["--net", "height=1"]), spec)


def test_positional_and_excluded_fields():
    @dataclass
    class Files:
        paths: tuple[str, ...] = field(metadata={"help": "Files.", "positional": True})
        size: int = field(default=1, metadata={"help": "Size."})

    spec = ConfigSpec(Files, exclude=frozenset({"size"}))
    p = parser(spec)
    args = p.parse_args(["a.jsonl", "b.jsonl"])
    assert config_from_args(args, spec, size=3) == Files(("a.jsonl", "b.jsonl"), 3)
    assert not hasattr(args, "size")
