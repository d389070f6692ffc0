"""The README's adversarial reward table: mean return per episode of each scripted policy under
each reward preset, on the synthetic routing world of ``tests/rewards/test_adversarial.py``.

    python benchmarks/reward_table.py [--questions 40] [--parse lenient|strict] [--protocol tags|r3|tools]

The policies and the gullible judge are the test suite's own (``tests/rewards``), so the table and
the tests cannot drift; the test asserts the ordering (no policy above the oracle), this prints
the numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "rewards"), str(ROOT / "tests")]

from reward_helpers import ADVERSARIES, ORACLE, TOOL_ADVERSARIES, play  # noqa: E402
from rewards.test_adversarial import JUDGE, synthetic  # noqa: E402

from hopgym.rewards import PRESETS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--parse", default="lenient", choices=("lenient", "strict"))
    parser.add_argument("--protocol", default="tags", choices=("tags", "r3", "tools"))
    args = parser.parse_args()
    variants = [(name, None) for name in PRESETS] + [("r3rag", JUDGE)]
    heads = [n if j is None else f"{n} + gullible judge" for n, j in variants]
    envs = [synthetic(n, j, args.protocol, args.parse) for n, j in variants]
    ids = [s.id for s in envs[0].unwrapped.task.samples][: args.questions]
    print(
        f"mean return per episode, {len(ids)} synthetic routing questions, "
        f"parse={args.parse}, protocol={args.protocol}\n"
    )
    print("| policy | " + " | ".join(heads) + " |")
    print("| --- |" + " --- |" * len(heads))
    extra = TOOL_ADVERSARIES if args.protocol == "tools" else ()
    for policy in (ORACLE, *ADVERSARIES, *extra):
        means = []
        for env in envs:
            total = sum(play(env, policy, qid).total for qid in ids)
            means.append(total / len(ids))
        cells = " | ".join(f"{m:.2f}".replace("-", "−") for m in means)
        print(f"| {policy.name} | {cells} |")


if __name__ == "__main__":
    main()
