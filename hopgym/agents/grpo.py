"""GRPO over multi-turn env rollouts, with TRL's ``GRPOTrainer`` and a ``rollout_func``.

Classes: :class:`GRPORunConfig`, :class:`EnvRolloutFunc` (the ``rollout_func``), :class:`EnvReward`
(the reward function TRL calls: the env's episode return), :class:`CurveCallback` (keeps the log
and writes the reward/EM curve PNG). Functions: :func:`train_grpo`, :func:`plot_curves`.

How it maps onto TRL 1.16 (``trl/trainer/grpo_trainer.py``):

- The train dataset's ``prompt`` column holds *question ids*; TRL's ``RepeatSampler`` repeats each
  one ``num_generations`` times, consecutively, and hands the slice to ``rollout_func(prompts,
  trainer)``, which must return one completion per row.
- :class:`EnvRolloutFunc` runs every row as an episode through the env (with its reward wrappers)
  with :class:`~hopgym.agents.rollout.RolloutCollector` on the trainer's current model, and returns
  ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` (1 on model tokens, 0 on
  observation tokens; TRL multiplies it into the loss mask), plus ``env_reward`` and per-term
  fields that TRL forwards to the reward functions.
- :class:`EnvReward` returns ``env_reward``: the reward is exactly the env's wrapper stack (any
  preset). TRL normalises it within each group (GRPO's advantage) and applies PPO clipping and,
  with ``beta > 0``, a KL penalty.
- TRL's logprob recomputation divides logits by ``GRPOConfig.temperature``; the collector samples
  with the same temperature, so the sampled and recomputed distributions agree.
- Logged each step (besides TRL's ``reward``, ``loss``, ``entropy``...): ``env/em``, ``env/f1``,
  ``env/searches_per_episode``, ``env/invalid_rate``, ``env/answered``, ``env/reward_terms/NAME``.
- ``use_vllm=False`` on CPU (the collector generates with the model itself); on a GPU the same
  code runs in bf16. The vLLM server path of TRL is not used by the rollout function.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym.agents.rollout import RolloutCollector, RolloutConfig, Trajectory, summarize
from hopgym.corpora.retrieval import DependencyNotInstalled

__all__ = ["GRPORunConfig", "EnvRolloutFunc", "EnvReward", "train_grpo", "plot_curves",
           "make_curve_callback"]


@dataclass
class GRPORunConfig:
    """Settings of a GRPO run (what hopgym sets on TRL's ``GRPOConfig``)."""

    output_dir: str = field(default="runs/grpo", metadata={
        "help": "Checkpoints, log, curve PNG."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    questions_per_step: int = field(default=8, metadata={"help": "Questions per step (B)."})
    group_size: int = field(default=8, metadata={"help": "Episodes per question (G)."})
    learning_rate: float = field(default=1e-4, metadata={"help": "Adam learning rate."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient (0: no reference model)."})
    epsilon: float = field(default=0.2, metadata={"help": "PPO clipping range."})
    loss_type: str = field(default="dapo", metadata={
        "help": "TRL loss: grpo, dr_grpo, dapo, bnpo.",
        "choices": ("grpo", "dr_grpo", "dapo", "bnpo")})
    scale_rewards: str = field(default="group", metadata={
        "help": "Advantage scaling: group, batch or none (Dr. GRPO).",
        "choices": ("group", "batch", "none")})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0)."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling (0: off)."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn (tokens)."})
    max_completion_tokens: int = field(default=1024, metadata={
        "help": "Longest trajectory after the prompt (model + env tokens)."})
    rollout_batch_size: int = field(default=64, metadata={
        "help": "Episodes sampled at once."})
    logging_steps: int = field(default=1, metadata={"help": "Log every N steps."})
    save_steps: int = field(default=0, metadata={
        "help": "Checkpoint every N steps (0: only the final model)."})
    seed: int = field(default=0, metadata={"help": "Seed for data order and sampling."})
    time_limit_s: float | None = field(default=None, metadata={
        "help": "Stop after this many seconds of training."})
    bf16: bool | None = field(default=None, metadata={
        "help": "bf16 (None: when CUDA supports it)."})
    plot: bool = field(default=True, metadata={"help": "Write curves.png next to the run."})

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (GRPO normalises rewards within a group), "
                             f"got {self.group_size}")
        if self.questions_per_step < 1 or self.max_steps < 1:
            raise ValueError("questions_per_step and max_steps must be >= 1")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for GRPO sampling, got {self.temperature}")
        if self.max_completion_tokens < self.max_new_tokens:
            raise ValueError(f"max_completion_tokens ({self.max_completion_tokens}) must be >= "
                             f"max_new_tokens ({self.max_new_tokens})")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(
                f"scale_rewards must be group, batch or none, got {self.scale_rewards!r}")
        if self.loss_type not in ("grpo", "dr_grpo", "dapo", "bnpo"):
            raise ValueError(
                f"loss_type must be grpo, dr_grpo, dapo or bnpo, got {self.loss_type!r}")

    @property
    def batch_rows(self) -> int:
        """Episodes per optimizer step: ``questions_per_step * group_size``."""
        return self.questions_per_step * self.group_size


class EnvReward:
    """TRL reward function: the env's episode return, forwarded by :class:`EnvRolloutFunc`.

    A callable class (not a closure) so that it pickles; TRL logs it as ``rewards/env/mean``.

    Example:
        >>> EnvReward()(prompts=["q1"], completions=["..."], env_reward=[0.5])
        [0.5]
    """

    __name__ = "env"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 env_reward: Sequence[float] | None = None, **kwargs: Any) -> list[float]:
        if env_reward is None:
            raise ValueError("env_reward is missing: use EnvRolloutFunc as the rollout_func")
        return [float(r) for r in env_reward]


class EnvRolloutFunc:
    """TRL ``rollout_func``: runs each prompt row (a question id) as one env episode.

    Args:
        env_fn: builds one env with its reward wrappers.
        tokenizer: the policy's tokenizer.
        config: sampling settings (temperature must equal ``GRPOConfig.temperature``).
        seed: base seed; call ``k`` uses ``seed + k``.
        on_trajectories: optional hook called with each batch of trajectories (for tests, logs).
    """

    def __init__(self, env_fn: Callable[[], gym.Env], tokenizer: Any, config: RolloutConfig,
                 seed: int = 0,
                 on_trajectories: Callable[[list[Trajectory]], None] | None = None) -> None:
        self.env_fn = env_fn
        self.tokenizer = tokenizer
        self.config = config
        self.seed = seed
        self.calls = 0
        self.on_trajectories = on_trajectories
        self._collector: RolloutCollector | None = None
        self.seconds = 0.0

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        start = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._collector is None:
            self._collector = RolloutCollector(model, self.tokenizer, self.env_fn, self.config)
        self._collector.model = model
        qids = [p if isinstance(p, str) else str(p) for p in prompts]
        trajs = self._collector.collect(qids, group_size=1, seed=self.seed + 100_003 * self.calls)
        self.calls += 1
        mode = "train" if model.training else "eval"
        metrics = getattr(trainer, "_metrics", None)
        if metrics is not None:
            for key, value in summarize(trajs).items():
                metrics[mode][f"env/{key}"].append(value)
        if self.on_trajectories is not None:
            self.on_trajectories(trajs)
        self.seconds += time.perf_counter() - start
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            "env_mask": [t.mask for t in trajs],
            "env_reward": [t.reward for t in trajs],
            "env_em": [t.em for t in trajs],
        }


def make_curve_callback(path: str | Path) -> Any:
    """A ``TrainerCallback`` that appends every log line to ``path`` (jsonl)."""
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    path = Path(path)

    class _Curve(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] = []

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001, D102
            if logs:
                row = {"step": state.global_step, **{k: v for k, v in logs.items()
                                                      if isinstance(v, (int, float))}}
                self.history.append(row)
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")

    return _Curve()


def plot_curves(history: Sequence[dict[str, Any]], path: str | Path,
                keys: Sequence[str] = ("reward", "env/em"), title: str = "GRPO") -> Path | None:
    """Plot ``keys`` against ``step`` from a log history into a PNG; ``None`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        pts = [(h["step"], h[key]) for h in history if key in h]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def train_grpo(model: Any, tokenizer: Any, env_fn: Callable[[], gym.Env],
               question_ids: Sequence[str], config: GRPORunConfig,
               callbacks: Sequence[Any] = (),
               on_trajectories: Callable[[list[Trajectory]], None] | None = None) -> Any:
    """GRPO on ``model`` over env episodes of ``question_ids``, with TRL's ``GRPOTrainer``.

    Args:
        model: a causal LM (trained in place).
        tokenizer: its tokenizer.
        env_fn: builds one env with its reward wrappers; the reward is its return.
        question_ids: the training questions (ids of the env's task).
        config: the run's settings.
        callbacks: extra ``TrainerCallback`` objects.
        on_trajectories: hook called with every batch of trajectories.

    Returns:
        The ``GRPOTrainer`` after training; ``trainer.hopgym_history`` is the log history and
        ``<output_dir>/curves.png`` the reward/EM curve (with ``config.plot``).
    """
    import os

    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("trl/datasets", "train") from exc
    from hopgym.agents.sft import TimeLimitCallback, _bf16

    if not question_ids:
        raise ValueError("no training questions")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = EnvRolloutFunc(
        env_fn, tokenizer,
        RolloutConfig(temperature=config.temperature, top_k=config.top_k,
                      max_new_tokens=config.max_new_tokens,
                      max_completion_tokens=config.max_completion_tokens,
                      batch_size=config.rollout_batch_size),
        seed=config.seed, on_trajectories=on_trajectories)
    dataset = Dataset.from_list([{"prompt": str(q)} for q in question_ids])
    args = GRPOConfig(
        output_dir=config.output_dir, max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_rows, num_generations=config.group_size,
        gradient_accumulation_steps=1, learning_rate=config.learning_rate,
        lr_scheduler_type="constant", warmup_steps=0, beta=config.beta, epsilon=config.epsilon,
        loss_type=config.loss_type, scale_rewards=config.scale_rewards,
        temperature=config.temperature, top_k=config.top_k,
        max_completion_length=config.max_completion_tokens, use_vllm=False,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_steps else "no", save_steps=config.save_steps or 500,
        seed=config.seed, data_seed=config.seed, report_to="none", bf16=_bf16(config.bf16),
        disable_tqdm=True, dataloader_num_workers=0, remove_unused_columns=False,
        log_completions=False,
    )
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.jsonl"
    if log_path.exists():
        log_path.unlink()
    curve = make_curve_callback(log_path)
    cbs = [curve, *callbacks]
    if config.time_limit_s is not None:
        cbs.append(TimeLimitCallback.make(config.time_limit_s))
    trainer = GRPOTrainer(model=model, reward_funcs=[EnvReward()], args=args,
                          train_dataset=dataset, processing_class=tokenizer,
                          rollout_func=rollout, callbacks=cbs)
    trainer.train()
    trainer.hopgym_history = curve.history
    trainer.hopgym_rollout = rollout
    if config.plot:
        plot_curves(curve.history, out / "curves.png", keys=("reward", "env/em"))
    return trainer
