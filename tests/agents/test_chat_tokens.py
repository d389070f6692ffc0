"""Token correctness of tool-call episodes: the ids that SFT and the rollout collector build turn by
turn equal the chat template's rendering of the whole conversation, for every supported template
(Qwen2.5's hermes template with tools, Qwen3's, Llama 3.2's, and a template without tool support,
which gets the default tools block); a difference is reported, naming the turn."""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401  (registers the ids)

pytest.importorskip("transformers")
trl = pytest.importorskip("trl")

from tiny_llm import TEMPLATE, build_tokenizer  # noqa: E402

from hopgym.agents import make_agent  # noqa: E402
from hopgym.agents.chat_tokens import ChatTokens, TokenMismatchError  # noqa: E402
from hopgym.agents.rollout import RolloutCollector, RolloutConfig  # noqa: E402
from hopgym.agents.sft import teacher_examples  # noqa: E402
from hopgym.envs.conversation import Conversation  # noqa: E402

#: Real chat templates, as TRL ships them (the models' own), and their special tokens (the end of
#: turn last).
TEMPLATES = {
    "qwen2_5": ("<|im_start|>", "<|im_end|>"),
    "qwen3": ("<|im_start|>", "<|im_end|>"),
    "llama3_2": ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    "no_tools": (),  # tiny_llm's template: no tool support, the default tools block
}


def tokenizer_for(name: str):
    tok = build_tokenizer()
    if name == "no_tools":
        assert tok.chat_template == TEMPLATE
        return tok
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()
    specials = TEMPLATES[name]
    tok.add_special_tokens({"additional_special_tokens": list(specials)})
    tok.eos_token = specials[-1]
    return tok


def tools_env(**kwargs):
    return gym.make("hopgym/Tiny-v1", protocol="tools", reward="em", sources=("local", "web"), **kwargs)


def whole_ids(tok, messages, tools):
    text = Conversation(messages, tools).render(tok, add_generation_prompt=False)
    return tok(text, add_special_tokens=False)["input_ids"], text


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_sft_examples_equal_the_template_rendering(name):
    tok = tokenizer_for(name)
    qids = ["tiny-1", "tiny-4", "tiny-2"]
    examples = teacher_examples(tools_env, lambda e: make_agent("oracle", e), qids, tok, on_mismatch="raise")
    specs = tools_env().unwrapped.tool_specs
    assert [e["em"] for e in examples] == [1.0, 1.0, 1.0]
    for ex in examples:
        assert ex["token_mismatch"] is None
        expected, text = whole_ids(tok, ex["messages"], specs)
        assert ex["input_ids"] == expected[: len(ex["input_ids"])]
        assert not tok.decode(expected[len(ex["input_ids"]) :]).strip()  # at most the final newline
        # The loss is on the assistant turns only: each trained run is one turn, ending with the
        # end-of-turn token, and what it says parses as the env's tool call.
        runs, start = [], None
        for i, m in enumerate([*ex["completion_mask"], 0]):
            if m and start is None:
                start = i
            if not m and start is not None:
                runs.append(ex["input_ids"][start:i])
                start = None
        assert len(runs) == sum(m["role"] == "assistant" for m in ex["messages"])
        assert all(run[-1] == tok.eos_token_id for run in runs)
        env = tools_env()
        env.reset(options={"question_id": ex["question_id"]})
        for run in runs:
            _, _, terminated, _, info = env.step(tok.decode(run, skip_special_tokens=True))
            assert info["action_type"] in ("search", "answer"), info["invalid_action"]
        assert terminated


class ScriptedEngine:
    """A TurnEngine that writes the given turns (by the number of tool results seen so far)."""

    def __init__(self, tok, turns, split_word=None):
        self.tok, self.turns, self.split_word = tok, turns, split_word

    def encode(self, text):
        if self.split_word and self.split_word in text:  # a tokenisation the tokenizer never makes
            a, b = text.split(self.split_word, 1)
            return (
                self.encode(a)
                + [self.tok.convert_tokens_to_ids(c) for c in self.split_word]
                + self.tok.encode(b, add_special_tokens=False)
            )
        return self.tok.encode(text, add_special_tokens=False)

    def sample(self, contexts, budgets):
        ids = []
        for c in contexts:
            turn = min(self.tok.decode(c).count("Qelvor Dynamics is a shipbuilding"), len(self.turns) - 1)
            ids.append(self.encode(self.turns[turn]) + [self.tok.eos_token_id])
        return ids, [[0.0] * len(i) for i in ids]


SEARCH = '<tool_call>\n{"name": "search", "arguments": {"query": "Qelvor Dynamics founded"}}\n</tool_call>'
ANSWER = '<tool_call>\n{"name": "answer", "arguments": {"answer": "1962"}}\n</tool_call>'


def collect(tok, engine, **cfg):
    col = RolloutCollector(
        None, tok, tools_env, RolloutConfig(max_new_tokens=64, max_completion_tokens=2048, **cfg), engine
    )
    return col, col.collect(["tiny-1"], group_size=2, seed=0)


@pytest.mark.parametrize("name", ["qwen2_5", "llama3_2", "no_tools"])
def test_rollout_ids_equal_the_template_rendering(name):
    tok = tokenizer_for(name)
    col, trajs = collect(tok, ScriptedEngine(tok, [f"Search first.\n{SEARCH}", ANSWER]))
    specs = tools_env().unwrapped.tool_specs
    for t in trajs:
        assert t.em == 1.0 and t.searches == 1 and t.token_mismatch is None
        messages = [{"role": "user", "content": tools_env().reset(options={"question_id": "tiny-1"})[0]}]
        messages += [
            {"role": "assistant", "content": f"Search first.\n{SEARCH}"},
            *t_tool_messages(t),
            {"role": "assistant", "content": ANSWER},
        ]
        expected, _ = whole_ids(tok, messages, specs)
        ids = t.prompt_ids + t.completion_ids
        assert ids == expected[: len(ids)]
        # Loss only on the model's two turns (each ending with the end-of-turn token).
        model = [i for i, m in zip(t.completion_ids, t.mask, strict=True) if m]
        assert tok.decode(model, skip_special_tokens=True) == f"Search first.\n{SEARCH}{ANSWER}"
        assert [k for k, *_ in t.spans] == ["model", "env", "model"]
    assert col.token_mismatches == 0


def t_tool_messages(t):
    env = tools_env()
    env.reset(options={"question_id": "tiny-1"})
    _, _, _, _, info = env.step(t.turns[0])
    return info["tool_messages"]


def test_a_template_that_rewrites_the_turn_is_reported_with_the_turn(caplog):
    # Qwen3's template re-renders "<think>x</think>" as "<think>\nx\n</think>\n\n": what the model
    # wrote is not what the template shows it later.
    tok = tokenizer_for("qwen3")
    engine = ScriptedEngine(tok, [f"<think>find it</think>{SEARCH}", ANSWER])
    with caplog.at_level(logging.WARNING, logger="hopgym.agents.rollout"):
        col, trajs = collect(tok, engine)
    assert all(t.token_mismatch and t.token_mismatch.startswith("turn 0") for t in trajs)
    assert col.token_mismatches == 2 and "rollout of question tiny-1: turn 0" in caplog.text
    with pytest.raises(TokenMismatchError, match="tiny-1: turn 0"):
        collect(tok, engine, on_token_mismatch="raise")


def test_a_tokenisation_the_tokenizer_never_makes_is_reported():
    tok = tokenizer_for("qwen2_5")
    engine = ScriptedEngine(tok, [SEARCH, ANSWER.replace("1962", "Qelvor")], split_word="Qelvor")
    _, trajs = collect(tok, engine)
    assert all("turn 0 (the model)" in t.token_mismatch for t in trajs)


def test_chat_tokens_needs_a_chat_template():
    tok = build_tokenizer()
    tok.chat_template = None
    with pytest.raises(hopgym.errors.InvalidOptionError, match="chat template"):
        ChatTokens(tok, [], "q")
