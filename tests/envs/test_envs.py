"""Conformance over every registered built-in hopgym id (Gymnasium's own test pattern)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import hopgym  # noqa: F401
from hopgym.envs import BUILTIN_IDS

SPECS = [gym.spec(env_id) for env_id in BUILTIN_IDS]


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_check_env(spec):
    env = gym.make(spec.id)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


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
