"""The verifiers adapter, driven the way a verifiers ``Env.run`` is: a scripted player.

verifiers 0.4.0 runs a player through a harness program (``uv``-installed, in a runtime) behind
an interception server; that machinery needs ``uv`` and a package index at run time, so these
tests hand ``HopgymEnv.run`` the ``agents.player.interaction(task)`` surface with scripted
replies (verifiers' own ``Segment`` and ``Trace`` types) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

import pytest

vf = pytest.importorskip("verifiers.v1")

from episodes import oracle_turns, reference_episode  # noqa: E402

from hopgym.errors import HopgymError, InvalidOptionError, InvalidOptionTypeError  # noqa: E402
from hopgym.integrations.verifiers import HopgymEnv, HopgymTaskset, load_environment  # noqa: E402


class ScriptedPlayer:
    """``agents.player``: ``interaction(task)`` replays ``replies`` and records what it was sent."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.sent = []
        self.trace = vf.Trace.model_construct(rewards={}, metrics={})

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        self.sent.append(task.data.prompt)
        player = self

        class _Interaction:
            trace = player.trace

            async def turn(self, message=None):
                if message is not None:
                    player.sent.append(message)
                if not player.replies:
                    return vf.Segment(messages=[], terminated=True)
                return vf.Segment(messages=[], root_reply=player.replies.pop(0))

        yield _Interaction()


class Agents:
    def __init__(self, player):
        self.player = player


@pytest.fixture(scope="module")
def env():
    return load_environment("hopgym/Tiny-v1", reward="searchr1")


def _task(env, question_id):
    return next(t for t in env.taskset.load() if t.data.question_id == question_id)


def test_load_environment_is_a_verifiers_env(env):
    assert isinstance(env, vf.Env) and isinstance(env, HopgymEnv)
    assert isinstance(env.taskset, HopgymTaskset) and isinstance(env.taskset, vf.Taskset)
    tasks = list(env.taskset.load())
    assert len(tasks) == len(env.taskset.env.unwrapped.task.samples)
    assert all("Question:" in t.data.prompt for t in tasks)
    assert all(t.data.answers for t in tasks)  # gold answers ride on the task data, for reports


def test_scripted_episode_rewards_equal_hopgyms(env, tiny_sample):
    turns = oracle_turns(tiny_sample)
    player = ScriptedPlayer(turns)
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    total, terms, observations = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    trace = player.trace
    assert {k: r.score for k, r in trace.rewards.items()} == terms
    assert all(r.weight == 1.0 for r in trace.rewards.values())
    assert math.isclose(trace.reward, total) and total > 0
    assert trace.metrics == {"turns": len(turns), "invalid_turns": 0, "answered": 1}
    # the user turns are hopgym's observations; the last turn (the answer) gets no reply
    assert player.sent[1:] == observations[:-1]


def test_malformed_turns_get_corrections_and_budget_ends(env):
    replies = ["no tags at all", "<search></search>", "<answer>a</answer><search>b</search>"] * 3
    player = ScriptedPlayer(replies)
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    assert all("Invalid turn" in m for m in player.sent[1:3])
    assert player.trace.metrics["invalid_turns"] >= 2
    assert player.trace.metrics["turns"] <= 8  # hopgym's budget, not the script, ended it


def test_player_stopping_early_scores_what_happened(env):
    player = ScriptedPlayer([])
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    assert player.trace.reward == 0 and player.trace.metrics["turns"] == 0


@pytest.mark.parametrize(
    ("env_id", "kwargs", "error", "names"),
    [
        ("hopgym/Tinny-v1", {}, InvalidOptionTypeError, "hopgym/Tinny-v1"),
        ("hopgym/Tiny-v1", {"top_kk": 2}, InvalidOptionTypeError, "top_kk"),
        ("hopgym/Tiny-v1", {"reward": "nope"}, InvalidOptionError, "reward"),
    ],
)
def test_bad_env_fails_at_construction(env_id, kwargs, error, names):
    with pytest.raises(error, match=names) as info:
        load_environment(env_id, **kwargs)
    assert isinstance(info.value, HopgymError)
