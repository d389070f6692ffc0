"""A tiny random Qwen2 model and a byte-level BPE tokenizer trained on the tiny corpus, offline:
what the LLM-agent tests run instead of a real model, and the module-scoped fixtures that serve
them, which a test module imports by name (``from tiny_llm import backend, model, tokenizer,
one_thread``); a ``conftest.py`` here would clash with ``tests/conftest.py`` under
``--doctest-modules``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401  (registers the ids)

#: A minimal chat template with a system role (``<|role|>\ncontent<|end|>``).
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tokenizer() -> Any:
    """A byte-level BPE tokenizer (400 tokens) trained on the tiny corpus and the env's prompts."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from hopgym.tasks.tiny import TINY_PASSAGES

    lines = [p.contents for p in TINY_PASSAGES]
    for protocol in ("tags", "r3"):
        env = gym.make("hopgym/Tiny-v1", reward=None, protocol=protocol)
        for i in range(6):
            obs, _ = env.reset(options={"index": i})
            lines += obs.splitlines()
    lines += [
        "<think>",
        "</think>",
        "<search>",
        "</search>",
        "<answer>",
        "</answer>",
        "<information>",
        "</information>",
        "The retrieval query:",
        "The final answer:",
    ]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|pad|>", "<|end|>"],
    )
    tok.train_from_iterator(lines * 3, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|end|>")
    fast.chat_template = TEMPLATE
    return fast


def build_model(tokenizer: Any) -> Any:
    """A random two-layer Qwen2 (hidden size 32) for ``tokenizer``, seeded."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.2,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    config._attn_implementation = "eager"
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread for the importing module's tests (restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_model(tokenizer)


@pytest.fixture(scope="module")
def backend(model, tokenizer):
    from hopgym.backends import TransformersBackend

    return TransformersBackend(model, tokenizer, device="cpu")
