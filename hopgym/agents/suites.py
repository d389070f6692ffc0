"""The field's evaluation protocol as one call: :func:`run_suite` runs an agent on a suite's sets
(:data:`~hopgym.agents.suite_defs.SUITES`) over one corpus and returns the papers' table.

Functions: :func:`run_suite`, :func:`suite_table` (Markdown), :func:`compare_settings`,
:func:`read_results`, :func:`details_table`, :func:`settings_markdown`, :func:`set_metrics`,
:func:`pass_at_k`, :func:`corpus_summary`,
:func:`find_set_file`, :func:`get_suite`.

One corpus (a FlashRAG jsonl read once, streamed), a saved index, or a retrieval server is
searched by every set; each set is read with :func:`~hopgym.corpora.datasets.load_dataset`
(FlashRAG's ``{id, question, golden_answers}`` and the original HotpotQA / 2Wiki / MuSiQue
layouts), its gold paragraphs mapped to corpus passages by title, and run with
:func:`~hopgym.agents.evaluation.evaluate`, writing one trajectory file per set that ``hopgym view``
opens. The results file is written after each set, so an interrupted run keeps the sets it
finished.

The results file (``format: hopgym-suite``) holds the agent, each set's metrics, the sets skipped
(with the file looked for) or empty, the averages, and ``settings``: everything that makes two
tables comparable (corpus file, size, passages and xxh3 checksum; the retriever spec; top-k, turn
budget, protocol, parse mode; sampling; the data files' checksums; hopgym's version).
:func:`compare_settings` lists what differs between two of them.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from hopgym._atomic import check_folder, check_writable, write_json
from hopgym.agents.suite_defs import SUITES
from hopgym.corpora.datasets import DatasetFormatError, LoadReport, iter_corpus, load_dataset
from hopgym.corpora.datasets.base import norm_title
from hopgym.corpora.types import Passage, QASample
from hopgym.errors import HopgymError, InvalidOptionError

__all__ = [
    "run_suite",
    "suite_table",
    "compare_settings",
    "agent_settings",
    "AGENT_SETTINGS",
    "read_results",
    "set_metrics",
    "pass_at_k",
    "corpus_summary",
    "find_set_file",
    "get_suite",
    "details_table",
    "settings_markdown",
    "SuiteError",
]

FORMAT = "hopgym-suite"
#: Metric names as the tables show them.
LABELS = {"em": "EM", "f1": "F1", "cover_em": "cover-EM", "judge": "judge"}


class SuiteError(HopgymError):
    """A suite cannot run as asked (no set found, results files that cannot be compared)."""


def get_suite(name: str) -> dict[str, Any]:
    """The suite called ``name`` (a copy), or an error listing the suites."""
    if name not in SUITES:
        raise InvalidOptionError(f"unknown suite {name!r}; choose one of {', '.join(SUITES)}")
    return dict(SUITES[name])


# ------------------------------------------------------------------------------ metrics
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): the chance that ``k`` of ``n`` attempts, ``c`` of them
    right, drawn without replacement, hold at least one right one: ``1 - C(n-c, k) / C(n, k)``.

    Example:
        >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
        (0.25, 0.5, 0.0, 1.0)
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise InvalidOptionError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return math.fsum(vals) / len(vals) if vals else None


def set_metrics(
    records: Sequence[Mapping[str, Any]],
    *,
    cover_em_max_extra: int | None = 20,
    attempts: int = 1,
    judge: Any = None,
) -> dict[str, Any]:
    """The field's metrics over episode records (of a trajectory file): EM, F1, cover-EM, the
    judge's accuracy (with ``judge``, a :class:`~hopgym.rewards.judges.Judge`; string matches are
    not asked), ``pass@k`` for every ``k`` up to ``attempts`` (the episodes of one question are
    its attempts), and answered, invalid turns per turn, searches and turns per episode.

    Example:
        >>> recs = [{"question_id": "q", "question": "?", "answers": ["Oslo"], "prediction": p,
        ...          "steps": 2, "searches": 1, "invalid": 0} for p in ("Oslo", "in Oslo", None)]
        >>> m = set_metrics(recs, attempts=3)
        >>> m["em"], m["cover_em"], round(m["pass@2"], 4), m["answered"]
        (0.3333333333333333, 0.6666666666666666, 0.6667, 0.6666666666666666)
    """
    from hopgym.rewards.scoring import cover_em, exact_match, token_f1

    if not records:
        return {"episodes": 0}
    em, f1, cov, judged = [], [], [], []
    for r in records:
        pred, golds = r.get("prediction"), list(r.get("answers") or ())
        e = exact_match(pred, golds) if pred is not None else 0.0
        em.append(e)
        f1.append(token_f1(pred, golds) if pred is not None else 0.0)
        cov.append(cover_em(pred, golds, max_extra_tokens=cover_em_max_extra) if pred is not None else 0.0)
        if judge is not None:
            if pred is None:
                judged.append(0.0)
            elif e == 1.0:
                judged.append(1.0)
            else:
                from hopgym.rewards.judges import as_score

                judged.append(as_score(judge.judge_answer(r["question"], pred, golds)))
    steps = sum(r["steps"] for r in records)
    out: dict[str, Any] = {
        "episodes": len(records),
        "questions": len({r["question_id"] for r in records}),
        "em": _mean(em),
        "f1": _mean(f1),
        "cover_em": _mean(cov),
        "answered": sum(r.get("prediction") is not None for r in records) / len(records),
        "invalid_rate": sum(r["invalid"] for r in records) / max(steps, 1),
        "avg_searches": _mean(r["searches"] for r in records),
        "avg_turns": steps / len(records),
    }
    if judge is not None:
        out["judge"] = _mean(judged)
    by_q: dict[str, list[float]] = defaultdict(list)
    for r, e in zip(records, em, strict=True):
        by_q[r["question_id"]].append(e)
    for k in range(1, attempts + 1):
        out[f"pass@{k}"] = _mean(pass_at_k(len(v), int(sum(v)), k) for v in by_q.values() if len(v) >= k)
    return out


# ------------------------------------------------------------------------------ inputs
def find_set_file(data: str | os.PathLike[str], entry: Mapping[str, Any]) -> Path | None:
    """The first of the set's ``files`` that exists under ``data``, or ``None``."""
    for rel in entry["files"]:
        path = Path(data) / rel
        if path.is_file():
            return path
    return None


def _xxh3(path: str | os.PathLike[str]) -> str:
    import xxhash

    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def corpus_summary(path: str | os.PathLike[str], passages: int, untitled: int) -> dict[str, Any]:
    """What the settings header records about a corpus file: name, bytes, passages, untitled
    passages and its xxh3-64 checksum (read in 1 MiB blocks)."""
    return {
        "file": Path(path).name,
        "bytes": os.path.getsize(path),
        "passages": passages,
        "untitled": untitled,
        "xxh3_64": _xxh3(path),
    }


def _read_corpus(path: str, log: Callable[[str], None]) -> tuple[list[Passage], dict[str, Any]]:
    """The corpus streamed once into passages (its text held once), and its summary."""
    passages, untitled = [], 0
    for p in iter_corpus(path, report=LoadReport()):
        untitled += not p.title
        passages.append(p)
    if not passages:
        raise DatasetFormatError(path, 0, "<file>", "the corpus has no passages")
    if untitled:
        log(
            f"corpus: {untitled} of {len(passages)} passages have no title (FlashRAG 'contents' "
            "without a title line): they are searched and shown by their text alone"
        )
    return passages, corpus_summary(path, len(passages), untitled)


def _title_map(passages: Iterable[Passage]) -> dict[str, str]:
    """Title (exact, and folded by :func:`norm_title`) -> the first passage with it (the lead)."""
    out: dict[str, str] = {}
    for p in passages:
        if p.title:
            out.setdefault(p.title, p.doc_id)
            out.setdefault("\0" + norm_title(p.title), p.doc_id)
    return out


def _remap_gold(
    samples: list[QASample], titles: Mapping[str, str], by_id: Mapping[str, str]
) -> list[QASample]:
    """Samples whose gold doc ids (read in distractor mode: ``qid:title``) name corpus passages;
    gold without a corpus passage of its title is dropped (recall counts the ones found)."""

    def corpus_id(doc_id: str) -> str:
        title = by_id.get(doc_id)
        if title is None:
            return ""
        return titles.get(title) or titles.get("\0" + norm_title(title)) or ""

    out = []
    for s in samples:
        support = tuple(dict.fromkeys(i for i in map(corpus_id, s.supporting_ids) if i))
        hops = tuple(replace(h, doc_id=corpus_id(h.doc_id)) for h in s.decomposition)
        out.append(replace(s, supporting_ids=support, decomposition=hops))
    return out


def _retrieval_recall(retriever: Any, samples: Sequence[QASample], k: int) -> float | None:
    """Mean share of gold passages in the top ``k`` for the question itself (questions with gold)."""
    from hopgym.rewards.scoring import support_recall

    gold = [s for s in samples if s.supporting_ids]
    if not gold:
        return None
    return _mean(
        support_recall([p.doc_id for p in retriever.search(s.question, k)], s.supporting_ids) for s in gold
    )


# ------------------------------------------------------------------------------ running
#: What the settings header records of a retriever, by kind: the settings that kind uses, no
#: other (a BM25 run records no embedder, a dense one no BM25 engine).
_SPEC_KEYS = {
    "bm25": ("kind", "engine"),
    "dense": ("kind", "model", "query_prefix", "passage_prefix", "pooling", "index_type"),
    "hybrid": ("kind", "engine", "model", "query_prefix", "passage_prefix", "pooling", "index_type", "rrf_k"),
    "http": ("kind", "urls"),
}
_IVF_KEYS = ("nlist", "nprobe", "pq_m", "pq_bits", "opq", "rerank")


def _spec_dict(spec: Any) -> dict[str, Any]:
    """The retriever as the settings header records it: exactly the settings its kind used.

    Example:
        >>> from hopgym.retrieval.specs import RetrieverSpec
        >>> _spec_dict(RetrieverSpec(kind="bm25"))
        {'kind': 'bm25', 'engine': 'bm25s'}
    """
    kind = "http" if spec.urls else spec.resolved_kind
    keep: tuple[str, ...] = _SPEC_KEYS.get(kind, tuple(f.name for f in fields(spec)))
    if "index_type" in keep and spec.index_type != "flat":
        keep += _IVF_KEYS
    out = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name in keep}
    out["kind"] = kind
    if "urls" in out:
        out["urls"] = list(out["urls"])
    if "model" in out and not isinstance(out["model"], (str, type(None))):
        out["model"] = getattr(out["model"], "name", type(out["model"]).__name__)
    return out


def _write(path: str | None, result: dict[str, Any]) -> None:
    if path is not None:
        write_json(path, result)  # never a half-written file, even when interrupted


def _averages(suite: Mapping[str, Any], sets: Mapping[str, Any], metric: str) -> dict[str, float | None]:
    groups: dict[str, list[float]] = {"general": [], "multihop": [], "overall": []}
    for entry in suite["sets"]:
        value = sets.get(entry["name"], {}).get(metric)
        if value is not None:
            groups[entry["group"]].append(value)
            groups["overall"].append(value)
    return {g: _mean(v) for g, v in groups.items()}


def run_suite(
    suite: str | Mapping[str, Any],
    data: str | os.PathLike[str],
    agent: Callable[[Any], Any],
    *,
    agent_name: str,
    corpus: str | os.PathLike[str] | None = None,
    index: str | os.PathLike[str] | None = None,
    retriever: Any = None,
    sets: Sequence[str] | None = None,
    limit: int | None = None,
    attempts: int = 1,
    sampling: Mapping[str, Any] | None = None,
    judge: Any = None,
    env_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    json_path: str | None = None,
    trajectories: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = print,
    stop_after_failed_searches: int | None = None,
) -> dict[str, Any]:
    """Run an agent on every set of a suite found under ``data``; returns the results (and writes
    them to ``json_path`` after each set).

    Args:
        suite: a suite's name or definition (:data:`~hopgym.agents.suite_defs.SUITES`).
        data: the folder of QA files (FlashRAG layout, or the original releases' file names).
        agent: ``env -> agent``, called once per set.
        agent_name: the table's row label.
        corpus: a FlashRAG corpus jsonl; searched in process with ``retriever`` (default: the
            suite's), or with a server ``retriever`` only read for its summary and gold titles.
        index: a saved index directory (:mod:`hopgym.retrieval.index_store`) instead.
        retriever: a :class:`~hopgym.retrieval.specs.RetrieverSpec` or what it coerces (a server
            URL); ``None``: the suite's spec.
        sets: names of the sets to run (default: all).
        limit: at most this many questions per set.
        attempts: episodes per question (``pass@1`` .. ``pass@attempts``; EM is their mean).
        sampling: the agent's sampling settings, recorded (default ``{"temperature": 0.0}``).
        judge: an answer judge for ``judge`` accuracy (:mod:`hopgym.rewards.judges`).
        env_options: env options over the suite's (``max_turns=2`` for an ablation); recorded.
        seed: question order and resets.
        json_path: the results file.
        trajectories: a folder for one ``{set}.jsonl`` trajectory file per set.
        log: where progress lines go.
        stop_after_failed_searches: end the suite once this many searches in a row failed (a
            dead retrieval server): the set running is scored on its finished episodes and
            ``result["stopped"]`` is ``"failed_searches"`` (see
            :func:`~hopgym.agents.evaluation.evaluate`). Every set records its
            ``search_attempts`` and ``failed_searches``, and the result their sums.
    """
    import hopgym
    from hopgym.agents.evaluation import evaluate
    from hopgym.agents.trajectories import read_trajectories
    from hopgym.envs.options import EnvOptions
    from hopgym.envs.registration import make_task_env
    from hopgym.retrieval.specs import RetrieverSpec, make_retriever
    from hopgym.tasks.base import QATask, Source

    s = get_suite(suite) if isinstance(suite, str) else dict(suite)
    names = [e["name"] for e in s["sets"]]
    chosen = list(names if sets is None else sets)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise InvalidOptionError(f"unknown set(s) {unknown}; this suite has {', '.join(names)}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise InvalidOptionError(f"limit must be an int >= 1, got {limit!r}")
    if not isinstance(attempts, int) or attempts < 1:
        raise InvalidOptionError(f"attempts must be an int >= 1, got {attempts!r}")
    if (corpus is None) == (index is None) and not (
        retriever is not None and RetrieverSpec.coerce(retriever).urls and index is None
    ):
        raise InvalidOptionError(
            "give the corpus to search: corpus= or index= (or a server URL as retriever=)"
        )
    # The outputs before the sets, the corpus and hours of episodes: a bad path costs nothing.
    if json_path is not None:
        check_writable(json_path)
    if trajectories is not None:
        check_folder(trajectories)
    opts = EnvOptions.from_kwargs(
        {
            "top_k": s["top_k"],
            "max_turns": s["max_turns"],
            "protocol": s["protocol"],
            "reward": s["reward"],
            **dict(env_options or {}),
        }
    ).resolved()

    # The sets first (small), so that the corpus is read once.
    found: dict[str, tuple[Path, Any]] = {}
    skipped: dict[str, str] = {}
    empty: list[str] = []
    for entry in s["sets"]:
        if entry["name"] not in chosen:
            continue
        path = find_set_file(data, entry)
        if path is None:
            looked = " or ".join(str(Path(data) / f) for f in entry["files"])
            skipped[entry["name"]] = f"no file: looked for {looked}"
            log(f"{entry['name']}: skipped, no file (looked for {looked})")
            continue
        try:
            ds = load_dataset("auto", path, limit=limit)
        except DatasetFormatError as exc:
            if exc.line != 0 or exc.field != "<file>":
                raise
            empty.append(entry["name"])
            log(f"{entry['name']}: {path} has no questions: reported as empty, left out of the averages")
            continue
        found[entry["name"]] = (path, ds)
    if not found:
        raise SuiteError(f"no set of suite {s.get('name', suite)!r} was found under {data}")

    spec = RetrieverSpec.coerce(s["retriever"] if retriever is None else retriever)
    if index is None and not spec.urls and spec.resolved_kind in ("dense", "hybrid") and spec.model is None:
        # The packaged MiniLM under E5's prefixes would be a third retriever, neither the
        # papers' nor a baseline: refuse rather than substitute it.
        raise SuiteError(
            f"the retriever is {spec.resolved_kind} and names no model: give its model "
            "(retriever={..., 'model': PATH}; CLI --retriever-model PATH, e.g. a local e5-base-v2), "
            "or search with BM25 (retriever='bm25'; CLI --retriever bm25)"
        )
    passages: list[Passage] = []
    corpus_info: dict[str, Any]
    if index is not None:
        from hopgym.retrieval.index_store import load_index

        backend = load_index(index, nprobe=spec.nprobe, ef_search=spec.ef_search)
        passages = list(getattr(backend, "passages", []))
        manifest = Path(index) / "manifest.json"
        corpus_info = {"index": str(index)}
        if manifest.is_file():
            corpus_info["manifest_xxh3_64"] = _xxh3(manifest)
        corpus_info["passages"] = len(passages)
        spec_info = {
            "kind": getattr(backend, "kind", None),
            "index": str(index),
            "params": getattr(backend, "params", None),
        }
    else:
        corpus_info = {"server": list(spec.urls)}
        if corpus is not None:
            passages, corpus_info = _read_corpus(os.fspath(corpus), log)
            log(f"corpus: {corpus_info['passages']} passages from {corpus}")
        if spec.urls:
            backend = make_retriever(spec)
            corpus_info["server"] = list(spec.urls)
        else:
            log(f"building the {spec.resolved_kind} index ...")
            backend = make_retriever(spec, passages)
        spec_info = _spec_dict(spec)
    titles = _title_map(passages)
    prepared: dict[str, list[QASample]] = {}
    for name, (_, ds) in found.items():
        by_id = {p.doc_id: p.title for p in ds.passages}  # distractor mode: gold read by title
        prepared[name] = _remap_gold(list(ds.samples), titles, by_id) if by_id else list(ds.samples)
    gold = {d for samples in prepared.values() for q in samples for d in q.supporting_ids}
    gold_docs = {p.doc_id: p for p in passages if p.doc_id in gold}
    del passages, titles  # the retriever holds the passages; nothing else needs them

    settings = {
        "suite": suite if isinstance(suite, str) else s.get("name"),
        "corpus": corpus_info,
        "retriever": {**spec_info, "top_k": opts.top_k},
        "max_turns": opts.max_turns,
        "protocol": opts.protocol if isinstance(opts.protocol, str) else opts.protocol.name,
        "parse": opts.parse,
        "reward": opts.reward,
        "sampling": dict(sampling or {"temperature": 0.0}),
        "attempts": attempts,
        "limit": limit,
        "seed": seed,
        "data": {n: {"file": str(p.relative_to(data)), "xxh3_64": _xxh3(p)} for n, (p, _) in found.items()},
        "hopgym_version": hopgym.__version__,
    }
    result: dict[str, Any] = {
        "format": FORMAT,
        "version": 1,
        "agent": agent_name,
        "settings": settings,
        "metrics": list(s["metrics"]),
        "sets": {},
        "skipped": skipped,
        "empty": empty,
        "averages": {},
        "interrupted": False,
        "stopped": None,
        "search_attempts": 0,
        "failed_searches": 0,
    }
    traj_dir = Path(trajectories) if trajectories is not None else None
    if traj_dir is not None:
        traj_dir.mkdir(parents=True, exist_ok=True)
    labels = {e["name"]: e for e in s["sets"]}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, (name, (path, _)) in enumerate(found.items(), 1):
                samples = prepared[name]
                docs = {d: gold_docs[d] for q in samples for d in q.supporting_ids if d in gold_docs}
                source = Source("local", backend, description="Wikipedia paragraphs")
                task = QATask(name, samples, {"local": source}, docs or None)
                env = make_task_env(task, opts)
                n = len(samples)
                log(f"[{i}/{len(found)}] {name}: {n} questions from {path} ...")
                start = time.perf_counter()
                out = (traj_dir or Path(tmp)) / f"{name}.jsonl"
                run = evaluate(
                    env,
                    agent(env),
                    episodes=n * attempts,
                    seed=seed,
                    trajectories=out,
                    agent_name=agent_name,
                    progress=f"{name} {agent_name}",
                    stop_after_failed_searches=stop_after_failed_searches,
                )
                records = read_trajectories(out).episodes
                m = set_metrics(
                    records, cover_em_max_extra=s.get("cover_em_max_extra"), attempts=attempts, judge=judge
                )
                m["file"] = str(path)
                m["search_attempts"], m["failed_searches"] = run["search_attempts"], run["failed_searches"]
                result["search_attempts"] += run["search_attempts"]
                result["failed_searches"] += run["failed_searches"]
                m[f"recall@{opts.top_k}"] = _retrieval_recall(backend, samples, opts.top_k)
                m["seconds"] = time.perf_counter() - start
                result["sets"][name] = m
                result["averages"] = {k: _averages(s, result["sets"], k) for k in ("em", "f1", "cover_em")}
                _write(json_path, result)
                shown = ", ".join(f"{LABELS[k]} {m[k]:.3f}" for k in ("em", "f1", "cover_em"))
                log(f"[{i}/{len(found)}] {labels[name]['label']}: {shown} ({m['episodes']} episodes)")
                if run["stopped"] == "failed_searches":
                    result["stopped"] = "failed_searches"
                    _write(json_path, result)
                    log(f"stopped: {run['error']}; the {len(result['sets'])} set(s) run so far are kept")
                    break
    except KeyboardInterrupt:
        result["interrupted"] = True
        _write(json_path, result)
        log(f"interrupted: the {len(result['sets'])} finished set(s) are kept")
    return result


# ------------------------------------------------------------------------------ tables
def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A results file of :func:`run_suite`; :class:`SuiteError` when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SuiteError(f"{path}: cannot read a suite results file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SuiteError(f"{path}: not a suite results file (no format: {FORMAT!r})")
    return data


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


#: Settings that describe the agent of a row, not the protocol every row is measured under: rows
#: that differ in them are compared (a greedy model beside a sampled one, a scripted agent beside
#: an LLM), and :func:`agent_settings` lists them under the table.
AGENT_SETTINGS = ("sampling",)


def compare_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per protocol setting that differs between two results' ``settings`` (empty:
    comparable). The agent's own settings (:data:`AGENT_SETTINGS`) are not compared.

    Example:
        >>> compare_settings({"settings": {"retriever": {"top_k": 3}, "max_turns": 4}},
        ...                  {"settings": {"retriever": {"top_k": 5}, "max_turns": 4}})
        ['retriever.top_k: 3 != 5']
        >>> compare_settings({"settings": {"sampling": {"temperature": 0.0}}},
        ...                  {"settings": {"sampling": {"temperature": 1.0}}})
        []
    """
    protocol = [{k: v for k, v in r.get("settings", {}).items() if k not in AGENT_SETTINGS} for r in (a, b)]
    fa, fb = _flat(protocol[0]), _flat(protocol[1])
    return [
        f"{key}: {fa.get(key, '(absent)')} != {fb.get(key, '(absent)')}"
        for key in sorted(set(fa) | set(fb))
        if fa.get(key, "(absent)") != fb.get(key, "(absent)")
    ]


def agent_settings(results: Sequence[Mapping[str, Any]]) -> str:
    """One line per row: its agent and its own settings (:data:`AGENT_SETTINGS`).

    Example:
        >>> print(agent_settings([{"agent": "oracle", "settings": {"sampling": {"temperature": 0.0}}}]))
        - oracle: sampling.temperature=0.0
    """
    lines = []
    for r in results:
        own = _flat({k: r.get("settings", {}).get(k) for k in AGENT_SETTINGS})
        lines.append(f"- {r['agent']}: " + ", ".join(f"{k}={v}" for k, v in own.items()))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def suite_table(results: Sequence[Mapping[str, Any]], metric: str | None = None) -> str:
    """The papers' table in Markdown: a row per results file (agent), the seven sets, the
    general-QA, multi-hop and overall averages (over the sets run), in percent; ``–`` for a set
    not run or empty. ``metric`` defaults to the suite's first."""
    if not results:
        raise InvalidOptionError("suite_table needs at least one result")
    suite = get_suite(results[0]["settings"]["suite"])
    metric = metric or results[0]["metrics"][0]
    general = [e for e in suite["sets"] if e["group"] == "general"]
    multi = [e for e in suite["sets"] if e["group"] == "multihop"]
    head = [
        f"{LABELS.get(metric, metric)} (%)",
        *(e["label"] for e in general),
        *(e["label"] for e in multi),
        "General avg",
        "Multi-hop avg",
        "Overall",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in results:
        avg = _averages(suite, r["sets"], metric)
        cells = [_cell(r["sets"].get(e["name"], {}).get(metric)) for e in (*general, *multi)]
        cells += [_cell(avg["general"]), _cell(avg["multihop"]), _cell(avg["overall"])]
        lines.append("| " + " | ".join([r["agent"], *cells]) + " |")
    return "\n".join(lines)


def details_table(result: Mapping[str, Any]) -> str:
    """Every metric of one results file, a row per set (Markdown)."""
    k = result["settings"]["retriever"]["top_k"]
    cols = [
        "em",
        "f1",
        "cover_em",
        "judge",
        "pass@1",
        f"recall@{k}",
        "answered",
        "invalid_rate",
        "avg_searches",
        "avg_turns",
    ]
    present = [c for c in cols if any(c in m for m in result["sets"].values())]
    lines = [
        "| set | episodes | " + " | ".join(present) + " |",
        "|---|---:|" + "---:|" * len(present),
    ]
    for name, m in result["sets"].items():
        vals = ["–" if m.get(c) is None else f"{m[c]:.3f}" for c in present]
        lines.append(f"| {name} | {m['episodes']} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def settings_markdown(result: Mapping[str, Any]) -> str:
    """The settings header as a Markdown list (one line per setting)."""
    return "\n".join(f"- {k}: `{json.dumps(v)}`" for k, v in _flat(result["settings"]).items())
