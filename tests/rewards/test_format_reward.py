"""FormatReward: per-invalid-turn penalty, termination, well-formed bonus, bad arguments."""

from __future__ import annotations

import pytest
from reward_helpers import ScriptedInfoEnv, answer, invalid, run, search, tiny

from hopgym.rewards import FormatReward, RewardArgumentError


def test_penalty_per_invalid_turn():
    env = FormatReward(ScriptedInfoEnv([invalid(), search("q"), invalid(), answer("x")]), penalty=0.25)
    ep = run(env, "abcd")
    assert [i["reward_terms"]["format"] for i in ep.infos] == [-0.25, 0.0, -0.25, 0.0]
    assert env.invalid_turns == 2


def test_terminate_on_invalid_like_r3rag():
    env = FormatReward(ScriptedInfoEnv([search("q"), invalid(), answer("x")]), penalty=0.9, terminate=True)
    ep = run(env, "abc")
    assert ep.terminated and not ep.truncated and ep.steps == 2 and ep.total == -0.9


@pytest.mark.parametrize(
    ("script", "bonus"),
    [
        ([search("q"), answer("Cardell")], 0.2),
        ([search("q"), answer("wrong but well formed")], 0.2),
        ([invalid(), answer("Cardell")], 0.0),  # an invalid turn forfeits it
        ([search("q"), answer(" . ")], 0.0),  # nothing to score
        ([search("q"), search("q2")], 0.0),  # no answer
    ],
)
def test_bonus(script, bonus):
    env = FormatReward(ScriptedInfoEnv(script), penalty=0.0, bonus=0.2)
    ep = run(env, "ab")
    assert set(ep.terms) == {"format_bonus"}
    assert ep.terms["format_bonus"] == pytest.approx(bonus)


@pytest.mark.parametrize(
    "action",
    [
        "no tags",
        "",
        "<search></search>",
        "<answer></answer>",
        "<route>moon</route>",
        "<search>a</search><answer>b</answer>",
        "<think><answer>x</answer></think>",
        42,
        None,
        "<information>x</information>",
        "<search>unclosed",
    ],
)
def test_real_env_invalid_turns(action):
    env = FormatReward(tiny(None), penalty=0.5, terminate=True)
    env.reset(seed=0)
    _, r, terminated, truncated, info = env.step(action)
    assert info["action_type"] == "invalid" and r == -0.5 and terminated and not truncated


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"penalty": -0.1}, "penalty must be >= 0"),
        ({"bonus": -1}, "bonus must be >= 0"),
        ({"penalty": 0.0}, "does nothing"),
        ({"penalty": True}, "finite number"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        FormatReward(tiny(None), **kwargs)


# ---------------------------------------------------------------------- format issues
def _issue(code: str = "unclosed_think"):
    from hopgym.turns import FormatIssue

    return [FormatIssue(code, "found")]


def test_issue_penalty_per_valid_turn_with_issues_once_per_turn():
    issues = _issue() + _issue("text_outside_tags")
    script = [
        dict(search("q"), format_issues=issues),
        search("q2"),
        invalid(),
        dict(answer("x"), format_issues=_issue()),
    ]
    env = FormatReward(ScriptedInfoEnv(script), penalty=0.5, issue_penalty=0.1)
    ep = run(env, "abcd")
    assert [i["reward_terms"]["format"] for i in ep.infos] == [-0.1, 0.0, -0.5, -0.1]
    assert (env.invalid_turns, env.issue_turns) == (1, 2)


@pytest.mark.parametrize(
    ("script", "bonus"),
    [
        ([search("q"), answer("Cardell")], 0.2),
        ([dict(search("q"), format_issues=_issue()), answer("Cardell")], 0.0),
        ([search("q"), dict(answer("Cardell"), format_issues=_issue("duplicate_action"))], 0.0),
    ],
)
def test_format_issues_forfeit_the_bonus(script, bonus):
    env = FormatReward(ScriptedInfoEnv(script), penalty=0.0, bonus=0.2)
    assert run(env, "ab").terms["format_bonus"] == pytest.approx(bonus)


@pytest.mark.parametrize(
    "action",
    [
        "<think>Lorn is a town<answer>Lorn</answer>",
        "<answer>Lorn</answer> I am sure.",
        "< answer >Lorn</ answer >",
        "<answer>Lorn</answer><answer>Lorn</answer>",
        "Lorn</think><answer>Lorn</answer>",
    ],
)
def test_real_env_lenient_turns_are_charged_not_refused(action):
    lenient = FormatReward(tiny(None), penalty=0.5, terminate=True, issue_penalty=0.1, bonus=0.2)
    lenient.reset(seed=0)
    _, r, terminated, _, info = lenient.step(action)
    assert info["action_type"] == "answer" and info["answer"] == "Lorn" and terminated
    assert info["format_issues"] and r == pytest.approx(-0.1)  # and no bonus
    assert info["reward_terms"] == {"format": pytest.approx(-0.1), "format_bonus": 0.0}
    strict = FormatReward(tiny(None, parse="strict"), penalty=0.5, terminate=True, issue_penalty=0.1)
    strict.reset(seed=0)
    _, r, terminated, _, info = strict.step(action)
    if info["action_type"] == "invalid":  # strict refuses all but text outside the tags
        assert r == -0.5 and terminated
    else:
        assert [i.code for i in info["format_issues"]] == ["text_outside_tags"]
        assert r == pytest.approx(-0.1)


def test_issue_penalty_alone_is_enough_and_checked():
    env = FormatReward(tiny(None), penalty=0.0, issue_penalty=0.2)
    assert env.term_names == ("format",)
    with pytest.raises(RewardArgumentError, match="issue_penalty must be >= 0"):
        FormatReward(tiny(None), issue_penalty=-0.1)
