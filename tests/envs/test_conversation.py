"""Conversation: an episode as OpenAI messages, rendered with real (locally built) tokenizers'
chat templates, with and without tool support."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.conversation import DEFAULT_TOOLS_BLOCK, Conversation
from hopgym.errors import InvalidOptionError
from hopgym.turns.tools import ToolProtocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
from tiny_llm import build_tokenizer  # noqa: E402

#: A hermes-style (Qwen2.5-like) chat template with tool support, written for this test: the
#: tools in <tools> in the system message, calls as <tool_call> blocks, tool results as
#: <tool_response> blocks in a user turn.
HERMES = (
    "{%- if tools %}{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{%- endif %}"
    "# Tools\n<tools>{%- for t in tools %}{{ '\\n' + t | tojson }}{%- endfor %}{{ '\\n' }}</tools><|im_end|>"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' %}{{ '\\n<|im_start|>user\\n' + m.content + '<|im_end|>' }}"
    "{%- elif m.role == 'assistant' %}{{ '\\n<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for c in m.tool_calls or [] %}"
    '{{ \'\\n<tool_call>\\n{"name": "\' + c.function.name + \'", "arguments": \' }}'
    "{{- c.function.arguments | tojson }}{{ '}\\n</tool_call>' }}"
    "{%- endfor %}<|im_end|>"
    "{%- elif m.role == 'tool' %}"
    "{{ '\\n<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '\\n<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def tokenizers():
    plain = build_tokenizer()
    hermes = build_tokenizer()
    hermes.chat_template = HERMES
    return plain, hermes


def episode():
    env = gym.make("hopgym/Tiny-v1", protocol="tools", reward=None)
    env.reset(seed=0, options={"question_id": "tiny-1"})
    msg = {
        "role": "assistant",
        "content": "<think>find Sefa Quill</think>",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "Sefa Quill"}'},
            }
        ],
    }
    env.step(msg)
    env.step('<tool_call>{"name": "search", "arguments": {"query": "Aldo Quill father"}}</tool_call>')
    return env


def test_messages_follow_the_openai_shape():
    conv = Conversation.from_env(episode(), system="You answer questions.")
    roles = [m["role"] for m in conv.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert conv.messages[3]["tool_call_id"] == "c1" and "tool_call_id" not in conv.messages[5]
    assert json.loads(conv.messages[2]["tool_calls"][0]["function"]["arguments"]) == {"query": "Sefa Quill"}


def test_a_template_with_tools_renders_schemas_calls_and_results(tokenizers):
    _, hermes = tokenizers
    conv = Conversation.from_env(episode(), system="You answer questions.")
    text = conv.render(hermes)
    assert text.startswith("<|im_start|>system\nYou answer questions.\n\n# Tools\n<tools>")
    assert '"name": "search"' in text and '"enum"' not in text  # one source: no routing
    assert '<tool_call>\n{"name": "search", "arguments": {"query": "Sefa Quill"}}\n</tool_call>' in text
    assert text.count("<tool_response>") == 2 and text.endswith("<|im_start|>assistant\n")
    ids = conv.render(hermes, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert hermes.decode(ids) == text
    # what a model writes after the rendering reads back as the calls the conversation holds
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    calls = ToolProtocol().read(turn, ["local"]).calls
    assert [c.parsed.action.query for c in calls] == ["Sefa Quill"]


def test_a_template_without_tools_gets_the_default_block(tokenizers):
    plain, _ = tokenizers
    conv = Conversation.from_env(episode())
    msgs = conv.template_messages(tools_supported=False)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith(DEFAULT_TOOLS_BLOCK.split("{tools}")[0])
    assert json.loads(msgs[0]["content"].split("<tools>\n")[1].split("\n")[0])["function"]["name"] == "search"
    text = conv.render(plain)
    assert "<tools>" in text and "<tool_response>" in text and "<tool_call>" in text
    assert ToolProtocol().read(msgs[2]["content"], ["local"]).calls[0].parsed.action.query == "Sefa Quill"


def test_only_tools_envs_make_conversations():
    env = gym.make("hopgym/Tiny-v1", reward=None)
    env.reset(seed=0)
    with pytest.raises(InvalidOptionError, match="protocol='tools'"):
        Conversation.from_env(env)
