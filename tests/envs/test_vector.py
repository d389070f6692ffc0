"""BatchedSearchVectorEnv against Gymnasium's SyncVectorEnv: the same observations, rewards, flags,
infos and transcripts under the same seeds, with one search_batch call per retriever per step."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from vector_helpers import WORLD, assert_same_logs, drive, per_env

import hopgym
from hopgym.envs.registration import make_task_env
from hopgym.envs.vector import BatchedSearchVectorEnv, step_batched
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.tasks.base import QATask, Source
from hopgym.vector import BatchedSearchVectorEnv as Reexported

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)


def assert_same(fns, mode, steps=40, seed=3):
    sync = SyncVectorEnv(fns, autoreset_mode=mode)
    batched = BatchedSearchVectorEnv(fns, autoreset_mode=mode)
    assert_same_logs(drive(batched, steps, seed), drive(sync, steps, seed))
    sync.close()
    batched.close()
    return batched


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize(
    "env_id,kwargs",
    [
        ("hopgym/Synthetic-v1", {"protocol": "tags"}),
        ("hopgym/Synthetic-v1", {"protocol": "r3", "dedup": False}),
        ("hopgym/SyntheticRouting-v1", {"protocol": "tags", "reward": "kunlun"}),
        ("hopgym/SyntheticRouting-v1", {"protocol": "r3", "reward": "r3rag", "max_docs": 5}),
        ("hopgym/Synthetic-v1", {"parse": "strict", "background_k": 2, "reward": "searchr1", "top_k": 2}),
    ],
    ids=["tags", "r3-nodedup", "routing-kunlun", "routing-r3rag-maxdocs", "strict-bg"],
)
def test_the_same_as_sync_vector_env(env_id, kwargs, mode):
    fns = [lambda: gym.make(env_id, **WORLD, **kwargs)] * 8
    batched = assert_same(fns, mode, steps=40)
    stats = batched.search_stats()
    # 8 sub-envs, at most one call per source and step (BM25: one k per call).
    sources = len(batched.envs[0].unwrapped.source_names)
    assert stats.requests > 100
    assert stats.calls <= 40 * sources < stats.requests


def test_one_call_per_retriever_per_step_at_the_largest_k():
    calls: list[tuple[tuple[str, ...], int]] = []

    class Recording(BM25Retriever):
        def search_batch(self, queries, k):
            calls.append((tuple(queries), k))
            return super().search_batch(queries, k)

    base = gym.make("hopgym/Tiny-v1").unwrapped.task
    ((name, src),) = base.sources.items()
    retriever = Recording(src.retriever.passages, cache_entries=0)
    task = QATask("tiny", base.samples, {name: Source(name, retriever)}, base.documents)
    venv = BatchedSearchVectorEnv([lambda: make_task_env(task)] * 4)
    venv.reset(seed=0)
    venv.step(["<search>capital</search>"] * 2 + ["<think>x</think>", "<search>Vashti</search>"])
    assert calls == [(("capital", "Vashti"), 3)]
    calls.clear()
    # Envs 0, 1 and 3 have seen 3 documents (dedup asks k + 3), env 2 none: one call at the
    # largest k (BM25's top k is a prefix of any longer list), cut per env.
    venv.step(
        ["<search>film</search>", "<search>Lorn</search>", "<search>Lorn</search>", "<search>film</search>"]
    )
    assert calls == [(("film", "Lorn"), 6)]
    assert venv.search_stats() == (7, 2, 4)


def test_a_retriever_that_fails_in_batches_is_searched_per_env():
    class NoBatch(BM25Retriever):
        def search_batch(self, queries, k):
            raise RuntimeError("batch endpoint down")

    class Broken(BM25Retriever):
        def search_batch(self, queries, k):
            raise RuntimeError("down")

        def search(self, query, k):
            raise RuntimeError("down")

    base = gym.make("hopgym/Tiny-v1").unwrapped.task
    ((name, src),) = base.sources.items()
    for cls in (NoBatch, Broken):
        retriever = cls(src.retriever.passages)
        task = QATask("tiny", base.samples, {name: Source(name, retriever)}, base.documents)
        fns = [lambda task=task: make_task_env(task)] * 3
        assert_same(fns, AutoresetMode.NEXT_STEP, steps=12)


def test_an_action_wrapper_changes_the_action_after_the_prepare():
    class Shout(gym.ActionWrapper):
        def action(self, action):
            return action.replace("<search>", "<search>Kaldor ") if isinstance(action, str) else action

    fns = [lambda: Shout(gym.make("hopgym/Tiny-v1"))] * 3
    sync, batched = SyncVectorEnv(fns), BatchedSearchVectorEnv(fns)
    for venv in (sync, batched):
        venv.reset(seed=1)
    acts = ["<search>river</search>"] * 3
    a, b = sync.step(acts), batched.step(acts)
    assert data_equivalence(a, b)
    assert [e.unwrapped.transcript for e in sync.envs] == [e.unwrapped.transcript for e in batched.envs]
    assert "Kaldor" in a[4]["query"][0]


def test_dense_batches_rank_as_single_searches():
    pytest.importorskip("faiss")
    fns = [lambda: gym.make("hopgym/Tiny-v1", retriever={"kind": "dense", "model": "hashing-64"})] * 6
    # Dense batches take FAISS' BLAS path and may differ from single searches in the last float
    # bits; ranks use scores rounded to 1e-5, so on this corpus the transcripts are the same.
    assert_same(fns, AutoresetMode.SAME_STEP, steps=30)


def test_api_spaces_repr_and_attrs():
    venv = gym.make_vec("hopgym/Tiny-v1", num_envs=2, autoreset_mode="SameStep")
    assert isinstance(venv, gym.vector.VectorEnv) and Reexported is BatchedSearchVectorEnv
    assert repr(venv) == "BatchedSearchVectorEnv(hopgym/Tiny-v1, num_envs=2)"
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.single_observation_space == venv.envs[0].observation_space
    assert venv.observation_space == SyncVectorEnv([lambda: gym.make("hopgym/Tiny-v1")] * 2).observation_space
    obs, infos = venv.reset(seed=[5, None])
    assert venv.get_attr("np_random_seed")[0] == 5
    assert venv.get_attr("max_turns") == (8, 8)
    venv.set_attr("tag", ["a", "b"])
    assert venv.get_attr("tag") == ("a", "b")
    assert venv.call("source_names") == (("local",), ("local",))
    json.dumps(per_env(infos, 2), default=str)
    with pytest.raises(ValueError, match="2 sub-envs"):
        venv.step(["<think>x</think>"])
    venv.close()


def test_gym_make_vec_uses_it_and_sync_stays_available():
    venv = gym.make_vec("hopgym/Tiny-v1", num_envs=2, autoreset_mode="SameStep", top_k=2)
    assert isinstance(venv, BatchedSearchVectorEnv)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.get_attr("top_k") == (2, 2)
    assert isinstance(gym.make_vec("hopgym/Tiny-v1", num_envs=2, vectorization_mode="sync"), SyncVectorEnv)
    assert gym.spec("hopgym/SyntheticFeaturized-v0").vector_entry_point is None


def test_per_env_options_and_step_subset():
    venv = BatchedSearchVectorEnv(
        [lambda: gym.make("hopgym/Tiny-v1")] * 3, autoreset_mode=AutoresetMode.DISABLED
    )
    ids = [s.id for s in venv.envs[0].unwrapped.task.samples]
    obs, infos = venv.reset(seed=[1, 2, 3], options=[{"question_id": ids[2]}, None, {"question_id": ids[0]}])
    assert list(infos["_question_id"]) == [True, False, True]
    assert infos["question_id"][0] == ids[2] and infos["question_id"][2] == ids[0]
    out = venv.step_subset([2, 0], ["<answer>x</answer>", "<search>Orsk</search>"])
    assert [r[2] for r in out] == [True, False]
    with pytest.raises(gym.error.ResetNeeded, match=r"\[2\]"):
        venv.step_subset([2], ["<think>a</think>"])
    with pytest.raises(gym.error.ResetNeeded):
        venv.step(["<think>a</think>"] * 3)
    with pytest.raises(ValueError, match="distinct"):
        venv.step_subset([0, 0], ["a", "b"])
    with pytest.raises(ValueError, match="one entry per sub-env"):
        venv.reset(options=[{}])
    venv.reset(options=[None, None, {}])
    assert venv.step_subset([2], ["<think>a</think>"])[0][4]["action_type"] == "think"
    with pytest.raises(ValueError, match="DISABLED"):
        BatchedSearchVectorEnv([lambda: gym.make("hopgym/Tiny-v1")]).step_subset([0], ["a"])


def test_step_batched_is_the_envs_own_steps():
    envs = [gym.make("hopgym/Tiny-v1") for _ in range(3)]
    refs = [gym.make("hopgym/Tiny-v1") for _ in range(3)]
    acts = ["<search>Kaldor</search>", "<search>Kaldor</search>", "<answer>x</answer>"]
    for i, (e, r) in enumerate(zip(envs, refs, strict=True)):
        e.reset(seed=i)
        r.reset(seed=i)
    assert data_equivalence(step_batched(envs, acts), [r.step(a) for r, a in zip(refs, acts, strict=True)])


def test_the_facade_exposes_vector_and_no_second_make_vec():
    assert hopgym.vector.BatchedSearchVectorEnv is BatchedSearchVectorEnv
    assert not hasattr(hopgym.vector, "make_vec")  # gym.make_vec is the one way


@pytest.mark.parametrize(
    "entries",
    [
        [(0, {"a": 1, "b": "x", "c": {"d": 1.5}}), (2, {"a": 2.7, "c": {"d": 2, "e": None}})],
        [(1, {"v": np.arange(3), "f": True}), (0, {"v": np.ones(3), "f": False, "g": [1]})],
        [(0, {"final_obs": "o", "final_info": {"x": 1}}), (0, {"x": 2}), (1, {"x": np.int8(3)})],
        [(0, {"m": {"a": 1}}), (1, {"m": 5})],  # a dict and a number under one key
        [(0, {"_x": 1, "x": 2}), (1, {"x": 3})],  # a key shaped like a mask
        [(2, {"k": None}), (2, {"k": "again"})],  # the same sub-env twice
    ],
)
def test_the_info_merge_is_gymnasiums(entries):
    from gymnasium.vector import VectorEnv

    venv = BatchedSearchVectorEnv([lambda: gym.make("hopgym/Tiny-v1")] * 12)
    # A few infos are merged one by one, more (here 12-18) key by key: both as Gymnasium does.
    for batch in (entries, [(i + 4 * j, info) for j in range(3) for i, info in entries]):
        expected: dict = {}
        for i, info in batch:
            expected = VectorEnv._add_info(venv, expected, info, i)
        got = venv._merge_infos(batch)
        assert list(got) == list(expected) and data_equivalence(got, expected)
        for key, value in expected.items():
            if isinstance(value, np.ndarray):
                assert got[key].dtype == value.dtype, key


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_async_mode_works_and_reads_as_sync_and_batched(mode):
    # Gymnasium's AsyncVectorEnv keeps observations in shared memory by default: FreeText has its
    # own shared-memory layout (issue 21: the text space had none, and async mode failed).
    logs = {}
    for how in ("sync", "async", None):  # None: the vector entry point (the batched env)
        extra = {"vectorization_mode": how, "vector_kwargs": {"autoreset_mode": mode}} if how else {}
        venv = gym.make_vec(
            "hopgym/Synthetic-v1",
            num_envs=4,
            **WORLD,
            **extra,
            **({} if how else {"autoreset_mode": mode}),
        )
        logs[how] = drive(venv, 16, seed=5)
        venv.close()
    assert_same_logs(logs["async"], logs["sync"])
    assert_same_logs(logs[None], logs["sync"])


def test_async_observations_are_the_latest_texts_and_any_unicode():
    from hopgym.envs.spaces import FreeText, SharedTexts

    venv = gym.make_vec("hopgym/Tiny-v1", num_envs=2, vectorization_mode="async")
    first, _ = venv.reset(seed=0)
    second, *_ = venv.step(["<search>Zürich \ud83d 中 \x00</search>", "<answer>x</answer>"])
    assert type(first) is tuple and type(second) is tuple  # copies (copy=True is the default)
    assert first != second and "No documents" in second[0]
    venv.close()
    # The shared-memory row round-trips any str, NUL and lone surrogates included.
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    space = FreeText(8)
    shared = create_shared_memory(space, n=2)
    view = read_from_shared_memory(space, shared, n=2)
    write_to_shared_memory(space, 1, "a\x00\ud83dé中", shared)
    assert isinstance(view, SharedTexts) and view == ("", "a\x00\ud83dé中")
    write_to_shared_memory(space, 1, "b", shared)
    assert view[1] == "b" and list(view) == ["", "b"]
    with pytest.raises(hopgym.errors.InvalidOptionError, match="at most 8"):
        write_to_shared_memory(space, 0, "x" * 9, shared)


@pytest.mark.parametrize("actions", ["<search>x</search>", None, 3, np.array("a")])
def test_step_refuses_what_is_not_a_sequence_of_actions(actions):
    venv = gym.make_vec("hopgym/Tiny-v1", num_envs=3, autoreset_mode="Disabled")
    venv.reset(seed=0)
    with pytest.raises(hopgym.errors.InvalidOptionTypeError, match="expected a sequence of 3 strings"):
        venv.step(actions)
    with pytest.raises(hopgym.errors.InvalidOptionError, match=r"expected a sequence of 3 strings.*got 2"):
        venv.step(["a", "b"])
    with pytest.raises(hopgym.errors.InvalidOptionTypeError, match="expected a sequence of 2 strings"):
        venv.step_subset([0, 1], actions)
    venv.close()
