"""Peak memory of reading a FlashRAG corpus and building its index, per million passages.

    python benchmarks/suite_memory.py --passages 200000 --json benchmarks/results/suite_memory.json

The synthetic world is exported as a FlashRAG corpus (``hopgym.tasks.export_flashrag``:
``{"id", "contents": "\\"Title\\"\\ntext"}``), then each step runs in a fresh child process that
reports its peak resident memory (``VmHWM``, reset after the imports through
``/proc/self/clear_refs``) above the resident memory after the imports:

- ``passages``: the corpus streamed into passages (:func:`hopgym.corpora.datasets.iter_corpus`),
  as ``hopgym eval --suite`` reads it: the text held once;
- ``bm25``: that plus the BM25 index (bm25s), term ids made passage by passage;
- ``bm25-tokens-first``: the same index built the way hopgym 0.2 did, every passage tokenized
  into a list of strings first (the corpus text held a second time, as tokens);
- ``dense``: the passages plus a flat dense index (``--dense-model``, default ``hashing-64``, no
  model files), passages encoded in chunks of ``DenseRetriever.encode_chunk``.

Figures scale linearly with the passages (the index grows with the text), so a run on 200k is
multiplied by 5 for 1M; wiki-18's passages are about twice as long (100 words) as the synthetic
world's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {key} in /proc/self/status (Linux only)")


def _reset_peak() -> float:
    """Forget the peak so far (the imports' transient one) and return the resident MiB now."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to VmRSS (Linux >= 4.0)
    return _status_mib("VmRSS")


def child(step: str, corpus: str, dense_model: str) -> dict:
    from hopgym.corpora.datasets import iter_corpus
    from hopgym.retrieval.base import tokenize
    from hopgym.retrieval.specs import make_retriever

    if step == "dense":
        import faiss  # noqa: F401 - imported before the baseline, as the other steps' libraries

    import bm25s  # noqa: F401

    base = _reset_peak()
    t = time.perf_counter()
    passages = list(iter_corpus(corpus))
    if step == "bm25":
        make_retriever({"kind": "bm25", "cache_entries": 0}, passages)
    elif step == "bm25-tokens-first":
        docs = [tokenize(p.contents) or ["\x00"] for p in passages]
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(w, len(vocab)) for w in d] for d in docs]
        import bm25s

        bm25s.BM25().index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    elif step == "dense":
        make_retriever({"kind": "dense", "model": dense_model, "cache_entries": 0}, passages)
    return {
        "step": step,
        "passages": len(passages),
        "peak_mib_over_imports": round(_status_mib("VmHWM") - base, 1),
        "seconds": round(time.perf_counter() - t, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=200_000, help="synthetic entities (one passage each)")
    ap.add_argument("--steps", nargs="+", default=["passages", "bm25", "bm25-tokens-first", "dense"])
    ap.add_argument("--dense-model", default="hashing-64")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.corpus, args.dense_model)))
        return
    from hopgym._atomic import check_writable, write_json
    from hopgym.tasks import export_flashrag

    if args.json:
        check_writable(args.json)  # before the children's builds, not after them

    with tempfile.TemporaryDirectory() as tmp:
        corpus = export_flashrag(tmp, n_entities=args.passages, n_questions=10)[0]
        size = os.path.getsize(corpus)
        rows = []
        for step in args.steps:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    step,
                    "--corpus",
                    str(corpus),
                    "--dense-model",
                    args.dense_model,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            row["peak_mib_per_million"] = round(row["peak_mib_over_imports"] * 1e6 / row["passages"], 1)
            rows.append(row)
            print(
                f"{step:>18}: {row['passages']} passages, peak +{row['peak_mib_over_imports']} MiB "
                f"(+{row['peak_mib_per_million']} MiB per million), {row['seconds']} s",
                flush=True,
            )
    result = {"corpus_bytes": size, "bytes_per_passage": round(size / rows[0]["passages"], 1), "rows": rows}
    print(f"corpus file: {size / 2**20:.1f} MiB ({result['bytes_per_passage']} bytes per passage)")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
