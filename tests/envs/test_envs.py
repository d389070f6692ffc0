"""Conformance over every registered hopgym id (Gymnasium's own test pattern)."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import hopgym  # noqa: F401
from hopgym.envs import BUILTIN_IDS
from hopgym.errors import InvalidOptionError

SPECS = [gym.spec(env_id) for env_id in BUILTIN_IDS]
ALL_IDS = sorted(i for i in gym.registry if i.startswith("hopgym/"))

# The dataset ids read the package's own small fixture files (no download, no shared data).
FIX = Path(__file__).resolve().parents[1] / "fixtures"
_FILES = {
    "HotpotQA": {"path": FIX / "hotpotqa_dev.json"},
    "2WikiMultiHopQA": {"path": FIX / "2wiki_dev.json"},
    "MuSiQue": {"path": FIX / "musique_dev.jsonl"},
    "MultiHopQA": {"path": FIX / "musique_dev.jsonl"},
    "Bamboogle": {"path": FIX / "bamboogle_test.jsonl", "corpus": FIX / "wiki_corpus.jsonl"},
}


def _kwargs(env_id: str) -> dict:
    name = env_id.removeprefix("hopgym/").rsplit("-v", 1)[0]
    return {k: str(v) for k, v in _FILES.get(name, {}).items()}


def test_every_id_is_checked():
    # Every id needs no file (the built-in worlds, the featurized env) or has one here.
    builtin = {*BUILTIN_IDS, *(i.replace("-v1", "-v0") for i in BUILTIN_IDS), "hopgym/SyntheticFeaturized-v0"}
    assert {i for i in ALL_IDS if not _kwargs(i)} == builtin


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_without_any_warning(env_id):
    # As Gymnasium's own tests do: any warning of the checkers fails the test.
    with warnings.catch_warnings(record=True) as made:
        warnings.simplefilter("always")
        env = gym.make(env_id, **_kwargs(env_id))
    # Gymnasium's one deliberate warning: a -v0 id is out of date (-v1 exists).
    expected = ["out of date"] if env_id.endswith("-v0") and env_id != "hopgym/SyntheticFeaturized-v0" else []
    assert [w for w in made if not any(e in str(w.message) for e in expected)] == []
    assert len(made) == len(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # gym.make's passive checker runs on the first reset and step; check_env on the bare env.
        check_env(env.unwrapped, skip_render_check=False)
        env.reset(seed=0)
        env.step(env.action_space.sample())
        env.close()


def test_max_episode_steps_is_refused_for_max_turns():
    # One step budget: a TimeLimit from gym.make(max_episode_steps=) would truncate the very step
    # that answers (terminated and truncated together), so it is refused, naming max_turns.
    env = gym.make("hopgym/Tiny-v1", max_episode_steps=1)
    with pytest.raises(InvalidOptionError, match="max_turns=1"):
        env.reset(seed=0)
    with pytest.raises(InvalidOptionError, match="max_turns=1"):  # every reset, not only the first
        env.reset(seed=1)
    # Gymnasium records the keyword on the wrappers' spec only: the env's own spec has no budget.
    assert env.spec.max_episode_steps == 1 and env.unwrapped.spec.max_episode_steps is None
    # The registered specs carry none, so gym.make adds no TimeLimit of its own.
    assert all(gym.spec(i).max_episode_steps is None for i in gym.registry if i.startswith("hopgym/"))
    assert gym.make("hopgym/Tiny-v1").reset(seed=0)[1]["max_turns"] == 8


def test_max_episode_steps_equal_to_max_turns_is_refused_too():
    # Both budgets would end the same step: an answer on the last turn would come back
    # terminated and truncated together, so even max_episode_steps == max_turns is refused.
    env = gym.make("hopgym/Tiny-v1", max_turns=2, max_episode_steps=2)
    with pytest.raises(InvalidOptionError, match="max_turns=2 instead"):
        env.reset(seed=0)
    # The same env without the TimeLimit (max_episode_steps=-1 tells gym.make to add none).
    env = gym.make("hopgym/Tiny-v1", max_turns=2, max_episode_steps=-1)
    env.reset(seed=0)
    env.step("<think>x</think>")
    assert env.step("<answer>x</answer>")[2:4] == (True, False)


def test_the_budget_check_runs_once_per_env():
    env = gym.make("hopgym/Tiny-v1")
    env.reset(seed=0)
    assert env.unwrapped._budget_checked
    # A TimeLimit put on later by hand is the user's own wrapper; the env is not asked again.
    from gymnasium.wrappers import TimeLimit

    limited = TimeLimit(env, max_episode_steps=3)
    limited.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env.unwrapped))
    assert not clone._budget_checked
    with pytest.raises(InvalidOptionError, match="max_turns=3"):
        TimeLimit(clone, max_episode_steps=3).reset(seed=0)
    env = gym.make("hopgym/Tiny-v1", max_turns=1)
    env.reset(seed=0)
    assert env.step("<answer>x</answer>")[2:4] == (True, False)
    env.reset(seed=0)
    assert env.step("<think>x</think>")[2:4] == (False, True)
    # A step after the end repeats how it ended and records nothing.
    assert env.step("<answer>x</answer>")[2:4] == (False, True)
    assert env.unwrapped.turn == 1


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_same_seed_same_rollout(spec):
    env_a, env_b = gym.make(spec.id), gym.make(spec.id)
    env_a.action_space.seed(3)
    obs_a, info_a = env_a.reset(seed=11)
    obs_b, info_b = env_b.reset(seed=11)
    assert obs_a == obs_b and data_equivalence(info_a, info_b)
    for _ in range(6):
        action = env_a.action_space.sample()
        out_a, out_b = env_a.step(action), env_b.step(action)
        assert data_equivalence(out_a, out_b)
        if out_a[2] or out_a[3]:
            break


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_pickle_round_trip(spec):
    env = gym.make(spec.id)
    env.reset(seed=5)
    env.step("<search>capital</search>")
    clone = pickle.loads(pickle.dumps(env))
    # The clone continues the same episode with the same outcome.
    out_a = env.step("<answer>Vashti</answer>")
    out_b = clone.step("<answer>Vashti</answer>")
    assert data_equivalence(out_a, out_b)


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_terminated_and_truncated_never_both(spec):
    env = gym.make(spec.id, max_turns=2)
    env.reset(seed=0)
    _, _, term, trunc, _ = env.step("<think>hm</think>")
    assert not term and not trunc
    _, _, term, trunc, _ = env.step("<answer>x</answer>")
    assert term and not trunc
    env.reset(seed=0)
    env.step("<search>a</search>")
    _, _, term, trunc, _ = env.step("<search>b</search>")
    assert trunc and not term


def test_import_hopgym_is_light():
    import subprocess
    import sys

    code = (
        "import sys, hopgym, gymnasium as gym; gym.make('hopgym/Tiny-v1');"
        "heavy = [m for m in ('torch', 'faiss', 'trl', 'transformers') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
