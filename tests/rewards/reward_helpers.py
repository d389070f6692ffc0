"""Shared helpers of the reward tests: a scripted-info env, real tiny envs, rollouts, policies."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.envs import Answer, Route, Search, Think
from hopgym.envs.spaces import FreeText
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.tasks.base import QATask, Source


def fold_routes(actions: Iterable[Any]) -> list[Any]:
    """An action list for the ``tools`` protocol: each :class:`Route` folded into the next
    :class:`Search` as its ``source`` (there is no route tool); other items are kept."""
    out: list[Any] = []
    pending: Route | None = None
    for act in actions:
        if isinstance(act, Route):
            pending = act
            continue
        if isinstance(act, Search) and pending is not None and act.source is None:
            act = Search(act.query, act.think or pending.think, source=pending.source)
        pending = None if isinstance(act, Search) else pending
        out.append(act)
    return out


GOLD = QASample(
    "q1",
    "Where was the founder of Qelvor Dynamics born?",
    ("Cardell", "Cardell City"),
    ("d1", "d2"),
    2,
    "bridge",
    (
        Hop("Who founded Qelvor Dynamics?", "Maren Oskdal", "d1", "Qelvor founder", "local"),
        Hop("Where was Maren Oskdal born?", "Cardell", "d2", "Maren Oskdal born", "web"),
    ),
)

PASSAGES = (
    Passage("d1", "Qelvor Dynamics", "Qelvor Dynamics was founded by Maren Oskdal."),
    Passage("d2", "Maren Oskdal", "Maren Oskdal was born in Cardell."),
    Passage("d3", "Lorn", "Lorn is a town."),
)


def info_step(**kw: Any) -> dict[str, Any]:
    """A step info of the env contract with defaults (a think turn)."""
    base: dict[str, Any] = {
        "turn": 1,
        "turns_left": 0,
        "action_type": "think",
        "invalid_action": None,
        "think": None,
        "query": None,
        "source": "local",
        "routed_to": None,
        "retrieved_ids": [],
        "new_ids": [],
        "documents": [],
        "answer": None,
        "retrieval_error": None,
        "question_id": "q1",
        "searches": 0,
        "searches_by_source": {},
    }
    base.update(kw)
    if base["action_type"] == "search" and not base["documents"] and base["new_ids"]:
        by_id = {p.doc_id: p for p in PASSAGES}
        base["documents"] = [by_id[i] for i in base["new_ids"] if i in by_id]
    return base


def search(
    query: str,
    new_ids: Sequence[str] = (),
    retrieved: Sequence[str] | None = None,
    source: str = "local",
    think: str | None = None,
) -> dict[str, Any]:
    return info_step(
        action_type="search",
        query=query,
        new_ids=list(new_ids),
        retrieved_ids=list(retrieved if retrieved is not None else new_ids),
        source=source,
        think=think,
    )


def answer(text: str) -> dict[str, Any]:
    return info_step(action_type="answer", answer=text)


def invalid(reason: str = "no action") -> dict[str, Any]:
    return info_step(action_type="invalid", invalid_action=reason)


def route(source: str) -> dict[str, Any]:
    return info_step(action_type="route", routed_to=source, source=source)


class ScriptedInfoEnv(gym.Env[str, str]):
    """A tiny fake env that replays a script of step infos (the env's info contract).

    An ``answer`` info terminates unless ``answer_ends=False`` (for multi-answer tests); the last
    info of the script, or the ``max_turns``-th step, truncates if nothing else ended the episode,
    as ``MultiHopQAEnv``'s one step budget does; ``max_turns`` is reported at reset as it does.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        script: Sequence[dict[str, Any]],
        sample: QASample = GOLD,
        *,
        answer_ends: bool = True,
        costs: dict[str, float] | None = None,
        max_turns: int | None = None,
    ) -> None:
        self.script = [dict(s) for s in script]
        self.sample = sample
        self.answer_ends = answer_ends
        self.max_turns = max_turns
        costs = costs or {"local": 0.0, "web": 1.0}
        retriever = BM25Retriever(PASSAGES, engine="rank_bm25")
        self.task = QATask("fake", [sample], {n: Source(n, retriever, c) for n, c in costs.items()})
        self.action_space = FreeText(100)
        self.observation_space = FreeText(100)
        self.i = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.i = 0
        return "prompt", {
            "question_id": self.sample.id,
            "question": self.sample.question,
            "source": "local",
            "sources": tuple(self.task.sources),
            "turn": 0,
            "max_turns": self.max_turns,
        }

    def step(self, action: Any):
        info = dict(self.script[self.i])
        self.i += 1
        info["turn"] = self.i
        terminated = info["action_type"] == "answer" and self.answer_ends
        budget = len(self.script) if self.max_turns is None else min(self.max_turns, len(self.script))
        truncated = not terminated and self.i >= budget
        return "obs", 0.0, terminated, truncated, info


@dataclass
class Episode:
    total: float
    terms: Counter = field(default_factory=Counter)
    steps: int = 0
    terminated: bool = False
    truncated: bool = False
    infos: list[dict[str, Any]] = field(default_factory=list)


def run(
    env: gym.Env,
    actions: Sequence[Any] | Callable[..., Any],
    *,
    options=None,
    seed: int | None = 0,
    max_steps: int = 50,
) -> Episode:
    """Roll out a fixed action list (or a policy ``(obs, info, sample) -> action``).

    Checks the sum invariant at every step.
    """
    obs, info = env.reset(seed=seed, options=options)
    ep = Episode(0.0)
    for t in range(max_steps):
        if callable(actions):
            act = actions(obs, info, env.unwrapped.sample)
        elif t < len(actions):
            act = actions[t]
        else:
            act = "<think>waiting</think>"
        obs, r, terminated, truncated, info = env.step(act)
        terms = info["reward_terms"]
        assert math.isclose(r, math.fsum(terms.values()), abs_tol=1e-12), (r, terms)
        if ep.steps:  # every wrapper writes all of its terms on every step
            assert set(terms) == set(ep.terms), (sorted(terms), sorted(ep.terms))
        ep.total += r
        ep.terms.update(terms)
        ep.steps += 1
        ep.infos.append(info)
        if terminated or truncated:
            ep.terminated, ep.truncated = terminated, truncated
            return ep
    raise AssertionError("episode did not end")


def tiny(
    reward: str | None = None,
    *,
    sources: tuple[str, ...] = ("local",),
    max_turns: int = 6,
    protocol: str = "tags",
    parse: str = "lenient",
) -> gym.Env:
    from hopgym.envs.registration import make_tiny
    from hopgym.turns import get_protocol

    return make_tiny(
        sources=sources, reward=reward, max_turns=max_turns, protocol=get_protocol(protocol, parse=parse)
    )


TINY_IDS = tuple(f"tiny-{i}" for i in range(1, 7))


# ---------------------------------------------------------------------------- policies
def oracle_actions(
    sample: QASample, start_source: str = "local", answer_text: str | None = None
) -> list[Any]:
    """Route where a hop's document lives, search each hop's query, answer the gold."""
    acts: list[Any] = []
    cur = start_source
    for hop in sample.decomposition:
        if hop.source and hop.source != cur:
            acts.append(Route(hop.source))
            cur = hop.source
        acts.append(Search(hop.search_query, think=f"need: {hop.question}"))
    acts.append(Answer(sample.answer if answer_text is None else answer_text))
    return acts


def distractors(env: gym.Env, sample: QASample, n: int = 2) -> list[str]:
    others = [s.answer for s in env.unwrapped.task.samples if s.answer not in sample.answers and s.answer]
    return others[:n]


class Policy:
    """A scripted adversary: builds its action list from the gold sample at the first step."""

    def __init__(self, name: str, build: Callable[[gym.Env, QASample], list[Any]]) -> None:
        self.name = name
        self.build = build

    def __repr__(self) -> str:
        return self.name


def _oracle(env: gym.Env, s: QASample) -> list[Any]:
    return oracle_actions(s)


def _searches(s: QASample) -> list[Any]:
    return oracle_actions(s)[:-1]


def _filler(env: gym.Env, k: int) -> list[Any]:
    titles = (
        [p.title for p in env.unwrapped.task.documents.values()] if env.unwrapped.task.documents else ["x"]
    )
    return [Search(f"{titles[i % len(titles)]} facts {i}") for i in range(k)]


def _budget(env: gym.Env) -> int:
    return env.unwrapped.max_turns


#: Correct answers in sloppy format, read by the lenient parse (invalid under the strict one).
SLOPPY: tuple[Policy, ...] = (
    Policy(
        "sloppy_unclosed_think",
        lambda env, s: _searches(s) + [f"<think>so it is {s.answer}<answer>{s.answer}</answer>"],
    ),
    Policy(
        "sloppy_unopened_think",
        lambda env, s: _searches(s) + [f"so it is {s.answer}</think><answer>{s.answer}</answer>"],
    ),
    Policy("sloppy_text_outside", lambda env, s: _searches(s) + [f"<answer>{s.answer}</answer> I am sure."]),
    Policy(
        "sloppy_duplicate_answer",
        lambda env, s: _searches(s) + [f"<answer>{s.answer}</answer><answer>{s.answer}</answer>"],
    ),
    Policy("sloppy_spaced_tags", lambda env, s: _searches(s) + [f"< answer >{s.answer}</ answer >"]),
    Policy(
        "sloppy_stray_wrong_answer",
        lambda env, s: _searches(s) + [f"<answer>{s.answer}</answer><answer>{distractors(env, s, 1)[0]}"],
    ),
    Policy(
        "sloppy_r3_inline",
        lambda env, s: _searches(s) + [f"The problem analysis: done. The final answer: {s.answer}"],
    ),
    Policy(
        "sloppy_r3_trailing_text",
        lambda env, s: (
            _searches(s)
            + [f"The problem analysis: done.\nThe final answer: {s.answer}\nThe documents say so."]
        ),
    ),
)

ADVERSARIES: tuple[Policy, ...] = (
    Policy(
        "stuff_comma", lambda env, s: _searches(s) + [Answer(", ".join([*distractors(env, s), s.answer]))]
    ),
    Policy("stuff_or", lambda env, s: _searches(s) + [Answer(f"{distractors(env, s, 1)[0]} or {s.answer}")]),
    Policy("stuff_aliases", lambda env, s: _searches(s) + [Answer(" / ".join(s.answers * 2))]),
    Policy(
        "answer_in_think",
        lambda env, s: (
            [f"<think><answer>{s.answer}</answer></think><search>{s.question}</search>"] * _budget(env)
        ),
    ),
    Policy(
        "answer_in_search", lambda env, s: [f"<search><answer>{s.answer}</answer></search>"] * _budget(env)
    ),
    Policy("answer_text_in_query", lambda env, s: [Search(f"answer {s.answer}")] * _budget(env)),
    Policy("search_to_limit", lambda env, s: (_searches(s) + _filler(env, _budget(env)))[: _budget(env)]),
    Policy(
        "search_to_limit_then_correct",
        lambda env, s: (_searches(s) + _filler(env, _budget(env)))[: _budget(env) - 1] + [Answer(s.answer)],
    ),
    Policy(
        "repeat_query_then_correct",
        lambda env, s: [Search(s.decomposition[0].search_query)] * (_budget(env) - 1) + [Answer(s.answer)],
    ),
    Policy("repeat_query_to_limit", lambda env, s: [Search(s.decomposition[0].search_query)] * _budget(env)),
    Policy("paste_documents", None),  # built at run time from the last observation
    Policy("empty_answer_tag", lambda env, s: _searches(s) + ["<answer></answer>"] * _budget(env)),
    Policy("punctuation_answer", lambda env, s: _searches(s) + [Answer(" . ")]),
    Policy("wrong_answer", lambda env, s: _searches(s) + [Answer(distractors(env, s, 1)[0])]),
    Policy("no_search_wrong", lambda env, s: [Answer(distractors(env, s, 1)[0])]),
    Policy("invalid_spam_then_correct", lambda env, s: ["garbage"] * 2 + oracle_actions(s)),
    Policy("think_to_limit", lambda env, s: [Think("hmm")] * _budget(env)),
    # Against the lenient parse: answers it must refuse whatever surrounds them...
    Policy(
        "answer_in_closed_think_only",
        lambda env, s: [f"<think><answer>{s.answer}</answer></think>"] * _budget(env),
    ),
    Policy(
        "answer_in_think_then_closed",
        lambda env, s: (
            _searches(s) + [f"<think>maybe <answer>{s.answer}</answer> or not</think>"] * _budget(env)
        ),
    ),
    Policy(
        "two_answers_wrong_first",
        lambda env, s: (
            _searches(s)
            + [f"<answer>{distractors(env, s, 1)[0]}</answer><answer>{s.answer}</answer>"] * _budget(env)
        ),
    ),
    Policy(
        "two_answers_gold_first",
        lambda env, s: (
            _searches(s)
            + [f"<answer>{s.answer}</answer><answer>{distractors(env, s, 1)[0]}</answer>"] * _budget(env)
        ),
    ),
    Policy(
        "answer_then_information",
        lambda env, s: (
            _searches(s)
            + [f"<answer>{s.answer}</answer><information>{s.answer}</information>"] * _budget(env)
        ),
    ),
    Policy(
        "information_then_answer",
        lambda env, s: (
            [f"<information>Doc 1 (Title: x) {s.answer}</information><answer>{s.answer}</answer>"]
            * _budget(env)
        ),
    ),
    Policy(
        "search_and_answer",
        lambda env, s: [f"<search>{s.question}</search><answer>{s.answer}</answer>"] * _budget(env),
    ),
    Policy(
        "unclosed_answer",
        lambda env, s: _searches(s) + [f"<think>done</think><answer>{s.answer}"] * _budget(env),
    ),
    Policy(
        "r3_two_answers",
        lambda env, s: (
            _searches(s)
            + [
                f"The problem analysis: x.\nThe final answer: {distractors(env, s, 1)[0]}\n"
                f"The final answer: {s.answer}"
            ]
            * _budget(env)
        ),
    ),
    Policy(
        "r3_answer_then_documents",
        lambda env, s: (
            _searches(s)
            + [f"The problem analysis: x.\nThe final answer: {s.answer}\nThe retrieval documents: {s.answer}"]
            * _budget(env)
        ),
    ),
    # ...and correct answers it reads past flaws in (they may tie the oracle where format is
    # free, and must earn less where the preset pays for format).
    *SLOPPY,
)
ORACLE = Policy("oracle", _oracle)


def _tc(name: str, **args: Any) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def _all_in_one(env: gym.Env, s: QASample, answers: Sequence[str]) -> str:
    """One turn: the oracle's searches (routes folded in) then answer calls."""
    calls = [
        _tc("search", query=a.query, **({"source": a.source} if a.source else {}))
        for a in fold_routes(_searches(s))
    ]
    return "".join(calls + [_tc("answer", answer=a) for a in answers])


#: Adversaries of the ``tools`` protocol (beside the shared ones, which it plays too).
TOOL_ADVERSARIES: tuple[Policy, ...] = (
    Policy("tools_all_in_one_turn", lambda env, s: [_all_in_one(env, s, [s.answer])]),
    Policy(
        "tools_two_answers_wrong_first",
        lambda env, s: [_all_in_one(env, s, [distractors(env, s, 1)[0], s.answer])],
    ),
    Policy(
        "tools_answer_in_think",
        lambda env, s: [f"<think>{_tc('answer', answer=s.answer)}</think>"] * _budget(env),
    ),
    Policy(
        "tools_plain_text_answer", lambda env, s: _searches(s) + [f"The answer is {s.answer}."] * _budget(env)
    ),
    Policy("tools_gold_in_query", lambda env, s: [_tc("search", query=s.answer)] * _budget(env)),
    Policy(
        "tools_search_spam_one_turn",
        lambda env, s: ["".join(_tc("search", query=f"{s.answer} {i}") for i in range(50))] * _budget(env),
    ),
    Policy(
        "tools_answer_number_type",
        lambda env, s: (
            _searches(s)
            + ['<tool_call>{"name": "answer", "arguments": {"answer": ["' + s.answer + '"]}}</tool_call>']
            * _budget(env)
        ),
    ),
    Policy(
        "tools_stuffed_answer",
        lambda env, s: _searches(s) + [_tc("answer", answer=", ".join([*distractors(env, s), s.answer]))],
    ),
    Policy(
        "tools_unknown_tool_then_answer",
        lambda env, s: (
            _searches(s) + [_tc("lookup", query="x") + _tc("answer", answer=s.answer)] * _budget(env)
        ),
    ),
)
#: Of those, the ones that may tie the oracle (the gold answer, honestly reached).
TOOL_HONEST = {"tools_all_in_one_turn"}


def play(env: gym.Env, policy: Policy, question_id: str) -> Episode:
    """Run ``policy`` on one question of ``env``."""
    state: dict[str, Any] = {}

    def act(obs: str, info: dict[str, Any], sample: QASample) -> Any:
        if policy.name == "paste_documents":
            # search each hop, then answer with the text of everything retrieved
            plan = state.setdefault("plan", _searches(sample))
            if env.unwrapped.protocol.name == "tools" and not state.get("folded"):
                plan[:] = fold_routes(plan)
                state["folded"] = True
            state.setdefault("seen", [])
            if info.get("documents"):
                state["seen"].extend(d.text for d in info["documents"])
            if plan:
                return plan.pop(0)
            return Answer(" ".join(state["seen"]) or obs)
        if "plan" not in state:
            plan = list(policy.build(env, sample))
            if env.unwrapped.protocol.name == "tools":  # no route tool: searches name the source
                plan = fold_routes(plan)
            state["plan"] = plan
        plan = state["plan"]
        if plan:
            return plan.pop(0)
        return Think("out of plan")

    return run(env, act, options={"question_id": question_id})
