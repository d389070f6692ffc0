"""The benchmark env ids (HotpotQA, 2Wiki, MuSiQue, Bamboogle, generic) on fixture files."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.evaluation import evaluate
from hopgym.agents.scripted import make_agent
from hopgym.corpora.datasets import DatasetUnavailableError
from hopgym.envs.datasets import clear_task_cache, load_task
from hopgym.retrieval.index_store import StaleIndexError, read_manifest
from hopgym.turns import Answer, Search

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOTPOT = str(FIX / "hotpotqa_dev.json")
WIKI2 = str(FIX / "2wiki_dev.json")
MUSIQUE = str(FIX / "musique_dev.jsonl")
BAMBOOGLE = str(FIX / "bamboogle_test.jsonl")
CORPUS = str(FIX / "wiki_corpus.jsonl")

DISTRACTOR = [
    ("hopgym/HotpotQA-v1", HOTPOT),
    ("hopgym/2WikiMultiHopQA-v1", WIKI2),
    ("hopgym/MuSiQue-v1", MUSIQUE),
    ("hopgym/MultiHopQA-v1", MUSIQUE),
]


@pytest.mark.parametrize("env_id,path", DISTRACTOR, ids=[d[0] for d in DISTRACTOR])
def test_oracle_solves_every_question_in_distractor_mode(env_id, path):
    env = gym.make(env_id, path=path)
    m = evaluate(env, make_agent("oracle", env), episodes=len(env.unwrapped.task.samples))
    assert m["em"] == 1.0 and m["support_recall"] == 1.0


@pytest.mark.parametrize("env_id,path", DISTRACTOR[:3], ids=[d[0] for d in DISTRACTOR[:3]])
def test_check_env_and_same_seed_rollouts(env_id, path):
    env = gym.make(env_id, path=path)
    check_env(env.unwrapped, skip_render_check=True)
    a, b = gym.make(env_id, path=path), gym.make(env_id, path=path)
    assert a.unwrapped.task is b.unwrapped.task  # loaded once, shared
    oa, ia = a.reset(seed=4)
    ob, ib = b.reset(seed=4)
    assert oa == ob and data_equivalence(ia, ib)
    for action in ["<search>Kaldor</search>", "<think>hm</think>", "<answer>x</answer>"]:
        assert data_equivalence(a.step(action), b.step(action))


def test_distractor_search_sees_only_the_questions_paragraphs():
    env = gym.make("hopgym/HotpotQA-v1", path=HOTPOT, reward=None)
    _, info = env.reset(seed=0, options={"question_id": "5a7a06935542990198eaf050"})
    assert info["question"].startswith("Which was founded first")
    _, _, _, _, info = env.step(Search("Kaldor Tolva River Brenna Observatory"))
    assert all(d.startswith("5a7a06935542990198eaf050:") for d in info["retrieved_ids"])


def test_open_mode_and_dense_and_hybrid_retrievers():
    pytest.importorskip("faiss")
    for retriever in ("bm25", "dense", "hybrid"):
        env = gym.make(
            "hopgym/MuSiQue-v1",
            path=MUSIQUE,
            mode="open",
            retriever=retriever,
            model="hashing-128",
            reward=None,
        )
        task = env.unwrapped.task
        kind = getattr(task.sources["local"].retriever, "kind", "bm25")
        assert kind == ("bm25" if retriever == "bm25" else retriever)
        env.reset(seed=0, options={"question_id": "3hop1__9285_5188_23307"})
        _, _, _, _, info = env.step(Search("Corvin Institute founded"))
        assert info["documents"][0].title == "Corvin Institute"


def test_bamboogle_with_a_corpus():
    env = gym.make("hopgym/Bamboogle-v1", path=BAMBOOGLE, corpus=CORPUS)
    task = env.unwrapped.task
    assert [s.id for s in task.samples] == ["test_0", "test_1", "test_2"]
    env.reset(seed=0, options={"question_id": "test_2"})
    _, _, _, _, info = env.step(Search("institute mineralogy"))
    assert info["documents"][0].doc_id == "7"
    _, reward, terminated, _, _ = env.step(Answer("Mara Corvin"))
    assert terminated and reward > 0


def test_hotpotqa_over_an_external_corpus_maps_gold_to_corpus_ids():
    env = gym.make("hopgym/HotpotQA-v1", path=HOTPOT, corpus=CORPUS, reward=None)
    task = env.unwrapped.task
    assert task.samples[0].supporting_ids == ("0", "2")
    assert set(task.documents) == {"0", "2", "6", "7"}


def test_index_is_built_once_then_reused_and_checked(tmp_path):
    idx = tmp_path / "idx"
    env = gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx))
    m = read_manifest(idx)
    assert m.retriever == "bm25" and m.corpus_format == "musique"
    assert m.num_passages == len(env.unwrapped.task.sources["local"].retriever.passages)
    stamp = (idx / "manifest.json").stat().st_mtime_ns
    clear_task_cache()
    env2 = gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx))  # loads it
    assert (idx / "manifest.json").stat().st_mtime_ns == stamp
    env2.reset(seed=0)
    assert env2.step(Search("Van Hook Township"))[4]["new_ids"]
    # The same index with other questions' paragraphs is stale: refused, not used.
    with pytest.raises(StaleIndexError):
        gym.make("hopgym/HotpotQA-v1", path=HOTPOT, mode="open", index=str(idx))
    # Bamboogle has no paragraphs: an index alone brings its corpus (recorded in the manifest).
    idx2 = tmp_path / "wiki"
    from hopgym.retrieval.index_store import build_index

    build_index(CORPUS, idx2)
    env3 = gym.make("hopgym/Bamboogle-v1", path=BAMBOOGLE, index=str(idx2), reward=None)
    env3.reset(seed=0, options={"question_id": "test_0"})
    assert env3.step(Search("Brenna Observatory"))[4]["documents"][0].doc_id == "0"


def test_an_index_without_its_manifest_is_refused_unless_rebuild(tmp_path):
    from hopgym.retrieval.index_store import IndexIntegrityWarning, IndexStoreError

    idx = tmp_path / "idx"
    gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx))
    (idx / "manifest.json").unlink()
    clear_task_cache()
    with pytest.raises(IndexStoreError, match="no manifest.json.*rebuild=True"):
        gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx))
    with pytest.warns(IndexIntegrityWarning, match="rebuilding"):
        env = gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx), rebuild=True)
    assert read_manifest(idx).corpus_format == "musique"
    env.reset(seed=0)
    assert env.step(Search("Van Hook Township"))[4]["new_ids"]
    with pytest.raises(ValueError, match="rebuild=True rebuilds a saved index"):
        gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", rebuild=True)


def test_pickled_env_rebuilds_its_task_from_the_cache():
    env = gym.make("hopgym/2WikiMultiHopQA-v1", path=WIKI2)
    env.reset(seed=1)
    env.step("<search>Grey Harbour</search>")
    data = pickle.dumps(env)
    assert len(data) < 20_000  # the recipe, not the corpus and its indexes
    clone = pickle.loads(data)
    assert clone.unwrapped.task is env.unwrapped.task
    assert data_equivalence(
        env.step("<answer>Grey Harbour</answer>"), clone.step("<answer>Grey Harbour</answer>")
    )


def test_vector_envs_share_one_task():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("hopgym/HotpotQA-v1", path=HOTPOT) for _ in range(3)])
    envs.reset(seed=0)
    tasks = {id(e.unwrapped.task) for e in envs.envs}
    assert len(tasks) == 1
    _, _, term, _, _ = envs.step(["<answer>Tolva River</answer>"] * 3)
    assert term.all()
    envs.close()


def test_async_vector_env_workers_build_their_own_task():
    envs = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("hopgym/HotpotQA-v1", path=HOTPOT) for _ in range(2)], shared_memory=False
    )
    try:
        _, info = envs.reset(seed=0)
        assert len(set(info["question_id"])) == 2
        _, _, _, _, info = envs.step(["<search>Kaldor</search>"] * 2)
        for qid, ids in zip(info["question_id"], info["retrieved_ids"], strict=True):
            assert all(d.startswith(f"{qid}:") for d in ids)
    finally:
        envs.close()


def test_cache_key_includes_the_arguments():
    a = gym.make("hopgym/HotpotQA-v1", path=HOTPOT).unwrapped.task
    b = gym.make("hopgym/HotpotQA-v1", path=HOTPOT, limit=2).unwrapped.task
    c = gym.make("hopgym/HotpotQA-v1", path=HOTPOT, mode="open").unwrapped.task
    assert len({id(a), id(b), id(c)}) == 3 and len(b.samples) == 2
    assert load_task(a.recipe[1][0]) is a


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"path": BAMBOOGLE}, "questions only"),
        ({"path": HOTPOT, "mode": "distractor", "index": "somewhere"}, "distractor"),
        ({"path": HOTPOT, "retriever": "tfidf"}, "retriever must be"),
        ({"path": HOTPOT, "mode": "closed"}, "mode must be"),
        ({"path": HOTPOT, "index_type": "lsh"}, "index_type"),
    ],
)
def test_bad_arguments_say_what_to_do(kwargs, match):
    env_id = "hopgym/Bamboogle-v1" if kwargs["path"] == BAMBOOGLE else "hopgym/HotpotQA-v1"
    with pytest.raises(ValueError, match=match):
        gym.make(env_id, **kwargs)


def test_missing_path_and_offline_hub(monkeypatch):
    with pytest.raises(ValueError, match="needs path="):
        gym.make("hopgym/MuSiQue-v1")

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    mod = types.ModuleType("datasets")
    mod.load_dataset = offline  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", mod)
    with pytest.raises(DatasetUnavailableError, match="pass path="):
        gym.make("hopgym/HotpotQA-v1")  # the default path is the hub name


def test_retriever_settings_reach_the_client_from_gym_make():
    from hopgym.retrieval.http import HTTPRetriever

    env = gym.make(
        "hopgym/Bamboogle-v1",
        path=BAMBOOGLE,
        reward=None,
        retriever={"url": "http://127.0.0.1:9", "timeout": 0.5, "retries": 0},
        web="http://127.0.0.1:9",
    )
    local = env.unwrapped.task.sources["local"].retriever
    assert isinstance(local, HTTPRetriever) and (local.timeout, local.retries) == (0.5, 0)
    assert isinstance(env.unwrapped.task.sources["web"].retriever, HTTPRetriever)
    env.reset(seed=0)
    info = env.step(Search("anything"))[4]  # nothing listens on port 9: reported, not raised
    assert "RetrievalError" in info["retrieval_error"]
    clone = pickle.loads(pickle.dumps(env))  # the spec is part of the recipe
    assert clone.unwrapped.task is env.unwrapped.task


def test_shorthand_keywords_merge_into_the_retriever_spec():
    from hopgym.retrieval.specs import RetrieverSpec

    pytest.importorskip("faiss")
    env = gym.make(
        "hopgym/MuSiQue-v1",
        path=MUSIQUE,
        mode="open",
        retriever="dense",
        model="hashing-128",
        index_type="hnsw",
        reward=None,
    )
    spec = env.unwrapped.task.recipe[1][0].retriever
    assert spec == RetrieverSpec(kind="dense", model="hashing-128", index_type="hnsw")
    assert env.unwrapped.task.sources["local"].retriever.index_type == "hnsw"
    with pytest.raises(ValueError, match="model is given twice"):
        gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, retriever={"kind": "dense", "model": "a"}, model="b")


def test_task_spec_is_built_by_keyword_and_checked():
    from hopgym.envs.datasets import TaskSpec

    spec = TaskSpec(dataset="hotpotqa", path=HOTPOT, retriever="bm25", limit=2)
    assert spec.path == HOTPOT and spec.path_key[0] > 0 and spec.retriever.kind == "bm25"
    assert TaskSpec(dataset="hotpotqa").path == "hotpotqa/hotpot_qa"  # the hub name by default
    assert spec == TaskSpec(dataset="hotpotqa", path=HOTPOT, retriever={"kind": "bm25"}, limit=2)
    for kwargs, match in [
        ({"dataset": "squad", "path": HOTPOT}, "dataset must be one of"),
        ({"dataset": "bamboogle", "path": BAMBOOGLE, "mode": "open"}, "mode does not apply"),
        ({"dataset": "hotpotqa", "path": HOTPOT, "limit": 0}, "limit must be None or an int"),
        ({"dataset": "hotpotqa", "path": HOTPOT, "lenient": "yes"}, "lenient must be"),
        ({"dataset": "hotpotqa", "path": HOTPOT, "web_cost": -1}, "web_cost must be"),
        (
            {"dataset": "hotpotqa", "path": HOTPOT, "mode": "distractor", "retriever": "http://127.0.0.1:9"},
            "distractor",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            TaskSpec(**kwargs)


def test_dataset_ids_share_one_entry_point():
    # One factory (make_dataset_env) serves every dataset id; no per-dataset wrappers.
    from hopgym.envs import datasets

    env = datasets.make_dataset_env("2wiki", WIKI2, top_k=2, reward=None)
    assert env.unwrapped.task is gym.make("hopgym/2WikiMultiHopQA-v1", path=WIKI2).unwrapped.task
    assert env.unwrapped.top_k == 2
    for name in ("make_hotpotqa", "make_2wiki", "make_musique", "make_bamboogle", "make_multihopqa"):
        assert not hasattr(datasets, name)


def test_a_loaded_index_takes_the_specs_cache_bounds(tmp_path):
    idx = tmp_path / "idx"
    gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx))
    clear_task_cache()
    env = gym.make(
        "hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx), retriever={"cache_entries": 7}
    )
    assert env.unwrapped.task.sources["local"].retriever.cache_info().max_entries == 7
    clear_task_cache()
    off = gym.make(
        "hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", index=str(idx), retriever={"cache_entries": 0}
    )
    assert off.unwrapped.task.sources["local"].retriever.cache_info().max_entries == 0


SLICEABLE = [
    ("hopgym/HotpotQA-v1", {"path": HOTPOT}),
    ("hopgym/2WikiMultiHopQA-v1", {"path": WIKI2}),
    ("hopgym/MuSiQue-v1", {"path": MUSIQUE, "mode": "open"}),
    ("hopgym/Bamboogle-v1", {"path": BAMBOOGLE, "corpus": CORPUS}),
    ("hopgym/MultiHopQA-v1", {"path": MUSIQUE}),
]


@pytest.mark.parametrize("env_id,kwargs", SLICEABLE, ids=[s[0] for s in SLICEABLE])
def test_start_and_limit_slice_every_dataset(env_id, kwargs):
    def ids(**kw):
        return [s.id for s in gym.make(env_id, **kw, **kwargs).unwrapped.task.samples]

    whole = ids()
    n = len(whole)
    assert n >= 2
    assert ids(start=1, limit=1) == whole[1:2]
    assert ids(start=1) == whole[1:]
    assert ids(start=n - 1, limit=5) == whole[n - 1 :]
    with pytest.raises(ValueError, match=rf"start={n} skips every question: .* has {n} questions"):
        gym.make(env_id, start=n, **kwargs)
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="start must be an int >= 0"):
            gym.make(env_id, start=bad, **kwargs)


def test_a_distractor_slice_keeps_only_its_questions_paragraphs():
    env = gym.make("hopgym/HotpotQA-v1", path=HOTPOT, start=2, reward=None)
    task = env.unwrapped.task
    (sample,) = task.samples
    assert set(task.documents) and all(d.startswith(f"{sample.id}:") for d in task.documents)
    m = evaluate(env, make_agent("oracle", env), episodes=1)
    assert m["em"] == 1.0 and m["support_recall"] == 1.0
