"""FormatReward: per-invalid-turn penalty, termination, well-formed bonus, bad arguments."""

from __future__ import annotations

import pytest
from reward_helpers import ScriptedInfoEnv, answer, invalid, run, search, tiny

from hopgym.rewards import FormatReward, RewardArgumentError


def test_penalty_per_invalid_turn():
    env = FormatReward(ScriptedInfoEnv([invalid(), search("q"), invalid(), answer("x")]),
                       penalty=0.25)
    ep = run(env, "abcd")
    assert [i["reward_terms"]["format"] for i in ep.infos] == [-0.25, 0.0, -0.25, 0.0]
    assert env.invalid_turns == 2


def test_terminate_on_invalid_like_r3rag():
    env = FormatReward(ScriptedInfoEnv([search("q"), invalid(), answer("x")]), penalty=0.9,
                       terminate=True)
    ep = run(env, "abc")
    assert ep.terminated and not ep.truncated and ep.steps == 2 and ep.total == -0.9


@pytest.mark.parametrize(("script", "bonus"), [
    ([search("q"), answer("Cardell")], 0.2),
    ([search("q"), answer("wrong but well formed")], 0.2),
    ([invalid(), answer("Cardell")], 0.0),            # an invalid turn forfeits it
    ([search("q"), answer(" . ")], 0.0),              # nothing to score
    ([search("q"), search("q2")], 0.0),               # no answer
])
def test_bonus(script, bonus):
    env = FormatReward(ScriptedInfoEnv(script), penalty=0.0, bonus=0.2)
    ep = run(env, "ab")
    assert set(ep.terms) == {"format_bonus"}
    assert ep.terms["format_bonus"] == pytest.approx(bonus)


@pytest.mark.parametrize("action", [
    "no tags", "", "<search></search>", "<answer></answer>", "<route>moon</route>",
    "<search>a</search><answer>b</answer>", "<think><answer>x</answer></think>", 42, None,
    "<information>x</information>", "<search>unclosed",
])
def test_real_env_invalid_turns(action):
    env = FormatReward(tiny(None), penalty=0.5, terminate=True)
    env.reset(seed=0)
    _, r, terminated, truncated, info = env.step(action)
    assert info["action_type"] == "invalid" and r == -0.5 and terminated and not truncated


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"penalty": -0.1}, "penalty must be >= 0"),
    ({"bonus": -1}, "bonus must be >= 0"),
    ({"penalty": 0.0}, "does nothing"),
    ({"penalty": True}, "finite number"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        FormatReward(tiny(None), **kwargs)
