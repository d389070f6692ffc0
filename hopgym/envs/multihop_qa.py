"""The text environment: :class:`MultiHopQAEnv`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from hopgym.corpora.retrieval import Retriever
from hopgym.corpora.sources import QATask
from hopgym.corpora.types import Passage, QASample
from hopgym.envs.actions import Answer, ParsedTurn, Route, Search, Think
from hopgym.envs.protocols import Protocol, get_protocol
from hopgym.envs.spaces import FreeText

__all__ = ["MultiHopQAEnv"]

_OBS_MAX = 1 << 22


class MultiHopQAEnv(gym.Env[str, str]):
    """Multi-hop question answering, one model turn per step.

    ## Description
    The agent answers a multi-hop question by reasoning, searching one or more knowledge sources and
    answering, step by step, as in Search-R1, R3-RAG and KunLunBaizeRAG. Actions are model turns as
    text; observations are the text the environment appends to the agent's context (the retrieved
    documents, a routing notice or a corrective message).

    ## Action Space
    :class:`~hopgym.envs.spaces.FreeText`: any string. Under the ``tags`` protocol a turn is
    ``<think>…</think>`` followed by exactly one of ``<search>query</search>``,
    ``<route>source</route>`` or ``<answer>text</answer>`` (a turn with only ``<think>`` is a think
    step). Under ``r3`` it is ``The problem analysis: …`` then ``The retrieval query: …`` or
    ``The final answer: …`` (``The retrieval source: …`` routes). Structured actions
    (:class:`~hopgym.envs.actions.Search` and friends) are rendered to the protocol's text first.
    Any other input — a non-string, an empty or over-long turn, two actions, nested or unbalanced
    tags, an unknown source — is an *invalid* turn: it never raises, the agent sees a short
    corrective observation and ``info["invalid_action"]`` says what was wrong.

    ## Observation Space
    :class:`~hopgym.envs.spaces.FreeText`. ``reset`` returns the prompt (instructions, sources,
    question and, with ``background_k``, documents retrieved for the raw question). ``step`` returns
    only the new text; the whole transcript is :attr:`transcript` and ``render()`` in ``ansi`` mode.

    ## Rewards
    The bare env's reward is always 0. ``gym.make`` applies a reward preset (``reward="default"``:
    exact match of the final answer); see :mod:`hopgym.rewards`. Everything a reward needs is in
    ``info`` and in the gold sample :attr:`sample`, which the agent never sees.

    ## Starting State
    A question chosen with ``self.np_random`` (or ``options={"question_id": id}`` /
    ``{"index": i}``), the first source selected, no documents seen.

    ## Episode End
    An answer terminates the episode. The step budget is truncation, applied by a ``TimeLimit`` of
    ``max_turns`` steps that ``gym.make`` puts under the reward wrappers; ``terminated`` and
    ``truncated`` are never both true.

    ## Info
    Every step: ``turn``, ``turns_left``, ``action_type`` (think/search/route/answer/invalid),
    ``invalid_action`` (reason or ``None``), ``think``, ``query``, ``source`` (the current source),
    ``routed_to``, ``retrieved_ids`` (the retriever's result), ``new_ids`` (documents shown after
    de-duplication and the cap), ``documents`` (the shown :class:`Passage` objects), ``answer``,
    ``retrieval_error``, ``question_id``, ``searches`` and ``searches_by_source`` (cumulative).
    ``reset`` gives ``question_id``, ``question``, ``source``, ``sources``, ``turn`` = 0,
    ``max_turns`` and, with background retrieval, ``retrieved_ids``/``new_ids``/``documents``.

    ## Arguments
    - ``task``: a :class:`~hopgym.corpora.sources.QATask` (questions and sources).
    - ``protocol``: ``"tags"`` (default) or ``"r3"``, or a :class:`Protocol` instance.
    - ``top_k``: documents shown per search.
    - ``dedup``: drop documents already seen in this trajectory and fill up with the next ones (R3-RAG).
    - ``max_docs``: cap on documents shown per trajectory (``None``: no cap).
    - ``doc_chars``: cut the joined documents of one observation to this many characters.
    - ``background_k``: documents retrieved for the raw question and shown in the prompt (RDRA).
    - ``max_turns``: the budget the prompt announces; ``gym.make`` enforces it with ``TimeLimit``.
    - ``max_action_chars``: longer turns are invalid.
    - ``render_mode``: ``None`` or ``"ansi"``.

    >>> import gymnasium as gym, hopgym
    >>> env = gym.make("hopgym/Synthetic-v0")
    >>> obs, info = env.reset(seed=0)
    >>> "Question:" in obs
    True

    ## Version History
    - v0: initial release.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        task: QATask,
        *,
        protocol: str | Protocol = "tags",
        top_k: int = 3,
        dedup: bool = True,
        max_docs: int | None = None,
        doc_chars: int | None = None,
        background_k: int = 0,
        max_turns: int = 8,
        max_action_chars: int = 8192,
        render_mode: str | None = None,
    ) -> None:
        if not isinstance(task, QATask):
            raise TypeError(f"task must be a hopgym.corpora.QATask, got {type(task).__name__}")
        for name, value, low in (("top_k", top_k, 1), ("background_k", background_k, 0),
                                 ("max_turns", max_turns, 1), ("max_action_chars", max_action_chars, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if max_docs is not None and (not isinstance(max_docs, int) or max_docs < 1):
            raise ValueError(f"max_docs must be None or an int >= 1, got {max_docs!r}")
        if doc_chars is not None and (not isinstance(doc_chars, int) or doc_chars < 1):
            raise ValueError(f"doc_chars must be None or an int >= 1, got {doc_chars!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.task = task
        self.protocol = get_protocol(protocol)
        self.top_k, self.dedup, self.max_docs = top_k, dedup, max_docs
        self.doc_chars, self.background_k = doc_chars, background_k
        self.max_turns, self.max_action_chars = max_turns, max_action_chars
        self.render_mode = render_mode
        self.action_space = FreeText(max_action_chars * 4)
        self.observation_space = FreeText(_OBS_MAX)
        self.sample: QASample | None = None
        self.transcript: list[dict[str, str]] = []
        self._reset_state()

    # ------------------------------------------------------------------ state
    def _reset_state(self) -> None:
        self.turn = 0
        self.source = self.task.default_source
        self.seen_ids: set[str] = set()
        self.shown = 0
        self.searches = 0
        self.searches_by_source = dict.fromkeys(self.task.sources, 0)
        self.done = False
        self._retrievers: dict[str, Retriever] = {}

    def _retriever(self, name: str) -> Retriever:
        if name not in self._retrievers:
            assert self.sample is not None
            self._retrievers[name] = self.task.sources[name].for_sample(self.sample)
        return self._retrievers[name]

    def __getstate__(self) -> dict[str, Any]:
        # Per-question retrievers are rebuilt on demand; pickling them would copy whole indexes.
        state = self.__dict__.copy()
        state["_retrievers"] = {}
        return state

    @property
    def source_names(self) -> tuple[str, ...]:
        """The names of the task's sources, the default first."""
        return tuple(self.task.sources)

    # ------------------------------------------------------------------ API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "question_id" in options:
            index = self.task.index_of(str(options["question_id"]))
        elif "index" in options:
            index = int(options["index"]) % len(self.task.samples)
        else:
            index = int(self.np_random.integers(len(self.task.samples)))
        self.sample = self.task.samples[index]
        self._reset_state()
        info: dict[str, Any] = {
            "question_id": self.sample.id,
            "question": self.sample.question,
            "source": self.source,
            "sources": self.source_names,
            "turn": 0,
            "max_turns": self.max_turns,
        }
        background = ""
        if self.background_k:
            docs, raw, error = self._search(self.sample.question, self.background_k)
            info.update(retrieved_ids=raw, new_ids=[d.doc_id for d in docs], documents=docs,
                        retrieval_error=error)
            if docs:
                background = self._docs_text(docs)
        descriptions = {n: s.description for n, s in self.task.sources.items()}
        obs = self.protocol.prompt(self.sample.question, descriptions, self.max_turns, background)
        self.transcript = [{"role": "user", "content": obs}]
        return obs, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.sample is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self.turn += 1
        text, parsed = self._read(action)
        self.transcript.append({"role": "assistant", "content": text})
        info = self._blank_info(parsed)
        terminated = False
        act = parsed.action
        if self.done:
            parsed = ParsedTurn(None, error="the episode is over: call reset()")
            info.update(action_type="invalid", invalid_action=parsed.error)
            obs, terminated = self.protocol.format_error(parsed.error, self.turn), True
        elif act is None:
            obs = self.protocol.format_error(parsed.error or "invalid turn", self.turn)
        elif isinstance(act, Think):
            obs = self.protocol.format_think(self.turn)
        elif isinstance(act, Route):
            self.source = act.source
            info.update(source=act.source, routed_to=act.source)
            desc = self.task.sources[act.source].description
            obs = self.protocol.format_notice(
                f"Searches now go to {act.source}" + (f" ({desc})." if desc else "."), self.turn)
        elif isinstance(act, Search):
            obs = self._do_search(act.query, info)
        else:
            assert isinstance(act, Answer)
            info["answer"] = act.text
            terminated = self.done = True
            obs = ""
        if obs:
            self.transcript.append({"role": "user", "content": obs})
        info["searches"] = self.searches
        info["searches_by_source"] = dict(self.searches_by_source)
        return obs, 0.0, terminated, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return "".join(m["content"] if m["role"] == "user" else m["content"] + "\n"
                           for m in self.transcript)
        return None

    # ------------------------------------------------------------------ helpers
    def _read(self, action: Any) -> tuple[str, ParsedTurn]:
        if isinstance(action, (Think, Search, Route, Answer)):
            text = self.protocol.render(action)
        elif isinstance(action, str):
            text = action
        else:
            shown = repr(action)[:60]
            return shown, ParsedTurn(None, error=f"a turn must be a string, got "
                                                 f"{type(action).__name__} {shown}")
        if not text.strip():
            return text, ParsedTurn(None, error="empty turn")
        if len(text) > self.max_action_chars:
            return text[: self.max_action_chars], ParsedTurn(
                None, error=f"turn too long ({len(text)} > {self.max_action_chars} characters)")
        return text, self.protocol.parse(text, self.source_names)

    def _blank_info(self, parsed: ParsedTurn) -> dict[str, Any]:
        act = parsed.action
        return {
            "turn": self.turn,
            "turns_left": max(self.max_turns - self.turn, 0),
            "action_type": parsed.kind,
            "invalid_action": parsed.error,
            "think": parsed.think or None,
            "query": act.query if isinstance(act, Search) else None,
            "source": self.source,
            "routed_to": None,
            "retrieved_ids": [],
            "new_ids": [],
            "documents": [],
            "answer": None,
            "retrieval_error": None,
            "question_id": self.sample.id if self.sample else None,
        }

    def _search(self, query: str, k: int) -> tuple[list[Passage], list[str], str | None]:
        """Search the current source; returns (shown docs, raw ids, error)."""
        budget = k if self.max_docs is None else min(k, self.max_docs - self.shown)
        if budget <= 0:
            return [], [], None
        # With de-duplication, ask for enough results that ``k`` unseen ones can remain.
        ask = k + len(self.seen_ids) if self.dedup else k
        try:
            hits = self._retriever(self.source).search(query, ask)
        except Exception as exc:  # noqa: BLE001 - any backend failure becomes an observation
            return [], [], f"{type(exc).__name__}: {exc}"
        raw = [p.doc_id for p in hits]
        if self.dedup:
            hits = [p for p in hits if p.doc_id not in self.seen_ids]
        docs = hits[:budget]
        self.seen_ids.update(p.doc_id for p in docs)
        self.shown += len(docs)
        return docs, raw, None

    def _docs_text(self, docs: Sequence[Passage]) -> str:
        return "\n".join(f"Doc {i + 1} (Title: {d.title}) {d.text}" for i, d in enumerate(docs))

    def _do_search(self, query: str, info: dict[str, Any]) -> str:
        self.searches += 1
        self.searches_by_source[self.source] += 1
        if self.max_docs is not None and self.shown >= self.max_docs:
            return self.protocol.format_notice(
                f"Document limit reached ({self.max_docs} per episode): answer now.", self.turn)
        docs, raw, error = self._search(query, self.top_k)
        info.update(retrieved_ids=raw, new_ids=[d.doc_id for d in docs], documents=docs,
                    retrieval_error=error)
        if error is not None:
            return self.protocol.format_notice(
                f"Search failed ({error}). Try again, route elsewhere or answer.", self.turn)
        if not docs:
            what = "No new documents found" if raw else "No documents found"
            return self.protocol.format_notice(f"{what} for this query.", self.turn)
        return self.protocol.format_documents(docs, self.doc_chars, self.turn)
