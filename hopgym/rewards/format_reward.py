"""Format rewards: malformed turns, turns with format issues, and well-formed episodes.

Classes: :class:`FormatReward`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from hopgym.rewards.base import RewardArgumentError, RewardTermWrapper, check_number
from hopgym.rewards.scoring import answer_tokens
from hopgym.turns.info import StepInfo

__all__ = ["FormatReward"]


class FormatReward(RewardTermWrapper):
    """Penalises invalid turns and format issues; optionally ends the episode on an invalid turn,
    or pays well-formed episodes.

    - Each invalid turn (``info["action_type"] == "invalid"``: no tag, two actions, an unknown
      source, an empty query, ...) adds ``-penalty`` to the ``name`` term.
    - Each valid turn with format issues (``info["format_issues"]`` not empty: an unclosed
      ``<think>``, text outside the tags, ... read past by the ``lenient`` parse; see
      :data:`~hopgym.turns.actions.FORMAT_ISSUES`) adds ``-issue_penalty`` to the ``name`` term,
      once per turn however many issues it has.
    - ``terminate=True`` ends the episode on the first invalid turn (``terminated=True``), as
      R3-RAG's −0.9 does; reward wrappers below this one are settled as for an episode without an
      answer (see :meth:`RewardTermWrapper.force_end`). Format issues never end an episode.
    - ``bonus > 0`` pays ``{name}_bonus`` once, when the episode ends with a non-empty answer and
      had no invalid turn and no turn with format issues (Search-R1's format reward, which pays
      well-formed wrong answers a little and is paid on top of a correct one; Search-R1 checks the
      whole rollout's tag structure, so a malformed turn that was read anyway forfeits it too).

    Terms: ``name`` (default ``"format"``) when ``penalty > 0``, ``issue_penalty > 0`` or
    ``terminate``; ``{name}_bonus`` when ``bonus > 0``.

    Args:
        env: the env to wrap.
        penalty: paid (as a negative term) for each invalid turn; ``>= 0``.
        terminate: end the episode on an invalid turn.
        bonus: paid once for an answered episode without invalid turns or format issues; ``>= 0``.
        issue_penalty: paid (as a negative term) for each valid turn with format issues; ``>= 0``.
        name: the base term name.

    Raises:
        RewardArgumentError: for a negative or non-finite penalty, issue penalty or bonus, or a
            wrapper that would do nothing.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = FormatReward(gym.make("hopgym/Tiny-v1", reward=None), penalty=0.9, terminate=True)
        >>> _ = env.reset(seed=0)
        >>> _, r, terminated, _, info = env.step("no tags at all")
        >>> r, terminated, info["reward_terms"]
        (-0.9, True, {'format': -0.9})
        >>> env = FormatReward(gym.make("hopgym/Tiny-v1", reward=None), penalty=0.0,
        ...                    issue_penalty=0.1)
        >>> _ = env.reset(seed=0)
        >>> _, r, _, _, info = env.step("<think>Lorn, so<search>Lorn</search>")
        >>> r, [i.code for i in info["format_issues"]]
        (-0.1, ['unclosed_think'])

    Change logs:
        v0.1.0: added.
        v0.2.0: ``issue_penalty``; format issues forfeit the bonus.
    """

    def __init__(
        self,
        env: gym.Env,
        penalty: float = 0.1,
        *,
        terminate: bool = False,
        bonus: float = 0.0,
        issue_penalty: float = 0.0,
        name: str = "format",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self, penalty=penalty, terminate=terminate, bonus=bonus, issue_penalty=issue_penalty, name=name
        )
        self.penalty = check_number(penalty, "penalty", low=0.0)
        self.bonus = check_number(bonus, "bonus", low=0.0)
        self.issue_penalty = check_number(issue_penalty, "issue_penalty", low=0.0)
        self.terminate = bool(terminate)
        self.name = name
        self.bonus_name = f"{name}_bonus"
        if not (self.penalty or self.terminate or self.bonus or self.issue_penalty):
            raise RewardArgumentError(
                "FormatReward with penalty=0, issue_penalty=0, bonus=0 and "
                "terminate=False does nothing: set one of them"
            )
        charges = self.penalty or self.issue_penalty or self.terminate
        names = ((name,) if charges else ()) + ((self.bonus_name,) if self.bonus > 0 else ())
        self._init_terms(env, names)
        self._on_reset({})

    def _on_reset(self, info: dict[str, Any]) -> None:
        self.invalid_turns = 0
        self.issue_turns = 0

    def _step_terms(self, info: StepInfo) -> dict[str, float]:
        if self._ended:
            return {}
        charge = 0.0
        if info.get("action_type") == "invalid":
            self.invalid_turns += 1
            charge = self.penalty
        elif info.get("format_issues"):
            self.issue_turns += 1
            charge = self.issue_penalty
        return {self.name: -charge} if charge and self.name in self.term_names else {}

    def _ends_episode(self, info: StepInfo) -> bool:
        return self.terminate and info.get("action_type") == "invalid"

    def _end_terms(self, info: StepInfo, answered: bool) -> dict[str, float]:
        if self.bonus <= 0 or not answered or self.invalid_turns or self.issue_turns:
            return {}
        if not answer_tokens(info["answer"] or ""):
            return {}
        return {self.bonus_name: self.bonus}
