"""The ``vf-eval`` command on hopgym's taskset against a served model, on a CPU: its eval table.

verifiers' own command (``vf-eval hopgym-verifiers ...``: its ``main(argv)``) evaluates
``hopgym/Tiny-v1`` against ``transformers serve`` behind hopgym's relay
(``python -m hopgym.integrations.sse_relay``, which adds the ``data: [DONE]`` verifiers waits
for). The served models are three tiny bigram models built here (nothing is downloaded), each of
which writes one fixed turn whatever it is sent: one answers ``1962`` (right on ``tiny-1`` only),
one searches until the turn budget ends, one writes no tags. For every episode ``vf-eval`` writes
to ``traces.jsonl``, the reward and reward terms it reports are compared with hopgym's own for the
model's turns replayed through ``gym.make``.

verifiers runs its null-harness chat program (a PEP 723 script) through ``uv sync --script``
against a package index; offline, this script gives that program this interpreter instead
(:func:`provide_chat_program`: verifiers depends on every package the program needs), which is
the one step that is not verifiers' own.

Run (``pip install -e ".[verifiers,serving,train]"``)::

    python examples/verifiers_eval_check.py --out benchmarks/results/verifiers_eval.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from hopgym._atomic import atomic_write, check_writable, write_text

ROOT = Path(__file__).resolve().parents[1]

#: The searcher's query and the answer: single added tokens (a bigram chain repeats no token).
QUERY, ANSWER = "Qelvor Dynamics founded", "1962"
#: What each served bigram model writes every turn, and its added tokens.
MODELS = {
    "answerer": (f"<think>hm</think><answer>{ANSWER}</answer>", [ANSWER]),
    "searcher": (f"<think>hm</think><search>{QUERY}</search>", [QUERY]),
    "rambler": ("no tags at all", ["no tags at all"]),
}
#: The env options per model (the searcher and the rambler on a short budget).
ENV_KWARGS = {
    "answerer": {"reward": "searchr1"},
    "searcher": {"reward": "searchr1", "max_turns": 3},
    "rambler": {"reward": "searchr1", "max_turns": 2},
}


def provide_chat_program(scripts_dir: Path) -> Path:
    """Give verifiers' null-harness chat program this interpreter instead of ``uv``'s.

    verifiers runs the program (``CHAT_PROGRAM_SOURCE``, a PEP 723 script needing openai, mcp,
    httpx, httpx2, tenacity and certifi) through ``Runtime.prepare_uv_script``, which runs ``uv
    sync --script`` against a package index and caches the interpreter it found per script path.
    Offline there is no index, but this interpreter has the script's packages: the script is
    written where ``prepare_uv_script`` looks for it and this interpreter cached for it, which is
    what ``uv`` would have returned. Returns the script's path.
    """
    import importlib.util

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    for module in ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi"):
        if importlib.util.find_spec(module) is None:
            raise RuntimeError(f"verifiers' chat program needs {module}")
    data = CHAT_PROGRAM_SOURCE.encode()
    path = scripts_dir / f"{hashlib.sha256(data).hexdigest()}.py"
    with atomic_write(path, "wb") as fh:  # the folder is made too
        fh.write(data)
    SubprocessRuntime.scripts_dir = str(scripts_dir)
    SubprocessRuntime._interpreters[str(path)] = sys.executable
    return path


def run_check(limit: int = 3) -> dict[str, Any]:
    """``vf-eval`` of each served model on ``limit`` Tiny questions; its rewards against hopgym's."""
    sys.path.insert(0, str(ROOT / "tests"))
    from served_models import build_bigram_model, free_port, serve
    from verifiers.v1.cli.eval.main import main as vf_eval

    from hopgym.integrations._common import replay_episode
    from hopgym.integrations.verifiers import TASKSET_ID

    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        provide_chat_program(root / "scripts")

        def build(_: Path) -> None:  # the server loads each model when a request first names it
            for name, (turn, extra) in MODELS.items():
                build_bigram_model(root / name, turn, extra)

        for url, _, _ in serve(root, build, pin=False):
            port = free_port()
            relay = subprocess.Popen(
                [sys.executable, "-m", "hopgym.integrations.sse_relay", url, "--port", str(port)],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert relay.stdout is not None and f"127.0.0.1:{port}" in relay.stdout.readline()
                for name, kwargs in ENV_KWARGS.items():
                    out = root / "out" / name
                    argv = [TASKSET_ID, "--env.taskset.env-id", "hopgym/Tiny-v1"]
                    argv += ["--env.taskset.env-kwargs", json.dumps(kwargs), "--model", str(root / name)]
                    argv += ["--no-push", "--select.limit", str(limit), "--sampling.max-tokens", "32"]
                    argv += ["--client.base-url", f"http://127.0.0.1:{port}/v1"]
                    argv += ["--client.api-key-var", "HOPGYM_NO_KEY", "--output-dir", str(out)]
                    t0 = time.perf_counter()
                    vf_eval(argv)
                    seconds = time.perf_counter() - t0
                    (traces,) = out.glob("*/traces.jsonl")
                    episodes = []
                    for line in map(json.loads, traces.read_text().splitlines()):
                        (trace,) = line["traces"]
                        qid = line["task"]["data"]["question_id"]
                        turns = [MODELS[name][0]] * int(trace["metrics"]["turns"])  # the model's fixed turn
                        total, terms, _ = replay_episode("hopgym/Tiny-v1", qid, turns, **kwargs)
                        got = {k: r["score"] for k, r in trace["rewards"].items()}
                        reward = sum(r["score"] * r["weight"] for r in trace["rewards"].values())
                        episodes.append(
                            {
                                "question_id": qid,
                                "ok": bool(line["ok"] and trace["ok"] and not trace["errors"]),
                                "turns": int(trace["metrics"]["turns"]),
                                "answered": trace["metrics"]["answered"],
                                "vf_reward": reward,
                                "vf_reward_terms": got,
                                "hopgym_reward": total,
                                "hopgym_reward_terms": terms,
                                "match": math.isclose(reward, total, abs_tol=1e-9) and got == terms,
                            }
                        )
                    episodes.sort(key=lambda e: e["question_id"])
                    runs.append(
                        {
                            "model": name,
                            "turn": MODELS[name][0],
                            "env_kwargs": kwargs,
                            "seconds": round(seconds, 1),
                            "episodes": episodes,
                            "all_match": all(e["match"] and e["ok"] for e in episodes),
                        }
                    )
            finally:
                relay.terminate()
                relay.wait(timeout=20)
    return {
        "what": "vf-eval hopgym-verifiers (verifiers' main(argv)) against transformers serve behind "
        "hopgym's sse_relay; three bigram models that write one fixed turn each",
        "command": "vf-eval hopgym-verifiers --env.taskset.env-id hopgym/Tiny-v1 --env.taskset.env-kwargs "
        "'<json>' --model <dir> --client.base-url <relay>/v1 --no-push --select.limit "
        f"{limit} --sampling.max-tokens 32",
        "runs": runs,
        "all_match": all(r["all_match"] for r in runs),
        "versions": {
            "verifiers": version("verifiers"),
            "transformers": version("transformers"),
            "python": platform.python_version(),
        },
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--limit", type=int, default=3, help="questions per model")
    p.add_argument("--out", type=Path, help="write the result JSON here")
    args = p.parse_args()
    if args.out:
        check_writable(args.out)  # before the run, not after it
    result = run_check(args.limit)
    text = json.dumps(result, indent=1)
    if args.out:
        write_text(args.out, text + "\n")
    print(text)
    if not result["all_match"]:
        raise SystemExit("vf-eval's rewards differ from hopgym's (see above)")


if __name__ == "__main__":
    main()
