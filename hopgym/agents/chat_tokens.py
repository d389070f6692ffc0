"""Token ids of a tool-call episode, built turn by turn through a chat template: :class:`ChatTokens`.

Classes: :class:`ChatTokens`, :class:`TokenMismatchError`.

Under the ``tools`` protocol an episode is a chat (:class:`~hopgym.envs.conversation.Conversation`:
the question, assistant turns, tool results) and a model sees it through its chat template. SFT and
the GRPO/RFT rollouts build the token ids of such an episode turn by turn: the template's rendering
of the question (the prompt), then each assistant turn (loss on), then the template's text between
that turn and the next one (the end of the turn, the tool results, the next assistant header:
no loss). What the model is trained on must be what the template shows it at inference time, so
the ids built turn by turn must equal the tokenised rendering of the whole conversation. Drift
between the two is a known source of silent training bugs (a template that rewrites earlier turns,
such as one that drops or reformats their reasoning; a model that wrote a token sequence the
tokenizer would not produce for its decoded text; a turn cut at the length limit). :class:`ChatTokens`
checks both at every turn (the rendering so far must extend the text laid out so far) and at the
end (the ids against the tokenised whole), and names the first turn that differs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.envs.conversation import Conversation
from hopgym.errors import HopgymError, InvalidOptionError

__all__ = ["ChatTokens", "TokenMismatchError", "template_turn_text"]


class TokenMismatchError(HopgymError, RuntimeError):
    """The token ids built turn by turn differ from the chat template's rendering of the whole
    conversation (the message names the turn)."""


def _encode(tokenizer: Any, text: str) -> list[int]:
    # The rendered text already holds the template's special tokens (BOS included).
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def template_turn_text(tokenizer: Any, head: str, rendered: str) -> str | None:
    """The assistant turn in ``rendered`` after ``head`` (the text up to the assistant header), up
    to and including the end-of-turn token (the tokenizer's EOS), or ``None`` when ``rendered``
    does not extend ``head``."""
    if not rendered.startswith(head):
        return None
    seg = rendered[len(head) :]
    eos = getattr(tokenizer, "eos_token", None)
    if eos and eos in seg:
        return seg[: seg.index(eos) + len(eos)]
    return seg


class ChatTokens:
    """One tool-call episode's token ids, built turn by turn through ``tokenizer``'s chat template.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        tools: the env's tool schemas (``env.unwrapped.tool_specs``).
        question: the env's first observation (the user message).
        system: an optional system message.
        template_kwargs: passed to ``apply_chat_template`` (e.g. ``enable_thinking``).

    :attr:`ids` holds the prompt and every segment so far; :attr:`spans` the segments as
    ``(kind, start, end, turn)`` with ``kind`` ``"model"`` or ``"env"`` (positions in :attr:`ids`).
    :attr:`mismatch` is ``None`` or the first difference found (naming the turn).
    """

    def __init__(
        self,
        tokenizer: Any,
        tools: Sequence[Mapping[str, Any]],
        question: str,
        *,
        system: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidOptionError(
                "protocol='tools' renders episodes with the tokenizer's chat template, and this "
                "tokenizer has none: set tokenizer.chat_template"
            )
        self.tokenizer = tokenizer
        self.kwargs = dict(template_kwargs or {})
        self.conversation = Conversation([{"role": "user", "content": question}], tools, system)
        self.text = self._render(True)
        self.ids = _encode(tokenizer, self.text)
        self.prompt_len = len(self.ids)
        self.spans: list[tuple[str, int, int, int]] = []
        self.turn = 0
        self.mismatch: str | None = None
        #: Positions up to which the final check compares (``None``: all; set when a segment is cut).
        self.limit: int | None = None

    def _render(self, add_generation_prompt: bool) -> str:
        return self.conversation.render(
            self.tokenizer, add_generation_prompt=add_generation_prompt, tokenize=False, **self.kwargs
        )

    def _note(self, message: str) -> None:
        if self.mismatch is None:
            self.mismatch = message

    def _add(self, kind: str, ids: Sequence[int]) -> list[int]:
        ids = [int(i) for i in ids]
        if ids:
            self.spans.append((kind, len(self.ids), len(self.ids) + len(ids), self.turn))
            self.ids.extend(ids)
        return ids

    # ------------------------------------------------------------------ turns
    def model_turn(self, message: Mapping[str, Any] | str, ids: Sequence[int] | None = None) -> list[int]:
        """Add an assistant turn and return its ids.

        Args:
            message: the turn as it goes into the conversation: the model's text, or an
                assistant message (e.g. the env's transcript entry, with ``tool_calls``).
            ids: the ids the model sampled (a rollout). ``None`` (SFT): the template's own
                rendering of ``message``, up to and including its end-of-turn token.
        """
        msg = {"role": "assistant", "content": message} if isinstance(message, str) else dict(message)
        self.conversation.append(msg)
        if ids is not None:
            self.text += self.tokenizer.decode(list(ids), skip_special_tokens=False)
            return self._add("model", ids)
        turn = template_turn_text(self.tokenizer, self.text, self._render(False))
        if turn is None:
            self._note(
                f"turn {self.turn}: the chat template renders the conversation before this turn "
                "differently once the turn is added (it rewrites earlier turns)"
            )
            turn = (msg.get("content") or "") + (getattr(self.tokenizer, "eos_token", None) or "")
        self.text += turn
        return self._add("model", _encode(self.tokenizer, turn))

    def env_turn(self, messages: Sequence[Mapping[str, Any]], budget: int | None = None) -> list[int]:
        """Add the env's messages after a turn (``info["tool_messages"]``: tool results, a
        corrective) and return the ids between the last assistant turn and the next one's header.

        Args:
            messages: the step's messages.
            budget: the most ids to add; more are cut (and the final check stops there).
        """
        self.conversation.extend(messages)
        nxt = self._render(True)
        if nxt.startswith(self.text):
            seg = nxt[len(self.text) :]
        else:
            common = len(os.path.commonprefix([nxt, self.text]))
            self._note(
                f"turn {self.turn}: the chat template renders the conversation so far differently "
                f"from the turns as laid out (first difference at character {common}: "
                f"{self.text[common : common + 40]!r} vs {nxt[common : common + 40]!r})"
            )
            seg = nxt[common:]
        ids = _encode(self.tokenizer, seg)
        if budget is not None and len(ids) > budget:
            ids = ids[: max(budget, 0)]
            self.limit = len(self.ids) + len(ids)
        self.text = nxt
        self.turn += 1
        return self._add("env", ids)

    def end(self, ids: Sequence[int] = ()) -> list[int]:
        """Add closing env ids after the last turn (the EOS a rollout appends)."""
        if ids:
            self.text += self.tokenizer.decode(list(ids), skip_special_tokens=False)
        return self._add("env", ids)

    # ------------------------------------------------------------------ the check
    def check(self) -> str | None:
        """Compare the ids with the tokenised rendering of the whole conversation; return (and keep
        in :attr:`mismatch`) the first difference, naming the turn, or ``None``."""
        if self.mismatch is not None:
            return self.mismatch
        whole = self._render(False)
        expected = _encode(self.tokenizer, whole)
        n = len(self.ids) if self.limit is None else self.limit
        got = self.ids[:n]
        if expected[:n] != got:
            at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), None)
            at = min(len(expected), n) if at is None else at
            where = "the prompt"
            for kind, start, end, turn in self.spans:
                if start <= at < end or (at >= end == len(self.ids)):
                    where = f"turn {turn} ({'the model' if kind == 'model' else 'the env'})"
            self._note(
                f"{where}: token {at} is {got[at] if at < len(got) else None} turn by turn but "
                f"{expected[at] if at < len(expected) else None} in the chat template's rendering "
                f"of the whole conversation"
            )
        elif self.limit is None and (not whole.startswith(self.text) or whole[len(self.text) :].strip()):
            self._note(
                f"turn {self.turn}: the chat template's rendering of the whole conversation goes on "
                f"after the last turn: {whole[len(self.text) :][:60]!r}"
            )
        return self.mismatch
