"""Featurized and multi-agent episodes replay exactly as recorded (observations, masks, rewards).

``tests/fixtures/featurized_episodes.json`` was written by this file's ``__main__`` from the code
before ``hopgym/envs/featurized.py`` became the ``hopgym/envs/featurized/`` package (a
``gym.Wrapper``): seeded episodes with masked-random actions, and every fourth action drawn from
the whole action space (so invalid choices are replayed too). Observations are stored as SHA-1
digests of their values rounded to 5 decimals, masks as bit strings.

Regenerate only for an intended behaviour change (and bump the env versions)::

    PYTHONPATH=. python tests/envs/test_featurized_regression.py
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import hopgym  # noqa: F401 - registers the ids
from hopgym.envs.featurized import make_featurized

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "featurized_episodes.json"
HOTPOT = str(Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_dev.json")
SMALL_WORLD = {"n_entities": 300, "n_questions": 40, "sources": ("local", "web")}


def _digest(obs: Any) -> str:
    if isinstance(obs, str):
        return hashlib.sha1(obs.encode()).hexdigest()
    arr = np.round(np.asarray(obs, dtype=np.float64), 5) + 0.0  # + 0.0: no negative zeros
    return hashlib.sha1(arr.tobytes()).hexdigest()


def _bits(mask: Any) -> str:
    return "".join("1" if m else "0" for m in np.asarray(mask).ravel())


def _choose(rng: np.random.Generator, step: int, mask: Any, n: int) -> int:
    if step % 4 == 3:
        return int(rng.integers(-1, n + 1))  # anything, including out-of-range indices
    return int(rng.choice(np.flatnonzero(np.asarray(mask))))


def _single(make: Callable[[], gym.Env], episodes: int) -> list[list[dict[str, Any]]]:
    env = make()
    out = []
    for ep in range(episodes):
        obs, info = env.reset(seed=ep)
        rng = np.random.default_rng(100 + ep)
        steps = [
            {"obs": _digest(obs), "mask": _bits(info["action_mask"]), "candidates": list(info["candidates"])}
        ]
        done, t = False, 0
        while not done:
            action = _choose(rng, t, info["action_mask"], int(env.action_space.n))
            obs, reward, term, trunc, info = env.step(action)
            steps.append(
                {
                    "action": action,
                    "obs": _digest(obs),
                    "reward": round(float(reward), 9),
                    "terminated": bool(term),
                    "truncated": bool(trunc),
                    "mask": _bits(info["action_mask"]),
                    "candidates": list(info["candidates"]),
                    "featurized_action": info["featurized_action"],
                }
            )
            done, t = term or trunc, t + 1
        out.append(steps)
    env.close()
    return out


def _team(kwargs: dict[str, Any], episodes: int) -> list[list[dict[str, Any]]]:
    from hopgym.envs.multiagent import parallel_env

    team = parallel_env(**kwargs)
    out = []
    for ep in range(episodes):
        obs, infos = team.reset(seed=ep)
        rng = np.random.default_rng(200 + ep)
        steps = [
            {
                "obs": {a: _digest(o) for a, o in sorted(obs.items())},
                "mask": {a: _bits(i["action_mask"]) for a, i in sorted(infos.items())},
            }
        ]
        t = 0
        while team.agents:
            actions = {
                a: _choose(rng, t, infos[a]["action_mask"], int(team.action_space(a).n))
                for a in sorted(team.agents)
            }
            obs, rewards, terms, truncs, infos = team.step(actions)
            steps.append(
                {
                    "actions": actions,
                    "obs": {a: _digest(o) for a, o in sorted(obs.items())},
                    "rewards": {a: round(float(r), 9) for a, r in sorted(rewards.items())},
                    "terminated": dict(sorted(terms.items())),
                    "truncated": dict(sorted(truncs.items())),
                    "mask": {a: _bits(i["action_mask"]) for a, i in sorted(infos.items())},
                }
            )
            t += 1
        out.append(steps)
    team.close()
    return out


CASES: dict[str, Callable[[], list[list[dict[str, Any]]]]] = {
    "tiny": lambda: _single(
        lambda: make_featurized(base_id="hopgym/Tiny-v1", max_turns=6, max_candidates=6), 12
    ),
    "tiny_routing_hashing": lambda: _single(
        lambda: make_featurized(
            base_id="hopgym/Tiny-v1",
            base_kwargs={"sources": ("local", "web")},
            reward="searchr1",
            max_turns=6,
            max_candidates=5,
            hash_dim=32,
            embedder="hashing-16",
        ),
        12,
    ),
    "synthetic_registered": lambda: _single(
        lambda: gym.make("hopgym/SyntheticFeaturized-v0", base_kwargs=SMALL_WORLD), 16
    ),
    "hotpotqa": lambda: _single(
        lambda: make_featurized(
            base_id="hopgym/HotpotQA-v1", base_kwargs={"path": HOTPOT}, max_turns=6, max_candidates=6
        ),
        4,
    ),
    "team_cooperative": lambda: _team({"base_id": "hopgym/Tiny-v1", "max_candidates": 4, "hash_dim": 16}, 8),
    "team_competitive_text": lambda: _team(
        {
            "mode": "competitive",
            "obs_mode": "text",
            "base_id": "hopgym/SyntheticRouting-v1",
            "base_kwargs": {k: v for k, v in SMALL_WORLD.items() if k != "sources"},
            "n_racers": 3,
        },
        6,
    ),
}


def _record(name: str) -> list[list[dict[str, Any]]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        # JSON has no tuples: compare in the form the fixture is stored in.
        return json.loads(json.dumps(CASES[name]()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_episodes_replay_as_recorded(name):
    if name.startswith("team_"):
        pytest.importorskip("pettingzoo")
    expected = json.loads(FIXTURE.read_text())[name]
    got = _record(name)
    assert len(got) == len(expected)
    for ep, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert len(g) == len(e), f"{name} episode {ep}: {len(g)} steps, recorded {len(e)}"
        for t, (gs, es) in enumerate(zip(g, e, strict=True)):
            assert gs == es, f"{name} episode {ep} step {t}"


if __name__ == "__main__":
    data = {name: _record(name) for name in sorted(CASES)}
    FIXTURE.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(
        f"wrote {FIXTURE}: " + ", ".join(f"{n} {sum(len(e) for e in eps)} steps" for n, eps in data.items())
    )
