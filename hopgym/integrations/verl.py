"""hopgym envs in verl: :class:`HopgymAgentLoop`, a verl agent loop registered as ``"hopgym_agent"``.

verl's extension point for multi-turn rollouts (``verl.experimental.agent_loop``): subclass
``AgentLoopBase``, register it by name, implement ``async run(sampling_params, **kwargs) ->
AgentLoopOutput``. Checked against verl 0.9.1 (``AgentLoopBase``, its Continuous Token helpers
``ct_build_initial_tokens`` / ``ct_merge_assistant_token`` / ``ct_merge_context_msg``,
``AgentLoopOutput``, ``TokenOutput``) and run in tests with a fake server manager, and inside
verl's ``AgentLoopManager`` / ``AgentLoopWorker`` Ray actors loaded from
``agent_loop_config_path`` (``examples/verl_agent_loop_check.py``); verl 0.9.1
imports only with ``cachetools``, ``uvicorn`` and ``fastapi`` installed beside it (it does not
declare them), which the ``verl`` extra adds.

Use: name the class in an agent-loop config file that verl's workers load
(``actor_rollout_ref.rollout.agent.agent_loop_config_path``, a YAML list of ``{name:
hopgym_agent, _target_: hopgym.integrations.verl.HopgymAgentLoop}``): verl's agent-loop workers
are Ray actors, each with its own registry, which an import in the launching process does not
reach. Set ``actor_rollout_ref.rollout.agent.default_agent_loop=hopgym_agent`` (or a dataset
column ``agent_name: hopgym_agent``) and give each row
``extra_info={"env_id": ..., "env_kwargs": {...}, "question_id": ...}``; :func:`write_dataset`
(``python -m hopgym.integrations.verl OUT.parquet --env ID --kw key=value``) writes such rows,
one per question of the env's task. Each rollout resets
hopgym's env on the row's question, chats with the policy through verl's server manager,
steps hopgym's env with each reply, appends its observation as a user message (masked out of the
loss: ``response_mask`` 0) and stops when hopgym's env ends the episode or the response reaches
``rollout.response_length``; ``reward_score`` is hopgym's episode reward, ``extra_fields`` holds
its reward terms and per-turn rewards (``turn_scores``), and the terms again as verl's
``reward_extra_info`` (``reward/<term>``: batch columns that verl's validation reports as
metrics). With ``protocol="tools"`` the env's tool schemas go to the chat template (``tools=``)
and the model's tool calls, written in its text, are hopgym's turns. hopgym's
``reset``/``step`` run in worker threads (:class:`~hopgym.envs.async_pool.AsyncEnv`), never on
verl's event loop.

Needs ``pip install 'hopgym[verl]'``; without it, importing this module raises
:class:`~hopgym.errors.DependencyNotInstalled`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import uuid4

from hopgym._atomic import atomic_write, check_writable
from hopgym._kwargs import parse_kwargs
from hopgym.envs.async_pool import AsyncEnv
from hopgym.integrations._common import add_terms, check_question, make_env, question_rows, require

require("verl", "verl")
from verl.experimental.agent_loop.agent_loop import (  # noqa: E402
    AgentLoopBase,
    AgentLoopOutput,
    register,
)

__all__ = ["HopgymAgentLoop", "AGENT_NAME", "dataset_rows", "write_dataset"]

#: The name verl's agent-loop registry knows the loop by.
AGENT_NAME = "hopgym_agent"

#: hopgym's steps for every rollout of the process run in this pool (at most 32 at once).
_EXECUTOR = ThreadPoolExecutor(32, thread_name_prefix="hopgym-verl")


def _build(extra: dict[str, Any]) -> tuple[AsyncEnv, dict[str, Any] | None]:
    env = make_env(extra.get("env_id", "hopgym/Synthetic-v1"), **dict(extra.get("env_kwargs") or {}))
    options = {"question_id": check_question(env, extra["question_id"])} if "question_id" in extra else None
    return AsyncEnv(env, _EXECUTOR), options


@register(AGENT_NAME)
class HopgymAgentLoop(AgentLoopBase):
    """One hopgym episode per verl rollout (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play one episode of the row's env (``kwargs["extra_info"]``) with the policy.

        Raises:
            hopgym.errors.InvalidOptionTypeError: an unknown env id, option or question id.
            hopgym.errors.InvalidOptionError: an option with a bad value.
        """
        extra = dict(kwargs.get("extra_info") or {})
        env, options = await asyncio.get_running_loop().run_in_executor(_EXECUTOR, _build, extra)
        inner = env.unwrapped
        tools = list(inner.tool_specs) or None  # type: ignore[attr-defined]
        limit = self.rollout_config.response_length
        try:
            obs, _ = await env.reset(options=options)
            messages: list[dict[str, Any]] = [{"role": "user", "content": obs}]
            ids = await self.ct_build_initial_tokens(messages, tools=tools)
            mask: list[int] = []
            terms: dict[str, float] = {}
            turn_scores: list[float] = []
            request_id = uuid4().hex
            while True:
                output = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=ids, sampling_params=sampling_params
                )
                merged, mask, _ = await self.ct_merge_assistant_token(ids, output.token_ids, mask)
                ids = merged.token_ids
                reply = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
                messages.append({"role": "assistant", "content": reply})
                obs, reward, terminated, truncated, info = await env.step(reply)
                turn_scores.append(float(reward))
                add_terms(terms, info)
                if terminated or truncated or len(mask) >= limit:
                    break
                previous = list(messages)
                messages.append({"role": "user", "content": obs})  # hopgym's text: no loss on it
                merged, mask, _ = await self.ct_merge_context_msg(previous, messages, ids, mask, tools=tools)
                ids = merged.token_ids
                if len(mask) >= limit:
                    break
        finally:
            await env.close()
        response_ids = ids[len(ids) - len(mask) :] if mask else []
        return AgentLoopOutput(
            prompt_ids=ids[: len(ids) - len(mask)],
            response_ids=response_ids[:limit],
            response_mask=mask[:limit],
            num_turns=len(messages),
            reward_score=sum(turn_scores),
            metrics={},
            extra_fields={
                "reward_terms": terms,
                "turn_scores": turn_scores,
                "tool_rewards": [],
                # verl's per-sample reward details: columns of the batch, metrics of its validation
                "reward_extra_info": {f"reward/{k}": v for k, v in terms.items()},
            },
        )


def dataset_rows(env_id: str = "hopgym/Synthetic-v1", **env_kwargs: Any) -> list[dict[str, Any]]:
    """Dataset rows for verl, one per question of the env's task, for :class:`HopgymAgentLoop`.

    Each row has ``data_source``, ``prompt`` (the question as a user message: verl's dataset
    tokenizes it, the loop writes hopgym's own prompt), ``agent_name`` and ``extra_info`` (the
    env id, ``env_kwargs`` and the ``question_id`` the loop resets on).

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown env id or option.
        hopgym.errors.InvalidOptionError: an option with a bad value.
    """
    env = make_env(env_id, **env_kwargs)
    try:
        rows = question_rows(env)
    finally:
        env.close()
    extra: dict[str, Any] = {"env_id": env_id}
    if env_kwargs:  # parquet cannot store a struct without fields
        extra["env_kwargs"] = dict(env_kwargs)
    return [
        {
            "data_source": env_id,
            "prompt": [{"role": "user", "content": row["question"]}],
            "agent_name": AGENT_NAME,
            "extra_info": {**extra, "question_id": row["question_id"], "index": i},
        }
        for i, row in enumerate(rows)
    ]


def write_dataset(path: str | Path, env_id: str = "hopgym/Synthetic-v1", **env_kwargs: Any) -> Path:
    """Write :func:`dataset_rows` as the parquet file verl's ``data.train_files`` reads.

    Example (``split`` is an option of the synthetic envs)::

        write_dataset("data/hopgym/train.parquet", "hopgym/Synthetic-v1", split="train", reward="searchr1")
    """
    import pandas as pd  # verl's own dependency

    out = check_writable(path)  # before the rows are made
    frame = pd.DataFrame(dataset_rows(env_id, **env_kwargs))
    with atomic_write(out, "wb", encoding=None) as fh:  # complete or absent, never cut
        frame.to_parquet(fh)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m hopgym.integrations.verl OUT.parquet --env ID --kw key=value ...``."""
    p = argparse.ArgumentParser(
        prog="python -m hopgym.integrations.verl",
        description="Write a verl dataset (parquet) with one row per question of a hopgym env.",
    )
    p.add_argument("out", help="the parquet file to write")
    p.add_argument("--env", default="hopgym/Synthetic-v1", help="hopgym env id (default: %(default)s)")
    p.add_argument("--kw", nargs="*", default=[], metavar="KEY=VALUE", help="env options, e.g. split=train")
    args = p.parse_args(argv)
    rows = write_dataset(args.out, args.env, **parse_kwargs(args.kw))
    print(f"wrote {rows}")


if __name__ == "__main__":
    main()
