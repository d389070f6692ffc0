"""``OpenAIBackend`` and ``LLMAgent`` against a real OpenAI-compatible server: ``transformers serve``.

Slow (the server takes tens of seconds to start on a small CPU) and offline: the served model is a
one-layer Qwen2 built here whose attention and MLP are zeroed, so that it is a bigram table: after
the chat template's ``<|im_start|>assistant\\n`` it writes ``<think>hm</think><search>Acme
founder</search>`` and ends its turn, whatever the question. Qwen2 models get the server's
response parser, which returns the ``<think>`` part as ``message.reasoning_content``: the case of
a reasoning model behind vLLM or SGLang. Needs the ``serving`` test extra (fastapi, uvicorn,
openai).
"""

from __future__ import annotations

import time

import gymnasium as gym
import pytest
from served_models import STOPS, TURN, build_bigram_model, serve

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.llm import LLMAgent
from hopgym.backends import OpenAIBackend, SamplingParams

pytestmark = pytest.mark.slow

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``transformers serve`` on the bigram model; yields (base URL, model path, log path)."""
    yield from serve(tmp_path_factory.mktemp("serve"), build_bigram_model)


def test_reasoning_content_is_merged_back_and_no_n_is_sent(server):
    url, model, log = server
    be = OpenAIBackend(url, model, timeout=60, retries=0)
    params = SamplingParams(max_new_tokens=20, stop=STOPS)
    chat = [{"role": "user", "content": "Who founded Acme?"}]
    result = be.complete([chat], params)[0]
    # The server's response parser took the thought out of the content ...
    assert result.reasoning == "hm"
    assert result.text == "<search>Acme founder</search>" and result.finish_reason == "stop"
    assert result.prompt_tokens and result.completion_tokens
    # ... and the backend puts it back where the model wrote it.
    assert be.generate([chat], params) == [TURN]
    assert "Ignoring unsupported fields" not in log.read_text()
    OpenAIBackend(url, model, timeout=60, retries=0, extra_body={"n": 1}).generate([chat], params)
    time.sleep(0.5)
    assert "Ignoring unsupported fields in the request: {'n'}" in log.read_text()


def test_agent_keeps_the_thought_in_history_and_transcript(server):
    url, model, _ = server
    agent = LLMAgent(
        OpenAIBackend(url, model, timeout=60, retries=0),
        sampling=SamplingParams(max_new_tokens=20),
        force_answer="never",
    )
    assert agent.mode == "chat"
    env = gym.make("hopgym/Tiny-v1", reward=None, max_turns=3)
    obs, info = env.reset(options={"index": 0})
    for _ in range(2):
        text = agent.act(obs, info)
        obs, _, _, _, info = env.step(text)
        assert text == TURN and info["action_type"] == "search"
        assert info["query"] == "Acme founder" and info["think"] == "hm"
    assert agent.transcript == env.unwrapped.transcript[: len(agent.transcript)]
    assert sum(m["content"] == TURN for m in env.unwrapped.transcript) == 2


def test_raw_completions_cut_at_the_limit_are_closed(server):
    url, model, _ = server
    be = OpenAIBackend(url, model, timeout=60, retries=0, tokenizer=model)
    agent = LLMAgent(
        be,
        mode="continuation",
        system_prompt="",
        sampling=SamplingParams(max_new_tokens=5),
        force_answer="never",
    )
    env = gym.make("hopgym/Tiny-v1", reward=None, max_turns=3)
    obs, info = env.reset(options={"index": 0})
    text = agent.act(obs, info)
    assert agent.turn_info[0]["finish_reason"] == "length" and agent.turn_info[0]["truncated"]
    head = "<think>hm</think><search>"
    query = text[len(head) : -len("</search>")]
    assert text.startswith(head) and text.endswith("</search>") and "Acme".startswith(query)
    assert agent.turn_info[0]["closed"] == "</search>"
    assert env.step(text)[4]["query"] == query


CALL = '{"name": "search", "arguments": {"query": "Acme founder"}}'
TOOL_TURN = f"<think>hm</think><tool_call>{CALL}</tool_call>"


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    """``transformers serve`` on a bigram model that writes a hermes tool call (:data:`TOOL_TURN`);
    the call's JSON is one added token, so the chain has no repeated token."""
    root = tmp_path_factory.mktemp("serve_tools")
    yield from serve(
        root, lambda out: build_bigram_model(out, turn=TOOL_TURN, extra=["<tool_call>", "</tool_call>", CALL])
    )


def test_tools_are_sent_and_tool_calls_reach_the_env(tool_server):
    url, model, _ = tool_server
    env = gym.make("hopgym/Tiny-v1", reward=None, max_turns=3, protocol="tools")
    agent = LLMAgent(
        OpenAIBackend(url, model, timeout=60, retries=0),
        protocol="tools",
        tools=env.unwrapped.tool_specs,
        sampling=SamplingParams(max_new_tokens=20),
        force_answer="never",
    )
    obs, info = env.reset(options={"index": 0})
    for _ in range(2):
        action = agent.act(obs, info)
        # The server parsed the call out of the text: a structured assistant message.
        assert isinstance(action, dict) and len(action["tool_calls"]) == 1
        assert action["content"] == "<think>hm</think>"
        obs, _, _, _, info = env.step(action)
        assert info["action_type"] == "search" and info["query"] == "Acme founder"
        assert info["think"] == "hm"
        assert info["tool_messages"][0]["tool_call_id"] == action["tool_calls"][0]["id"]
    # The second request carried the history as OpenAI messages: the call and its result.
    assert [m["role"] for m in agent.transcript] == ["user", "assistant", "tool", "assistant"]
