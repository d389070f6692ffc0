"""Load on the env server (``hopgym serve-env``): episodes/s with 1, 16 and 64 concurrent sessions
against in-process stepping of the same env, step latency, CPU per step, errors, and a client
killed mid-episode.

    python benchmarks/env_server_load.py                       # the table (~2-4 min)
    python benchmarks/env_server_load.py --episodes 1024 --concurrency 1 16 64 128 --batched 128/2

The server runs in a child process (``hopgym serve-env``, what a user runs) so that it does not
share this process's GIL with the clients; the clients are coroutines on one event loop. Every
episode is the oracle's: it resets on question ``index``, searches each hop's query of the gold
decomposition, then answers the gold answer (the actions are computed here from the same env's
task, before the clock starts), so the server and the in-process run step exactly the same turns;
the total reward of both is compared.

Rows: ``in-process`` (one env, ``env.step`` in a loop: the ceiling), then:

- ``N sessions``: the per-session protocol, OpenEnv's ``/ws`` as OpenEnv's ``EnvClient`` speaks
  it (``websockets`` and ``json``): N connections, one session each, one message per step;
- ``N sessions batched (K connections)``: hopgym's ``batch`` message, what a trainer holding many
  episodes sends: K connections, each holding N/K sessions and sending one message a round with
  each of its sessions' next turn (a reset where an episode ended); a step's latency is its
  message's round trip.

Columns: episodes/s, steps/s, the ratio to in-process, p50/p99 of one step's round trip as the
client sees it, the CPU time per step of the server process and of this process (the clients;
for the in-process row, the env itself), errors (error replies or broken sessions), and whether
the rewards equal in-process. Then 16 sessions again, alone and beside one adversarial client
that sends turns built to be slow to read (:data:`ADVERSARIAL`: repeated unclosed tags, deep
brackets, huge tool-call arguments, under the tools protocol): their p99 should stay under 100 ms.
Then a client opens a session, steps once and dies without closing: the server's open-session
count must fall back to 0 (``leaked`` = sessions still open 5 s later).

Both sides are warmed up alike (one full pass first). Each row is the median of ``--repeats``
runs, and each run follows an in-process run of its own: the ratio is the median of those pairs'
ratios (``vs_in_process_range``: the lowest and the highest), so a load that changes during the
benchmark moves both sides of a ratio alike.

The clients share the machine with the server: on a small machine they take CPU the server would
otherwise have (say how many cores the machine had, and how busy it was, with the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hopgym  # noqa: E402, F401 - registers the ids
from hopgym._atomic import check_writable, write_json  # noqa: E402

ADVERSARY_ROW_SESSIONS = 16  # the honest sessions of the adversarial row and the row before it


def oracle_actions(env: gym.Env, index: int) -> list[str]:
    """The oracle's turns for question ``index``: each hop's search, then the gold answer."""
    task = env.unwrapped.task
    sample = task.samples[index % len(task.samples)]
    turns = [
        f"<think>{hop.question}</think><search>{hop.search_query}</search>" for hop in sample.decomposition
    ]
    max_turns = env.unwrapped.options.max_turns
    return turns[: max_turns - 1] + [f"<think>done</think><answer>{sample.answer}</answer>"]


def in_process(env_id: str, episodes: int) -> dict[str, Any]:
    env = gym.make(env_id)
    plans = [oracle_actions(env, i) for i in range(episodes)]
    latencies, total, steps = [], 0.0, 0
    started = time.perf_counter()
    for i, plan in enumerate(plans):
        env.reset(options={"index": i})
        for action in plan:
            t = time.perf_counter()
            _, reward, terminated, truncated, _ = env.step(action)
            latencies.append(time.perf_counter() - t)
            total += reward
            steps += 1
            if terminated or truncated:
                break
    wall = time.perf_counter() - started
    return {
        "wall": wall,
        "episodes": episodes,
        "steps": steps,
        "latencies": latencies,
        "reward": total,
        "errors": 0,
    }


async def _client(url: str, queue: asyncio.Queue, plans: list[list[str]], out: dict[str, Any]) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:

        async def call(message: dict[str, Any]) -> dict[str, Any]:
            await ws.send(json.dumps(message))
            return json.loads(await ws.recv())

        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            reply = await call({"type": "reset", "data": {"options": {"index": i}}})
            if reply["type"] != "observation":
                out["errors"] += 1
                continue
            for action in plans[i]:
                t = time.perf_counter()
                reply = await call({"type": "step", "data": {"message": action}})
                out["latencies"].append(time.perf_counter() - t)
                if reply["type"] != "observation":
                    out["errors"] += 1
                    break
                out["steps"] += 1
                out["reward"] += reply["data"]["reward"]
                if reply["data"]["done"]:
                    break
        await ws.send(json.dumps({"type": "close"}))


async def _run_clients(base: str, plans: list[list[str]], clients: int, client: Any) -> dict[str, Any]:
    """Run ``clients`` copies of ``client(url, queue, plans, out)`` over one queue of episodes."""
    url = base.replace("http", "ws", 1) + "/ws"
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(len(plans)):
        queue.put_nowait(i)
    out: dict[str, Any] = {"latencies": [], "steps": 0, "reward": 0.0, "errors": 0}
    started = time.perf_counter()
    results = await asyncio.gather(
        *(client(url, queue, plans, out) for _ in range(clients)), return_exceptions=True
    )
    out["errors"] += sum(isinstance(r, BaseException) for r in results)
    out["wall"] = time.perf_counter() - started
    out["episodes"] = len(plans)
    return out


async def over_server(base: str, plans: list[list[str]], concurrency: int) -> dict[str, Any]:
    return await _run_clients(base, plans, concurrency, _client)


async def _batched_client(
    url: str, queue: asyncio.Queue, plans: list[list[str]], width: int, out: dict[str, Any]
) -> None:
    """One connection driving ``width`` sessions with ``batch`` messages: each round, one message
    holds every session's next turn (a reset where its episode ended), as a trainer holding
    ``width`` episodes would send them."""
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:
        todo: dict[int, list[str]] = {}  # slot -> the turns its episode has left
        while True:
            items = []
            for slot in range(width):
                if slot not in todo:
                    try:
                        i = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        continue
                    todo[slot] = list(plans[i])
                    items.append({"session": slot, "type": "reset", "data": {"options": {"index": i}}})
                else:
                    items.append({"session": slot, "type": "step", "data": {"message": todo[slot][0]}})
            if not items:
                break
            t = time.perf_counter()
            await ws.send(json.dumps({"type": "batch", "data": items}))
            replies = json.loads(await ws.recv())["data"]
            elapsed = time.perf_counter() - t
            for item, reply in zip(items, replies, strict=True):
                slot = item["session"]
                if reply["type"] != "observation":
                    out["errors"] += 1
                    todo.pop(slot)
                elif item["type"] == "step":
                    out["latencies"].append(elapsed)
                    out["steps"] += 1
                    out["reward"] += reply["data"]["reward"]
                    todo[slot].pop(0)
                    if reply["data"]["done"] or not todo[slot]:
                        del todo[slot]
        await ws.send(json.dumps({"type": "close"}))


async def batched(base: str, plans: list[list[str]], width: int, connections: int = 1) -> dict[str, Any]:
    """:func:`over_server` with ``connections`` connections, each stepping ``width`` sessions
    per message (while the server answers one, the client reads and writes another's)."""

    def client(url: str, queue: asyncio.Queue, plans: list[list[str]], out: dict[str, Any]) -> Any:
        return _batched_client(url, queue, plans, width, out)

    return await _run_clients(base, plans, connections, client)


#: Turns built to be slow to read, each within the server's --max-action-bytes (64 KiB): repeated
#: unclosed tags (once cubic under the tools protocol), deep brackets (once a RecursionError), a
#: huge tool-call argument.
ADVERSARIAL = [
    "<think>" * 8000,
    "<think>a" * 6000 + "<search>x",
    "[" * 30000,
    '{"name": "search", "arguments": {"query": "' + "x" * 60000 + '"}}',
    "<tool_call>" * 5000,
]


async def _adversary(url: str, stop: asyncio.Event, out: dict[str, Any]) -> None:
    """One client sending :data:`ADVERSARIAL` turns under the tools protocol until ``stop``."""
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None) as ws:

        async def call(message: dict[str, Any]) -> dict[str, Any]:
            await ws.send(json.dumps(message))
            return json.loads(await ws.recv())

        i = 0
        while not stop.is_set():
            reply = await call(
                {"type": "reset", "data": {"env_options": {"protocol": "tools", "max_turns": 8}}}
            )
            if reply["type"] != "observation":
                out["adversary_errors"] += 1
                await asyncio.sleep(0.01)
                continue
            for _ in range(8):
                t = time.perf_counter()
                reply = await call({"type": "step", "data": {"message": ADVERSARIAL[i % len(ADVERSARIAL)]}})
                out["adversary_latencies"].append(time.perf_counter() - t)
                i += 1
                if reply["type"] != "observation" or reply["data"]["done"] or stop.is_set():
                    break


async def with_adversary(base: str, plans: list[list[str]], concurrency: int) -> dict[str, Any]:
    """:func:`over_server` with ``concurrency`` clients while one adversary sends slow turns."""
    url = base.replace("http", "ws", 1) + "/ws"
    stop = asyncio.Event()
    extra: dict[str, Any] = {"adversary_latencies": [], "adversary_errors": 0}
    adversary = asyncio.ensure_future(_adversary(url, stop, extra))
    await asyncio.sleep(0.2)  # the adversary is stepping before the others start
    out = await over_server(base, plans, concurrency)
    stop.set()
    await adversary
    return {**out, **extra}


async def killed_client(base: str) -> int:
    """Open a session, step once, drop the TCP connection; sessions still open 5 s later."""
    from websockets.asyncio.client import connect

    ws = await connect(base.replace("http", "ws", 1) + "/ws")
    await ws.send(json.dumps({"type": "reset", "data": {}}))
    await ws.recv()
    await ws.send(json.dumps({"type": "step", "data": {"message": "<search>x</search>"}}))
    await ws.recv()
    ws.transport.abort()  # no close frame: the process died
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if health(base)["sessions"] == 0:
            return 0
        await asyncio.sleep(0.05)
    return health(base)["sessions"]


def health(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/health", timeout=10) as resp:
        return json.loads(resp.read())


def start_server(
    env_id: str, max_sessions: int, workers: int, step_batch: int
) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, "-m", "hopgym.cli", "serve-env", "--env", env_id, "--port", "0",
        "--max-sessions", str(max_sessions), "--workers", str(workers), "--step-batch", str(step_batch),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if " at " not in line:
        proc.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return proc, line.split(" at ", 1)[1].split()[0]


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, or ``None`` without ``/proc``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(run: Any, pid: int | None = None) -> dict[str, Any]:
    """``run()``'s result with the CPU seconds this process and server ``pid`` spent in it."""
    server, client = process_cpu(pid) if pid else None, time.process_time()
    res = run()
    res["client_cpu"] = time.process_time() - client
    after = process_cpu(pid) if pid else None
    res["server_cpu"] = None if server is None or after is None else after - server
    return res


def row(name: str, pairs: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> dict[str, Any]:
    """One row from ``(run, the in-process run just before it)`` pairs: the median throughput,
    the median of the pairs' ratios, the latencies of the median run, CPU per step."""
    runs = [run for run, _ in pairs]
    med = sorted(runs, key=lambda r: r["episodes"] / r["wall"])[len(runs) // 2]
    lat = sorted(med["latencies"]) or [0.0]
    ratios = [(r["episodes"] / r["wall"]) / (b["episodes"] / b["wall"]) for r, b in pairs if b is not None]

    def per_step(key: str) -> float | None:
        values = [r[key] / r["steps"] for r in runs if r.get(key) is not None and r["steps"]]
        return round(1e6 * statistics.median(values), 1) if values else None

    return {
        "run": name,
        "episodes_per_s": round(statistics.median(r["episodes"] / r["wall"] for r in runs), 1),
        "steps_per_s": round(statistics.median(r["steps"] / r["wall"] for r in runs), 1),
        "vs_in_process": round(statistics.median(ratios), 2) if ratios else None,
        "vs_in_process_range": [round(min(ratios), 2), round(max(ratios), 2)] if ratios else None,
        "p50_step_ms": round(1000 * statistics.median(lat), 2),
        "p99_step_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2),
        "server_cpu_us_per_step": per_step("server_cpu"),
        "client_cpu_us_per_step": per_step("client_cpu"),
        "errors": sum(r["errors"] for r in runs),
        "rewards_equal": None
        if not ratios
        else all(abs(r["reward"] - b["reward"]) < 1e-6 for r, b in pairs if b is not None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="hopgym/Synthetic-v1")
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--batched",
        nargs="*",
        default=["16/1", "64/1", "64/2"],
        help="batched rows, SESSIONS/CONNECTIONS: that many sessions over that many connections, "
        "each connection sending one batch message a round for its share of the sessions",
    )
    parser.add_argument(
        "--repeats", type=int, default=7, help="runs of each row; the median is shown (and the ratios' range)"
    )
    parser.add_argument("--workers", type=int, default=8, help="the server's --workers")
    parser.add_argument("--step-batch", type=int, default=16, help="the server's --step-batch")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "env_server_load.json"))
    args = parser.parse_args()
    batched_rows = []
    for spec in args.batched:
        sessions, _, connections = spec.partition("/")
        if not (sessions.isdigit() and connections.isdigit() and int(sessions) % int(connections or 0) == 0):
            parser.error(f"--batched takes SESSIONS/CONNECTIONS with SESSIONS a multiple, got {spec!r}")
        batched_rows.append((int(sessions), int(connections)))
    check_writable(args.out)  # before the server and the load, not after them

    # Both sides warmed up the same way: one full pass over the episodes first (the env, the
    # index's caches, the query cache). Then each run of a row follows an in-process run of its
    # own, and the row's ratio is the median of those pairs' ratios: a machine whose load
    # changes between rows moves both sides of each ratio alike.
    plans = [oracle_actions(gym.make(args.env), i) for i in range(args.episodes)]
    # the fixed rows run 16 sessions and one adversary (+ the killed client's session)
    sessions = max([ADVERSARY_ROW_SESSIONS + 1, *args.concurrency, *(c for c, _ in batched_rows)]) + 2
    proc, url = start_server(args.env, sessions, args.workers, args.step_batch)
    inproc: list[dict[str, Any]] = []

    def paired(run: Any) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
        for _ in range(args.repeats):
            inproc.append(measured(lambda: in_process(args.env, args.episodes)))
            pairs.append((measured(lambda: asyncio.run(run()), proc.pid), inproc[-1]))
        return pairs

    try:
        in_process(args.env, args.episodes)
        asyncio.run(over_server(url, plans, max(args.concurrency)))  # warm up, as in-process
        rows = []
        for c in args.concurrency:
            rows.append(row(f"server, {c} sessions", paired(lambda c=c: over_server(url, plans, c))))
        for c, k in batched_rows:
            name = f"server, {c} sessions batched ({k} connection{'s' * (k > 1)}, 1 message a round each)"
            rows.append(row(name, paired(lambda c=c, k=k: batched(url, plans, c // k, k))))
        rows.append(
            row(
                "server, 16 sessions (again, for the next row)",
                paired(lambda: over_server(url, plans, ADVERSARY_ROW_SESSIONS)),
            )
        )
        noisy_pairs = paired(lambda: with_adversary(url, plans, ADVERSARY_ROW_SESSIONS))
        rows.append(row("server, 16 sessions + 1 adversarial client", noisy_pairs))
        noisy = sorted((r for r, _ in noisy_pairs), key=lambda r: r["episodes"] / r["wall"])[
            len(noisy_pairs) // 2
        ]
        adv = sorted(noisy["adversary_latencies"]) or [0.0]
        leaked = asyncio.run(killed_client(url))
        stats = health(url)["stats"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rows.insert(0, row("in-process", [(r, None) for r in inproc]))
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    adversary = {
        "steps": len(noisy["adversary_latencies"]),
        "p50_step_ms": round(1000 * statistics.median(adv), 2),
        "max_step_ms": round(1000 * adv[-1], 2),
        "errors": noisy["adversary_errors"],
    }
    print(f"adversarial client (its own steps): {adversary}")
    print(f"killed client: sessions leaked = {leaked}; server stats: {stats}")
    result = {
        "env": args.env,
        "episodes": args.episodes,
        "repeats": args.repeats,
        "workers": args.workers,
        "step_batch": args.step_batch,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "rows": rows,
        "adversary": adversary,
        "killed_client_leaked_sessions": leaked,
    }
    write_json(args.out, result)


if __name__ == "__main__":
    main()
