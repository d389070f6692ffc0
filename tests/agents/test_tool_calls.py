"""Scripted agents and the teachers write tool calls under protocol="tools", and score what they
score under tags."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.agents.scripted import OracleAgent, make_agent
from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
from hopgym.agents.tool_calls import ToolCallAgent, speak_tools
from hopgym.cli import main
from hopgym.turns.tools import ToolProtocol

SYNTH = {"n_entities": 300, "n_questions": 40, "sources": ("local", "web")}


def rollout(env, agent, seed):
    obs, info = env.reset(seed=seed)
    agent.reset()
    actions = []
    for _ in range(50):
        act = agent.act(obs, info)
        actions.append(act)
        obs, r, term, trunc, info = env.step(act)
        if term or trunc:
            return actions, info, env.unwrapped.sample
    raise AssertionError("no end")


@pytest.mark.parametrize("name", ["oracle", "iterative"])
def test_agents_write_tool_calls_and_answer_like_under_tags(name):
    tags = gym.make("hopgym/Synthetic-v1", reward="em", **SYNTH)
    tools = gym.make("hopgym/Synthetic-v1", reward="em", protocol="tools", **SYNTH)
    assert isinstance(make_agent(name, tools, seed=0), ToolCallAgent)
    assert not isinstance(make_agent(name, tags, seed=0), ToolCallAgent)
    routed = 0
    for seed in range(12):
        a_tags, i_tags, _ = rollout(tags, make_agent(name, tags, seed=0), seed)
        a_tools, i_tools, _ = rollout(tools, make_agent(name, tools, seed=0), seed)
        assert i_tags.get("answer") == i_tools.get("answer"), seed
        assert len(a_tools) <= len(a_tags)  # a route costs no turn of its own
        for act in a_tools:
            turn = ToolProtocol(parse="strict").read(act, ("local", "web"))
            assert turn.error is None and len(turn.calls) == 1 and not turn.issues, act
            args = turn.calls[0].arguments
            routed += "source" in args
        assert i_tools["action_type"] == "answer"
    if name == "oracle":
        assert routed  # the routing world makes the oracle search the web


def test_eval_gives_the_same_em_for_tools_and_tags(tmp_path):
    for agent in ("oracle", "iterative"):
        ems = {}
        for protocol in ("tags", "tools"):
            out = tmp_path / f"{agent}-{protocol}.json"
            argv = ["eval", "--env", "hopgym/Tiny-v1", "--kw", "sources=('local','web')"]
            argv += ["--agent", agent, "--episodes", "6", "--protocol", protocol, "--json", str(out)]
            assert main(argv) == 0
            ems[protocol] = json.loads(out.read_text())
        assert ems["tools"]["em"] == ems["tags"]["em"], agent
        assert ems["tools"]["invalid_rate"] == 0.0
        if agent == "oracle":
            assert ems["tools"]["em"] == 1.0


def test_the_teachers_write_tool_calls_for_sft_data():
    env = gym.make("hopgym/Synthetic-v1", reward="em", protocol="tools", **SYNTH)
    for agent in (
        speak_tools(OracleAgent(env), env),
        speak_tools(ImperfectTeacher(env, TeacherConfig(), seed=0), env),
    ):
        actions, info, _ = rollout(env, agent, 3)
        assert all("<tool_call>" in a for a in actions)
        assert info["action_type"] == "answer"
    transcript = env.unwrapped.transcript
    assert (
        transcript[-1]["role"] == "assistant"
        and transcript[-1]["tool_calls"][0]["function"]["name"] == "answer"
    )
