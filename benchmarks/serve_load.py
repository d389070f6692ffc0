"""Load on the retrieval server: throughput, latency and errors under concurrency and abuse.

    python benchmarks/serve_load.py                           # every row (~10 min)
    python benchmarks/serve_load.py --only bm25 --seconds 5   # some sections
    python benchmarks/serve_load.py --only ray --replicas 1 2

Starts each server itself, in a child process, through ``serve_index`` (what ``hopgym serve``
runs), on an index of ``--passages`` synthetic-world passages built once into ``--workdir``, and
prints one table:

- ``bm25``, ``dense``: 1, 8, 32 and 64 concurrent clients (one query per request, top-3), each
  with a kept-alive connection or a fresh connection per request: queries/s, p50/p99/max latency,
  errors (anything but HTTP 200), the server's average batch (queries per engine call), the CPU
  time the server process and the clients spent per query (fair where wall-clock figures are not:
  on a busy machine), and the ratio to one client. Dense retrieval is the packaged
  all-MiniLM-L6-v2 query encoder (real encoder batching) over a FAISS flat index of random unit
  vectors: encoding 100k passages takes ~35 min on one core here, and which vectors are in the
  index changes nothing in the speed of encoding queries and scanning 100k x 384 floats (the
  hashing embedder would: it has no batch speed-up to show).
- ``abuse`` (BM25): 300 idle sockets (half send nothing, half a partial request head: a
  slow-loris) beside one normal client, its latency, and how many idle sockets the server closed
  (``read_timeout``); one client sending 2 MB queries beside 8 normal clients, their worst
  latency (the 2 MB queries are refused with 413 before they reach the engine).
- ``ray``: the same BM25 index on Ray Serve with ``--replicas`` replicas (a local Ray), 1 and 32
  kept-alive clients.

The clients run in this process (coroutines on one event loop, raw HTTP/1.1, tens of microseconds
of Python a request) and share the machine with the server: on a small machine they take CPU the
server would otherwise have. Run on an idle machine, and compare ratios rather than absolute figures.
Every server runs with its query cache off (``cache_entries=0``): the clients cycle through a fixed
list of queries, which a cache would answer after the first pass, and this measures the engine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopgym.retrieval.index_store import (  # noqa: E402
    index_exists,
    read_manifest,
    save_index,
    verify_index,
)
from hopgym.retrieval.serving import ServeConfig  # noqa: E402

console = Console(width=160)

_SERVER = """
import json, sys
from hopgym.retrieval.serving import ServeConfig, serve_index
serve_index(config=ServeConfig(**json.loads(sys.argv[1])))
"""


# ------------------------------------------------------------------------------------ corpus
def corpus_and_queries(size: int, n_queries: int) -> tuple[list, list[str]]:
    """Synthetic-world passages and its oracle hop queries (2-4 word entity queries)."""
    from hopgym.corpora.synthetic import WorldConfig, generate_world

    world = generate_world(WorldConfig(n_entities=size, n_questions=max(200, n_queries), seed=0))
    queries = [h.search_query for s in world.samples for h in s.decomposition]
    rng = np.random.default_rng(0)
    pick = rng.choice(len(queries), size=min(n_queries, len(queries)), replace=False)
    return list(world.passages), [queries[i] for i in pick]


def build_indexes(workdir: Path, size: int, kinds: set[str]) -> tuple[dict[str, Path], list[str]]:
    """The BM25 and dense indexes (reused when ``workdir`` already holds them) and queries."""
    t0 = time.perf_counter()
    passages, queries = corpus_and_queries(size, 2000)
    console.print(f"  synthetic world of {len(passages):,} passages in {time.perf_counter() - t0:.1f} s")
    out = {"bm25": workdir / f"bm25-{size}", "dense": workdir / f"dense-{size}"}
    for kind in sorted(kinds):
        path = out[kind]
        if index_exists(path) and read_manifest(path).num_passages == len(passages):
            continue
        t0 = time.perf_counter()
        if kind == "bm25":
            from hopgym.retrieval.sparse import BM25Retriever

            r = BM25Retriever(passages)
        else:
            from hopgym.retrieval.dense import DenseRetriever

            rng = np.random.default_rng(0)
            vecs = rng.standard_normal((len(passages), 384), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            r = DenseRetriever(passages, embedder="default", embeddings=vecs)
        save_index(r, path, overwrite=True)
        console.print(f"  built the {kind} index in {time.perf_counter() - t0:.1f} s")
    return out, queries


def verify_figures(path: Path) -> str:
    """Time of each verification mode over the index's largest file."""
    m = read_manifest(path)
    big, size = max(((f, r["size"]) for f, r in m.files.items()), key=lambda x: x[1])
    times = {}
    for mode in ("size", "sample", "full"):
        t0 = time.perf_counter()
        verify_index(path, mode)
        times[mode] = (time.perf_counter() - t0) * 1000
    return f"{path.name}: {len(m.files)} files, largest {big} {size / 2**20:.1f} MiB; verify " + ", ".join(
        f"{k} {v:.0f} ms" for k, v in times.items()
    )


# ------------------------------------------------------------------------------------ server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``serve_index`` child process."""

    def __init__(self, cfg: ServeConfig, timeout: float = 600) -> None:
        self.ray = cfg.ray
        self.url = f"http://127.0.0.1:{cfg.port}"
        self.host, self.port = "127.0.0.1", cfg.port
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(asdict(cfg))],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.get("/health").get("status") == "ok":
                    break
            except (OSError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server died: {self.proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.3)

    def get(self, path: str) -> dict:
        c = Client(self.host, self.port, keep_alive=False)
        status, body = c.call(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return json.loads(body)

    def stats(self) -> dict:
        return self.get("/health")["stats"]

    def cpu_seconds(self) -> float:
        """CPU time of the server process so far (all its threads); 0 for Ray (its replicas are
        other processes)."""
        if self.ray:
            return 0.0
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------------ client
class Client:
    """One HTTP/1.1 client over a raw socket (kept alive, or a fresh one per request)."""

    def __init__(self, host: str, port: int, keep_alive: bool) -> None:
        self.addr, self.keep_alive = (host, port), keep_alive
        self.sock: socket.socket | None = None
        self.reader = None

    def _connect(self) -> None:
        self.sock = socket.create_connection(self.addr, timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def close(self) -> None:
        if self.sock is not None:
            self.reader.close()
            self.sock.close()
            self.sock = None

    def call(self, request: bytes) -> tuple[int, bytes]:
        if self.sock is None:
            self._connect()
        try:
            self.sock.sendall(request)
            status = int(self.reader.readline().split()[1])
            length, close = 0, not self.keep_alive
            while True:
                line = self.reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            body = self.reader.read(length)
        except Exception:
            self.close()
            raise
        if close:
            self.close()
        return status, body

    def retrieve(self, body: bytes) -> int:
        head = (
            f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + ("" if self.keep_alive else "Connection: close\r\n") + "\r\n"
        ).encode()
        return self.call(head + body)[0]


def bodies(queries: list[str]) -> list[bytes]:
    return [json.dumps({"queries": [q], "topk": 3}).encode() for q in queries]


async def _client(
    host: str,
    port: int,
    reqs: list[bytes],
    start: int,
    keep_alive: bool,
    stop: asyncio.Event,
    lat: list[float],
    errors: list[int],
) -> None:
    """One client: a request, its whole reply, the next (a kept-alive connection or a fresh one
    each time)."""
    reader = writer = None
    n = start
    while not stop.is_set():
        body = reqs[n % len(reqs)]
        n += 1
        head = (
            f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + ("" if keep_alive else "Connection: close\r\n") + "\r\n"
        ).encode()
        t0 = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            writer.write(head + body)
            status = int((await reader.readline()).split()[1])
            length, close = 0, not keep_alive
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            await reader.readexactly(length)
            ok = status == 200
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            ok, close = False, True
        if ok:
            lat.append(time.perf_counter() - t0)
        else:
            errors[0] += 1
        if close and writer is not None:
            writer.close()
            reader = writer = None
    if writer is not None:
        writer.close()


def load(server: Server, reqs: list[bytes], clients: int, keep_alive: bool, seconds: float) -> dict:
    """``clients`` concurrent clients for ``seconds``: rate, latencies, errors, CPU.

    The clients are coroutines on one event loop in this process (as load generators such as
    wrk are event-driven): threads would put dozens of runnable threads beside the server on a
    small machine and measure the scheduler as much as the server.
    """
    lat: list[float] = []
    errors = [0]

    async def run() -> None:
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(
                _client(server.host, server.port, reqs, i * 7919, keep_alive, stop, lat, errors)
            )
            for i in range(clients)
        ]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)

    before = server.stats()
    cpu0, mine0 = server.cpu_seconds(), time.process_time()
    t0 = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - t0
    cpu, mine = server.cpu_seconds() - cpu0, time.process_time() - mine0
    after = server.stats()
    arr = np.array(lat) * 1000
    batches = 0 if server.ray else after["batches"] - before["batches"]  # Ray: per replica
    return {
        "qps": len(arr) / elapsed,
        "p50": float(np.percentile(arr, 50)) if len(arr) else 0,
        "p99": float(np.percentile(arr, 99)) if len(arr) else 0,
        "max": float(arr.max()) if len(arr) else 0,
        "errors": errors[0],
        "batch": (after["queries"] - before["queries"]) / batches if batches else 0.0,
        "server_cpu": cpu * 1000 / max(1, len(arr)),
        "client_cpu": mine * 1000 / max(1, len(arr)),
    }


# ------------------------------------------------------------------------------------ rows
class Report:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.table = Table(
            title="hopgym serve under load (POST /retrieve, one query per request, "
            "top-3; clients on loopback)"
        )
        for col in (
            "server",
            "index",
            "load",
            "conn",
            "q/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "avg batch",
            "server CPU ms/q",
            "client CPU ms/q",
            "vs 1",
        ):
            self.table.add_column(col, justify="left" if col in ("server", "load", "conn") else "right")

    def row(self, server: str, index: str, load_: str, conn: str, r: dict, base: float | None = None) -> None:
        ratio = f"{r['qps'] / base:.1f}x" if base else ""
        self.table.add_row(
            server,
            index,
            load_,
            conn,
            f"{r['qps']:,.0f}",
            f"{r['p50']:.1f}",
            f"{r['p99']:.1f}",
            f"{r['max']:.0f}",
            str(r["errors"]),
            f"{r['batch']:.1f}" if r["batch"] else "-",
            f"{r['server_cpu']:.2f}" if r["server_cpu"] else "-",
            f"{r['client_cpu']:.2f}",
            ratio,
        )
        console.print(
            f"  {server} {index} {load_} {conn}: {r['qps']:,.0f} q/s, p50 "
            f"{r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.0f} ms, "
            f"{r['errors']} errors, batch {r['batch']:.1f}, server CPU "
            f"{r['server_cpu']:.2f} ms/q, client CPU {r['client_cpu']:.2f} ms/q {ratio}"
        )


def concurrency_rows(
    report: Report,
    server: Server,
    name: str,
    index: str,
    reqs: list[bytes],
    levels: list[int],
    seconds: float,
) -> None:
    load(server, reqs, 4, True, 1.0)  # warm-up (first queries load the encoder, page in files)
    for keep_alive in (True, False):
        base = None
        for n in levels:
            r = load(server, reqs, n, keep_alive, seconds)
            base = base or r["qps"]
            report.row(
                name, index, f"{n} client{'s' * (n > 1)}", "keep-alive" if keep_alive else "fresh", r, base
            )


def abuse_rows(
    report: Report, server: Server, index: str, reqs: list[bytes], seconds: float, read_timeout: float
) -> None:
    # 300 idle sockets beside one client; held past read_timeout, so the server closes them.
    socks = []
    for i in range(300):
        s = socket.create_connection((server.host, server.port), timeout=30)
        if i % 2:
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    r = load(server, reqs, 1, True, max(seconds, read_timeout + 2))
    closed = 0
    for s in socks:
        s.settimeout(0.5)
        try:
            closed += s.recv(65536).startswith(b"HTTP/1.1 408")
        except OSError:
            pass
        s.close()
    report.row("uvicorn", index, "1 client + 300 idle sockets", "keep-alive", r)
    report.notes.append(
        f"300 idle sockets (150 silent, 150 slow-loris): {closed} answered 408 and "
        "closed by the server (read_timeout)"
    )
    # One client sending 2 MB queries beside 8 normal clients.
    huge = json.dumps({"queries": ["lorem " * 350_000], "topk": 3}).encode()
    stop = threading.Event()
    huge_lat, huge_status = [], []

    def flood() -> None:
        c = Client(server.host, server.port, keep_alive=False)
        while not stop.is_set():
            t0 = time.perf_counter()
            huge_status.append(c.retrieve(huge))
            huge_lat.append(time.perf_counter() - t0)

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    r = load(server, reqs, 8, True, seconds)
    stop.set()
    t.join(60)
    codes = sorted(set(huge_status))
    report.row("uvicorn", index, "8 clients + 2 MB queries", "keep-alive", r)
    report.notes.append(
        f"2 MB queries sent back to back beside the 8 clients: {len(huge_status)}, "
        f"each answered HTTP {'/'.join(map(str, codes))} in "
        f"{np.median(huge_lat) * 1000:.0f} ms (median)"
    )


# ------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("bm25", "dense", "abuse", "ray"),
        default=["bm25", "dense", "abuse", "ray"],
    )
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--seconds", type=float, default=6.0, help="per row")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--threads", type=int, default=1, help="engine threads (FAISS and torch) of the uvicorn servers"
    )
    parser.add_argument(
        "--workdir",
        default="/tmp/hopgym_serve_load",
        help="where the indexes are built (and reused by later runs)",
    )
    args = parser.parse_args()

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    kinds = {"dense"} if args.only == ["dense"] else {"bm25"}
    if "dense" in args.only:
        kinds.add("dense")
    console.print(f"[bold]indexes[/] of {args.passages:,} passages in {workdir}")
    paths, queries = build_indexes(workdir, args.passages, kinds)
    reqs = bodies(queries)
    notes = [verify_figures(paths[k]) for k in sorted(kinds)]
    report = Report()
    size = f"{args.passages // 1000}k" if args.passages >= 1000 else str(args.passages)
    t_all = time.perf_counter()
    for kind in ("bm25", "dense"):
        if kind not in args.only:
            continue
        console.print(f"[bold]uvicorn[/] {kind}")
        server = Server(
            ServeConfig(index=str(paths[kind]), port=free_port(), threads=args.threads, cache_entries=0)
        )
        try:
            label = f"{kind} {size}"
            concurrency_rows(report, server, "uvicorn", label, reqs, args.clients, args.seconds)
            if kind == "bm25" and "abuse" in args.only:
                abuse_rows(report, server, f"bm25 {size}", reqs, args.seconds, ServeConfig().read_timeout)
        finally:
            server.stop()
    if "abuse" in args.only and "bm25" not in args.only:
        server = Server(ServeConfig(index=str(paths["bm25"]), port=free_port(), cache_entries=0))
        try:
            abuse_rows(report, server, f"bm25 {size}", reqs, args.seconds, ServeConfig().read_timeout)
        finally:
            server.stop()
    if "ray" in args.only:
        for n in args.replicas:
            console.print(f"[bold]ray serve[/] bm25, {n} replica(s)")
            t0 = time.perf_counter()
            server = Server(
                ServeConfig(index=str(paths["bm25"]), port=free_port(), ray=True, replicas=n, cache_entries=0)
            )
            console.print(f"  deployed in {time.perf_counter() - t0:.0f} s")
            try:
                load(server, reqs, 4, True, 2.0)
                base = None
                for c in (1, 32):
                    r = load(server, reqs, c, True, args.seconds)
                    base = base or r["qps"]
                    report.row(
                        f"ray serve x{n}", f"bm25 {size}", f"{c} client{'s' * (c > 1)}", "keep-alive", r, base
                    )
            finally:
                server.stop()
    console.print(report.table)
    console.print(
        f"  {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; rows took "
        f"{time.perf_counter() - t_all:.0f} s; dense = MiniLM query encoder + FAISS flat; "
        "avg batch = queries per engine call, server CPU = the server process's (neither "
        "shown for Ray: its replicas are other processes)"
    )
    for note in report.notes + notes:
        console.print(f"  {note}")


if __name__ == "__main__":
    main()
