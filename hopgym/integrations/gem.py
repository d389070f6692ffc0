"""hopgym envs in GEM: :class:`HopgymGemEnv`, registered in GEM's registry as ``"hopgym:<Name>-v1"``.

``import hopgym.integrations.gem`` registers one GEM id per hopgym text id, the ``/`` written as
``:`` (``hopgym/Synthetic-v1`` is ``"hopgym:Synthetic-v1"``); then ``gem.make("hopgym:Tiny-v1",
**env_kwargs)`` builds one env and ``gem.make_vec(["hopgym:Tiny-v1"] * 4)`` a vector of them,
which GEM's trainer integrations step.

GEM's contract is Gymnasium's without spaces: ``reset(seed=None) -> (obs, info)`` and
``step(action) -> (obs, reward, terminated, truncated, info)`` on text. hopgym's env does the work:
the observations are its prompt and replies (a malformed turn gets its corrective message), the
reward is its reward wrappers' and ``info`` its plain JSON fields (``reward_terms`` among them).
The seed GEM's ``make_vec`` gives each env (``seed=seed + i``) seeds the first ``reset``; unlike
GEM's own envs this one never seeds Python's global RNGs.

GEM's vector envs reset by default in the step that ends an episode (``SAME_STEP`` autoreset): the
trainer gets that step's reward but the *next* episode's reset ``info``, so the last step's
``info`` would be lost. ``reset`` therefore hands the finished episode on in its ``info``:
``prev_ep_reward_terms`` (its reward terms summed over its steps: they add up to the episode's
reward) and ``prev_ep_final_info`` (its last step's plain ``info``, ``reward_terms`` included),
beside GEM's own ``prev_ep_cumulative_rewards`` from its ``episode_tracking`` wrapper.

Needs ``pip install 'hopgym[gem]'`` (``gem-llm``); without it, importing this module raises
:class:`~hopgym.errors.DependencyNotInstalled`.
"""

from __future__ import annotations

from typing import Any

from hopgym.integrations._common import add_terms, make_env, plain_info, require, text_env_ids

require("gem", "gem")
import gem  # noqa: E402

__all__ = ["HopgymGemEnv", "gem_id"]


def gem_id(env_id: str) -> str:
    """The GEM id of a hopgym id: ``"hopgym/Tiny-v1"`` -> ``"hopgym:Tiny-v1"``."""
    return env_id.replace("/", ":", 1)


class HopgymGemEnv(gem.Env):
    """A hopgym text env behind GEM's ``Env`` interface.

    Args:
        hopgym_id: the hopgym id (``gem.make`` passes it from the registry; GEM itself sets
            ``env_id`` to the GEM id after construction).
        seed: seeds the first ``reset`` that has no seed of its own (GEM's ``make_vec`` passes one).
        **env_kwargs: hopgym env options (``reward``, ``max_turns``...) and the factory's own.

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown env id or option.
        hopgym.errors.InvalidOptionError: an option with a bad value.

    Example:
        >>> import gem, hopgym.integrations.gem
        >>> env = gem.make("hopgym:Tiny-v1")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step("no tags here")
        >>> info["invalid_action"], terminated
        ('no action: write <search> or <answer> (after an optional <think>)', False)
    """

    def __init__(
        self, hopgym_id: str = "hopgym/Synthetic-v1", seed: int | None = None, **env_kwargs: Any
    ) -> None:
        super().__init__()
        self.env = make_env(hopgym_id, **env_kwargs)
        self._first_seed = seed
        self._terms: dict[str, float] = {}
        self._last_info: dict[str, Any] | None = None

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        # Not super().reset(seed): GEM's seeds the process-wide random/numpy/torch RNGs.
        if seed is None:
            seed, self._first_seed = self._first_seed, None
        obs, info = self.env.reset(seed=seed)
        out: dict[str, Any] = {"question_id": info["question_id"], "question": info["question"]}
        if self._last_info is not None:  # the episode this reset ends (see the module docstring)
            out["prev_ep_reward_terms"], out["prev_ep_final_info"] = self._terms, self._last_info
        self._terms, self._last_info = {}, None
        return obs, out

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._last_info = plain_info(info)
        add_terms(self._terms, self._last_info)
        return obs, float(reward), bool(terminated), bool(truncated), dict(self._last_info)

    def sample_random_action(self) -> str:
        """A random turn from the env's action space (mostly malformed: a baseline, not an agent)."""
        return str(self.env.action_space.sample())

    def close(self) -> None:
        self.env.close()


def _register() -> None:
    from gem.envs.registration import ENV_REGISTRY

    for env_id in text_env_ids():
        if gem_id(env_id) not in ENV_REGISTRY:
            gem.register(gem_id(env_id), f"{__name__}:HopgymGemEnv", hopgym_id=env_id)


_register()
