"""hopgym envs in verl: :class:`HopgymAgentLoop`, a verl agent loop registered as ``"hopgym_agent"``.

**Untested**: verl 0.9.1 installed on the machine this was written on, but importing
``verl.experimental.agent_loop`` failed on a dependency verl does not declare (``cachetools``; see
``docs/integrations.md``); the loop follows verl's documented extension point for multi-turn
rollouts (``verl.experimental.agent_loop``: subclass ``AgentLoopBase``, register it by name,
implement ``async run(sampling_params, **kwargs) -> AgentLoopOutput``) and has not run against
verl itself.

Use: ``import hopgym.integrations.verl`` in the trainer process (or list the module in verl's
agent-loop config), set ``actor_rollout_ref.rollout.agent.default_agent_loop=hopgym_agent`` (or a
dataset column ``agent_name: hopgym_agent``) and give each row
``extra_info={"env_id": ..., "env_kwargs": {...}, "question_id": ...}``. Each rollout resets
hopgym's env on the row's question, chats with the policy through verl's server manager,
steps hopgym's env with each reply, appends its observation (masked out of the loss:
``response_mask`` 0) and stops when hopgym's env ends the episode; ``reward_score`` is hopgym's
episode reward and ``metrics`` its reward terms.

Needs ``pip install 'hopgym[verl]'``; without it, importing this module raises
:class:`~hopgym.errors.DependencyNotInstalled`.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hopgym.integrations._common import add_terms, check_question, make_env, require

require("verl", "verl")
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopOutput,
    register,
)

__all__ = ["HopgymAgentLoop", "AGENT_NAME"]

#: The name verl's agent-loop registry knows the loop by.
AGENT_NAME = "hopgym_agent"


@register(AGENT_NAME)
class HopgymAgentLoop(AgentLoopBase):
    """One hopgym episode per verl rollout (see the module docstring; untested against verl)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = dict(kwargs.get("extra_info") or {})
        env = make_env(extra.get("env_id", "hopgym/Synthetic-v1"), **dict(extra.get("env_kwargs") or {}))
        options = (
            {"question_id": check_question(env, extra["question_id"])} if "question_id" in extra else None
        )
        obs, _ = env.reset(options=options)
        messages = [{"role": "user", "content": obs}]
        prompt_ids = await self.loop.run_in_executor(
            None,
            lambda: self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True),
        )
        response_ids: list[int] = []
        response_mask: list[int] = []
        terms: dict[str, float] = {}
        total, turns, request_id = 0.0, 0, uuid4().hex
        while True:
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=prompt_ids + response_ids, sampling_params=sampling_params
            )
            reply_ids = list(getattr(output, "token_ids", output))
            response_ids += reply_ids
            response_mask += [1] * len(reply_ids)
            reply = self.tokenizer.decode(reply_ids, skip_special_tokens=True)
            obs, reward, terminated, truncated, info = env.step(reply)
            total += float(reward)
            add_terms(terms, info)
            turns += 1
            if (
                terminated
                or truncated
                or len(response_ids) >= self.config.actor_rollout_ref.rollout.response_length
            ):
                break
            obs_ids = self.tokenizer.encode(obs, add_special_tokens=False)
            response_ids += obs_ids
            response_mask += [0] * len(obs_ids)  # hopgym's text is not the policy's: no loss on it
        limit = self.config.actor_rollout_ref.rollout.response_length
        env.close()
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:limit],
            response_mask=response_mask[:limit],
            num_turns=2 * turns + 1,
            reward_score=total,
            metrics={},
            extra_fields={"reward_terms": terms},
        )
