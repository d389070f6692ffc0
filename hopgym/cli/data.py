"""``hopgym data``: write the synthetic world in FlashRAG layout (corpus and questions jsonl).

Options: :class:`DataConfig`, and ``--kw`` for the fields of
:class:`~hopgym.corpora.synthetic.WorldConfig`.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hopgym.cli._common import command_parser, say
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, config_from_args
from hopgym.corpora.synthetic import WorldConfig

__all__ = ["DataConfig", "add_parser", "run"]


@dataclass
class DataConfig:
    """Where ``hopgym data`` writes."""

    out: str = field(metadata={"help": "Output folder (created if missing).", "metavar": "DIR"})
    force: bool = field(
        default=False, metadata={"help": "Replace the files of an earlier export (as index build --force)."}
    )


#: The world: every WorldConfig field through ``--kw key=value`` (tuples, e.g. hops=(2,3), are
#: Python literals, which per-field options would not express as simply).
WORLD_SPEC = ConfigSpec(
    WorldConfig,
    kv_flag="--kw",
    title="world",
    exclude=frozenset(f.name for f in dataclasses.fields(WorldConfig)),
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``data`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "data",
        "export the synthetic world as FlashRAG jsonl files",
        "Write the synthetic world in FlashRAG layout: corpus.jsonl (web.jsonl "
        "too with two sources) and questions.jsonl.",
        run=run,
    )
    add_config_arguments(p, DataConfig)
    add_config_arguments(p, WORLD_SPEC)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym data``."""
    from hopgym.tasks.synthetic import export_flashrag

    cfg = config_from_args(args, DataConfig)
    paths = export_flashrag(cfg.out, config_from_args(args, WORLD_SPEC), overwrite=cfg.force)
    say(*(str(p) for p in paths))
    return 0
