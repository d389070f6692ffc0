"""Scripted agents driving a vector env, for comparing vector envs step for step (the batched and
the Ray vector envs against Gymnasium's SyncVectorEnv)."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode

from hopgym.agents import OracleAgent, RandomAgent
from hopgym.agents.iterative import IterativeAgent
from hopgym.turns import Answer, Route, Search

WORLD = {"n_entities": 300, "n_questions": 12}


def per_env(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's vector info layout back to one dict per sub-env."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos["_" + key]
        if isinstance(value, dict):
            for i, sub in enumerate(per_env(value, n)):
                if mask[i]:
                    out[i][key] = sub
            continue
        for i in range(n):
            if mask[i]:
                out[i][key] = value[i]
    return out


class SubEnvView:
    """What the scripted agents read of their env, through the vector env's ``get_attr`` (so
    that they work when the sub-envs live in other processes): the gold sample, the sources and
    an action space of its own."""

    def __init__(self, venv: gym.vector.VectorEnv, i: int) -> None:
        self.venv, self.i = venv, i
        self.action_space = copy.deepcopy(venv.single_action_space)
        self.action_space.seed(100 + i)

    @property
    def unwrapped(self) -> SubEnvView:
        return self

    @property
    def sample(self) -> Any:
        return self.venv.get_attr("sample")[self.i]

    @property
    def source_names(self) -> tuple[str, ...]:
        return self.venv.get_attr("source_names")[self.i]


class NoisyAgent(OracleAgent):
    """The oracle, with seeded noise: garbage turns, routes, repeated and reworded queries, wrong
    answers, so that every corner of a step (invalid turns, empty results, dedup, the caps) runs."""

    def __init__(self, env: Any, seed: int) -> None:
        super().__init__(env)
        self.rng = np.random.default_rng(seed)
        self.last: str | None = None

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        action = super().act(observation, info)
        roll = self.rng.random()
        sources = self.env.unwrapped.source_names
        if roll < 0.1:
            return self.env.action_space.sample()
        if roll < 0.2 and len(sources) > 1:
            return Route(sources[int(self.rng.integers(len(sources)))])
        if roll < 0.35 and self.last is not None:
            return Search(self.last)
        if roll < 0.4:
            return Answer("nobody")
        if isinstance(action, Search):
            words = action.query.split()
            if self.rng.random() < 0.4 and len(words) > 1:
                words.insert(0, words.pop())
            self.last = " ".join(words)
            return Search(self.last, think=action.think)
        return action


def make_agents(venv: gym.vector.VectorEnv) -> list[Any]:
    agents: list[Any] = []
    for i in range(venv.num_envs):
        view = SubEnvView(venv, i)
        agents.append(
            [RandomAgent(seed=i), IterativeAgent(seed=i), OracleAgent(view), NoisyAgent(view, seed=i)][i % 4]
        )
    return agents


def drive(venv: gym.vector.VectorEnv, steps: int, seed: int) -> list[Any]:
    """Run scripted agents in ``venv`` for ``steps`` steps; returns everything it returned, and
    each sub-env's transcript at each episode end and at the end."""
    n = venv.num_envs
    mode = venv.metadata["autoreset_mode"]
    agents = make_agents(venv)
    obs, infos = venv.reset(seed=seed)
    log: list[Any] = [obs, infos]
    info_list = per_env(infos, n)
    done = np.zeros(n, dtype=bool)
    for _ in range(steps):
        actions = []
        for i in range(n):
            if done[i] and mode == AutoresetMode.NEXT_STEP:
                actions.append("ignored: this sub-env resets")
            else:
                actions.append(agents[i].act(obs[i], info_list[i]))
        if mode == AutoresetMode.NEXT_STEP:
            for i in np.flatnonzero(done):
                agents[i].reset()
        obs, rewards, terminated, truncated, infos = venv.step(actions)
        log += [obs, rewards, terminated, truncated, infos]
        info_list = per_env(infos, n)
        done = terminated | truncated
        if done.any():
            transcripts = venv.get_attr("transcript")
            log += [list(transcripts[i]) for i in np.flatnonzero(done)]
        for i in np.flatnonzero(done):
            if mode == AutoresetMode.SAME_STEP:
                agents[i].reset()
        if mode == AutoresetMode.DISABLED and done.any():
            seeds = [seed * 1000 + int(i) if d else None for i, d in enumerate(done)]
            obs, infos = venv.reset(seed=seeds, options={"reset_mask": done})
            log += [obs, infos]
            info_list = [b if d else a for a, b, d in zip(info_list, per_env(infos, n), done, strict=True)]
            for i in np.flatnonzero(done):
                agents[i].reset()
            done[:] = False
    log.append([list(t) for t in venv.get_attr("transcript")])
    return log


def assert_same_logs(got: list[Any], expected: list[Any]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert data_equivalence(a, b), (a, b)
