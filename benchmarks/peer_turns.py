"""One think-only turn of hopgym's env against SkyRL-gym's search env, into a results file.

    python benchmarks/peer_turns.py --json benchmarks/results/peer_turns.json

The measurement is ``benchmarks/env_overhead.py``'s (interleaved blocks of client CPU time per
turn, the median block): hopgym's ``gym.make("hopgym/Tiny-v1")`` with its default wrappers
(Gymnasium's ``OrderEnforcing`` and ``PassiveEnvChecker`` around the ``reward="default"`` preset,
``OutcomeReward``), hopgym's bare ``MultiHopQAEnv``, and a no-tag turn of SkyRL-gym's
``SearchEnv`` (it parses, finds no tag and calls no server). GEM and aviary are not in it: GEM's
QA env is a one-turn env over a Hugging Face dataset whose search tool needs a retrieval server,
and aviary does not install here.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from pathlib import Path

from env_overhead import _bare_turns, think_turns

from hopgym._atomic import check_writable, write_json


def main(argv: list[str] | None = None) -> int:
    """Measure and write ``--json``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, required=True, help="where to write the results")
    p.add_argument("--turns", type=int, default=20_000, help="think-only turns per block")
    p.add_argument("--blocks", type=int, default=5, help="interleaved blocks per side")
    args = p.parse_args(argv)
    check_writable(args.json)  # before the measuring, not after it
    load_before = os.getloadavg()
    name, wrapped, other = think_turns(args.blocks, args.turns)
    bare = statistics.median(_bare_turns(args.turns) for _ in range(args.blocks))
    result = {
        "turns": args.turns,
        "blocks": args.blocks,
        "python": platform.python_version(),
        # The machine's load (1, 5, 15 minutes) before and after: a busy machine slows both sides.
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "us_per_turn": {
            "hopgym, default wrappers": wrapped * 1e6,
            "hopgym, bare env": bare * 1e6,
            name: other * 1e6,
        },
    }
    write_json(args.json, result)
    for label, us in result["us_per_turn"].items():
        print(f"{us:8.2f} us  {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
