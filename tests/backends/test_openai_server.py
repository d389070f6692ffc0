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

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.llm import LLMAgent
from hopgym.backends import OpenAIBackend, SamplingParams

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TURN = "<think>hm</think><search>Acme founder</search>"
STOPS = ("</search>", "</route>", "</answer>")


def build_bigram_model(out: Path, turn: str = TURN, extra: tuple[str, ...] | list[str] = ()) -> None:
    """Save a tokenizer and a Qwen2 model that always writes ``turn`` after the template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    )
    tok.train_from_iterator(
        ["Who founded Acme? Search for the Acme founder.", "hm", "user assistant system"] * 3, trainer
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.add_tokens(["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>", *extra])
    fast.chat_template = CHATML
    chain = fast.encode(turn, add_special_tokens=False)
    newline = fast.encode("\n", add_special_tokens=False)[-1]
    assert len(set(chain)) == len(chain) and newline not in chain
    vocab = len(fast)
    hidden = -(-vocab // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        pad_token_id=fast.pad_token_id,
        eos_token_id=fast.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    successor = {newline: chain[0], **dict(zip(chain, chain[1:], strict=False)), chain[-1]: fast.eos_token_id}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # attention and MLP add nothing: the residual stream is the embedding
        model.model.embed_tokens.weight.copy_(torch.eye(vocab, hidden))
        for norm in (
            model.model.norm,
            *(
                n
                for layer in model.model.layers
                for n in (layer.input_layernorm, layer.post_attention_layernorm)
            ),
        ):
            norm.weight.fill_(1.0)
        for a, b in successor.items():
            model.lm_head.weight[b, a] = 10.0
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(out)
    fast.save_pretrained(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``transformers serve`` on the bigram model; yields (base URL, model path, log path)."""
    yield from _serve(tmp_path_factory.mktemp("serve"), build_bigram_model)


def _serve(root: Path, build):
    from hopgym.httpclient import HTTPClient, HTTPError

    model_dir = root / "bigram"
    build(model_dir)
    log = root / "server.log"
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "transformers.cli.transformers",
                "serve",
                str(model_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--device",
                "cpu",
                "--log-level",
                "info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        client = HTTPClient(url, timeout=5.0, retries=0)
        deadline = time.monotonic() + 180
        while True:
            try:
                client.get_json("/health")
                break
            except HTTPError:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "transformers serve did not start"
                time.sleep(0.5)
        yield url, str(model_dir), log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    yield from _serve(
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
