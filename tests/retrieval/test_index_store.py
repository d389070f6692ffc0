from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from hopgym.cli import build_parser
from hopgym.corpora.datasets import load_corpus, load_musique
from hopgym.corpora.types import Passage
from hopgym.retrieval.index_store import (
    FORMAT_VERSION,
    SAMPLE_BLOCK,
    SAMPLE_BLOCKS,
    CorruptIndexError,
    ForeignIndexError,
    IndexIntegrityWarning,
    IndexStoreError,
    StaleIndexError,
    build_index,
    build_retriever,
    corpus_fingerprint,
    file_checksums,
    index_exists,
    load_index,
    read_manifest,
    save_index,
    verify_index,
)
from hopgym.retrieval.sparse import BM25Retriever

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS_FILE = FIX / "wiki_corpus.jsonl"
CORPUS = load_corpus(CORPUS_FILE)
QUERIES = ["Tolva River Kaldor", "music school founded 1902", "Corvin Institute", "zzzz"]
KINDS = ["bm25", "dense", "hybrid"]


def needs(kind: str) -> None:
    if kind != "bm25":
        pytest.importorskip("faiss")


def results(r, k: int = 4) -> list[list[tuple[str, float]]]:
    from hopgym.retrieval.hybrid import scored_search_batch

    return [
        [(h.passage.doc_id, round(h.score, 5)) for h in hits] for hits in scored_search_batch(r, QUERIES, k)
    ]


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
    m = build_index(CORPUS, tmp_path / "d", retriever="dense", model="hashing-64", index_type=index_type)
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


# -------------------------------------------------------------------------------- integrity
def garble(f: Path, offset: int = 0, length: int | None = None) -> None:
    """Overwrite ``length`` bytes of ``f`` from ``offset`` with other bytes (same size)."""
    data = bytearray(f.read_bytes())
    end = len(data) if length is None else offset + length
    data[offset:end] = bytes((b + 1) % 256 for b in data[offset:end])
    f.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", KINDS)
def test_the_manifest_records_every_file_with_checksums(tmp_path, kind):
    needs(kind)
    m = build_index(CORPUS, tmp_path / "i", retriever=kind, model="hashing-64")
    on_disk = sorted(
        p.relative_to(tmp_path / "i").as_posix() for p in (tmp_path / "i").rglob("*") if p.is_file()
    )
    assert sorted(m.files) == [f for f in on_disk if f != "manifest.json"]
    assert any(f.endswith(".npy") for f in m.files) == (kind != "dense")
    for rel, rec in m.files.items():
        assert rec == file_checksums(tmp_path / "i" / rel)
    assert verify_index(tmp_path / "i", "full") == m


def test_a_same_size_corruption_is_caught_and_named(tmp_path):
    build_index(CORPUS_FILE, tmp_path / "i")
    npy = tmp_path / "i" / "bm25" / "data.csc.index.npy"  # the BM25 weights
    garble(npy, offset=128)  # past the .npy header: numpy still reads it
    for mode in ("sample", "full"):
        with pytest.raises(CorruptIndexError) as err:
            load_index(tmp_path / "i", verify=mode)
        msg = str(err.value)
        assert str(npy) in msg and "same size" in msg
        assert f"hopgym index build --corpus {CORPUS_FILE.resolve()} --retriever bm25" in msg
        assert "--force" in msg and "rebuild=True" in msg
    verify_index(tmp_path / "i", "size")  # sizes alone cannot see it
    unchecked = load_index(tmp_path / "i", verify="none")  # the caller's choice: and it ranks
    assert results(unchecked) != results(BM25Retriever(CORPUS))  # differently, silently
    with pytest.warns(IndexIntegrityWarning, match="rebuilding the bm25 index"):
        r = load_index(tmp_path / "i", rebuild=True)  # from the recorded corpus file
    assert results(r) == results(BM25Retriever(CORPUS))
    verify_index(tmp_path / "i", "full")


def test_size_changes_and_missing_files_are_caught(tmp_path):
    build_index(CORPUS, tmp_path / "i")
    vocab = tmp_path / "i" / "bm25" / "vocab.index.json"
    with open(vocab, "a") as f:
        f.write(" ")
    with pytest.raises(CorruptIndexError, match="vocab.index.json.*bytes, the manifest says"):
        load_index(tmp_path / "i", verify="size")
    vocab.unlink()
    with pytest.raises(CorruptIndexError, match="vocab.index.json.*missing"):
        load_index(tmp_path / "i")
    with pytest.raises(ValueError, match="verify must be one of"):
        load_index(tmp_path / "i", verify="quick")


def test_the_sample_reads_16_mib_and_catches_large_corruptions(tmp_path):
    build_index(CORPUS, tmp_path / "i")
    big = tmp_path / "i" / "bm25" / "big.npy"  # a large file, as a 1M-passage index has
    big.write_bytes(np.random.default_rng(0).bytes(3 * SAMPLE_BLOCK * SAMPLE_BLOCKS))
    mf = tmp_path / "i" / "manifest.json"
    data = json.loads(mf.read_text())
    data["files"]["bm25/big.npy"] = file_checksums(big)
    mf.write_text(json.dumps(data))
    verify_index(tmp_path / "i", "sample")
    garble(big, offset=len(big.read_bytes()) // 2, length=4 * SAMPLE_BLOCK)
    with pytest.raises(CorruptIndexError, match="sampled checksum"):
        verify_index(tmp_path / "i", "sample")
    big.write_bytes(np.random.default_rng(0).bytes(3 * SAMPLE_BLOCK * SAMPLE_BLOCKS))
    garble(big, offset=SAMPLE_BLOCK + 10, length=1)  # one byte between two sampled blocks
    verify_index(tmp_path / "i", "sample")  # what a sample cannot promise
    with pytest.raises(CorruptIndexError, match="its checksum differs"):
        verify_index(tmp_path / "i", "full")


def test_a_missing_manifest_is_refused_unless_rebuild(tmp_path):
    build_index(CORPUS, tmp_path / "i")
    (tmp_path / "i" / "manifest.json").unlink()
    with pytest.raises(IndexStoreError, match="holds index files but no manifest.json") as err:
        load_index(tmp_path / "i")
    assert "--rebuild" in str(err.value) and "hopgym index build" in str(err.value)
    with pytest.raises(IndexStoreError, match="no manifest.json: pass overwrite=True"):
        build_index(CORPUS, tmp_path / "i")
    with pytest.raises(IndexStoreError, match="records no corpus file"):
        load_index(tmp_path / "i", rebuild=True)  # nothing to rebuild it from
    with pytest.warns(IndexIntegrityWarning, match="no manifest.json"):
        r = load_index(tmp_path / "i", passages=CORPUS, rebuild=True)
    assert results(r) == results(BM25Retriever(CORPUS))
    assert read_manifest(tmp_path / "i").files
    (tmp_path / "i" / "manifest.json").unlink()
    with pytest.warns(IndexIntegrityWarning):
        load_index(tmp_path / "i", corpus=CORPUS_FILE, rebuild=True)
    assert read_manifest(tmp_path / "i").corpus_path == str(CORPUS_FILE.resolve())
    # Foreign indexes are never rebuilt: the caller asked for something else.
    with pytest.raises(ForeignIndexError):
        load_index(tmp_path / "i", retriever="dense", rebuild=True)


def test_an_old_manifest_without_checksums_loads_with_a_warning(tmp_path):
    build_index(CORPUS, tmp_path / "i")
    mf = tmp_path / "i" / "manifest.json"
    data = json.loads(mf.read_text())
    del data["files"]
    mf.write_text(json.dumps(data))
    with pytest.warns(IndexIntegrityWarning, match="records no checksums.*--force"):
        r = load_index(tmp_path / "i")
    assert results(r) == results(BM25Retriever(CORPUS))
    with pytest.raises(IndexStoreError, match="records no checksums"):
        verify_index(tmp_path / "i", "full")


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
    assert run(["index", "build", "--corpus", str(CORPUS_FILE), "--out", str(out), "--no-progress"]) == 0
    assert "indexed 22 passages (bm25)" in capsys.readouterr().out
    assert run(["index", "info", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["retriever"] == "bm25"
    # A second build without --force fails with a message, not a traceback.
    assert run(["index", "build", "--corpus", str(CORPUS_FILE), "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert run(["index", "info", str(tmp_path / "none")]) == 2
    assert (
        run(["index", "build", "--corpus", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x")])
        == 2
    )


def test_index_build_dense_command(tmp_path, capsys):
    pytest.importorskip("faiss")
    out = tmp_path / "dense"
    assert (
        run(
            [
                "index",
                "build",
                "--corpus",
                str(CORPUS_FILE),
                "--retriever",
                "hybrid",
                "--model",
                "hashing-32",
                "--index-type",
                "hnsw",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    m = read_manifest(out)
    assert (m.retriever, m.model, m.params["dense"]["index_type"]) == ("hybrid", "hashing-32", "hnsw")


def test_serve_command_options():
    args = parser().parse_args(["serve", "--index", "idx", "--port", "8123"])
    assert (args.index, args.host, args.port, args.topk) == ("idx", "127.0.0.1", 8123, 3)
    assert run(["serve", "--index", "/nonexistent/index"]) == 2


def test_index_verify_command(tmp_path, capsys):
    out = tmp_path / "idx"
    build_index(CORPUS_FILE, out)
    assert run(["index", "verify", str(out)]) == 0
    assert "5 files" in capsys.readouterr().out
    garble(out / "bm25" / "indices.csc.index.npy", offset=200, length=8)
    assert run(["index", "verify", str(out), "--verify", "size"]) == 0  # sizes cannot see it
    capsys.readouterr()
    assert run(["index", "verify", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hopgym index verify: error:" in err and "indices.csc.index.npy" in err
    assert "--force" in err
    (out / "manifest.json").unlink()
    assert run(["serve", "--index", str(out)]) == 2
    assert "--rebuild" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_the_torch_index_loads_and_saves_the_same_faiss_file(tmp_path, kind):
    pytest.importorskip("faiss")
    pytest.importorskip("torch")
    from hopgym.retrieval.devices import TorchFlatIndex

    fresh = build_retriever(CORPUS, kind, model="hashing-64")
    build_index(CORPUS, tmp_path / "f", retriever=kind, model="hashing-64")
    loaded = load_index(tmp_path / "f", index_backend="torch", mmap=True)
    dense = loaded if kind == "dense" else loaded.retrievers[1]
    assert isinstance(dense.index, TorchFlatIndex) and dense.index_backend == "torch"
    # The torch tensor reads the memory-mapped FAISS file's rows: no copy.
    assert np.shares_memory(dense.index.x.numpy(), dense.index.host)
    assert results(loaded) == results(fresh)
    # Built with the torch index, saved as the same FAISS flat file, read back by either backend.
    build_index(CORPUS, tmp_path / "t", retriever=kind, model="hashing-64", index_backend="torch")
    name = "dense.faiss"
    assert (tmp_path / "t" / name).read_bytes() == (tmp_path / "f" / name).read_bytes()
    assert results(load_index(tmp_path / "t")) == results(fresh)
    assert results(load_index(tmp_path / "t", index_backend="torch", mmap=False)) == results(fresh)


def test_the_torch_index_refuses_a_saved_hnsw_index(tmp_path):
    pytest.importorskip("faiss")
    build_index(CORPUS, tmp_path / "h", retriever="dense", model="hashing-64", index_type="hnsw")
    with pytest.raises(ValueError, match="index_type must be 'flat', got 'hnsw'"):
        load_index(tmp_path / "h", index_backend="torch")


def test_index_verify_checks_the_corpus_as_load_does(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(CORPUS_FILE, corpus)
    out = tmp_path / "idx"
    build_index(corpus, out)
    assert run(["index", "verify", str(out)]) == 0
    assert "and the corpus match" in capsys.readouterr().out
    with corpus.open("a", encoding="utf-8") as f:  # the corpus changes after the build
        f.write(json.dumps({"id": "new", "contents": "New\nA passage added later."}) + "\n")
    with pytest.raises(StaleIndexError):
        load_index(out)
    with pytest.raises(StaleIndexError, match="is stale"):
        verify_index(out, "full", corpus=True)
    verify_index(out, "full")  # the files alone still match
    assert run(["index", "verify", str(out)]) == 2
    err = capsys.readouterr().err
    assert "hopgym index verify: error:" in err and "is stale" in err
    # --corpus: check against another file (the corpus moved), as load_index(corpus=) does
    assert run(["index", "verify", str(out), "--corpus", str(CORPUS_FILE)]) == 0
