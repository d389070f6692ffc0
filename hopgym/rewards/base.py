"""The shared base of every hopgym reward wrapper: named, weighted, signed reward terms.

Classes: :class:`RewardTermWrapper`, :class:`RewardTermError`, :class:`RewardArgumentError`.

Contract (it holds for any stack of these wrappers, in any order):

- every step, each wrapper copies ``info["reward_terms"]`` (a dict name → float; ``info`` itself
  is updated in place, as Gymnasium's wrappers do), adds its own
  terms under names nobody below it used (a clash raises :class:`RewardTermError`), and returns
  ``reward == math.fsum(info["reward_terms"].values())``. Every wrapper writes all of its term names
  on every step (0.0 when a term does not apply), so vector envs and per-episode means see the same
  keys throughout;
- a step whose ``info["calls"]`` lists several calls (a turn of the ``tools`` protocol) is scored
  call by call: ``_step_terms`` sees each call's info, shaped like a one-action turn's;
- a reward that an inner, non-hopgym wrapper added without a term is kept under ``"unattributed"``,
  so the sum still holds;
- a wrapper decides everything from ``info`` and the gold sample ``env.unwrapped.sample`` and never
  from the terms of other wrappers, so the total of an episode does not depend on the stacking
  order. The episode end is ``terminated or truncated`` (the env truncates at its one step
  budget, ``max_turns``), or a wrapper that ends the episode (``FormatReward(terminate=True)``):
  such a wrapper settles the wrappers *below* it through :meth:`RewardTermWrapper.force_end`,
  since they never see its ``terminated``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym

from hopgym.errors import RewardArgumentError, RewardTermError  # defined there, re-exported here
from hopgym.turns.info import StepInfo

__all__ = ["RewardTermWrapper", "RewardTermError", "RewardArgumentError", "reward_terms_of"]

TERMS_KEY = "reward_terms"
UNATTRIBUTED = "unattributed"


def reward_terms_of(env: gym.Env) -> list[str]:
    """Every term name the hopgym reward wrappers of ``env`` write, outermost first.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> reward_terms_of(gym.make("hopgym/Tiny-v1", reward="default"))
        ['outcome']
    """
    names: list[str] = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RewardTermWrapper):
            names.extend(env.term_names)
        env = env.env
    return names


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
        raise RewardArgumentError(f"{what} must be a non-empty identifier such as 'outcome', got {name!r}")
    return name


def check_number(value: Any, what: str, *, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RewardArgumentError(f"{what} must be a finite number, got {value!r}")
    if low is not None and value < low:
        raise RewardArgumentError(f"{what} must be >= {low}, got {value!r}")
    if high is not None and value > high:
        raise RewardArgumentError(f"{what} must be <= {high}, got {value!r}")
    return float(value)


class RewardTermWrapper(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Base class: subclasses declare ``term_names`` and implement the hooks.

    Hooks:
        ``_on_reset(info)``: clear per-episode state.
        ``_step_terms(info) -> dict``: this step's contributions (a subset of ``term_names``).
        ``_end_terms(info, answered) -> dict``: once per episode, at its end (``answered`` says
        whether the last turn was an answer).
        ``_ends_episode(info) -> bool``: ``True`` to end the episode (``terminated=True``) here.

    Subclasses call ``RecordConstructorArgs.__init__`` first, then :meth:`_init_terms`.
    """

    term_names: tuple[str, ...] = ()

    def _init_terms(self, env: gym.Env, names: tuple[str, ...]) -> None:
        gym.Wrapper.__init__(self, env)
        for n in names:
            check_name(n, "term name")
        if len(set(names)) != len(names):
            raise RewardTermError(
                f"{type(self).__name__} would write the term names {names} "
                "more than once: give distinct names"
            )
        below = reward_terms_of(env)
        taken = [n for n in names if n in below or n == UNATTRIBUTED]
        if taken:
            raise RewardTermError(
                f"{type(self).__name__}: term name(s) {taken} already written by a wrapper below "
                f"(terms so far: {below}); pass name=... to give this wrapper other names"
            )
        self.term_names = tuple(names)
        self._ended = False
        # Hooks a subclass leaves as they are need not be called every step (they add nothing).
        cls = type(self)
        self._scores_steps = cls._step_terms is not RewardTermWrapper._step_terms
        self._may_end = cls._ends_episode is not RewardTermWrapper._ends_episode
        self._quiet = not (self._scores_steps or self._may_end)

    # ------------------------------------------------------------------ hooks
    def _on_reset(self, info: dict[str, Any]) -> None:
        """Clear per-episode state (override)."""

    def _step_terms(self, info: StepInfo) -> dict[str, float]:
        """This step's contributions (override)."""
        return {}

    def _end_terms(self, info: StepInfo, answered: bool) -> dict[str, float]:
        """Contributions settled once at the end of an episode (override)."""
        return {}

    def _ends_episode(self, info: StepInfo) -> bool:
        """Whether this wrapper ends the episode on this step (override)."""
        return False

    # ------------------------------------------------------------------ gym API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._ended = False
        self._on_reset(info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        # ``info`` is updated in place, as Gymnasium's wrappers do (RecordEpisodeStatistics); the
        # terms below are copied, so the dict an inner wrapper wrote is never changed.
        inner = info.get(TERMS_KEY)
        if self._quiet and not (inner or reward or terminated or truncated):
            # The usual mid-episode step of a wrapper that pays only at the end (OutcomeReward):
            # nothing below paid, nothing here scores steps or ends episodes: every term is 0.
            info[TERMS_KEY] = dict.fromkeys(self.term_names, 0.0)
            return obs, 0.0, terminated, truncated, info
        terms: dict[str, float] = dict(inner) if inner else {}
        # Keep any reward an inner wrapper added without a term, so the sum stays the reward.
        rest = float(reward) - math.fsum(terms.values()) if terms else float(reward)
        if rest and not math.isclose(rest, 0.0, abs_tol=1e-12):
            terms[UNATTRIBUTED] = terms.get(UNATTRIBUTED, 0.0) + rest
        if terms and not terms.keys().isdisjoint(self.term_names):
            clash = [n for n in self.term_names if n in terms]
            raise RewardTermError(
                f"{type(self).__name__}: info['reward_terms'] already has {clash} (written below "
                f"this wrapper: {sorted(terms)}); pass name=... to use other names"
            )
        own = dict.fromkeys(self.term_names, 0.0)
        step: StepInfo = info  # type: ignore[assignment]  # the keys the hooks read, checked against StepInfo
        # A turn of several tool calls (the ``tools`` protocol) is scored call by call, each
        # call's info shaped like a tag turn's, so that N searches cost what N tag turns cost.
        if self._scores_steps:
            for call in step.get("calls") or (step,):
                step_terms = self._step_terms(call)
                if step_terms:
                    self._add(own, step_terms)
        forced = not (terminated or truncated) and self._may_end and self._ends_episode(step)
        if (terminated or truncated or forced) and not self._ended:
            self._ended = True
            self._add(own, self._end_terms(step, _answered(step)))
        if forced:
            terminated = True
            for name, value in self.force_end(step).items():
                terms[name] = terms.get(name, 0.0) + value
        terms.update(own)
        info[TERMS_KEY] = terms
        return obs, math.fsum(terms.values()), terminated, truncated, info

    def force_end(self, info: StepInfo) -> dict[str, float]:
        """Settle every hopgym reward wrapper below this one that has not seen the episode end.

        Called by a wrapper that ends the episode itself; returns the settled terms to add.
        """
        out: dict[str, float] = {}
        env = self.env
        while isinstance(env, gym.Wrapper):
            if isinstance(env, RewardTermWrapper) and not env._ended:
                env._ended = True
                self._add(out, env._end_terms(info, _answered(info)))
            env = env.env
        return out

    def _add(self, into: dict[str, float], terms: dict[str, float]) -> None:
        for name, value in terms.items():
            into[name] = into.get(name, 0.0) + float(value)


def _answered(info: StepInfo) -> bool:
    return info.get("action_type") == "answer" and isinstance(info.get("answer"), str)
