"""hopgym's SkyRL env through SkyRL's own generator (``SkyRLGymGenerator.generate``), on a CPU.

SkyRL's generator makes one ``skyrl_gym`` env per row (``env_class: hopgym``, the row's other
columns as ``extras``, ``generator.max_turns`` written into them), chats with the policy through
its inference-engine client and turns the env's step rewards into what the trainer reads: per-token
rewards on its token-in/token-out paths, the last step's reward on its re-tokenizing path (a custom
chat template, as for Qwen3). This script runs ``generate`` on the rows of
``hopgym.integrations.skyrl.dataset_rows`` on three of its paths and compares the reward each
trajectory gets with hopgym's own episode reward (plain ``gym.make``, the same turns). The one
stand-in is the inference engine (vLLM needs a GPU): a client that answers each turn with a
scripted policy (the gold searches and the answer of the question in the prompt, after one
malformed turn for the ``kunlun`` preset).

Run (in an environment with ``pip install torch==2.13.0 "skyrl==0.3.0" loguru tqdm jaxtyping
"hydra-core==1.3.2" aiohttp`` and ``pip install -e ".[skyrl]"``; skyrl 0.3.0 pins transformers
<= 5.8)::

    python examples/skyrl_generator_check.py --out benchmarks/results/skyrl_generator.json

skyrl 0.3.0 declares Python >= 3.11 but its ``skyrl.tinker.types`` defines a pydantic model over a
``typing.TypedDict``, which pydantic refuses below Python 3.12 (``PydanticUserError: Please use
typing_extensions.TypedDict``); on 3.11 this script imports SkyRL with ``typing.TypedDict`` set to
``typing_extensions.TypedDict`` (a no-op on 3.12+).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import sys
import time
import typing
from pathlib import Path
from typing import Any

import typing_extensions

from hopgym._atomic import check_writable, write_text

if sys.version_info < (3, 12):  # see the module docstring
    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

ROOT = Path(__file__).resolve().parents[1]

#: A ChatML template (Qwen2.5's, without tools): the tokenizer's own on the token paths.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: (name, GeneratorConfig fields) of the generator paths run.
PATHS = [
    ("token-in/out, one message per turn", {"use_conversation_multi_turn": True}),
    ("token-in/out, turns appended to one response", {"use_conversation_multi_turn": False}),
    (
        "re-tokenizing (custom chat template qwen3_without_thinking)",
        {
            "use_conversation_multi_turn": True,
            "chat_template": {"source": "name", "name_or_path": "qwen3_without_thinking"},
        },
    ),
]


def script(sample: Any, malformed: bool) -> list[str]:
    """The scripted policy's turns: (a malformed turn,) the gold searches, the answer."""
    turns = [f"<think>hop {i}</think><search>{h.query}</search>" for i, h in enumerate(sample.decomposition)]
    return [
        *(["no tags"] if malformed else []),
        *turns,
        f"<think>done</think><answer>{sample.answers[0]}</answer>",
    ]


class ScriptedEngine:
    """SkyRL's inference-engine client: ``generate(input) -> {responses, response_ids, stop_reasons}``.

    It decodes the prompt, finds the question (hopgym's prompt has ``Question: ...``) and the turn
    (the scripted turns already in the chat, whatever the template) and answers with the next.
    """

    def __init__(self, tokenizer: Any, samples: list, malformed: bool) -> None:
        self.tokenizer, self.malformed = tokenizer, malformed
        self.by_question = {s.question: s for s in samples}
        self.calls = 0

    async def generate(self, engine_input: dict, model: Any = None) -> dict:
        text = self.tokenizer.decode(engine_input["prompt_token_ids"][0])
        question = text.split("Question:", 1)[1].strip().splitlines()[0].strip()
        sample = self.by_question[question]
        turns = script(sample, self.malformed)
        # the scripted turns already in the chat (their actions: Qwen3's template drops <think>)
        done = sum(text.count(t.split("</think>")[-1]) for t in turns)
        reply = turns[min(done, len(turns) - 1)]
        self.calls += 1
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return {
            "responses": [reply],
            "response_ids": [ids],
            "stop_reasons": ["stop"],
            "response_logprobs": None,
        }

    async def finish_session(self, session_id: str) -> None:
        return None


def tokenizer() -> Any:
    """The tests' tiny tokenizer with ChatML's markers as special tokens (``<|im_end|>`` its eos)."""
    sys.path.insert(0, str(ROOT / "tests" / "agents"))
    from tiny_llm import build_tokenizer

    tok = build_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = CHATML
    return tok


def run_check(
    env_id: str = "hopgym/Tiny-v1",
    presets: tuple[str, ...] = ("r3rag", "kunlun"),
    max_turns: int = 6,
    paths: list[tuple[str, dict]] | None = None,
    step_rewards: bool = False,
) -> dict[str, Any]:
    """``SkyRLGymGenerator.generate`` over every row of ``env_id``, per preset and generator path.

    ``step_rewards=True`` gives the env ``env_config.step_rewards: true`` (each step's own reward, not
    the episode's on its last step), set on SkyRL's gym config as a SkyRL version that takes an env
    config of its own would.
    """
    import gymnasium as gym
    import skyrl
    import transformers
    from skyrl.train.config.config import GeneratorConfig, SamplingParams, SkyRLGymConfig
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator

    import hopgym  # noqa: F401
    from hopgym.integrations._common import replay_episode
    from hopgym.integrations.skyrl import dataset_rows

    started = time.perf_counter()
    tok = tokenizer()
    samples = list(gym.make(env_id).unwrapped.task.samples)
    runs = []
    for preset in presets:
        malformed = preset == "kunlun"  # its format term: one malformed turn costs 0.1
        rows = dataset_rows(env_id, reward=preset)
        for name, fields in paths or PATHS:
            cfg = GeneratorConfig(
                max_turns=max_turns,
                max_input_length=4096,
                sampling_params=SamplingParams(max_generate_length=256, logprobs=None),
                use_cache_salt=False,
                **{k: v for k, v in fields.items() if k != "chat_template"},
            )
            if "chat_template" in fields:
                cfg.chat_template.source = fields["chat_template"]["source"]
                cfg.chat_template.name_or_path = fields["chat_template"]["name_or_path"]
            engine = ScriptedEngine(tok, samples, malformed)
            gym_cfg = SkyRLGymConfig(max_env_workers=2)
            if step_rewards:
                gym_cfg.hopgym = {"step_rewards": True}  # type: ignore[attr-defined]
            generator = SkyRLGymGenerator(cfg, gym_cfg, engine, tok)
            batch = {
                "prompts": [r["prompt"] for r in rows],
                "env_classes": [r["env_class"] for r in rows],
                "env_extras": [
                    {k: v for k, v in r.items() if k not in ("prompt", "env_class")} for r in rows
                ],
            }
            out = asyncio.run(generator.generate(batch, disable_tqdm=True))
            episodes = []
            for row, reward, mask in zip(rows, out["rewards"], out["loss_masks"], strict=True):
                sample = next(s for s in samples if s.id == row["question_id"])
                turns = script(sample, malformed)
                total, terms, _ = replay_episode(
                    env_id, row["question_id"], turns, reward=preset, max_turns=max_turns
                )
                received = float(sum(reward)) if isinstance(reward, list) else float(reward)
                episodes.append(
                    {
                        "question_id": row["question_id"],
                        "turns": len(turns),
                        "skyrl_reward": received,
                        "skyrl_reward_form": "per-token list (summed)"
                        if isinstance(reward, list)
                        else "scalar",
                        "hopgym_reward": total,
                        "hopgym_reward_terms": terms,
                        "policy_tokens": int(sum(mask)),
                        "match": math.isclose(received, total, abs_tol=1e-6),
                    }
                )
            runs.append(
                {
                    "preset": preset,
                    "path": name,
                    "generator_config": {k: v for k, v in fields.items()},
                    "engine_calls": engine.calls,
                    "episodes": episodes,
                    "env_metrics_keys": sorted(out["rollout_metrics"] or {})[:8]
                    if out.get("rollout_metrics")
                    else [],
                    "all_match": all(e["match"] for e in episodes),
                }
            )
    return {
        "what": "hopgym's skyrl_gym env through SkyRL's SkyRLGymGenerator.generate (rows from "
        "hopgym.integrations.skyrl.dataset_rows, env_class hopgym); scripted inference-engine client",
        "env_id": env_id,
        "generator_max_turns": max_turns,
        "runs": runs,
        "all_match": all(r["all_match"] for r in runs),
        "versions": {
            "skyrl": getattr(skyrl, "__version__", "0.3.0"),
            "skyrl_gym": __import__("importlib.metadata").metadata.version("skyrl-gym"),
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the result JSON here")
    args = p.parse_args()
    if args.out:
        check_writable(args.out)  # before the run, not after it
    result = run_check()
    # what the re-tokenizing path would train on with each step's own reward (the env's option)
    result["with_step_rewards"] = run_check(presets=("r3rag",), paths=PATHS[2:], step_rewards=True)["runs"]
    text = json.dumps(result, indent=1)
    if args.out:
        write_text(args.out, text + "\n")
    print(text)
    if not result["all_match"]:
        raise SystemExit("SkyRL's reward differs from hopgym's (see the runs above)")


if __name__ == "__main__":
    main()
