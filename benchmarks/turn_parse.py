"""Turn parsing on adversarial turns: every protocol and the TRL reward functions, at 1 MB and 4 MB.

    python benchmarks/turn_parse.py                 # 1 MB and 4 MB (a few minutes)
    python benchmarks/turn_parse.py --mb 0.25 1     # a quick run

Each shape of ``tests/turns/adversarial.py`` (repeated unclosed tags of every kind, nested
brackets and braces, huge and unterminated arguments, call openings, ...) is read by the
protocol's ``read`` in both parse modes (``lenient`` then ``strict``: a row is the two together),
or by the TRL reward functions a user passes by default (``AnswerRewardFunc()``, which detects
the protocol, and ``FormatRewardFunc()``, together). Client CPU time
(``time.process_time``), best of ``--repeat``. Prints, per shape, the seconds per MB at each size
and the ratio of the largest to the smallest size's time (linear: the size ratio, 4; quadratic:
16). Goal: under 0.2 s per MB each, ratio under 5. ``--json`` writes the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "turns"))

from adversarial import PROTOCOLS, make, reader, shapes  # noqa: E402

MB = 1_000_000


def _time(read, text: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        read(text)
        best = min(best, time.process_time() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[1.0, 4.0], help="turn sizes in MB")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    from hopgym._atomic import check_writable, write_json

    if args.json:
        check_writable(args.json)  # before the timings, not after them
    sizes = sorted(args.mb)
    rows = []
    head = " ".join(f"{s:>6g} MB s/MB" for s in sizes)
    print(f"{'reader':<6} {'shape':<26} {head}  ratio")
    for protocol in PROTOCOLS:
        read = reader(protocol)
        for shape in shapes(protocol):
            per_mb = []
            secs = []
            for size in sizes:
                text = make(protocol, shape, int(size * MB))
                took = _time(read, text, args.repeat)
                secs.append(took)
                per_mb.append(took / (len(text) / MB))
            ratio = secs[-1] / max(secs[0], 1e-9)
            rows.append(
                {"reader": protocol, "shape": shape, "sizes_mb": sizes, "s_per_mb": per_mb, "ratio": ratio}
            )
            cells = " ".join(f"{v:>13.3f}" for v in per_mb)
            print(f"{protocol:<6} {shape:<26} {cells}  {ratio:5.2f}", flush=True)
    worst = max(r["s_per_mb"][-1] for r in rows)
    worst_ratio = max(r["ratio"] for r in rows)
    print(f"worst: {worst:.3f} s/MB, worst ratio {worst_ratio:.2f} (size ratio {sizes[-1] / sizes[0]:g})")
    if args.json:
        write_json(args.json, {"rows": rows}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
