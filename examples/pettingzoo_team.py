"""Multi-agent hopgym with PettingZoo: a searcher/answerer team, and racers sharing a search budget.

    OMP_NUM_THREADS=1 python examples/pettingzoo_team.py --episodes 100 --seed 0
    OMP_NUM_THREADS=1 python examples/pettingzoo_team.py --obs-mode text --episodes 3 --show

Cooperative mode: ``searcher_0`` issues queries and routes, ``answerer_0`` decides when and what
to answer; both receive the team reward of hopgym's reward wrappers. The script plays three teams
on the same questions: random (uniform over each agent's action mask), a rule team that reads the
candidate features (the searcher follows the deepest relation evidence, the answerer answers when
a candidate completes the question's relation chain), and a rule searcher with a random answerer.
Competitive mode: two racers with the rule policy, sharing one search budget; the first correct
answer wins. The last part steps the AEC form (``env()``), the API most PettingZoo tools expect.
"""

# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[marl]"]
# ///

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from hopgym.envs.featurized import FeaturizedEnv  # noqa: E402
from hopgym.envs.multiagent import env as aec_env  # noqa: E402
from hopgym.envs.multiagent import parallel_env  # noqa: E402

Policy = Callable[[str, dict[str, Any]], int]


def random_policy(rng: np.random.Generator) -> Policy:
    return lambda agent, info: int(rng.choice(np.flatnonzero(info["action_mask"])))


def rule_searcher(core: FeaturizedEnv) -> Policy:
    """Search the question, then the candidate with the deepest chain evidence; wait when done."""

    def act(agent: str, info: dict[str, Any]) -> int:
        mask = info["action_mask"]
        wait = len(mask) - 1
        if any(c.level >= len(core.question.chain) > 0 for c in core.slots):
            return wait
        if mask[0]:
            return 0
        for i, c in enumerate(core.slots):
            if c.kind not in ("yesno",) and mask[core.slot("search", i)]:
                return core.slot("search", i)
        return wait

    return act


def rule_answerer(core: FeaturizedEnv) -> Policy:
    """Answer the first candidate that completes the chain (or the decided option / yes-no)."""
    team_budget = core.unwrapped.max_turns

    def act(agent: str, info: dict[str, Any]) -> int:
        wait = len(info["action_mask"]) - 1
        q = core.question
        for i, c in enumerate(core.slots):
            if c.kind == "option" and (
                (q.wants == "min" and c.value_min) or (q.wants == "max" and c.value_max)
            ):
                return i
            if c.kind == "yesno" and c.support:
                return i
            if c.kind not in ("option", "yesno", "qentity") and c.level >= len(q.chain) > 0:
                return i
        return wait if info.get("turns_left", team_budget) > 1 else 0

    return act


def rule_racer(core: FeaturizedEnv) -> Policy:
    search, answer = rule_searcher(core), rule_answerer(core)
    k, s = core.max_candidates, len(core.sources)

    def act(agent: str, info: dict[str, Any]) -> int:
        mask = info["action_mask"]
        a = answer(agent, {**info, "action_mask": np.concatenate([mask[1 + k + s :], [1]])})
        if a < k:
            return 1 + k + s + a
        a = search(agent, {**info, "action_mask": np.concatenate([mask[: 1 + k + s], [1]])})
        if a < 1 + k + s and mask[a]:
            return a
        return int(np.flatnonzero(mask)[-1])  # nothing useful left: the last sensible action

    return act


def play(
    team: Any, policies: dict[str, Policy], episodes: int, seed: int, show: bool = False
) -> dict[str, float]:
    returns = {a: 0.0 for a in team.possible_agents}
    wins = 0
    for ep in range(episodes):
        obs, infos = team.reset(seed=seed + ep)
        while team.agents:
            actions = {a: policies[a](a, infos[a]) for a in team.agents}
            obs, rewards, terms, truncs, infos = team.step(actions)
            for a, r in rewards.items():
                returns[a] += r
            if show:
                print({a: infos[a].get("featurized_action") for a in infos})
        wins += any(r > 0 for r in rewards.values())
        if show:
            print(team.render() if team.render_mode else "", "\n---")
    out = {f"return/{a}": v / episodes for a, v in returns.items()}
    out["solved"] = wins / episodes
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--obs-mode", default="featurized", choices=["featurized", "text"])
    parser.add_argument("--base-id", default="hopgym/Synthetic-v1")
    parser.add_argument("--show", action="store_true", help="print every step and transcript")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    kw = {"base_id": args.base_id, "obs_mode": args.obs_mode, "render_mode": "ansi" if args.show else None}

    team = parallel_env(mode="cooperative", **kw)
    core = team.cores[0]
    teams = {
        "random team": {"searcher_0": random_policy(rng), "answerer_0": random_policy(rng)},
        "rule team": {"searcher_0": rule_searcher(core), "answerer_0": rule_answerer(core)},
        "rule searcher + random answerer": {
            "searcher_0": rule_searcher(core),
            "answerer_0": random_policy(rng),
        },
    }
    for name, policies in teams.items():
        res = play(team, policies, args.episodes, args.seed, args.show)
        print(
            f"cooperative, {name:<32} solved {res['solved']:.3f}  team return {res['return/searcher_0']:.3f}"
        )

    race = parallel_env(mode="competitive", n_racers=2, **kw)
    racers = {"racer_0": rule_racer(race.cores[0]), "racer_1": random_policy(rng)}
    res = play(race, racers, args.episodes, args.seed, args.show)
    print(
        f"competitive, rule racer_0 vs random racer_1: return {res['return/racer_0']:.3f} "
        f"vs {res['return/racer_1']:.3f} (shared budget {race.search_budget} searches)"
    )

    # The AEC form: agents act one after another; the conversion collects a joint action.
    aec = aec_env(mode="cooperative", **kw)
    aec.reset(seed=args.seed)
    for _agent in aec.agent_iter(max_iter=20):
        obs, reward, term, trunc, info = aec.last()
        action = None if term or trunc else int(np.flatnonzero(info["action_mask"])[0])
        aec.step(action)
    print("AEC episode finished:", not aec.agents)


if __name__ == "__main__":
    main()
