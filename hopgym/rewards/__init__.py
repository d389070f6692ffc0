"""Rewards: pure scoring, composable reward wrappers, judges, presets and TRL adapters.

Wrappers (each adds named, weighted, signed terms to ``info["reward_terms"]``; the reward is their
sum, whatever the stacking order):

- :class:`OutcomeReward` — the final answer: EM, F1, bounded cover-EM or a judge.
- :class:`RelevanceReward` — per search: gold support found or judged relevance, with R3-RAG's
  outcome-dependent scaling.
- :class:`FormatReward` — invalid turns (optionally ending the episode) and a well-formed bonus.
- :class:`SearchCostReward` — per search, per source.
- :class:`RedundancyReward` — repeated queries, re-retrieved documents, repeated answers (STIE).

Also :func:`preset` (``default``, ``em``, ``f1``, ``searchr1``, ``r3rag``, ``kunlun``), the
judges (:class:`CallableJudge`, :class:`PromptJudge` on any :mod:`hopgym.backends` backend,
:class:`OpenAIJudge`, :class:`TransformersJudge`), the scoring
functions (:mod:`hopgym.rewards.scoring`) and the TRL reward functions (:mod:`hopgym.rewards.trl`).

Example:
    >>> import gymnasium as gym, hopgym
    >>> from hopgym.rewards import OutcomeReward, RelevanceReward, FormatReward
    >>> env = gym.make("hopgym/Tiny-v1", reward=None)
    >>> env = RelevanceReward(OutcomeReward(FormatReward(env), metric="f1"), "gold", weight=0.3)
    >>> _ = env.reset(options={"question_id": "tiny-1"})
    >>> _ = env.step("<search>Qelvor Dynamics founded</search>")
    >>> _, r, _, _, info = env.step("<answer>1962</answer>")
    >>> r, info["reward_terms"]
    (1.0, {'format': 0.0, 'outcome': 1.0, 'relevance': 0.0})
"""

from __future__ import annotations

from hopgym.rewards.answer_reward import AnswerCheck, OutcomeReward
from hopgym.rewards.base import (
    RewardArgumentError,
    RewardTermError,
    RewardTermWrapper,
    reward_terms_of,
)
from hopgym.rewards.cost_reward import RedundancyReward, SearchCostReward
from hopgym.rewards.format_reward import FormatReward
from hopgym.rewards.judges import (
    CallableJudge,
    Judge,
    JudgeError,
    OpenAIJudge,
    PromptJudge,
    TransformersJudge,
)
from hopgym.rewards.presets import PRESETS, preset
from hopgym.rewards.process_reward import RelevanceReward
from hopgym.rewards.scoring import (
    answer_score,
    cover_em,
    exact_match,
    normalize_answer,
    support_precision,
    support_recall,
    token_f1,
)
from hopgym.rewards.trl import AnswerRewardFunc, FormatRewardFunc, extract_answer

__all__ = [
    "OutcomeReward",
    "RelevanceReward",
    "FormatReward",
    "SearchCostReward",
    "RedundancyReward",
    "AnswerCheck",
    "RewardTermWrapper",
    "RewardTermError",
    "RewardArgumentError",
    "reward_terms_of",
    "preset",
    "PRESETS",
    "Judge",
    "JudgeError",
    "CallableJudge",
    "PromptJudge",
    "OpenAIJudge",
    "TransformersJudge",
    "normalize_answer",
    "exact_match",
    "token_f1",
    "cover_em",
    "answer_score",
    "support_recall",
    "support_precision",
    "AnswerRewardFunc",
    "FormatRewardFunc",
    "extract_answer",
]
