"""Runs the Python blocks of one docs page in one namespace, as a reader would, one after another.

Usage: ``python snippet_runner.py BLOCKS.json`` where the file holds ``[{"where": "page.md:12",
"code": "..."}, ...]``. Prints one JSON object per block on the last line: ``{"outputs": [...]}``
(what each block printed) or ``{"error": "...", "where": ...}`` at the first block that raised.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        blocks = json.load(f)
    namespace: dict[str, object] = {"__name__": "__main__"}
    outputs: list[str] = []
    for block in blocks:
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                exec(compile(block["code"], block["where"], "exec"), namespace)
        except BaseException:  # report any failure (SystemExit included) with its block
            result = {"outputs": outputs, "error": traceback.format_exc(), "where": block["where"]}
            sys.__stdout__.write("\n" + json.dumps(result) + "\n")
            return 0
        outputs.append(buffer.getvalue())
    sys.__stdout__.write("\n" + json.dumps({"outputs": outputs}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
