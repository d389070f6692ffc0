"""Env options: one type (EnvOptions), every id takes all of it, bad options fail fast, and steps
after the end are refused without growing memory."""

from __future__ import annotations

import dataclasses
import pickle
import tracemalloc
import typing
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym
from hopgym.envs import BUILTIN_IDS, MultiHopQAEnv
from hopgym.envs.datasets import DATASETS, RETRIEVER_SHORTHANDS, TASK_ARGS, DatasetKwargs
from hopgym.envs.options import OPTION_NAMES, EnvKwargs, EnvOptions
from hopgym.rewards.base import reward_terms_of
from hopgym.tasks.tiny import tiny_task
from hopgym.turns import R3Protocol

FIX = Path(__file__).resolve().parents[1] / "fixtures"

#: A value other than the default for every option: a new field fails
#: test_every_option_has_a_non_default_value until it is added here, and then every id is made
#: with it.
NON_DEFAULT = {
    "protocol": "r3",
    "top_k": 2,
    "dedup": False,
    "max_docs": 5,
    "doc_chars": 400,
    "background_k": 1,
    "max_turns": 5,
    "max_action_chars": 4000,
    "max_tool_calls": 2,
    "reward": "f1",
    "render_mode": "ansi",
    "parse": "strict",
    "repeat_notice": False,
    "last_turn_notice": False,
}

SMALL_WORLD = {"n_entities": 300, "n_questions": 40}

#: What each registered id needs besides the options, and how the options are passed.
ID_ARGS = {
    "hopgym/Synthetic-v1": SMALL_WORLD,
    "hopgym/SyntheticRouting-v1": SMALL_WORLD,
    "hopgym/Tiny-v1": {},
    "hopgym/HotpotQA-v1": {"path": str(FIX / "hotpotqa_dev.json")},
    "hopgym/2WikiMultiHopQA-v1": {"path": str(FIX / "2wiki_dev.json")},
    "hopgym/MuSiQue-v1": {"path": str(FIX / "musique_dev.jsonl")},
    "hopgym/Bamboogle-v1": {
        "path": str(FIX / "bamboogle_test.jsonl"),
        "corpus": str(FIX / "wiki_corpus.jsonl"),
    },
    "hopgym/MultiHopQA-v1": {"path": str(FIX / "musique_dev.jsonl")},
}
# Every -v1 id has a -v0 twin with 0.1's turn handling; both take the same arguments.
ID_ARGS.update({i.replace("-v1", "-v0"): args for i, args in list(ID_ARGS.items())})
FEATURIZED = "hopgym/SyntheticFeaturized-v0"
HOPGYM_IDS = sorted(i for i in gym.registry if i.startswith("hopgym/"))


def _make_with_all_options(env_id):
    if env_id == FEATURIZED:
        # make_featurized passes every option to the text env it wraps (render_mode also sets
        # the featurized view's); the wrapper machinery reaches the text env's wrappers.
        env = gym.make(env_id, **NON_DEFAULT, base_kwargs=SMALL_WORLD)
        return env, env
    env = gym.make(env_id, **ID_ARGS[env_id], **NON_DEFAULT)
    return env, env


def test_every_option_is_declared_once_with_help():
    names = [f.name for f in dataclasses.fields(EnvOptions)]
    assert tuple(names) == OPTION_NAMES
    assert list(typing.get_type_hints(EnvKwargs)) == names  # the TypedDict keeps in step
    for f in dataclasses.fields(EnvOptions):
        assert f.metadata["help"], f.name


def test_every_option_has_a_non_default_value():
    assert list(NON_DEFAULT) == list(OPTION_NAMES)
    defaults = EnvOptions()
    for name, value in NON_DEFAULT.items():
        assert getattr(defaults, name) != value, name


def test_every_registered_id_is_covered():
    assert set(HOPGYM_IDS) == set(ID_ARGS) | {FEATURIZED}
    assert set(BUILTIN_IDS) <= set(ID_ARGS)


@pytest.mark.parametrize("env_id", HOPGYM_IDS)
def test_every_id_takes_every_option(env_id):
    env, text_env = _make_with_all_options(env_id)
    assert text_env.unwrapped.options == EnvOptions(**NON_DEFAULT)
    base = text_env.unwrapped
    assert isinstance(base.protocol, R3Protocol) and base.top_k == 2 and base.max_turns == 5
    # The env applies the budget itself; the reward preset is applied around it.
    assert reward_terms_of(text_env) == ["outcome"]
    assert text_env.get_wrapper_attr("metric") == "f1"
    obs, info = env.reset(seed=0)
    assert "Doc 1" in base.transcript[0]["content"] or "(1)" in base.transcript[0]["content"]
    assert isinstance(env.render(), str)


def test_bare_env_takes_options_one_way_or_another():
    task = tiny_task()
    a = MultiHopQAEnv(task, top_k=2, dedup=False)
    b = MultiHopQAEnv(task, EnvOptions(top_k=2, dedup=False))
    c = MultiHopQAEnv(task, {"top_k": 2}, dedup=False)
    assert a.options == b.options == c.options == EnvOptions(top_k=2, dedup=False).resolved()
    assert a.top_k == 2 and a.dedup is False
    with pytest.raises(AttributeError):
        a.top_k = 5  # read-only: the options are the one place
    clone = pickle.loads(pickle.dumps(a))
    assert clone.options == a.options


BAD = [
    ("top_k", 0, "top_k must be an int >= 1, got 0"),
    ("top_k", -1, "top_k must be an int >= 1"),
    ("top_k", True, "top_k must be an int >= 1, got True"),  # bool is not an int here
    ("top_k", 2.0, "top_k"),
    ("background_k", -1, "background_k must be an int >= 0"),
    ("max_turns", 0, "max_turns"),
    ("max_action_chars", 0, "max_action_chars"),
    ("max_docs", 0, "max_docs must be None or an int >= 1"),
    ("doc_chars", -5, "doc_chars must be None or an int >= 1"),
    ("dedup", 1, "dedup must be True or False"),
    ("protocol", "xml", "protocol must be one of"),
    ("reward", "foo", "reward: unknown reward preset 'foo'"),
    ("reward", 3, "reward: reward preset must be a name or None"),
    ("render_mode", "human", "render_mode must be None or one of"),
    ("parse", "loose", "parse must be None or one of"),
    ("repeat_notice", 1, "repeat_notice must be None, True or False"),
    ("last_turn_notice", "yes", "last_turn_notice must be None, True or False"),
]


@pytest.mark.parametrize("name,value,match", BAD, ids=[f"{b[0]}={b[1]!r}" for b in BAD])
def test_bad_options_name_the_field(name, value, match):
    with pytest.raises(ValueError, match=match):
        EnvOptions(**{name: value})


def _no_build(*args, **kwargs):
    raise AssertionError("a world or a task was built before the keywords were checked")


@pytest.mark.parametrize("name,value,match", BAD[:3] + BAD[-3:], ids=lambda v: str(v))
def test_bad_options_fail_before_any_world_or_index_is_built(monkeypatch, name, value, match):
    no_build = _no_build
    monkeypatch.setattr("hopgym.tasks.synthetic.build_task", no_build)
    monkeypatch.setattr("hopgym.tasks.tiny.tiny_task", no_build)
    monkeypatch.setattr("hopgym.envs.datasets._build_task", no_build)
    monkeypatch.setattr("hopgym.envs.datasets._load_dataset", no_build)
    for env_id in ("hopgym/Synthetic-v1", "hopgym/Tiny-v1", "hopgym/HotpotQA-v1"):
        with pytest.raises(ValueError, match=match):
            gym.make(env_id, **ID_ARGS[env_id], **{name: value})


@pytest.mark.parametrize(
    "env_id,kwargs,match",
    [
        ("hopgym/Tiny-v1", {"top_kk": 2}, "unknown option 'top_kk' \\(did you mean 'top_k'\\?\\)"),
        ("hopgym/Tiny-v1", {"max_turn": 2}, "did you mean 'max_turns'"),
        ("hopgym/Synthetic-v1", {"n_entitis": 300}, "did you mean 'n_entities'"),
        ("hopgym/Synthetic-v1", {"rewards": "f1"}, "did you mean 'reward'"),
        ("hopgym/HotpotQA-v1", {"retreiver": "bm25"}, "did you mean 'retriever'"),
        ("hopgym/HotpotQA-v1", {"web_costs": 2.0}, "did you mean 'web_cost'"),
        (
            "hopgym/HotpotQA-v1",
            {"retriever": {"kind": "dense", "modle": "x"}},
            "unknown retriever setting 'modle' \\(did you mean 'model'\\?\\)",
        ),
    ],
)
def test_unknown_keywords_suggest_the_close_match(monkeypatch, env_id, kwargs, match):
    monkeypatch.setattr("hopgym.tasks.synthetic.build_task", _no_build)
    monkeypatch.setattr("hopgym.envs.datasets._load_dataset", _no_build)
    with pytest.raises(TypeError, match=match):
        gym.make(env_id, **ID_ARGS.get(env_id, {}), **kwargs)


def test_dataset_keywords_are_declared_once():
    from hopgym.envs.datasets import TaskSpec

    assert set(typing.get_type_hints(DatasetKwargs)) == {*TASK_ARGS, *RETRIEVER_SHORTHANDS, *OPTION_NAMES}
    for f in dataclasses.fields(TaskSpec):
        if f.init:
            assert f.metadata["help"], f.name


def test_dataset_ids_share_one_entry_point():
    for env_id in ID_ARGS:
        spec = gym.spec(env_id)
        if "dataset" in spec.kwargs:
            assert spec.entry_point == "hopgym.envs.datasets:make_dataset_env"
            assert spec.kwargs["dataset"] in DATASETS
    assert {gym.spec(i).kwargs.get("dataset") for i in ID_ARGS} - {None} == set(DATASETS)


# ----------------------------------------------------------------------------- after the end
def _transcript_size(env):
    return sum(len(m["content"]) for m in env.unwrapped.transcript)


@pytest.mark.parametrize("protocol", ["tags", "r3"])
def test_steps_after_an_answer_are_refused_and_not_recorded(protocol):
    env = gym.make("hopgym/Tiny-v1", protocol=protocol)
    env.reset(seed=0)
    env.step(hopgym.Search("Qelvor Dynamics"))
    _, _, term, trunc, info = env.step(hopgym.Answer("1962"))
    assert term and not trunc
    turns, size = env.unwrapped.turn, _transcript_size(env)
    searches = info["searches"]
    for action in (hopgym.Search("x"), "<answer>again</answer>", 5, "x" * 100_000):
        obs, reward, term, trunc, info = env.step(action)
        assert "episode is over" in obs and term and not trunc
        # Only the first sentence: no "Write <think>…" hint, since there is no turn to fix.
        assert "Write" not in obs and "Format error" not in obs
        assert info["action_type"] == "invalid" and "call reset()" in info["invalid_action"]
        assert info["searches"] == searches and info["retrieved_ids"] == []
    assert env.unwrapped.turn == turns and _transcript_size(env) == size
    env.reset(seed=1)  # a reset starts afresh
    assert env.step(hopgym.Search("Qelvor"))[4]["action_type"] == "search"


def test_steps_after_the_budget_are_refused_as_truncation():
    env = gym.make("hopgym/Tiny-v1", max_turns=2, reward="kunlun")
    env.reset(seed=0)
    env.step(hopgym.Search("Qelvor"))
    _, _, term, trunc, _ = env.step(hopgym.Search("Dynamics"))
    assert trunc and not term
    size = _transcript_size(env)
    obs, _, term, trunc, info = env.step(hopgym.Search("more"))
    assert "episode is over" in obs and trunc and not term and info["action_type"] == "invalid"
    assert _transcript_size(env) == size and env.unwrapped.turn == 2


@pytest.mark.parametrize("reward", ["default", "kunlun", "r3rag"])
def test_twenty_thousand_steps_after_the_end_do_not_grow_memory(reward):
    env = gym.make("hopgym/Tiny-v1", reward=reward)
    env.reset(seed=0)
    env.step(hopgym.Answer("1962"))
    turn = "<think>" + "x" * 500 + "</think><answer>again</answer>"  # 20k of these were 11 MB
    for _ in range(200):  # warm up caches and lazy imports
        env.step(turn)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            env.step(turn)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(env.unwrapped.transcript) == 2
    assert grown < 100_000, f"{grown} bytes kept after 20k post-end steps"


@pytest.mark.parametrize("v1", BUILTIN_IDS)
def test_v0_ids_keep_the_0_1_turn_handling(v1):
    v0 = v1.replace("-v1", "-v0")
    with pytest.warns(DeprecationWarning, match="out of date"):
        old = gym.make(v0)
    new = gym.make(v1)
    assert (
        old.unwrapped.options.parse,
        old.unwrapped.options.repeat_notice,
        old.unwrapped.options.last_turn_notice,
    ) == ("strict", False, False)
    assert (
        new.unwrapped.options.parse,
        new.unwrapped.options.repeat_notice,
        new.unwrapped.options.last_turn_notice,
    ) == ("lenient", True, True)
    turn = "<think>the first hop <search>Cardell</search>"  # <think> left open
    for env in (old, new):
        env.reset(seed=0)
    _, _, _, _, info_old = old.step(turn)
    _, _, _, _, info_new = new.step(turn)
    assert info_old["action_type"] == "invalid"
    assert info_new["action_type"] == "search"
    assert [i.code for i in info_new["format_issues"]] == ["unclosed_think"]
    # Everything else is the same env: one option set apart.
    assert old.unwrapped.options == dataclasses.replace(
        new.unwrapped.options, parse="strict", repeat_notice=False, last_turn_notice=False
    )
