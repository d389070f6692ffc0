"""E5-style dense retrieval: query/passage prefixes and the pooling of RetrieverSpec, on a tiny BERT
built in the test (no download)."""

from __future__ import annotations

import numpy as np
import pytest

from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.specs import RetrieverSpec, make_retriever

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")
pytestmark = pytest.mark.slow  # ~30 s on 2 shared cores: torch and sentence-transformers load

WORDS = [
    "query",
    "passage",
    ":",
    "oslo",
    "is",
    "a",
    "city",
    "rome",
    "old",
    "capital",
    "of",
    "italy",
    "norway",
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(path)
    transformers.BertTokenizerFast(vocab_file=str(vocab)).save_pretrained(path)
    return str(path)


def _manual(path, text, pooling):
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    batch = tok([text], return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state[0]
    v = hidden[0] if pooling == "cls" else hidden.mean(0)  # one text: every token counts
    v = v.numpy()
    return v / np.linalg.norm(v)


def _embedder(path, **settings):
    spec = RetrieverSpec(kind="dense", model=path, **settings)
    return make_retriever(spec, [Passage("a", "Oslo", "Oslo is a city.")]).embedder


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_pooling_as_set(tiny_bert, pooling):
    e = _embedder(tiny_bert, pooling=pooling, query_prefix="", passage_prefix="")
    got = e.encode(["oslo is a city"], kind="passage")[0]
    np.testing.assert_allclose(got, _manual(tiny_bert, "oslo is a city", pooling), atol=1e-5)


def test_prefixes_go_before_queries_and_passages(tiny_bert):
    e = _embedder(tiny_bert, pooling="mean", query_prefix="query: ", passage_prefix="passage: ")
    np.testing.assert_allclose(
        e.encode(["rome is old"], kind="query")[0],
        _manual(tiny_bert, "query: rome is old", "mean"),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        e.encode(["rome is old"], kind="passage")[0],
        _manual(tiny_bert, "passage: rome is old", "mean"),
        atol=1e-5,
    )


def test_e5_spec_retrieves_and_bad_pooling_is_refused(tiny_bert):
    docs = [
        Passage("a", "Oslo", "Oslo is a city in Norway."),
        Passage("b", "Rome", "Rome is the capital of Italy."),
    ]
    spec = {"kind": "dense", "model": tiny_bert, "query_prefix": "query: ", "passage_prefix": "passage: "}
    r = make_retriever({**spec, "pooling": "mean"}, docs)
    assert len(r.search("capital of italy", k=2)) == 2
    with pytest.raises(InvalidOptionError, match="pooling"):
        RetrieverSpec(kind="dense", pooling="median")
