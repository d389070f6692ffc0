"""The text environment: :class:`MultiHopQAEnv`."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from types import FrameType
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import TimeLimit

from hopgym.corpora.types import Passage, QASample
from hopgym.envs.options import RENDER_MODES, EnvKwargs, EnvOptions, Unpack
from hopgym.envs.spaces import FreeText
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.failures import failure_kind
from hopgym.rewards.scoring import query_key
from hopgym.tasks.base import QATask
from hopgym.turns.actions import Answer, ParsedTurn, Route, Search
from hopgym.turns.base import Turn
from hopgym.turns.info import StepInfo
from hopgym.turns.registry import get_protocol

__all__ = ["MultiHopQAEnv", "SearchRequest", "qa_env"]

_OBS_MAX = 1 << 22
_DOC_ID = attrgetter("doc_id")


@dataclass(frozen=True, slots=True, eq=False)
class SearchRequest:
    """The search an env's next ``step`` will run (see :meth:`MultiHopQAEnv.prepare_step`).

    Attributes:
        retriever: the retriever of the current source (for the current question).
        query: the query as the env will send it.
        k: how many results the env will ask for (``top_k``, plus the documents seen so far
            under de-duplication).
    """

    retriever: Retriever
    query: str
    k: int


# ``gym.make(id, max_episode_steps=n)`` wraps a ``TimeLimit`` around what the entry point
# returned and records ``n`` nowhere the env can read: the factory never receives it, and since
# Gymnasium 1.0 ``make`` sets ``env.unwrapped.spec`` with ``max_episode_steps=None`` (only the
# wrappers' ``env.spec`` carries ``n``). The first moment the env can see that wrapper is its first
# ``reset`` run through it: the wrapper's ``reset`` (this code object) is then on the call stack.
_TIME_LIMIT_RESET = TimeLimit.reset.__code__


def _time_limit_above() -> TimeLimit | None:
    """The Gymnasium ``TimeLimit`` whose ``reset`` is running this env's ``reset``, if any."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(64):  # a wrapper stack is a few frames per wrapper
        if frame is None:
            return None
        if frame.f_code is _TIME_LIMIT_RESET:
            limit = frame.f_locals.get("self")
            return limit if isinstance(limit, TimeLimit) else None
        frame = frame.f_back
    return None


def _option(name: str) -> property:
    """A read-only attribute that reads ``self.options.<name>``."""
    help_text = next(f.metadata["help"] for f in fields(EnvOptions) if f.name == name)
    return property(
        lambda self: getattr(self.options, name), doc=f"``options.{name}`` (read-only): {help_text}."
    )


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
    ``The final answer: …`` (``The retrieval source: …`` routes). Under ``tools`` it is free text and
    calls of the tools :attr:`tool_specs` (``search(query, source?)``, ``answer(answer)``) in any
    chat template's format or as an OpenAI assistant message dict; each call answers with a tool
    message and ``info["calls"]`` holds each call's info (see :mod:`hopgym.turns.tools`).
    Structured actions (:class:`~hopgym.turns.actions.Search` and friends) are rendered to the
    protocol's text first.
    Any other input — a non-string, an empty or over-long turn, no complete action block, two
    different actions, an action inside a closed ``<think>`` or another tag, an ``<information>``
    tag, an unknown source — is an *invalid* turn: it never raises, the agent sees a short
    corrective observation and ``info["invalid_action"]`` says what was wrong.

    The ``parse`` option says how strictly turns are read (see :mod:`hopgym.turns.tags`). In
    ``lenient`` mode (the default) the action comes from the first complete action block, as in
    Search-R1, and flaws read past — an unclosed ``<think>``, text outside the tags, spaces inside
    a tag — are *format issues* (``info["format_issues"]``), which a ``FormatReward`` can charge.
    In ``strict`` mode every unbalanced or stray tag makes the turn invalid.

    ## Observation Space
    :class:`~hopgym.envs.spaces.FreeText`. ``reset`` returns the prompt (instructions, sources,
    question and, with ``background_k``, documents retrieved for the raw question). ``step`` returns
    only the new text; the whole transcript is :attr:`transcript` and ``render()`` in ``ansi`` mode.

    Two notices, each an option (on by default, off under the papers' reward presets): with
    ``repeat_notice``, a search whose query repeats one of the episode (the same words in any
    order, :func:`~hopgym.rewards.scoring.query_key`) is answered with "You already searched for
    this; here are the next results." before the documents (with ``dedup``; without it, "the same
    results again"); with ``last_turn_notice``, the observation that leaves one turn asks for the
    answer now. The protocol writes both (:meth:`Protocol.repeat_note`, :meth:`Protocol.last_turn`).

    ## Rewards
    The bare env's reward is always 0. ``gym.make`` applies a reward preset (``reward="default"``:
    exact match of the final answer); see :mod:`hopgym.rewards`. Everything a reward needs is in
    ``info`` and in the gold sample :attr:`sample`, which the agent never sees.

    ## Starting State
    A question chosen with ``self.np_random`` (or ``options={"question_id": id}`` /
    ``{"index": i}``), the first source selected, no documents seen.

    ## Episode End
    An answer terminates the episode. The step budget, ``max_turns``, is the env's one step limit:
    the step that uses the last turn without answering is truncated, so reward wrappers see it, and
    ``terminated`` and ``truncated`` are never both true. It is the only budget: the registered
    specs carry no ``max_episode_steps``, and a Gymnasium ``TimeLimit`` above the env
    (``gym.make(..., max_episode_steps=n)`` adds one) is refused whatever ``n`` is: the env's
    first ``reset`` through one raises :class:`~hopgym.errors.InvalidOptionError` that says to
    pass ``max_turns=n`` instead. Even ``n == max_turns`` is refused: both budgets would end the
    same step, so an answer on the last turn would come back ``terminated`` *and* ``truncated``,
    and the reward wrappers under the ``TimeLimit`` would never see its truncation.

    A ``step`` after the end (after an answer, or beyond ``max_turns``) without ``reset`` is
    refused the way a malformed turn is: it never raises, the agent sees "the episode is over: call
    reset()", ``info["action_type"]`` is ``"invalid"``, the flags repeat how the episode ended, and
    nothing is recorded (the :attr:`transcript`, the turn count and the search counts stay as they
    were). Gymnasium leaves such steps undefined and its ``OrderEnforcing`` only refuses a step
    before the first ``reset``, which this env does too (``ResetNeeded``); raising after the end
    would break the promise that no action raises, so the step is answered and memory stays bounded
    (the transcript never holds more than ``max_turns`` turns).

    ## Info
    Every step: ``turn``, ``turns_left``, ``action_type`` (think/search/route/answer/invalid),
    ``invalid_action`` (reason or ``None``), ``think``, ``query``, ``source`` (the current source),
    ``routed_to``, ``retrieved_ids`` (the retriever's result), ``new_ids`` (documents shown after
    de-duplication and the cap), ``documents`` (the shown :class:`Passage` objects), ``answer``,
    ``retrieval_error`` (what a failed search raised, or ``None``), ``retrieval_error_kind`` (its
    kind: ``connection``, ``timeout``, ``http_status`` or ``other``, see
    :func:`~hopgym.retrieval.failures.failure_kind`), ``question_id``, ``searches``,
    ``searches_by_source`` and ``failed_searches`` (cumulative; background searches count as
    failed too),
    ``format_issues`` (the :class:`~hopgym.turns.actions.FormatIssue` list of a valid turn: codes
    such as ``unclosed_think`` and what was found), ``truncated_turn`` (an invalid turn that ends
    inside an open ``<think>``/action tag with no complete action — how a turn cut at the model's
    token limit looks to the env, which cannot see token limits; for ``r3``, an analysis that
    stops mid-sentence with no action line) and ``repeated_query`` (a search whose query was
    issued before in the episode). ``reset`` gives ``question_id``, ``question``, ``source``,
    ``sources``, ``turn`` = 0, ``max_turns`` and, with background retrieval,
    ``retrieved_ids``/``new_ids``/``documents``/``retrieval_error``/``retrieval_error_kind``/
    ``failed_searches``.

    ## Arguments
    - ``task``: a :class:`~hopgym.tasks.base.QATask` (questions and sources).
    - ``options``: an :class:`~hopgym.envs.options.EnvOptions` (or a mapping of its fields); keyword
      arguments override single fields: ``MultiHopQAEnv(task, top_k=2)``. The fields: ``protocol``
      (``"tags"``, ``"r3"`` or a protocol instance), ``top_k``, ``dedup``, ``max_docs``,
      ``doc_chars``, ``background_k``, ``max_turns`` (the budget the prompt announces),
      ``max_action_chars``, ``max_tool_calls``, ``reward`` (applied by ``gym.make``, not by this class),
      ``render_mode``, ``parse``, ``repeat_notice`` and ``last_turn_notice``; see
      :class:`~hopgym.envs.options.EnvOptions` for their meaning and defaults. :attr:`options`
      holds them resolved (:meth:`~hopgym.envs.options.EnvOptions.resolved`).

    >>> import gymnasium as gym, hopgym
    >>> env = gym.make("hopgym/Synthetic-v1")
    >>> obs, info = env.reset(seed=0)
    >>> "Question:" in obs
    True

    ## Version History
    - v1: turns are read leniently by default (``parse="lenient"``: the first complete action
      block; flaws read past are ``info["format_issues"]``), ``truncated_turn`` and
      ``repeated_query`` in ``info``, and the repeated-query and last-turn notices
      (``repeat_notice``, ``last_turn_notice``). What an agent sees and is paid differs from v0,
      so results on one version are not comparable with the other. In both versions (before
      the first release): ``max_turns`` is the one step budget (a ``TimeLimit`` above the env is
      refused), and an answer on the last turn is ``terminated`` only.
    - v0: initial release (hopgym 0.1's turn handling: ``parse="strict"``, no notices). Steps
      after the end are refused without being recorded.
    - In both versions (before the first release, no change to rewards or termination):
      ``protocol="tools"`` (OpenAI-style tool calls, ``max_tool_calls``, :attr:`tool_specs`;
      ``tags`` and ``r3`` unchanged); ``retrieval_error_kind`` and ``failed_searches`` in
      ``info``; a step after the end says only "the episode is over: call reset()." without the
      format hint.
    """

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 1}

    def __init__(
        self,
        task: QATask,
        options: EnvOptions | Mapping[str, Any] | None = None,
        **kwargs: Unpack[EnvKwargs],
    ) -> None:
        if not isinstance(task, QATask):
            raise InvalidOptionTypeError(f"task must be a hopgym.corpora.QATask, got {type(task).__name__}")
        #: The env's :class:`~hopgym.envs.options.EnvOptions` (``options`` updated by ``kwargs``),
        #: resolved: ``parse`` and the notices hold what they mean for this env, never ``None``.
        self.options = EnvOptions.from_kwargs(kwargs, base=options).resolved()
        self.task = task
        self.protocol = get_protocol(self.options.protocol, parse=self.options.parse)
        self.action_space = FreeText(self.options.max_action_chars * 4)
        self.observation_space = FreeText(_OBS_MAX)
        self.sample: QASample | None = None
        self.transcript: list[dict[str, Any]] = []
        self._budget_checked = False
        self._reset_state()

    # The options, read-only: they are :attr:`options`, never a copy that could drift from it.
    top_k = _option("top_k")
    dedup = _option("dedup")
    max_docs = _option("max_docs")
    doc_chars = _option("doc_chars")
    background_k = _option("background_k")
    max_turns = _option("max_turns")
    max_action_chars = _option("max_action_chars")
    render_mode = _option("render_mode")  # type: ignore[assignment]
    parse = _option("parse")
    repeat_notice = _option("repeat_notice")
    last_turn_notice = _option("last_turn_notice")

    # ------------------------------------------------------------------ state
    def _reset_state(self) -> None:
        self.turn = 0
        self.source = self.task.default_source
        self.seen_ids: set[str] = set()
        self.shown = 0
        self.searches = 0
        self.searches_by_source = dict.fromkeys(self.task.sources, 0)
        #: Searches (background ones included) whose retriever failed, in this episode.
        self.failed_searches = 0
        self._source_names = tuple(self.searches_by_source)
        #: ``None`` while the episode runs; then ``"terminated"`` (answered) or ``"truncated"``
        #: (the budget ran out).
        self.ended: str | None = None
        self._retrievers: dict[str, Retriever] = {}
        self._queries: set[frozenset[str]] = set()
        self._prepared: tuple[Any, Turn] | None = None
        self._supplied: tuple[SearchRequest, list[Passage]] | None = None
        self._info_base = self._new_info_base()

    def _retriever(self, name: str) -> Retriever:
        retriever = self._retrievers.get(name)
        if retriever is None:
            assert self.sample is not None
            retriever = self._retrievers[name] = self.task.sources[name].for_sample(self.sample)
        return retriever

    def __getstate__(self) -> dict[str, Any]:
        # Per-question retrievers are rebuilt on demand; pickling them would copy whole indexes.
        state = self.__dict__.copy()
        state["_retrievers"] = {}
        state["_prepared"] = state["_supplied"] = None
        state["_budget_checked"] = False  # a copy may be wrapped anew
        return state

    @property
    def current_sample(self) -> QASample:
        """The episode's question (:attr:`sample`, never ``None``), for code that runs after ``reset``.

        Raises:
            gymnasium.error.ResetNeeded: no episode was started yet.
        """
        if self.sample is None:
            raise gym.error.ResetNeeded("call reset() before reading the episode's sample")
        return self.sample

    @property
    def source_names(self) -> tuple[str, ...]:
        """The names of the task's sources, the default first."""
        return self._source_names

    def retrieval_cache_info(self) -> dict[str, Any]:
        """Each source's query-cache counters (``hits``, ``misses``, ``hit_rate``, sizes: a
        :class:`~hopgym.retrieval.query_cache.CacheInfo`), for sources whose retriever has one.

        A retriever and its cache are shared by every env of the process that searches it, so
        the counters are the process's, not this env's.
        """
        out: dict[str, Any] = {}
        for name, source in self.task.sources.items():
            retriever = source.retriever or self._retrievers.get(name)
            info = getattr(retriever, "cache_info", None)
            if callable(info):
                out[name] = info()
        return out

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if not self._budget_checked:  # once: the wrappers above an env do not change
            limit = _time_limit_above()
            if limit is not None:
                steps = limit.get_wrapper_attr("_max_episode_steps")
                raise InvalidOptionError(
                    f"hopgym envs have one step budget, max_turns (here {self.max_turns}), which "
                    f"ends the episode by truncation; a TimeLimit of {steps} step(s) above it "
                    f"(gym.make(..., max_episode_steps={steps}) adds one) would be a second: pass "
                    f"max_turns={steps} instead"
                )
            self._budget_checked = True
        opts = self.options
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
            "sources": self._source_names,
            "turn": 0,
            "max_turns": opts.max_turns,
        }
        background = ""
        if opts.background_k:
            docs, ids, raw, error, kind = self._search(self.sample.question, opts.background_k)
            info.update(
                retrieved_ids=raw,
                new_ids=ids,
                documents=docs,
                retrieval_error=error,
                retrieval_error_kind=kind,
                failed_searches=self.failed_searches,
            )
            if docs:
                background = self._docs_text(docs)
        descriptions = {n: s.description for n, s in self.task.sources.items()}
        obs = self.protocol.prompt(self.sample.question, descriptions, opts.max_turns, background)
        self.transcript = [{"role": "user", "content": obs}]
        return obs, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.sample is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        prepared, self._prepared = self._prepared, None
        if self.ended is not None:
            self._supplied = None
            return self._after_end()
        opts, protocol = self.options, self.protocol
        self.turn = n = self.turn + 1
        if prepared is not None and prepared[0] is action:
            turn = prepared[1]
        else:
            turn = protocol.read(
                action, self._source_names, opts.max_tool_calls, max_chars=opts.max_action_chars
            )
        self.transcript.append(protocol.assistant_message(turn))
        terminated = False
        info: dict[str, Any]
        if turn.calls:
            messages, info, terminated = self._run_calls(turn)
        else:  # a think-only turn, or one that cannot be read at all: nothing to run
            self._supplied = None
            # The blank info is this step's info: no search ran, so its counts are current.
            whole = turn.parsed if turn.parsed is not None else turn.whole()  # Turn.whole's first case
            info = self._blank_info(whole)  # type: ignore[assignment]  # a StepInfo is a dict
            text = (
                protocol.format_error(turn.error, n, self._source_names)
                if turn.error is not None
                else protocol.format_think(n)
            )
            messages = [protocol.reply(None, text)] if text else []
        # The one step budget, checked once: an answer on the last turn is a termination only.
        max_turns = opts.max_turns
        truncated = not terminated and n >= max_turns
        if terminated or truncated:
            self.ended = "terminated" if terminated else "truncated"
        elif n == max_turns - 1 and opts.last_turn_notice:
            messages = protocol.with_last_turn(messages, n)
        if messages:
            self.transcript.extend(messages)
        if protocol.accepts_messages:
            info["tool_messages"] = messages
        return protocol.observation_text(messages), 0.0, terminated, truncated, info

    def _run_calls(self, turn: Turn) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
        """Run a turn's calls in order: the reply messages, the step's info and whether an
        answer ended the episode."""
        protocol, sources = self.protocol, self._source_names
        self._supplied, supplied = None, self._supplied
        messages: list[dict[str, Any]] = []
        infos: list[StepInfo] = []
        terminated = False
        ran = 0
        calls, max_calls = turn.calls, self.options.max_tool_calls
        # One call within the limit (every tag or r3 turn) runs as itself: what ``turn.run``
        # yields then, without its generator.
        runs = ((calls[0], calls[0].parsed),) if len(calls) == 1 and max_calls >= 1 else turn.run(max_calls)
        for i, (call, parsed) in enumerate(runs):
            ran += 1
            one = self._blank_info(parsed)
            if i == 0 and turn.issues:
                one["format_issues"] = list(turn.issues) + one["format_issues"]
            infos.append(one)
            act = parsed.action
            if act is None:
                text = protocol.format_error(parsed.error or "invalid turn", self.turn, sources)
            elif isinstance(act, Answer):
                one["answer"] = act.text
                terminated = True
                continue  # an answer gets no reply: the episode is over
            elif isinstance(act, Route):
                self.source = act.source
                one["source"] = one["routed_to"] = act.source
                desc = self.task.sources[act.source].description
                text = protocol.format_notice(
                    f"Searches now go to {act.source}" + (f" ({desc})." if desc else "."), self.turn
                )
            else:
                assert isinstance(act, Search)
                if act.source is not None and act.source != self.source:
                    self.source = act.source
                    one["source"] = one["routed_to"] = act.source
                self._supplied = supplied if i == 0 else None
                text = self._do_search(act.query, one)
                self._supplied = None
            messages.append(protocol.reply(call, text))
        if ran < len(calls):
            why = "the answer ended the episode" if terminated else "an earlier call of this turn failed"
            messages += [protocol.reply(c, f"Not run: {why}.") for c in calls[ran:]]
        # The last info's counts are current: each call's info is made after the searches before it.
        last = infos[-1]
        if not protocol.accepts_messages:
            # The step's info is the one call's own (no list of calls holds it, so no copy).
            last["failed_searches"] = self.failed_searches
            return messages, last, terminated  # type: ignore[return-value]  # a StepInfo is a dict
        info: dict[str, Any] = dict(last, failed_searches=self.failed_searches)
        info["calls"] = infos
        return messages, info, terminated

    # ------------------------------------------------------------------ batched searches
    def prepare_step(self, action: Any) -> SearchRequest | None:
        """Read ``action`` ahead of :meth:`step` and say which search that step will run.

        A vector env that batches the searches of its sub-envs
        (:class:`~hopgym.envs.vector.BatchedSearchVectorEnv`) calls this on every sub-env, answers
        the requests of each retriever with one ``search_batch`` call, hands each env its
        results with :meth:`supply_search`, and then steps the envs as usual, through their
        wrappers. The step reuses the parse of this very ``action`` object and uses the supplied
        results only for the exact request (retriever, query and ``k``) it makes; any other
        step — a wrapper that changed the action, a step after the end — reads and searches as
        it always does. So a step returns the same whether or not it was prepared.

        Changes nothing the agent can observe.

        Returns:
            The search the step will run, or ``None`` (no search, or none that reaches the
            retriever).
        """
        self._prepared = self._supplied = None
        if self.sample is None or self.ended is not None:
            return None
        turn = self._read(action)
        self._prepared = (action, turn)
        # Prefetch the turn's first call when it searches the current source; the step uses the
        # results only for the very same request.
        first = turn.calls[0].parsed.action if turn.calls and turn.error is None else None
        if not isinstance(first, Search) or first.source not in (None, self.source):
            return None
        try:
            return self._request(first.query, self.options.top_k)
        except Exception:  # noqa: BLE001 - the step itself reports a failing retriever factory
            return None

    def supply_search(self, request: SearchRequest, hits: Sequence[Passage]) -> None:
        """Hand the next :meth:`step` the results of ``request`` (from :meth:`prepare_step`),
        searched by someone else: ``request.retriever.search(request.query, request.k)``."""
        self._supplied = (request, list(hits))

    def _after_end(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The answer to a step after the end: corrective, repeats the end flags, records nothing."""
        error = "the episode is over: call reset()"
        info = self._blank_info(ParsedTurn(None, error=error))
        answered = self.ended == "terminated"
        return (
            # A notice, not format_error: its "Write <think>…" hint is for turns to fix, and none is.
            self.protocol.format_notice(error + ".", self.turn),
            0.0,
            answered,
            not answered,
            dict(info),
        )

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self.protocol.render_transcript(self.transcript)

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The env's tools as OpenAI function schemas (``search`` and ``answer``; ``search`` takes
        a ``source`` enum when there are several sources), for ``apply_chat_template(tools=...)``
        and OpenAI-compatible servers, when the protocol acts by chat tools (``tools``); else ``[]``."""
        return self.protocol.tool_specs({n: s.description for n, s in self.task.sources.items()})

    # ------------------------------------------------------------------ helpers
    def _read(self, action: Any) -> Turn:
        return self.protocol.read(
            action,
            self._source_names,
            max_chars=self.options.max_action_chars,
            max_calls=self.options.max_tool_calls,
        )

    def _blank_info(self, parsed: ParsedTurn) -> StepInfo:
        """A step's ``info`` (its keys: :class:`~hopgym.turns.info.StepInfo`); ``searches`` and
        ``searches_by_source`` are this step's counts, so a step that searches updates them itself.

        A copy of the episode's :attr:`_info_base` (a dict copy is several times cheaper than
        building a dict of 21 keys) with the step's own values; every list and dict in it is new.
        """
        act, turn = parsed.action, self.turn
        info = self._info_base.copy()
        left = self.options.max_turns - turn
        info["turn"] = turn
        info["turns_left"] = left if left > 0 else 0
        info["action_type"] = "invalid" if act is None else act.kind
        info["invalid_action"] = parsed.error
        info["think"] = parsed.think or None
        if isinstance(act, Search):
            info["query"] = act.query
        info["source"] = self.source
        info["retrieved_ids"], info["new_ids"], info["documents"] = [], [], []
        info["format_issues"] = list(parsed.issues) if parsed.issues else []
        info["truncated_turn"] = parsed.truncated
        info["searches"] = self.searches
        info["searches_by_source"] = self.searches_by_source.copy()
        info["failed_searches"] = self.failed_searches
        return info

    def _new_info_base(self) -> StepInfo:
        """The episode's step info before the step's own values: its keys in their order."""
        return {
            "turn": 0,
            "turns_left": 0,
            "action_type": "invalid",
            "invalid_action": None,
            "think": None,
            "query": None,
            "source": self.source,
            "routed_to": None,
            "retrieved_ids": [],
            "new_ids": [],
            "documents": [],
            "answer": None,
            "retrieval_error": None,
            "retrieval_error_kind": None,
            "question_id": self.sample.id if self.sample else None,
            "format_issues": [],
            "truncated_turn": False,
            "repeated_query": False,
            "searches": 0,
            "searches_by_source": {},
            "failed_searches": 0,
        }

    def _sizes(self, k: int) -> tuple[int, int]:
        """How many documents a search for ``k`` may show (under ``max_docs``) and how many results
        it asks for: with de-duplication, enough that that many unseen ones can remain."""
        opts = self.options
        budget = k if opts.max_docs is None else min(k, opts.max_docs - self.shown)
        return budget, k + len(self.seen_ids) if opts.dedup else k

    def _request(self, query: str, k: int) -> SearchRequest | None:
        """The search :meth:`_search` runs for ``query`` (``None``: none, the cap is reached)."""
        budget, ask = self._sizes(k)
        if budget <= 0:
            return None
        return SearchRequest(self._retriever(self.source), query, ask)

    def _search(
        self, query: str, k: int
    ) -> tuple[list[Passage], list[str], list[str], str | None, str | None]:
        """Search the current source; returns (shown docs, their ids, raw ids, error, its kind)."""
        budget, ask = self._sizes(k)
        if budget <= 0:
            return [], [], [], None, None
        supplied, self._supplied = self._supplied, None
        try:
            # The request of :meth:`_request`, without building it: the step's usual case.
            retriever = self._retrievers.get(self.source)
            if retriever is None:
                retriever = self._retriever(self.source)
            if (
                supplied is not None
                and supplied[0].retriever is retriever
                and supplied[0].query == query
                and supplied[0].k == ask
            ):
                hits = supplied[1]
            else:
                hits = retriever.search(query, ask)
        except Exception as exc:  # noqa: BLE001 - any backend failure becomes an observation
            self.failed_searches += 1
            return [], [], [], f"{type(exc).__name__}: {exc}", failure_kind(exc)
        raw = list(map(_DOC_ID, hits))  # map, not a comprehension: no Python frame
        seen = self.seen_ids
        if self.options.dedup and not seen.isdisjoint(raw):
            docs = [p for p in hits if p.doc_id not in seen][:budget]
            ids = list(map(_DOC_ID, docs))
        else:  # nothing to drop: the ids are the first of ``raw``
            docs, ids = hits[:budget], raw[:budget]
        seen.update(ids)
        self.shown += len(docs)
        return docs, ids, raw, None, None

    def _docs_text(self, docs: Sequence[Passage]) -> str:
        return "\n".join(f"Doc {i + 1} (Title: {d.title}) {d.text}" for i, d in enumerate(docs))

    def _do_search(self, query: str, info: StepInfo) -> str:
        source, protocol, opts = self.source, self.protocol, self.options
        self.searches += 1
        self.searches_by_source[source] += 1
        info["searches"] = self.searches
        info["searches_by_source"][source] += 1  # the step's own copy
        key = query_key(query)
        queries = self._queries
        repeated = info["repeated_query"] = key in queries
        queries.add(key)
        note = protocol.repeat_note(opts.dedup) if repeated and opts.repeat_notice else ""
        if opts.max_docs is not None and self.shown >= opts.max_docs:
            return protocol.format_notice(
                f"Document limit reached ({opts.max_docs} per episode): answer now.", self.turn
            )
        docs, ids, raw, error, kind = self._search(query, opts.top_k)
        info["retrieved_ids"], info["new_ids"], info["documents"] = raw, ids, docs
        if error is not None:
            info["retrieval_error"], info["retrieval_error_kind"] = error, kind
            return protocol.format_notice(
                f"Search failed ({error}). Try again, route elsewhere or answer.", self.turn
            )
        if not docs:
            if note:
                return protocol.format_notice(protocol.repeat_note(opts.dedup, exhausted=True), self.turn)
            what = "No new documents found" if raw else "No documents found"
            return protocol.format_notice(f"{what} for this query.", self.turn)
        return protocol.format_documents(docs, opts.doc_chars, self.turn, note=note)


def qa_env(env: gym.Env[Any, Any]) -> MultiHopQAEnv:
    """The :class:`MultiHopQAEnv` under ``env``'s wrappers (``env.unwrapped``), typed as one.

    Code that reads the text env's own attributes (``sample``, ``task``, ``transcript``,
    ``protocol``...) goes through this rather than through ``env.unwrapped``, which Gymnasium
    types as a plain ``Env``.

    Args:
        env: a hopgym text env, wrapped or not (a :class:`~hopgym.envs.featurized.FeaturizedEnv`
            too: its ``unwrapped`` is the text env).

    Returns:
        ``env.unwrapped``.

    Raises:
        hopgym.errors.InvalidOptionTypeError: ``env.unwrapped`` is not a :class:`MultiHopQAEnv`.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1")
        >>> qa_env(env) is env.unwrapped, qa_env(env).max_turns
        (True, 8)
    """
    base = env.unwrapped
    if not isinstance(base, MultiHopQAEnv):
        raise InvalidOptionTypeError(
            f"a hopgym text env is needed (env.unwrapped a MultiHopQAEnv), got {type(base).__name__}"
        )
    return base
