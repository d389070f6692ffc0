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


def test_gems_trainer_wrappers_carry_hopgyms_episode_reward(tiny_sample):
    """The wrapper stack GEM's trainers build (``get_wrapper_fns("concat_chat,episode_tracking")``
    with the policy's tokenizer) over ``make_vec``: the chat the policy sees is hopgym's prompt and
    replies, the episode's cumulative reward is hopgym's; a group made with one seed
    (``vec_kwargs``) shares its questions, episode after episode."""
    from gem.wrappers.wrapper_factory import get_wrapper_fns

    class ChatTokenizer:  # the one method the concat_chat wrapper calls
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            turns = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
            return turns + ("<|assistant|>" if add_generation_prompt else "")

    wrappers = get_wrapper_fns("concat_chat,episode_tracking", tokenizer=ChatTokenizer())
    group = 3
    vec = gem.make_vec(
        ["hopgym:Tiny-v1"] * group, wrappers=wrappers, vec_kwargs=[{"seed": 11}] * group, reward="searchr1"
    )
    vec.envs[0].unwrapped  # noqa: B018 - a GEM wrapper stack, as the trainer holds it
    obs, infos = vec.reset()
    first = [i["question_id"] for i in infos]
    assert len(set(first)) == 1 and all(o.startswith("<|user|>") and "Question:" in o for o in obs)
    question_id = first[0]
    sample = next(s for s in gem.make("hopgym:Tiny-v1").env.unwrapped.task.samples if s.id == question_id)
    turns = oracle_turns(sample)
    received = np.zeros(group)
    for n, turn in enumerate(turns):
        obs, rewards, terminated, truncated, infos = vec.step([turn] * group)
        received += rewards
        if n < len(turns) - 1:  # the chat so far: hopgym's prompt, the turns, hopgym's replies
            assert obs[0].count("<|assistant|>") == n + 2 and turn in obs[0]
            assert [i["cumulative_rewards"] for i in infos] == pytest.approx(received)
    assert list(terminated) == [True] * group
    total, terms, _ = reference_episode("hopgym/Tiny-v1", question_id, turns, reward="searchr1")
    # the reward array the trainer reads, and the tracker's episode total (GEM's SAME_STEP autoreset
    # hands back the next episode's reset info, with the finished one's total as prev_ep_*)
    assert list(received) == pytest.approx([total] * group) and total > 0
    assert [i["prev_ep_cumulative_rewards"] for i in infos] == pytest.approx([total] * group)
    # ... and every reward term of the finished episode, its last step's included
    assert [i["prev_ep_reward_terms"] for i in infos] == [terms] * group
    assert len(terms) > 1 and all(i["prev_ep_final_info"]["action_type"] == "answer" for i in infos)
    # SAME_STEP autoreset: the next questions, again one for the whole group
    assert len({o.split("Question:")[1] for o in obs}) == 1


@pytest.mark.parametrize("autoreset_mode", ["SAME_STEP", "NEXT_STEP"])
def test_last_steps_reward_terms_survive_autoreset(tiny_sample, autoreset_mode):
    """Under SAME_STEP the trainer sees the next episode's reset info in the step that ends an
    episode; the finished episode's terms (last step included) ride on it as prev_ep_*."""
    from gem.vector.sync_vector_env import SyncVectorEnv
    from gem.vector.vector_env import AutoresetMode

    vec = SyncVectorEnv(
        env_ids=["hopgym:Tiny-v1"],
        env_fns=[lambda: gem.make("hopgym:Tiny-v1", reward="searchr1")],
        autoreset_mode=AutoresetMode[autoreset_mode],
    )
    vec.envs[0].env.reset(options={"question_id": "tiny-6"})
    turns = oracle_turns(tiny_sample)
    for turn in turns:
        _, _, terminated, _, infos = vec.step([turn])
    assert terminated[0]
    _, terms, _ = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    if autoreset_mode == "NEXT_STEP":  # the last step's own info arrives; the reset comes next step
        assert infos[0]["reward_terms"] and "prev_ep_reward_terms" not in infos[0]
        _, _, _, _, infos = vec.step(["ignored: this step resets"])
    assert infos[0]["prev_ep_reward_terms"] == terms and infos[0]["prev_ep_final_info"]["turn"] == len(turns)
    _, _, _, _, infos = vec.step(["no tags"])  # the next episode's steps carry no prev_ep_*
    assert "prev_ep_reward_terms" not in infos[0]


def test_the_gem_check_example_matches_hopgym():
    """examples/gem_wrappers_check.py (its results are in the docs): GEM's trainer wrappers over
    make_vec, two groups of three, two episodes each; the reward arrays, the tracker's totals and
    prev_ep_reward_terms equal hopgym's; each group shares its question."""
    import importlib.util as iu
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "gem_wrappers_check.py"
    spec = iu.spec_from_file_location("gem_wrappers_check", path)
    check = iu.module_from_spec(spec)
    spec.loader.exec_module(check)
    result = check.run_check()
    assert len(result["episodes"]) == 12 and result["all_match"] and result["groups_share_question"]
    assert len({e["hopgym_reward"] for e in result["episodes"]}) > 1
    assert all(len(e["hopgym_reward_terms"]) == 4 for e in result["episodes"])
