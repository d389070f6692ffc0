"""LLMAgent with protocol='tools': a local model through its chat template with the env's tools
(prefix cache reused across turns), a server that takes tools= and returns tool_calls (a fake here;
tests/backends/test_openai_server.py runs a real ``transformers serve``), and the CLI."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from tiny_llm import backend, model, one_thread, tokenizer  # noqa: F401  (fixtures)

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.llm import LLMAgent, make_llm_agent
from hopgym.backends import Completion, SamplingParams
from hopgym.envs.conversation import Conversation
from hopgym.errors import InvalidOptionError


def tools_env(**kw):
    return gym.make("hopgym/Tiny-v1", protocol="tools", reward="em", **kw)


def test_a_local_model_sees_the_chat_template_with_tools_and_reuses_its_cache(backend):  # noqa: F811
    env = tools_env(max_turns=3)
    agent = LLMAgent(
        backend,
        protocol="tools",
        tools=env.unwrapped.tool_specs,
        sampling=SamplingParams(max_new_tokens=8),
        force_answer="never",
    )
    obs, info = env.reset(options={"question_id": "tiny-1"})
    first = agent.act(obs, info)
    assert isinstance(first, str)
    specs = env.unwrapped.tool_specs
    prompt = Conversation(agent.transcript[:1], specs).render(backend.tokenizer)
    # The template without tool support got the default tools block with the env's schemas.
    assert "<tools>" in prompt and '"name": "search"' in prompt and obs.strip() in prompt
    before = dict(backend.stats)
    obs, _, _, _, info = env.step(first)
    agent.act(obs, info)
    # The env's reply went in as its messages, and the second prompt extends the first.
    assert agent.transcript[1] == {"role": "assistant", "content": first}
    assert agent.transcript[2:-1] == info["tool_messages"]
    second = Conversation(agent.transcript[:-1], specs).render(backend.tokenizer)
    assert second.startswith(prompt)
    assert backend.stats["cached_tokens"] - before["cached_tokens"] >= len(backend.encode(prompt)) - 1


class ToolServer:
    """A fake OpenAI-compatible backend that takes tools= and returns tool_calls."""

    supports_chat = supports_tools = True
    has_chat_template = False

    def __init__(self):
        self.requests = []

    def apply_chat_template(self, messages, *, add_generation_prompt=True):
        raise NotImplementedError

    def complete(self, prompts, params, tools=None):
        self.requests.append((prompts, tools))
        out = []
        for p in prompts:
            n = sum(m["role"] == "tool" for m in p)
            name, args = (
                ("search", {"query": "Qelvor Dynamics"}) if n == 0 else ("answer", {"answer": "1962"})
            )
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            out.append(Completion("", finish_reason="stop", reasoning="look it up", tool_calls=(call,)))
        return out


def test_a_server_gets_tools_and_its_tool_calls_go_to_the_env():
    env = tools_env()
    server = ToolServer()
    agent = LLMAgent(server, protocol="tools", tools=env.unwrapped.tool_specs)
    obs, info = env.reset(options={"question_id": "tiny-1"})
    done = False
    while not done:
        action = agent.act(obs, info)
        assert isinstance(action, dict) and action["tool_calls"]
        assert action["content"] == "<think>look it up</think>"  # the reasoning, as the model wrote it
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    assert reward == 1.0 and info["think"] == "look it up"
    prompts, tools = server.requests[-1]
    assert tools == env.unwrapped.tool_specs
    roles = [m["role"] for m in prompts[0]]
    assert roles == ["user", "assistant", "tool"]
    assert prompts[0][2]["tool_call_id"] == "call_0"  # the result answers the server's call id


def test_tools_needs_a_template_or_a_tools_server():
    class Plain:
        supports_chat = has_chat_template = False

        def generate(self, prompts, params):
            return [""]

    with pytest.raises(InvalidOptionError, match="chat template"):
        LLMAgent(Plain(), protocol="tools")
    with pytest.raises(InvalidOptionError, match="closed-book"):
        LLMAgent(ToolServer(), protocol="tools", closed_book=True)


def test_make_llm_agent_passes_the_tools():
    agent = make_llm_agent(
        "m",
        backend="openai",
        base_url="http://127.0.0.1:9",
        protocol="tools",
        tools=tools_env(sources=("local", "web")).unwrapped.tool_specs,
    )
    assert "source" in agent.tools[0]["function"]["parameters"]["properties"]


def test_vllm_backend_renders_the_tools_through_its_tokenizers_template(monkeypatch, tokenizer):  # noqa: F811
    """VLLMBackend's tools path: the conversation and the env's tools rendered with the engine's
    tokenizer, sent to ``LLM.generate`` as text, the hermes call it writes run by the env. vLLM
    needs a GPU, so a stand-in ``vllm`` module answers here (the real engine is not run in our
    tests); what is tested is hopgym's side of ``LLM.generate``."""
    import sys
    import types

    sent = []

    class Output:
        def __init__(self, text):
            self.outputs = [types.SimpleNamespace(text=text, token_ids=[1, 2], finish_reason="stop")]
            self.prompt_token_ids = [1, 2, 3]

    class LLM:
        def __init__(self, **kw):
            self.kw = kw

        def get_tokenizer(self):
            return tokenizer

        def generate(self, texts, sampling, use_tqdm=False):
            sent.append((texts, sampling))
            call = {"name": "search", "arguments": {"query": "Lorn"}}
            return [Output(f"Look it up.\n<tool_call>\n{json.dumps(call)}\n</tool_call>") for _ in texts]

    stand_in = types.ModuleType("vllm")
    stand_in.LLM = LLM
    stand_in.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", stand_in)
    env = tools_env(max_turns=3)
    agent = make_llm_agent("some/model", backend="vllm", protocol="tools", tools=env.unwrapped.tool_specs)
    obs, info = env.reset(options={"question_id": "tiny-1"})
    action = agent.act(obs, info)
    ((texts, sampling),) = sent
    assert "<tools>" in texts[0] and '"name": "search"' in texts[0] and obs.strip() in texts[0]
    assert sampling[0]["temperature"] == 0.0
    _, _, terminated, _, info = env.step(action)
    assert not terminated and info["action_type"] == "search" and info["query"] == "Lorn"
