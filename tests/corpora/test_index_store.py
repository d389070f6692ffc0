from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from hopgym.cli import build_parser
from hopgym.corpora.index_store import (
    FORMAT_VERSION,
    ForeignIndexError,
    IndexStoreError,
    StaleIndexError,
    build_index,
    build_retriever,
    corpus_fingerprint,
    index_exists,
    load_index,
    read_manifest,
    save_index,
)
from hopgym.corpora.loaders import load_corpus, load_musique
from hopgym.corpora.retrieval import BM25Retriever
from hopgym.corpora.types import Passage

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS_FILE = FIX / "wiki_corpus.jsonl"
CORPUS = load_corpus(CORPUS_FILE)
QUERIES = ["Tolva River Kaldor", "music school founded 1902", "Corvin Institute", "zzzz"]
KINDS = ["bm25", "dense", "hybrid"]


def needs(kind: str) -> None:
    if kind != "bm25":
        pytest.importorskip("faiss")


def results(r, k: int = 4) -> list[list[tuple[str, float]]]:
    from hopgym.corpora.hybrid import scored_search_batch

    return [[(h.passage.doc_id, round(h.score, 5)) for h in hits]
            for hits in scored_search_batch(r, QUERIES, k)]


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_gives_the_same_results(tmp_path, kind):
    needs(kind)
    fresh = build_retriever(CORPUS, kind, model="hashing-64")
    m = save_index(fresh, tmp_path / "idx", corpus_path=CORPUS_FILE)
    assert index_exists(tmp_path / "idx")
    assert m.retriever == kind and m.num_passages == len(CORPUS)
    assert m.corpus_fingerprint == corpus_fingerprint(CORPUS)
    assert m.corpus_path == str(CORPUS_FILE.resolve()) and m.corpus_format == "corpus"
    assert m.model == (None if kind == "bm25" else "hashing-64")
    assert read_manifest(tmp_path / "idx") == m
    loaded = load_index(tmp_path / "idx")  # corpus re-read from the recorded path
    assert type(loaded) is type(fresh)
    assert results(loaded) == results(fresh)
    loaded2 = load_index(tmp_path / "idx", passages=CORPUS, retriever=kind)
    assert results(loaded2) == results(fresh)


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivf"])
def test_dense_index_types_persist_memory_mapped(tmp_path, index_type):
    pytest.importorskip("faiss")
    m = build_index(CORPUS, tmp_path / "d", retriever="dense", model="hashing-64",
                    index_type=index_type)
    assert m.params["dense"]["index_type"] == index_type
    fresh = build_retriever(CORPUS, "dense", model="hashing-64", index_type=index_type)
    r = load_index(tmp_path / "d", mmap=True)
    assert r.index_type == index_type
    assert results(r) == results(fresh)


def test_bm25_arrays_are_memory_mapped(tmp_path):
    build_index(CORPUS, tmp_path / "b")
    r = load_index(tmp_path / "b", mmap=True)
    assert isinstance(r, BM25Retriever)
    assert isinstance(r._bm25.scores["data"], np.memmap)
    assert not isinstance(load_index(tmp_path / "b", mmap=False)._bm25.scores["data"], np.memmap)


def test_in_memory_corpus_is_stored_in_the_index(tmp_path):
    docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
    m = build_index(docs, tmp_path / "i")
    assert m.corpus_path == "passages.jsonl"
    assert (tmp_path / "i" / "passages.jsonl").is_file()
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "i", moved)  # the stored corpus travels with the index
    assert [p.doc_id for p in load_index(moved).search("Rome", 1)] == ["b"]


def test_stale_index_is_refused(tmp_path):
    corpus = tmp_path / "c.jsonl"
    shutil.copy(CORPUS_FILE, corpus)
    build_index(corpus, tmp_path / "idx")
    # The caller's passages differ (one text changed).
    changed = list(CORPUS)
    changed[3] = Passage(changed[3].doc_id, changed[3].title, changed[3].text + " Edited.")
    with pytest.raises(StaleIndexError, match="stale"):
        load_index(tmp_path / "idx", passages=changed)
    with pytest.raises(StaleIndexError):
        load_index(tmp_path / "idx", passages=CORPUS[:-1])
    # The corpus file itself changed since the build.
    with open(corpus, "a") as f:
        f.write(json.dumps({"id": "new", "contents": "New\nA new passage."}) + "\n")
    with pytest.raises(StaleIndexError, match="index build"):
        load_index(tmp_path / "idx")


def test_foreign_index_is_refused(tmp_path):
    pytest.importorskip("faiss")
    build_index(CORPUS, tmp_path / "d", retriever="dense", model="hashing-64")
    with pytest.raises(ForeignIndexError, match="'dense' index, not 'bm25'"):
        load_index(tmp_path / "d", retriever="bm25")
    with pytest.raises(ForeignIndexError, match="hashing-64"):
        load_index(tmp_path / "d", model="hashing-32")
    assert load_index(tmp_path / "d", model="hashing-64").embedder.dim == 64
    # A tokenizer other than the one the BM25 arrays were built with.
    build_index(CORPUS, tmp_path / "b")
    mf = tmp_path / "b" / "manifest.json"
    data = json.loads(mf.read_text())
    data["params"]["bm25"]["tokenizer"] = "something-else"
    mf.write_text(json.dumps(data))
    with pytest.raises(ForeignIndexError, match="tokenizer"):
        load_index(tmp_path / "b")


def test_missing_corrupt_and_existing_indexes(tmp_path):
    with pytest.raises(IndexStoreError, match="no index"):
        load_index(tmp_path / "nothing")
    build_index(CORPUS, tmp_path / "b")
    with pytest.raises(IndexStoreError, match="already exists"):
        build_index(CORPUS, tmp_path / "b")
    build_index(CORPUS[:5], tmp_path / "b", overwrite=True)
    assert read_manifest(tmp_path / "b").num_passages == 5
    mf = tmp_path / "b" / "manifest.json"
    data = json.loads(mf.read_text())
    data["format_version"] = FORMAT_VERSION + 1
    mf.write_text(json.dumps(data))
    with pytest.raises(IndexStoreError, match="format"):
        load_index(tmp_path / "b")
    mf.write_text("{broken")
    with pytest.raises(IndexStoreError, match="not valid JSON"):
        read_manifest(tmp_path / "b")


def test_moved_corpus_file(tmp_path):
    corpus = tmp_path / "c.jsonl"
    shutil.copy(CORPUS_FILE, corpus)
    build_index(corpus, tmp_path / "idx")
    moved = tmp_path / "elsewhere.jsonl"
    corpus.rename(moved)
    with pytest.raises(IndexStoreError, match="--corpus"):
        load_index(tmp_path / "idx")
    assert len(load_index(tmp_path / "idx", corpus=moved)) == len(CORPUS)


def test_qa_file_is_indexed_with_open_mode_ids(tmp_path):
    musique = FIX / "musique_dev.jsonl"
    m = build_index(musique, tmp_path / "m")
    assert m.corpus_format == "musique"
    pooled = load_musique(musique, mode="open").passages
    r = load_index(tmp_path / "m", passages=pooled)
    assert {p.doc_id for p in r.passages} == {p.doc_id for p in pooled}


def test_rank_bm25_cannot_be_saved(tmp_path):
    with pytest.raises(IndexStoreError, match="bm25s"):
        save_index(BM25Retriever(CORPUS, engine="rank_bm25"), tmp_path / "x")
    assert not index_exists(tmp_path / "x")


# --------------------------------------------------------------------------------- commands
def parser() -> argparse.ArgumentParser:  # the hopgym command's (index, serve ...)
    return build_parser()


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except SystemExit as exc:  # a command's one-line error: "hopgym index build: error: ..."
        print(exc, file=sys.stderr)
        return 2


def test_index_build_and_info_commands(tmp_path, capsys):
    out = tmp_path / "idx"
    assert run(["index", "build", "--corpus", str(CORPUS_FILE), "--out", str(out),
                "--no-progress"]) == 0
    assert "indexed 22 passages (bm25)" in capsys.readouterr().out
    assert run(["index", "info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["retriever"] == "bm25"
    # A second build without --force fails with a message, not a traceback.
    assert run(["index", "build", "--corpus", str(CORPUS_FILE), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert run(["index", "info", str(tmp_path / "none")]) == 2
    assert run(["index", "build", "--corpus", str(tmp_path / "missing.jsonl"), "--out",
                str(tmp_path / "x")]) == 2


def test_index_build_dense_command(tmp_path, capsys):
    pytest.importorskip("faiss")
    out = tmp_path / "dense"
    assert run(["index", "build", "--corpus", str(CORPUS_FILE), "--retriever", "hybrid",
                "--model", "hashing-32", "--index-type", "hnsw", "--out", str(out),
                "--no-progress"]) == 0
    m = read_manifest(out)
    assert (m.retriever, m.model, m.params["dense"]["index_type"]) == ("hybrid", "hashing-32",
                                                                       "hnsw")


def test_serve_command_options():
    args = parser().parse_args(["serve", "--index", "idx", "--port", "8123"])
    assert (args.index, args.host, args.port, args.topk) == ("idx", "127.0.0.1", 8123, 3)
    assert run(["serve", "--index", "/nonexistent/index"]) == 2
