"""One verdict everywhere, on many turns: ``tests/turns/turn_grammar.py``'s check on N
Hypothesis-generated turns per protocol.

    python benchmarks/turn_agreement.py --cases 100000      # ~ an hour per protocol on one core
    python benchmarks/turn_agreement.py --cases 2000 --protocols tags

For each turn (valid, nearly valid and adversarial, from each protocol's grammar) the env's
step, the GEM adapter's step, the TRL reward functions and ``extract_answer``, and the protocol's
own reading must give the same answer, the same invalid verdict and the same score. Prints the
number of turns checked per protocol (and stops at the first disagreement, which Hypothesis
shrinks and prints).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "turns"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from turn_grammar import Readers, check, turns  # noqa: E402


def run(protocol: str, cases: int, seed: int) -> int:
    readers = Readers(protocol)
    count = 0

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(turns(protocol))
    def one(turn: str) -> None:
        nonlocal count
        check(readers, turn)
        count += 1
        if count % 1_000 == 0:
            print(f"{protocol}: {count} turns checked so far, all agree", flush=True)

    from hypothesis import seed as hseed

    hseed(seed)(one)()
    return count


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--protocols", nargs="+", default=["tags", "r3", "tools"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    for protocol in args.protocols:
        start = time.perf_counter()
        n = run(protocol, args.cases, args.seed)
        print(f"{protocol}: {n} turns checked, all agree ({time.perf_counter() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
