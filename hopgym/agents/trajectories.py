"""The trajectory file: what ``hopgym eval --trajectories RUN.jsonl`` writes and ``hopgym view`` reads.

Classes: :class:`EpisodeRecorder`, :class:`TrajectoryWriter`, :class:`TrajectoryFile`,
:class:`TrajectoryFormatError`, :class:`TrajectoryCutWarning`. Functions: :func:`trajectory_header`,
:func:`read_trajectories`.

## Format (version 1)

A UTF-8 JSON-lines file. The first line is a header::

    {"format": "hopgym-trajectories", "version": 1, "hopgym_version": "0.1.0",
     "env_id": "hopgym/Synthetic-v1", "env_options": {"hops": 3}, "reward": "default",
     "protocol": "tags", "task": "synthetic", "questions": 1000, "agent": "iterative",
     "seed": 0, "doc_text_chars": 1000, "created": "2025-01-31T12:00:00Z"}

When the writer is closed (at the end of a run, whatever ended it) the header is completed in
place with ``episodes`` (written), ``search_attempts`` and ``failed_searches`` (sums over them) and
``failed_search_kinds``; a file cut short by a crash keeps the header it started with (those
keys absent) and every episode written before. Lines are written with JSON's ``\\uXXXX`` escapes
for non-ASCII text, so any string the env accepted (a lone surrogate too) is written.

``env_options`` are the keyword arguments given to ``gym.make`` (the reward preset is ``reward``;
``env_id`` is ``null`` for an env built by hand), plus the value each option whose default depends
on the others took in this env (``parse``, ``repeat_notice``, ``last_turn_notice``:
:data:`~hopgym.envs.options.AUTO_OPTIONS`), so that a run says how its turns were read and what
the env told the agent; ``seed`` is the
base seed of the run; ``doc_text_chars`` is the length documents are cut to in the file.
Every further line is one episode:

- ``question_id``, ``seed`` (of this episode's ``reset``), ``question``, ``kind``, ``hops``,
  ``answers`` (gold, canonical first), ``supporting_ids`` (gold supporting documents);
- outcome: ``prediction`` (the answer, or ``null``), ``em``, ``f1``, ``support_recall``
  (``null`` when the task knows no supporting documents for the question: not 1.0),
  ``steps``, ``searches``, ``searches_by_source``, ``background_searches`` (1 when the prompt
  came with a background search, ``background_k``), ``failed_searches`` (searches whose
  retriever failed, background ones included), ``failed_search_kinds`` (``{kind: count}``, kinds of
  :func:`~hopgym.retrieval.failures.failure_kind`: ``connection``, ``timeout``, ``http_status``,
  ``other``), ``search_error`` (the first failure's message, or ``null``), ``invalid`` (invalid
  turns), ``return``,
  ``reward_terms`` (each term summed over the episode), ``end`` (``"answer"``, ``"budget"`` when
  the step budget ran out, ``"terminated"`` when a wrapper ended the episode without an answer);
- ``turns``: one object per step with ``action`` (the turn's text), ``action_type`` (think, search,
  route, answer, invalid), ``reward`` and, where they apply, ``think``, ``query`` and ``source``
  (searches), ``route`` (the source routed to), ``answer``, ``invalid_action`` (what was wrong),
  ``new_ids`` (documents shown, in order), ``skipped_ids`` (already-seen documents the retriever
  ranked above the last one shown, or all of them when none was new: de-duplication dropped
  them), ``retrieval_error`` and ``retrieval_error_kind``, ``observation`` (what the agent saw,
  kept only for turns that showed no documents: the documents' text is in ``documents``),
  ``reward_terms`` (this step's non-zero terms), ``format_issues`` (the codes of the flaws the
  lenient parse read past, such as ``unclosed_think``), ``truncated_turn`` and ``repeated_query``
  (``true``), ``calls`` (below); keys that do not apply are left out;
- ``calls``, in a turn of the ``tools`` protocol whose calls were read: one object per call, in
  order, with ``name``, ``arguments`` (an object, or the text as written when it is not JSON),
  ``action_type`` (search, answer, invalid, or ``not run`` after a call that failed or answered)
  and, where they apply, ``id``, ``query``, ``source``, ``route``, ``answer``, ``invalid_action``,
  ``new_ids``, ``skipped_ids``, ``retrieval_error``, ``retrieval_error_kind``, ``format_issues``,
  ``repeated_query`` and ``result`` (the text of its tool message, kept when it showed no
  documents). The turn's ``new_ids`` and ``skipped_ids`` are then every call's, its
  ``observation`` only what came outside the tool results (a corrective, the last-turn notice),
  and its other keys the last call's;
- ``background_ids``: documents shown in the prompt (``background_k``), when there are any;
- ``documents``: ``{doc_id: {"title": ..., "text": ...}}`` for every document shown and every
  supporting document the task can look up; texts longer than ``doc_text_chars`` are cut and end
  with ``…``.

:func:`read_trajectories` also reads the files of hopgym 0.1, which have no header and whose turns
hold ``action``, ``action_type``, ``observation``, ``reward``, ``new_ids`` and
``invalid_action``: their turns are parsed again (think, query, route, answer; the shown documents'
titles and texts from the observation); ``kind``, ``hops``, ``seed``, ``supporting_ids`` and
``end`` stay unknown (``None``). Every record it returns has every key above.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, SupportsFloat

import gymnasium as gym

from hopgym._atomic import OutputFileError, publish_file, reason_of
from hopgym._version import __version__
from hopgym.envs.multihop_qa import qa_env
from hopgym.envs.options import AUTO_OPTIONS, EnvOptions
from hopgym.errors import HopgymError, InvalidOptionError
from hopgym.rewards.scoring import exact_match, token_f1
from hopgym.turns import ANY_SOURCE, Answer
from hopgym.turns.tools import step_calls

__all__ = [
    "FORMAT",
    "VERSION",
    "DOC_TEXT_CHARS",
    "EpisodeRecorder",
    "TrajectoryWriter",
    "TrajectoryFile",
    "TrajectoryFormatError",
    "TrajectoryCutWarning",
    "trajectory_header",
    "read_trajectories",
]

FORMAT = "hopgym-trajectories"
VERSION = 1
# Long enough for a Wikipedia paragraph of the benchmarks, short enough that 10k episodes stay tens
# of MB; the cut is recorded in the header so a reader knows texts may be partial.
DOC_TEXT_CHARS = 1000

_EPISODE_KEYS: dict[str, Any] = {
    "question_id": None,
    "seed": None,
    "question": "",
    "kind": None,
    "hops": None,
    "answers": [],
    "supporting_ids": None,
    "prediction": None,
    "em": 0.0,
    "f1": 0.0,
    "support_recall": 0.0,
    "steps": 0,
    "searches": 0,
    "searches_by_source": {},
    "background_searches": 0,
    "failed_searches": 0,
    "failed_search_kinds": {},
    "search_error": None,
    "invalid": 0,
    "return": 0.0,
    "reward_terms": {},
    "end": None,
    "turns": [],
    "background_ids": [],
    "documents": {},
}
_TURN_KEYS: dict[str, Any] = {
    "action": "",
    "action_type": "invalid",
    "reward": 0.0,
    "think": None,
    "query": None,
    "source": None,
    "route": None,
    "answer": None,
    "invalid_action": None,
    "new_ids": [],
    "skipped_ids": [],
    "retrieval_error": None,
    "retrieval_error_kind": None,
    "observation": None,
    "reward_terms": {},
    "format_issues": [],
    "truncated_turn": False,
    "repeated_query": False,
    "calls": [],
}
# What a record needs for its metrics; a line without them is not an episode.
_REQUIRED = ("question_id", "em", "f1", "steps", "searches", "invalid", "prediction")
#: The types of the fields that readers compute with (a wrong one is refused, naming it).
_NUMBER: tuple[type, ...] = (int, float)
_INT: tuple[type, ...] = (int,)
_TEXT: tuple[type, ...] = (str,)
_EPISODE_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {  # field: (types, None allowed)
    "em": (_NUMBER, False),
    "f1": (_NUMBER, False),
    "support_recall": (_NUMBER, True),
    "return": (_NUMBER, False),
    "steps": (_INT, False),
    "searches": (_INT, False),
    "background_searches": (_INT, True),
    "failed_searches": (_INT, True),
    "invalid": (_INT, False),
    "prediction": (_TEXT, True),
    "question": (_TEXT, True),
    "search_error": (_TEXT, True),
    "answers": ((list,), True),
    "supporting_ids": ((list,), True),
    "turns": ((list,), True),
    "background_ids": ((list,), True),
    "searches_by_source": ((dict,), False),
    "failed_search_kinds": ((dict,), True),
    "reward_terms": ((dict,), False),
    "documents": ((dict,), True),
}
_TURN_TYPES: dict[str, tuple[tuple[type, ...], bool]] = {
    "action": ((str, dict, list), True),
    "action_type": (_TEXT, True),
    "reward": (_NUMBER, True),
    "new_ids": ((list,), True),
    "skipped_ids": ((list,), True),
    "reward_terms": ((dict,), True),
    "format_issues": ((list,), True),
    "calls": ((list,), True),
}
_TYPE_WORDS: dict[tuple[type, ...], str] = {_NUMBER: "a number", _INT: "an int", _TEXT: "a string"}


def _check_types(
    obj: Mapping[str, Any], types: Mapping[str, tuple[tuple[type, ...], bool]], where: str
) -> None:
    for key, (kinds, nullable) in types.items():
        if key not in obj:
            continue
        value = obj[key]
        if value is None and nullable:
            continue
        if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
            continue
        want = _TYPE_WORDS.get(kinds) or " or ".join(
            f"a JSON {'object' if k is dict else 'array' if k is list else k.__name__}" for k in kinds
        )
        got = "null" if value is None else type(value).__name__
        raise TrajectoryFormatError(f"{where}: field {key!r} must be {want}, got {got} {str(value)[:40]!r}")


class TrajectoryFormatError(HopgymError, ValueError):
    """A trajectory file that cannot be read; the message names the file and line."""


class TrajectoryCutWarning(HopgymError, UserWarning):
    """A trajectory file's last line is cut short (its run stopped mid-write); it is left out."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def _json_safe(value: Any) -> Any:
    """Env options as JSON: tuples become lists, anything else JSON cannot hold its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return repr(value)


def _agent_name(agent: Any) -> str:
    model = getattr(agent, "model_name", None) or getattr(agent, "model", None)
    name = type(agent).__name__
    return f"{name}({model})" if isinstance(model, str) else name


def trajectory_header(
    env: gym.Env,
    agent: Any = None,
    *,
    seed: int | None = None,
    agent_name: str | None = None,
    doc_text_chars: int = DOC_TEXT_CHARS,
) -> dict[str, Any]:
    """The header line of a trajectory file for a run of ``agent`` in ``env``.

    Args:
        env: the evaluated env (as made by ``gym.make``, or by hand).
        agent: the agent; its class name (and model, for LLM agents) is recorded unless
            ``agent_name`` is given.
        seed: the run's base seed.
        agent_name: what to record as the agent (the CLI passes its ``--agent`` value).
        doc_text_chars: the length documents are cut to.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> h = trajectory_header(gym.make("hopgym/Tiny-v1", top_k=2), agent_name="oracle", seed=0)
        >>> h["format"], h["version"], h["env_id"], h["reward"], h["agent"]
        ('hopgym-trajectories', 1, 'hopgym/Tiny-v1', 'default', 'oracle')
        >>> h["env_options"]
        {'top_k': 2, 'parse': 'lenient', 'repeat_notice': True, 'last_turn_notice': True}
    """
    spec = env.spec
    inner = env.unwrapped
    task = getattr(inner, "task", None)
    protocol = getattr(inner, "protocol", None)
    options = {k: v for k, v in (spec.kwargs if spec else {}).items() if k != "reward"}
    resolved = getattr(inner, "options", None)
    if isinstance(resolved, EnvOptions):
        options.update({k: getattr(resolved, k) for k in AUTO_OPTIONS})
    return {
        "format": FORMAT,
        "version": VERSION,
        "hopgym_version": __version__,
        "env_id": spec.id if spec else None,
        "env_options": _json_safe(options),
        # What gym.make applied (EnvOptions resolves the default); unknown for an env made by hand.
        "reward": _json_safe(getattr(getattr(inner, "options", None), "reward", None)) if spec else None,
        "protocol": getattr(protocol, "name", None),
        "task": getattr(task, "name", None),
        "questions": len(task.samples) if task is not None else None,
        "agent": agent_name or (_agent_name(agent) if agent is not None else None),
        "seed": seed,
        "doc_text_chars": doc_text_chars,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


class EpisodeRecorder:
    """Follows one episode step by step and builds its result (and, with ``turns``, its record).

    ``run_episode`` uses it; so can any loop that drives the env itself (a batched LLM
    evaluation): call :meth:`start` after ``reset``, :meth:`step` after every ``step``, then
    :meth:`result`.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1")
        >>> obs, info = env.reset(seed=0)
        >>> rec = EpisodeRecorder(env)
        >>> rec.start(info, seed=0)
        >>> out = env.step("<think>hm</think><answer>Oslo</answer>")
        >>> rec.step(*out)
        >>> r = rec.result()
        >>> r["steps"], r["end"], r["turns"][0]["answer"], r["turns"][0]["think"]
        (1, 'answer', 'Oslo', 'hm')
    """

    def __init__(self, env: gym.Env, *, turns: bool = True, doc_text_chars: int = DOC_TEXT_CHARS) -> None:
        self.env = env
        self.record_turns = turns
        self.doc_text_chars = doc_text_chars

    def start(self, info: Mapping[str, Any], seed: int | None = None) -> None:
        """Begin an episode, given ``reset``'s ``info`` and the seed passed to it."""
        self.sample = qa_env(self.env).current_sample
        self.seed = seed
        self.seen: dict[str, int] = {}  # doc id -> turn first shown (0: the prompt)
        self.docs: dict[str, dict[str, str]] = {}
        self.turns: list[dict[str, Any]] = []
        self.ret, self.steps, self.searches, self.invalid = 0.0, 0, 0, 0
        self.by_source: dict[str, int] = defaultdict(int)
        self.failed: dict[str, int] = defaultdict(int)  # failed searches by kind
        self.search_error: str | None = None
        self.terms: dict[str, float] = defaultdict(float)
        self.answer: str | None = None
        self.end: str | None = None
        self.background = list(info.get("new_ids") or ())
        # A background search ran (background_k): reset's info then says how it went.
        self.background_searches = int("retrieval_error" in info)
        self._failure(info)
        self._show(self.background, info.get("documents") or (), 0)

    def _failure(self, info: Mapping[str, Any]) -> None:
        error = info.get("retrieval_error")
        if error is not None:
            self.failed[info.get("retrieval_error_kind") or "other"] += 1
            if self.search_error is None:
                self.search_error = str(error)

    def _show(self, ids: Sequence[str], docs: Sequence[Any], turn: int) -> None:
        for doc_id in ids:
            self.seen.setdefault(doc_id, turn)
        if self.record_turns:
            for doc in docs:
                self.docs.setdefault(
                    doc.doc_id, {"title": doc.title, "text": _cut(doc.text, self.doc_text_chars)}
                )

    def step(
        self, obs: str, reward: SupportsFloat, terminated: bool, truncated: bool, info: Mapping[str, Any]
    ) -> None:
        """Record one step: pass what ``env.step`` returned."""
        self.steps += 1
        self.ret += float(reward)
        step_terms = info.get("reward_terms") or {}
        for name, value in step_terms.items():
            self.terms[name] += float(value)
        kind = info.get("action_type")
        if kind == "invalid":
            self.invalid += 1
        # A tools-protocol turn runs several calls: each call's info says what it searched and
        # showed (the step's own info is the last call's).
        parts: Sequence[Mapping[str, Any]] = info.get("calls") or (info,)
        seen_before = set(self.seen)
        new_ids: list[str] = []
        shown: list[tuple[list[str], set[str]]] = []  # per part: its new ids, the ids seen before it
        for part in parts:
            if part.get("action_type") == "search":
                self.searches += 1
                self.by_source[part.get("source", "?")] += 1
            self._failure(part)
            ids = list(part.get("new_ids") or ())
            shown.append((ids, set(self.seen)))
            self._show(ids, part.get("documents") or (), self.steps)
            new_ids += [d for d in ids if d not in new_ids]
        if info.get("answer") is not None:
            self.answer = info["answer"]
        if self.record_turns:
            turn = self._turn(obs, float(reward), kind, info, new_ids, seen_before, step_terms)
            if info.get("calls") is not None:
                for key in ("skipped_ids", "observation"):  # the calls' own, below
                    turn.pop(key, None)
                turn.update(self._calls(info, shown))
            self.turns.append(turn)
        if terminated or truncated:
            self.end = (
                "answer" if info.get("answer") is not None else "terminated" if terminated else "budget"
            )

    def _turn(
        self,
        obs: str,
        reward: float,
        kind: Any,
        info: Mapping[str, Any],
        new_ids: list[str],
        seen_before: set[str],
        step_terms: Mapping[str, float],
    ) -> dict[str, Any]:
        transcript = qa_env(self.env).transcript
        last = next((m for m in reversed(transcript) if m["role"] == "assistant"), None)
        # A tools-protocol turn keeps its calls beside the content: the action is both, as text.
        action = "" if last is None else qa_env(self.env).protocol.assistant_text(last)
        turn: dict[str, Any] = {"action": action, "action_type": kind, "reward": reward}
        optional = {
            "think": info.get("think"),
            "query": info.get("query"),
            "source": info.get("source") if kind == "search" else None,
            "route": info.get("routed_to"),
            "answer": info.get("answer"),
            "invalid_action": info.get("invalid_action"),
            "new_ids": new_ids,
            "skipped_ids": self._skipped(info.get("retrieved_ids") or (), new_ids, seen_before),
            "retrieval_error": info.get("retrieval_error"),
            "retrieval_error_kind": info.get("retrieval_error_kind"),
            "observation": obs if obs and not new_ids else None,
            "reward_terms": {k: float(v) for k, v in step_terms.items() if v},
            "format_issues": [i[0] for i in info.get("format_issues") or ()],
            "truncated_turn": bool(info.get("truncated_turn")),
            "repeated_query": bool(info.get("repeated_query")),
        }
        turn.update((k, v) for k, v in optional.items() if v)
        return turn

    def _calls(self, info: Mapping[str, Any], shown: Sequence[tuple[list[str], set[str]]]) -> dict[str, Any]:
        """A tools-protocol turn's ``calls`` (each call, what it did and its result), its
        ``skipped_ids`` (every call's) and its ``observation`` (only what came outside the tool
        results: a corrective or a notice)."""
        last = next(m for m in reversed(qa_env(self.env).transcript) if m["role"] == "assistant")
        calls, skipped = [], []
        for i, call in enumerate(step_calls(last, info)):
            part = call["info"]  # None: not run (an earlier call failed or answered)
            ids, before = shown[i] if part is not None else ([], set())
            record: dict[str, Any] = {
                "name": call["name"],
                "arguments": call["arguments"],
                "action_type": "not run" if part is None else part.get("action_type"),
            }
            if part is not None:
                kind = part.get("action_type")
                skip = self._skipped(part.get("retrieved_ids") or (), ids, before)
                skipped += [d for d in skip if d not in skipped]
                optional = {
                    "id": call["id"],
                    "query": part.get("query"),
                    "source": part.get("source") if kind == "search" else None,
                    "route": part.get("routed_to"),
                    "answer": part.get("answer"),
                    "invalid_action": part.get("invalid_action"),
                    "new_ids": ids,
                    "skipped_ids": skip,
                    "retrieval_error": part.get("retrieval_error"),
                    "retrieval_error_kind": part.get("retrieval_error_kind"),
                    "format_issues": [i[0] for i in part.get("format_issues") or ()],
                    "repeated_query": bool(part.get("repeated_query")),
                }
            else:
                optional = {"id": call["id"]}
            # The result's text is kept when it showed no documents (theirs are in ``documents``).
            optional["result"] = call["result"] if call["result"] and not ids else None
            record.update((k, v) for k, v in optional.items() if v)
            calls.append(record)
        notes = "".join(
            m["content"] + "\n" for m in info.get("tool_messages") or () if m.get("role") != "tool"
        )
        out: dict[str, Any] = {"calls": calls, "skipped_ids": skipped, "observation": notes or None}
        return {k: v for k, v in out.items() if v}

    @staticmethod
    def _skipped(ranked: Sequence[str], shown: list[str], seen_before: set[str]) -> list[str]:
        """Already-seen documents the retriever ranked above the last shown one (all of them when
        nothing new was shown)."""
        if not seen_before:
            return []
        last = max((i for i, d in enumerate(ranked) if d in shown), default=len(ranked) - 1)
        return [d for d in ranked[: last + 1] if d in seen_before and d not in shown]

    def result(self) -> dict[str, Any]:
        """The episode's outcome; with ``turns``, also its turns and documents."""
        sample = self.sample
        golds = list(sample.answers)
        support = list(sample.supporting_ids)
        answer = self.answer
        out: dict[str, Any] = {
            "question_id": sample.id,
            "seed": self.seed,
            "question": sample.question,
            "kind": sample.kind,
            "hops": sample.hops,
            "answers": golds,
            "supporting_ids": support,
            "prediction": answer,
            "em": exact_match(answer, golds) if answer is not None else 0.0,
            "f1": token_f1(answer, golds) if answer is not None else 0.0,
            # No gold documents: recall is unknown (None), not perfect.
            "support_recall": (len(set(support) & set(self.seen)) / len(set(support)) if support else None),
            "steps": self.steps,
            "searches": self.searches,
            "searches_by_source": dict(self.by_source),
            "background_searches": self.background_searches,
            "failed_searches": sum(self.failed.values()),
            "failed_search_kinds": dict(self.failed),
            "search_error": self.search_error,
            "invalid": self.invalid,
            "return": self.ret,
            "reward_terms": dict(self.terms),
            "end": self.end,
        }
        if self.record_turns:
            lookup = getattr(qa_env(self.env).task, "documents", None) or {}
            for doc_id in support:
                if doc_id not in self.docs and doc_id in lookup:
                    doc = lookup[doc_id]
                    self.docs[doc_id] = {"title": doc.title, "text": _cut(doc.text, self.doc_text_chars)}
            out["turns"] = self.turns
            if self.background:
                out["background_ids"] = self.background
            out["documents"] = self.docs
        return out


def _line(obj: Any) -> str:
    # ASCII with \uXXXX escapes: a lone surrogate (which UTF-8 cannot encode) is written too.
    return json.dumps(obj, ensure_ascii=True) + "\n"


#: Room left after the header line so that :meth:`TrajectoryWriter.close` can complete it in place.
_HEADER_ROOM = 512


class TrajectoryWriter:
    """Writes a trajectory file: the header line at once, then one line per episode.

    ``TrajectoryWriter(path, header)`` writes the header to a temporary file beside ``path``
    (``NAME.XXXX.partial``, in the same folder, made with it); :meth:`write` appends an episode
    and flushes it; :meth:`close` (or leaving a ``with`` block, on any exit: a crash, Ctrl-C)
    completes the header with the run's counts (``episodes``, ``search_attempts``,
    ``failed_searches``, ``failed_search_kinds``), ``fsync``\\ s the file and renames it onto
    ``path``. So ``path`` is whole or absent, never cut (:mod:`hopgym._atomic`): an episode
    interrupted half-written is cut off before the rename, and only a process killed outright
    (``SIGKILL``, a power cut) leaves its finished episodes in the ``.partial`` file, which
    :func:`read_trajectories` and ``hopgym view`` read. Any string is written (JSON escapes), so an
    answer the env accepted never fails the write.

    A failed write (a full disk) raises :class:`~hopgym._atomic.OutputFileError` naming
    ``path``; :meth:`abandon` then deletes the temporary file and leaves ``path`` as it was.
    """

    def __init__(self, path: str | Path, header: Mapping[str, Any]) -> None:
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise InvalidOptionError(
                f"header must have format={FORMAT!r} and version={VERSION} (build it with trajectory_header)"
            )
        self.path = Path(path)
        self.header = dict(header)
        self.episodes = self.search_attempts = self.failed_searches = 0
        self.failed_search_kinds: dict[str, int] = defaultdict(int)
        first = _line(self.header).encode("ascii")
        # Spaces before the newline keep room to complete the header in place (JSON ignores them).
        self._room = len(first) + _HEADER_ROOM
        self._file: IO[bytes] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a folder, not a file")
            fd, tmp = tempfile.mkstemp(prefix=f"{self.path.name}.", suffix=".partial", dir=self.path.parent)
            self.partial = Path(tmp)
            self._file = os.fdopen(fd, "wb")
            self._file.write(first[:-1] + b" " * _HEADER_ROOM + b"\n")
            self._file.flush()
        except OSError as exc:
            self.abandon()
            raise OutputFileError(self.path, f"cannot be written ({reason_of(exc)})") from exc
        self._end = self._file.tell()  # the end of the last complete line

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one episode record (as built by :class:`EpisodeRecorder`) and flush it."""
        if self._file is None:
            raise InvalidOptionError(f"TrajectoryWriter for {self.path} is closed")
        line = _line(record).encode("ascii")
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:
            raise OutputFileError(self.path, reason_of(exc)) from exc
        self._end += len(line)
        self.episodes += 1
        self.search_attempts += int(record.get("searches") or 0) + int(record.get("background_searches") or 0)
        self.failed_searches += int(record.get("failed_searches") or 0)
        for kind, n in (record.get("failed_search_kinds") or {}).items():
            self.failed_search_kinds[kind] += int(n)

    def close(self) -> None:
        """Complete the header, and rename the file onto ``path`` (again: no-op).

        Raises:
            OutputFileError: the file could not be completed (``path`` is left as it was).
        """
        if self._file is None:
            return
        fh = self._file
        try:
            counts = {
                "episodes": self.episodes,
                "search_attempts": self.search_attempts,
                "failed_searches": self.failed_searches,
                "failed_search_kinds": dict(self.failed_search_kinds),
            }
            line = _line({**self.header, **counts}).encode("ascii")
            fh.flush()
            fh.truncate(self._end)  # an episode cut by an interrupt mid-write is left out
            if len(line) <= self._room:  # else the header keeps what it started with
                self.header.update(counts)
                fh.seek(0)
                fh.write(line[:-1] + b" " * (self._room - len(line)) + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            self._file = None
            publish_file(self.partial, self.path)
        except OSError as exc:
            self.abandon()
            raise OutputFileError(self.path, reason_of(exc)) from exc
        finally:
            if self._file is not None:  # an interrupt between the steps: nothing half-renamed
                self.abandon()

    def abandon(self) -> None:
        """Close and delete the temporary file; ``path`` stays as it was (again: no-op)."""
        fh, self._file = self._file, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        partial = getattr(self, "partial", None)
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class TrajectoryFile:
    """A trajectory file as read by :func:`read_trajectories`.

    Attributes:
        path: where it was read from.
        header: its header (for a hopgym 0.1 file, a header made up with ``version`` 0 and
            unknown fields ``None``).
        episodes: the episode records, every key of the format present.
        upgraded_from: ``"0.1"`` for a file of hopgym 0.1, else ``None``.
    """

    path: Path
    header: dict[str, Any]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    upgraded_from: str | None = None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    yield number, line
    except UnicodeDecodeError as exc:
        raise TrajectoryFormatError(f"{path}: not a UTF-8 text file ({exc})") from None


def read_trajectories(path: str | Path) -> TrajectoryFile:
    """Read a trajectory file of any version (see the module docstring for the format).

    A last line cut short (no newline, not JSON: the run stopped while writing it) is left out
    with a :class:`TrajectoryCutWarning`; the complete episodes before it are read.

    Raises:
        FileNotFoundError: no such file.
        TrajectoryFormatError: a line that is not JSON or not an episode, an unknown format or a
            newer version; the message names the file and line.

    Example:
        >>> import gymnasium as gym, hopgym, tempfile, os
        >>> from hopgym.agents import OracleAgent, evaluate
        >>> env = gym.make("hopgym/Tiny-v1")
        >>> path = os.path.join(tempfile.mkdtemp(), "run.jsonl")
        >>> _ = evaluate(env, OracleAgent(env), episodes=2, trajectories=path)
        >>> run = read_trajectories(path)
        >>> run.header["env_id"], len(run.episodes), run.episodes[0]["em"]
        ('hopgym/Tiny-v1', 2, 1.0)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no trajectory file at {path}")
    header: dict[str, Any] | None = None
    upgraded: str | None = None
    episodes: list[dict[str, Any]] = []
    lines = list(_lines(path))
    for number, line in lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            # json's messages end in "at" ("Unterminated string starting at"): the column follows it
            where = f"{path}:{number}: not JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})"
            if number == lines[-1][0] and header is not None and not line.endswith("\n"):
                # The last line, cut by a crash or a kill mid-write: keep the complete episodes.
                warnings.warn(
                    f"{where}: the last line is cut short (a run that stopped while writing); "
                    f"read the {len(episodes)} complete episode(s) before it",
                    TrajectoryCutWarning,
                    stacklevel=2,
                )
                break
            if number == lines[0][0]:
                _refuse_other_json(path)
            raise TrajectoryFormatError(where) from None
        if not isinstance(obj, dict):
            raise TrajectoryFormatError(f"{path}:{number}: expected a JSON object, got {type(obj).__name__}")
        if header is None and upgraded is None:
            if "format" in obj:
                header = _check_header(obj, path, number)
                continue
            upgraded = "0.1"  # hopgym 0.1 wrote episodes only
            header = {
                "format": FORMAT,
                "version": 0,
                "hopgym_version": "0.1",
                "env_id": None,
                "env_options": {},
                "reward": None,
                "protocol": None,
                "task": None,
                "questions": None,
                "agent": None,
                "seed": None,
                "doc_text_chars": None,
                "created": None,
            }
        missing = [k for k in _REQUIRED if k not in obj]
        if missing:
            raise TrajectoryFormatError(
                f"{path}:{number}: not an episode record (no {', '.join(repr(k) for k in missing)})"
            )
        _check_types(obj, _EPISODE_TYPES, f"{path}:{number}")
        for i, turn in enumerate(obj.get("turns") or (), 1):
            if not isinstance(turn, dict):
                raise TrajectoryFormatError(f"{path}:{number}: turn {i} must be a JSON object")
            _check_types(turn, _TURN_TYPES, f"{path}:{number}: turn {i}")
        episodes.append(_upgrade_episode(obj) if upgraded else _normalise(obj))
    if header is None:
        raise TrajectoryFormatError(f"{path}: empty file, no header and no episodes")
    return TrajectoryFile(path, header, episodes, upgraded)


def _refuse_other_json(path: Path) -> None:
    """A whole JSON file (not JSON lines) that hopgym wrote: say what it is and what to give."""
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except (ValueError, OSError, RecursionError):
        return
    if not isinstance(obj, dict):
        return
    if obj.get("format") == "hopgym-suite":
        what = "a suite results file (hopgym eval --suite --json; hopgym eval --compare reads it)"
    elif "episodes_requested" in obj or {"em", "f1", "episodes"} <= set(obj):
        what = "a metrics file (hopgym eval --json)"
    else:
        what = "a JSON file, not JSON lines"
    raise TrajectoryFormatError(
        f"{path} is {what}, not a trajectory file: give the file of hopgym eval --trajectories"
    )


def _check_header(obj: dict[str, Any], path: Path, number: int) -> dict[str, Any]:
    if obj.get("format") != FORMAT:
        raise TrajectoryFormatError(f"{path}:{number}: format {obj.get('format')!r} is not {FORMAT!r}")
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise TrajectoryFormatError(f"{path}:{number}: bad version {version!r}")
    if version > VERSION:
        raise TrajectoryFormatError(
            f"{path}:{number}: version {version} is newer than this hopgym reads ({VERSION}); upgrade hopgym"
        )
    return obj


def _normalise(obj: dict[str, Any]) -> dict[str, Any]:
    out = {**{k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in _EPISODE_KEYS.items()}, **obj}
    out["turns"] = [
        {**{k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in _TURN_KEYS.items()}, **t}
        for t in out["turns"] or ()
    ]
    return out


def _docs_from_observation(obs: str, ids: list[str]) -> dict[str, dict[str, str]]:
    """The shown documents' titles and texts, read back from a 0.1 observation (``tags`` or
    ``r3``) by its protocol (best effort: nothing when they do not match the shown ids one to one).
    """
    from hopgym.turns import get_protocol

    for name in ("tags", "r3"):
        docs = get_protocol(name).documents_of(obs, len(ids))
        if docs is not None:
            return {doc_id: {"title": t, "text": x} for doc_id, (t, x) in zip(ids, docs, strict=False)}
    return {}


def _upgrade_turn(old: dict[str, Any], docs: dict[str, dict[str, str]]) -> dict[str, Any]:
    from hopgym.turns import get_protocol

    text = old.get("action") or ""
    kind = old.get("action_type")
    turn = {
        **_TURN_KEYS,
        "skipped_ids": [],
        "reward_terms": {},
        "calls": [],
        "action": text,
        "action_type": kind,
        "reward": float(old.get("reward") or 0.0),
        "invalid_action": old.get("invalid_action"),
        "new_ids": list(old.get("new_ids") or ()),
    }
    for name in ("tags", "r3"):
        # hopgym 0.1 read turns with what is now the strict parse
        # Old files do not list the env's sources; a routed name was valid when it was recorded.
        parsed = get_protocol(name, parse="strict").parse(text, ANY_SOURCE)
        if parsed.kind == kind or (kind == "invalid" and parsed.think):
            turn["think"] = parsed.think or None
            act = parsed.action
            turn["query"] = getattr(act, "query", None)
            turn["route"] = getattr(act, "source", None)
            turn["answer"] = act.text if isinstance(act, Answer) and kind == "answer" else None
            break
    obs = old.get("observation") or ""
    shown = _docs_from_observation(obs, turn["new_ids"]) if turn["new_ids"] else {}
    docs.update((k, v) for k, v in shown.items() if k not in docs)
    if obs and not shown:
        turn["observation"] = obs
    return turn


def _upgrade_episode(old: dict[str, Any]) -> dict[str, Any]:
    docs: dict[str, dict[str, str]] = {}
    turns = [_upgrade_turn(t, docs) for t in old.get("turns") or ()]
    out = _normalise({k: v for k, v in old.items() if k != "turns"})
    out["turns"] = turns
    out["end"] = "answer" if out["prediction"] is not None else None
    out["documents"] = docs
    return out
