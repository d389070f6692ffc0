"""Tiny language models built from scratch: a word-level tokenizer and a small Llama/Qwen2.

Functions: :func:`build_tokenizer` (a Hugging Face fast tokenizer whose vocabulary is every word of
the given texts plus the protocol tags), :func:`task_texts` (the texts of a task an agent can meet:
prompts, documents, notices), :func:`build_model` (a randomly initialised causal LM from a
:class:`TinyLMConfig`). Class: :class:`TinyLMConfig`.

Tests and the default path download no pretrained weights, so learning is shown with a model
trained from nothing. A word-level vocabulary makes every name, year and tag one token, so copying
an answer out of a retrieved document is a token-level operation that a tiny model can learn.

Tokenisation (``tokenizers``' WordLevel model): a normaliser puts a space after ``>``, ``(`` and a
newline when a word follows, so that ``<answer>Emery Quill`` and ``(Title: Emery Quill)`` both give
the token ``▁Emery``; then every word, number, punctuation mark, tag and newline is one token, with
``▁`` marking a preceding space (as in SentencePiece). Decoding is exact on normalised text:
``decode(encode(x)) == normalize_text(x)``, and the protocols ignore the inserted spaces.

The chat template writes ``<|user|> … <|end|><|assistant|>`` (a space after ``<|user|>``, as the
normaliser cannot see across special tokens); in a rollout the environment's
observations stay inside the assistant turn (Search-R1's layout), and ``<|end|>`` is the EOS.

Example:
    >>> tok = build_tokenizer(["Emery Quill was born in 1880."])  # doctest: +SKIP
    >>> tok.decode(tok.encode("<answer>Emery Quill</answer>"))    # doctest: +SKIP
    '<answer> Emery Quill</answer>'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hopgym.errors import DependencyNotInstalled, InvalidOptionError

if TYPE_CHECKING:
    from hopgym.tasks.base import QATask

__all__ = [
    "TinyLMConfig",
    "build_tokenizer",
    "build_model",
    "task_texts",
    "normalize_text",
    "SPECIAL_TOKENS",
    "TAG_TOKENS",
    "CHAT_TEMPLATE",
]

PAD, UNK, BOS, EOS, USER, ASSISTANT = ("<pad>", "<unk>", "<bos>", "<|end|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, BOS, EOS, USER, ASSISTANT)
TAG_TOKENS: tuple[str, ...] = tuple(
    t for name in ("think", "search", "route", "answer", "information") for t in (f"<{name}>", f"</{name}>")
)

#: A chat template in the Hugging Face jinja format; ``{% generation %}`` marks assistant text so
#: that ``return_assistant_tokens_mask`` works too.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|assistant|>{% generation %}{{ m['content'] }}<|end|>"
    "{% endgeneration %}"
    "{% else %}<|{{ m['role'] }}|> {{ m['content'] }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

# A space after ">", "(" or a newline when a word follows: names right after a tag or a bracket
# then get the same token as inside a sentence.
_NORMALIZE = r"(?<=[>(\n])(?=[^\s<])"
# Tags never carry the space marker (a space before a tag is its own "▁" piece), so each tag has
# exactly one token id.
_PIECE = r"</?[a-z]+>|<\|[a-z]+\|>|▁?(?:[A-Za-z0-9]+|\n|[^\sA-Za-z0-9▁])"
_NORMALIZE_RE = re.compile(_NORMALIZE)


def normalize_text(text: str) -> str:
    """The text a word-level tokenizer round-trips to (a space after ``>``/``(``/newline + word).

    Example:
        >>> normalize_text("<answer>Emery Quill</answer>")
        '<answer> Emery Quill</answer>'
    """
    return _NORMALIZE_RE.sub(" ", text)


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - transformers depends on tokenizers
        raise DependencyNotInstalled.for_extra("tokenizers", "train") from exc
    return tokenizers


def _pipeline() -> tuple[Any, Any, Any]:
    tk = _tokenizers()
    normalizer = tk.normalizers.Replace(tk.Regex(_NORMALIZE), " ")
    pre = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True),
            tk.pre_tokenizers.Split(tk.Regex(_PIECE), behavior="isolated"),
        ]
    )
    decoder = tk.decoders.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    return normalizer, pre, decoder


def build_tokenizer(texts: Iterable[str], *, min_count: int = 1, extra_words: Sequence[str] = ()) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` whose vocabulary covers ``texts``.

    Args:
        texts: every text the model may read or write (see :func:`task_texts`).
        min_count: words seen fewer times become ``<unk>``.
        extra_words: words to add whatever their count (each also with a leading space).

    Returns:
        A tokenizer with ``pad``/``unk``/``bos``/``eos`` set, the chat template
        :data:`CHAT_TEMPLATE`, and the tags of both protocols as single tokens.
    """
    if min_count < 1:
        raise InvalidOptionError(f"min_count must be >= 1, got {min_count}")
    tk = _tokenizers()
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    normalizer, pre, decoder = _pipeline()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(piece for piece, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    vocab: dict[str, int] = {}
    for tok in SPECIAL_TOKENS + TAG_TOKENS + ("▁", "\n"):
        vocab.setdefault(tok, len(vocab))
    for word in extra_words:
        for w in (word, "▁" + word):
            vocab.setdefault(w, len(vocab))
    for piece, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n >= min_count:
            vocab.setdefault(piece, len(vocab))
    core = tk.Tokenizer(tk.models.WordLevel(vocab=vocab, unk_token=UNK))
    core.normalizer = normalizer
    core.pre_tokenizer = pre
    core.decoder = decoder
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 16,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def task_texts(task: QATask, protocols: Sequence[str] = ("tags", "r3"), max_turns: int = 8) -> list[str]:
    """Every text of ``task`` a model may read or write under ``protocols``.

    Prompts (with each question), documents as the protocol formats them, routing and error notices,
    sub-questions, queries and answers of the gold decompositions, the repeated-query and last-turn
    notices. Feed it to :func:`build_tokenizer`.
    """
    from hopgym.turns.actions import Answer, Search, Think
    from hopgym.turns.registry import get_protocol

    texts: list[str] = []
    descriptions = {n: s.description for n, s in task.sources.items()}
    passages = list((task.documents or {}).values())
    for name in protocols:
        proto = get_protocol(name)
        for sample in task.samples:
            texts.append(proto.prompt(sample.question, descriptions, max_turns))
            for hop in sample.decomposition:
                texts.append(proto.render(Search(hop.search_query, think=hop.question)))
                texts.append(hop.answer)
            for ans in sample.answers:
                texts.append(proto.render(Answer(ans, think="all hops resolved")))
        for turn in range(1, max_turns + 1):
            for src, desc in descriptions.items():
                texts.append(proto.render(proto.route_action(src, think=f"the answer lives in {src}")))
                texts.append(
                    proto.format_notice(f"Searches now go to {src}" + (f" ({desc})." if desc else "."), turn)
                )
            for msg in (
                "No new documents found for this query.",
                "No documents found for this query.",
                "Document limit reached: answer now.",
            ):
                texts.append(proto.format_notice(msg, turn))
            texts.append(proto.format_error("no action", turn))
            texts.append(proto.format_think(turn))
            # the env's notices: a repeated query, one turn left
            texts.append(proto.format_notice(proto.repeat_note(True, exhausted=True), turn))
            texts += [proto.repeat_note(dedup) for dedup in (True, False)]
            texts.append(proto.last_turn(proto.format_think(turn), turn))
        texts.append(proto.render(Think("thinking")))
        if proto.chat_tools:  # what the chat template shows: the tools block and tool results
            import json

            from hopgym.envs.conversation import DEFAULT_TOOLS_BLOCK

            specs = proto.tool_specs(descriptions)
            texts.append(DEFAULT_TOOLS_BLOCK.format(tools="\n".join(json.dumps(t) for t in specs)))
            texts.append(proto.observation_text([{"role": "tool", "content": "x"}]))
            texts.append(proto.LAST_TURN)
        for p in passages:
            if p is not None:
                texts.append(proto.format_documents([p], None, 1))
    return texts


@dataclass
class TinyLMConfig:
    """Architecture of a small causal LM built from scratch (no download).

    Defaults give about 1M parameters plus the embeddings: the size ``../shared/PERF.md`` found to
    learn a 2-hop protocol in minutes on one CPU thread.
    """

    arch: str = field(
        default="llama", metadata={"help": "'llama' or 'qwen2'.", "choices": ("llama", "qwen2")}
    )
    layers: int = field(default=4, metadata={"help": "Transformer blocks."})
    hidden: int = field(default=128, metadata={"help": "Model width."})
    heads: int = field(default=4, metadata={"help": "Attention heads (must divide hidden)."})
    kv_heads: int | None = field(
        default=None, metadata={"help": "KV heads (None: = heads).", "cli_help": "KV heads (none: = heads)."}
    )
    ffn: int = field(default=512, metadata={"help": "MLP width."})
    max_positions: int = field(
        default=1024, metadata={"help": "Longest sequence (prompt + trajectory) in tokens."}
    )
    tie_embeddings: bool = field(default=True, metadata={"help": "Share input/output embeddings."})
    rope_theta: float = field(default=10000.0, metadata={"help": "RoPE base."})

    def __post_init__(self) -> None:
        if self.arch not in ("llama", "qwen2"):
            raise InvalidOptionError(f"arch must be 'llama' or 'qwen2', got {self.arch!r}")
        for name in ("layers", "hidden", "heads", "ffn", "max_positions"):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise InvalidOptionError(
                f"heads ({self.heads}) must divide hidden ({self.hidden}): "
                f"try heads={max(d for d in range(1, 17) if self.hidden % d == 0)}"
            )
        kv = self.kv_heads or self.heads
        if self.heads % kv:
            raise InvalidOptionError(f"kv_heads ({kv}) must divide heads ({self.heads})")


def build_model(config: TinyLMConfig, tokenizer: Any, *, seed: int = 0) -> Any:
    """A randomly initialised ``LlamaForCausalLM``/``Qwen2ForCausalLM`` sized for ``tokenizer``.

    The initialisation is drawn from a local ``torch.Generator`` seeded with ``seed`` (the global
    torch RNG is left as it was).
    """
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("torch/transformers", "train") from exc
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden,
        intermediate_size=config.ffn,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads or config.heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=config.tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        rope_theta=config.rope_theta,
    )
    model: transformers.PreTrainedModel
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        if config.arch == "llama":
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
        else:
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    finally:
        torch.random.set_rng_state(state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
