"""How widely a saved index is searched (``nprobe`` for IVF, ``ef_search`` for HNSW) is set when it
is loaded or served, not only when it is built: ``load_index(nprobe=...)``, ``hopgym serve
--nprobe/--ef-search`` and a retriever spec's ``nprobe`` for an env or eval over a saved index."""

from __future__ import annotations

import pytest

from hopgym.cli import build_parser
from hopgym.cli._dataclass_args import config_from_args
from hopgym.cli.serve import SERVE
from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.dense import DenseRetriever
from hopgym.retrieval.index_store import build_index, load_index, save_index
from hopgym.retrieval.serving.app import load_served_index
from hopgym.retrieval.serving.config import ServeConfig
from hopgym.retrieval.specs import RetrieverSpec

pytest.importorskip("faiss")

WORDS = [f"w{i}" for i in range(97)]
DOCS = [
    Passage(str(i), f"T{i}", " ".join(WORDS[(i * j * 7 + j) % 97] for j in range(1, 12))) for i in range(400)
]
QUERIES = [" ".join(WORDS[(q * 13 + j * 5) % 97] for j in range(4)) for q in range(24)]


def _ids(r, k: int = 10) -> list[list[str]]:
    return [[h.passage.doc_id for h in hits] for hits in r.search_batch_scored(QUERIES, k)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An IVF index of 16 lists searched through 1 by default, an HNSW one, and BM25."""
    root = tmp_path_factory.mktemp("width")
    ivf = DenseRetriever(DOCS, embedder="hashing-64", index_type="ivf", nlist=16, nprobe=1)
    save_index(ivf, root / "ivf")
    hnsw = DenseRetriever(DOCS, embedder="hashing-64", index_type="hnsw", ef_search=16)
    save_index(hnsw, root / "hnsw")
    save_index(DenseRetriever(DOCS, embedder="hashing-64"), root / "flat")
    bm25 = root / "bm25.jsonl"
    bm25.write_text(
        "".join(f'{{"id": "{p.doc_id}", "title": "{p.title}", "text": "{p.text}"}}\n' for p in DOCS)
    )
    build_index(bm25, root / "bm25")
    return root


def test_nprobe_given_at_load_overrides_the_manifest(saved):
    exact = _ids(load_index(saved / "flat", passages=DOCS))
    narrow = load_index(saved / "ivf", passages=DOCS)
    assert narrow.nprobe == 1  # the manifest's
    wide = load_index(saved / "ivf", passages=DOCS, nprobe=16)
    assert wide.nprobe == 16 and wide.params["nprobe"] == 16
    assert _ids(wide) == exact  # every list probed: the exact ranking
    assert _ids(narrow) != exact  # one list of 16 misses some of it
    wide.set_search(nprobe=1)  # and back, the cache emptied with it
    assert _ids(wide) == _ids(narrow)


def test_ef_search_given_at_load_sets_the_hnsw_beam(saved):
    assert load_index(saved / "hnsw", passages=DOCS).host_index.hnsw.efSearch == 16
    wide = load_index(saved / "hnsw", passages=DOCS, ef_search=200)
    assert (wide.ef_search, wide.host_index.hnsw.efSearch) == (200, 200)


@pytest.mark.parametrize(
    ("index", "settings", "match"),
    [
        ("ivf", {"nprobe": 17}, r"nprobe=17 is more than the index's nlist=16"),
        ("ivf", {"nprobe": 0}, r"nprobe must be an int >= 1, got 0"),
        ("ivf", {"ef_search": 32}, r"ef_search is for hnsw indexes; this one is 'ivf'"),
        ("flat", {"nprobe": 4}, r"nprobe is for ivf/ivfpq indexes; this one is 'flat'"),
        ("bm25", {"nprobe": 4}, r"holds a bm25 index: nprobe and ef_search are for dense"),
    ],
)
def test_a_search_setting_the_index_cannot_take_is_refused(saved, index, settings, match):
    with pytest.raises(InvalidOptionError, match=match):
        load_index(saved / index, **({"passages": DOCS} if index != "bm25" else {}), **settings)


def test_serve_takes_nprobe_and_ef_search(saved):
    args = build_parser().parse_args(["serve", "--index", str(saved / "ivf"), "--nprobe", "16"])
    cfg = config_from_args(args, SERVE)
    assert (cfg.nprobe, cfg.ef_search) == (16, None)
    retriever, _ = load_served_index(cfg)
    assert retriever.nprobe == 16
    hnsw, _ = load_served_index(ServeConfig(index=str(saved / "hnsw"), ef_search=99))
    assert hnsw.host_index.hnsw.efSearch == 99
    with pytest.raises(InvalidOptionError, match=r"nprobe must be an int >= 1, got 0"):
        ServeConfig(nprobe=0)


def test_a_retriever_spec_leaves_a_saved_index_its_own_width():
    assert RetrieverSpec(kind="dense").nprobe is None  # a saved index keeps its own
    with pytest.raises(InvalidOptionError, match=r"ef_search must be None or an int >= 1"):
        RetrieverSpec(kind="dense", index_type="hnsw", ef_search=0)


def test_an_env_over_a_saved_index_takes_the_specs_nprobe(tmp_path):
    import json

    from hopgym.cli import main
    from hopgym.envs.datasets import TaskSpec, load_task

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": p.doc_id, "title": p.title, "text": p.text}) + "\n" for p in DOCS)
    )
    qa = tmp_path / "dev.jsonl"
    record = {"_id": "q", "question": "w1 w2?", "answer": "w3", "supporting_facts": [], "context": []}
    qa.write_text(json.dumps(record) + "\n")
    idx = str(tmp_path / "idx")
    build = ["index", "build", "--corpus", str(corpus), "--out", idx, "--retriever", "dense"]
    assert (
        main([*build, "--model", "hashing-64", "--index-type", "ivf", "--nlist", "16", "--nprobe", "1"]) == 0
    )

    def backend(**retriever):
        spec = TaskSpec(dataset="hotpotqa", path=str(qa), corpus=str(corpus), index=idx, retriever=retriever)
        return load_task(spec).sources["local"].retriever

    assert backend(kind="dense").nprobe == 1  # the index's own
    assert backend(kind="dense", nprobe=16).nprobe == 16
