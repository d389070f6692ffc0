from __future__ import annotations

import math

import numpy as np
import pytest

gem = pytest.importorskip("gem")

from episodes import oracle_turns, reference_episode  # noqa: E402

from hopgym.errors import HopgymError, InvalidOptionError, InvalidOptionTypeError  # noqa: E402
from hopgym.integrations.gem import HopgymGemEnv, gem_id  # noqa: E402


def test_every_builtin_id_is_in_gems_registry():
    from gem.envs.registration import ENV_REGISTRY

    for env_id in ("hopgym/Synthetic-v1", "hopgym/SyntheticRouting-v1", "hopgym/Tiny-v1", "hopgym/Tiny-v0"):
        assert gem_id(env_id) in ENV_REGISTRY
    env = gem.make("hopgym:Tiny-v1")
    assert isinstance(env, HopgymGemEnv) and isinstance(env, gem.Env)
    assert env.env_id == "hopgym:Tiny-v1"


def test_scripted_episode_matches_hopgym(tiny_sample):
    env = gem.make("hopgym:Tiny-v1", reward="searchr1")
    env.env.reset(options={"question_id": "tiny-6"})  # the question the reference plays
    turns = oracle_turns(tiny_sample)
    total, terms = 0.0, {}
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
        total += reward
        for k, v in info["reward_terms"].items():
            terms[k] = terms.get(k, 0.0) + v
        assert not (terminated and truncated)
    assert terminated and info["action_type"] == "answer"
    ref_total, ref_terms, _ = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    assert math.isclose(total, ref_total) and total > 0 and terms == ref_terms


def test_seeding_is_per_env_and_reproducible():
    a = gem.make("hopgym:Tiny-v1", seed=3)
    b = gem.make("hopgym:Tiny-v1", seed=3)
    assert a.reset() == b.reset()
    assert a.reset(seed=7) == b.reset(seed=7)


def test_vectorized_env_runs_hopgym():
    vec = gem.make_vec(["hopgym:Tiny-v1"] * 3, seed=5)
    obs, infos = vec.reset()
    assert len(obs) == 3 and all("Question:" in o for o in obs)
    again = gem.make_vec(["hopgym:Tiny-v1"] * 3, seed=5).reset()
    assert [i["question_id"] for i in infos] == [i["question_id"] for i in again[1]]
    # one answer, one malformed turn, one non-string: nothing raises
    obs, rewards, terminated, truncated, infos = vec.step(["<answer>x</answer>", "no tags", 7])
    assert list(terminated) == [True, False, False]
    assert infos[1]["action_type"] == "invalid" and "Invalid turn" in obs[1]
    assert infos[2]["action_type"] == "invalid" and infos[2]["invalid_action"]
    # SAME_STEP autoreset: the finished env already shows a new prompt
    assert "Question:" in obs[0]
    assert rewards.dtype == np.float64


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"hopgym_id": "hopgym/Tinny-v1"}, InvalidOptionTypeError, "hopgym/Tinny-v1"),
        ({"top_kk": 2}, InvalidOptionTypeError, "top_kk"),
        ({"max_turns": 0}, InvalidOptionError, "max_turns"),
    ],
)
def test_bad_options_fail_at_construction(kwargs, error, names):
    with pytest.raises(error, match=names) as info:
        gem.make("hopgym:Tiny-v1", **kwargs)
    assert isinstance(info.value, HopgymError)
