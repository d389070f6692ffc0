"""GRPO over multi-turn env rollouts, with TRL's ``GRPOTrainer`` and a ``rollout_func``.

Classes: :class:`GRPORunConfig`, :class:`EnvRolloutFunc` (the ``rollout_func``), :class:`EnvReward`
(the reward function TRL calls: the env's episode return). Functions: :func:`train_grpo`,
:func:`plot_curves` (the per-step curves PNG), :func:`make_curve_callback` (keeps the log).

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
  ``env/reward``, ``env/searches_per_episode``, ``env/invalid_rate``, ``env/answered``,
  ``env/reward_terms/NAME``, and (``track_kl``) ``policy/kl_ref`` and ``policy/entropy`` from
  :func:`~hopgym.agents.rollout.policy_stats`: the same estimates the rejection-sampling trainer
  (:mod:`hopgym.agents.rft`) logs, so the two runs' curves compare.
- ``use_vllm=False`` (the default, and on CPU): the collector generates with the model itself; on
  a GPU the same code runs in bf16. ``use_vllm=True``: TRL builds its vLLM integration (``colocate``
  or ``server`` mode) and syncs the weights into it before each rollout; the rollout function then
  samples every turn through it (:class:`~hopgym.agents.rollout.TRLVLLMEngine`) and keeps the
  token ids and log-probs the engine returns. TRL's importance-sampling correction then uses those
  log-probs. Tested against a stand-in client; vLLM itself was not run in our tests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym.agents.rollout import (
    RolloutCollector,
    RolloutConfig,
    Trajectory,
    TRLVLLMEngine,
    frozen_copy,
    policy_stats,
    stop_token_ids,
    summarize,
)
from hopgym.errors import DependencyNotInstalled, InvalidOptionError

__all__ = [
    "GRPORunConfig",
    "EnvRolloutFunc",
    "EnvReward",
    "train_grpo",
    "plot_curves",
    "make_curve_callback",
    "CURVE_KEYS",
    "LOSS_TYPES",
]

#: TRL ``loss_type`` values hopgym accepts (the group-relative ones).
LOSS_TYPES: tuple[str, ...] = ("grpo", "dr_grpo", "dapo", "bnpo")

#: What ``curves.png`` shows, one panel each: (log key, panel title).
CURVE_KEYS: tuple[tuple[str, str], ...] = (
    ("env/em", "sampled train EM"),
    ("env/reward", "reward"),
    ("env/searches_per_episode", "searches / episode"),
    ("policy/kl_ref", "KL to start"),
    ("policy/entropy", "entropy (sampled tokens)"),
)


@dataclass
class GRPORunConfig:
    """Settings of a GRPO run (what hopgym sets on TRL's ``GRPOConfig``)."""

    output_dir: str = field(default="runs/grpo", metadata={"help": "Checkpoints, log, curve PNG."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    questions_per_step: int = field(default=8, metadata={"help": "Questions per step (B)."})
    group_size: int = field(default=8, metadata={"help": "Episodes per question (G)."})
    learning_rate: float = field(default=1e-4, metadata={"help": "Adam learning rate."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient (0: no reference model)."})
    epsilon: float = field(default=0.2, metadata={"help": "PPO clipping range."})
    loss_type: str = field(
        default="dapo", metadata={"help": "TRL loss: " + ", ".join(LOSS_TYPES) + ".", "choices": LOSS_TYPES}
    )
    scale_rewards: str = field(
        default="group",
        metadata={
            "help": "Advantage scaling: group, batch or none (Dr. GRPO).",
            "choices": ("group", "batch", "none"),
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0)."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling (0: off)."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn (tokens)."})
    max_completion_tokens: int = field(
        default=1024, metadata={"help": "Longest trajectory after the prompt (model + env tokens)."}
    )
    rollout_batch_size: int = field(default=64, metadata={"help": "Episodes sampled at once."})
    env_workers: int = field(
        default=0,
        metadata={
            "help": "Ray workers that step the rollouts' envs (0: in this process; needs hopgym[ray])."
        },
    )
    logging_steps: int = field(default=1, metadata={"help": "Log every N steps."})
    save_steps: int = field(
        default=0, metadata={"help": "Checkpoint every N steps (0: only the final model)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed for data order and sampling."})
    time_limit_s: float | None = field(
        default=None, metadata={"help": "Stop after this many seconds of training."}
    )
    bf16: bool | None = field(default=None, metadata={"help": "bf16 (None: when CUDA supports it)."})
    plot: bool = field(default=True, metadata={"help": "Write curves.png next to the run."})
    track_kl: bool = field(
        default=True,
        metadata={
            "help": "Log policy/kl_ref (KL to the starting model, which a frozen copy keeps) and "
            "policy/entropy every step."
        },
    )
    use_vllm: bool = field(
        default=False, metadata={"help": "Sample turns with TRL's vLLM integration (needs vllm and a GPU)."}
    )
    vllm_mode: str = field(
        default="colocate",
        metadata={"help": "'colocate' (vLLM in this process) or 'server' (trl vllm-serve elsewhere)."},
    )
    vllm_server_base_url: str | None = field(
        default=None, metadata={"help": "Server mode: the server's URL (None: TRL's default host and port)."}
    )
    vllm_gpu_memory_utilization: float = field(
        default=0.3, metadata={"help": "Colocate mode: share of GPU memory vLLM may take."}
    )

    def __post_init__(self) -> None:
        if self.vllm_mode not in ("colocate", "server"):
            raise InvalidOptionError(f"vllm_mode must be 'colocate' or 'server', got {self.vllm_mode!r}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise InvalidOptionError(
                f"vllm_gpu_memory_utilization must be in (0, 1], got {self.vllm_gpu_memory_utilization}"
            )
        if self.group_size < 2:
            raise InvalidOptionError(
                f"group_size must be >= 2 (GRPO normalises rewards within a group), got {self.group_size}"
            )
        if self.questions_per_step < 1 or self.max_steps < 1:
            raise InvalidOptionError("questions_per_step and max_steps must be >= 1")
        if self.temperature <= 0:
            raise InvalidOptionError(f"temperature must be > 0 for GRPO sampling, got {self.temperature}")
        if (
            isinstance(self.env_workers, bool)
            or not isinstance(self.env_workers, int)
            or self.env_workers < 0
        ):
            raise InvalidOptionError(f"env_workers must be an int >= 0, got {self.env_workers!r}")
        if self.max_completion_tokens < self.max_new_tokens:
            raise InvalidOptionError(
                f"max_completion_tokens ({self.max_completion_tokens}) must be >= "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        if self.scale_rewards not in ("group", "batch", "none"):
            raise InvalidOptionError(
                f"scale_rewards must be group, batch or none, got {self.scale_rewards!r}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise InvalidOptionError(
                f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}"
            )

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

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        env_reward: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if env_reward is None:
            raise InvalidOptionError("env_reward is missing: use EnvRolloutFunc as the rollout_func")
        return [float(r) for r in env_reward]


class EnvRolloutFunc:
    """TRL ``rollout_func``: runs each prompt row (a question id) as one env episode.

    Args:
        env_fn: builds one env with its reward wrappers.
        tokenizer: the policy's tokenizer.
        config: sampling settings (temperature must equal ``GRPOConfig.temperature``).
        seed: base seed; call ``k`` uses ``seed + k``.
        on_trajectories: optional hook called with each batch of trajectories (for tests, logs).
        ref_model: a frozen copy of the starting model; with it, ``policy/kl_ref`` is logged.

    When the trainer runs with ``use_vllm=True``, every turn is sampled through the trainer's
    ``vllm_generation`` (:class:`~hopgym.agents.rollout.TRLVLLMEngine`).
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        tokenizer: Any,
        config: RolloutConfig,
        seed: int = 0,
        on_trajectories: Callable[[list[Trajectory]], None] | None = None,
        ref_model: Any | None = None,
    ) -> None:
        self.env_fn = env_fn
        self.tokenizer = tokenizer
        self.config = config
        self.seed = seed
        self.calls = 0
        self.episodes = 0
        self.on_trajectories = on_trajectories
        self.ref_model = ref_model
        self._collector: RolloutCollector | None = None
        self.seconds = 0.0

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        start = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._collector is None:
            engine = TRLVLLMEngine(trainer.vllm_generation) if getattr(trainer, "use_vllm", False) else None
            self._collector = RolloutCollector(model, self.tokenizer, self.env_fn, self.config, engine=engine)
        self._collector.model = model
        qids = [p if isinstance(p, str) else str(p) for p in prompts]
        trajs = self._collector.collect(qids, group_size=1, seed=self.seed + 100_003 * self.calls)
        self.calls += 1
        self.episodes += len(trajs)
        mode = "train" if model.training else "eval"
        metrics = getattr(trainer, "_metrics", None)
        if metrics is not None:
            for key, value in summarize(trajs).items():
                metrics[mode][f"env/{key}"].append(value)
            if self.ref_model is not None:
                for key, value in policy_stats(trajs, self.ref_model, self.config.temperature).items():
                    metrics[mode][f"policy/{key}"].append(value)
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
                row = {
                    "step": state.global_step,
                    **{k: v for k, v in logs.items() if isinstance(v, (int, float))},
                }
                self.history.append(row)
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")

    return _Curve()


def plot_curves(
    history: Sequence[dict[str, Any]] | Mapping[str, Sequence[dict[str, Any]]],
    path: str | Path,
    keys: Sequence[str | tuple[str, str]] = CURVE_KEYS,
    title: str = "GRPO",
) -> Path | None:
    """One panel per key of ``keys`` against ``step``, in one PNG; ``None`` without matplotlib.

    Args:
        history: a log history (rows with ``step`` and the keys), or ``{label: history}`` to
            draw several runs on the same panels (GRPO beside rejection sampling).
        path: the PNG.
        keys: log keys, or ``(key, panel title)`` pairs; a key no row has is left out.
        title: the figure's title.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    runs = dict(history) if isinstance(history, Mapping) else {"": history}
    panels = [(k, k) if isinstance(k, str) else (k[0], k[1]) for k in keys]
    panels = [(k, t) for k, t in panels if any(k in h for rows in runs.values() for h in rows)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0), squeeze=False)
    for ax, (key, name) in zip(axes[0], panels, strict=True):
        for label, rows in runs.items():
            pts = [(h["step"], h[key]) for h in rows if key in h]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label or None)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if len(runs) > 1:
        axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def train_grpo(
    model: Any,
    tokenizer: Any,
    env_fn: Callable[[], gym.Env],
    question_ids: Sequence[str],
    config: GRPORunConfig,
    callbacks: Sequence[Any] = (),
    on_trajectories: Callable[[list[Trajectory]], None] | None = None,
) -> Any:
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
        The ``GRPOTrainer`` after training; ``trainer.hopgym_history`` is the log history,
        ``trainer.hopgym_rollout`` the rollout function (``episodes``, ``seconds``) and
        ``<output_dir>/curves.png`` the per-step curves (with ``config.plot``).
    """
    import os

    try:
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("trl/datasets", "train") from exc
    from hopgym.agents.sft import TimeLimitCallback, _bf16

    if not question_ids:
        raise InvalidOptionError("no training questions")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    ref_model = None
    if config.track_kl:
        ref_model = frozen_copy(model)
    rollout = EnvRolloutFunc(
        env_fn,
        tokenizer,
        RolloutConfig(
            temperature=config.temperature,
            top_k=config.top_k,
            max_new_tokens=config.max_new_tokens,
            max_completion_tokens=config.max_completion_tokens,
            batch_size=config.rollout_batch_size,
            env_workers=config.env_workers,
        ),
        seed=config.seed,
        on_trajectories=on_trajectories,
        ref_model=ref_model,
    )
    dataset = Dataset.from_list([{"prompt": str(q)} for q in question_ids])
    out = Path(config.output_dir)
    vllm_kw: dict[str, Any] = {}
    if config.use_vllm:
        vllm_kw = _vllm_args(model, tokenizer, env_fn, config, out)
    args = GRPOConfig(
        output_dir=config.output_dir,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_rows,
        num_generations=config.group_size,
        gradient_accumulation_steps=1,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=config.beta,
        epsilon=config.epsilon,
        loss_type=config.loss_type,
        scale_rewards=config.scale_rewards,
        temperature=config.temperature,
        top_k=config.top_k,
        max_completion_length=config.max_completion_tokens,
        use_vllm=config.use_vllm,
        logging_steps=config.logging_steps,
        save_strategy="steps" if config.save_steps else "no",
        save_steps=config.save_steps or 500,
        seed=config.seed,
        data_seed=config.seed,
        report_to="none",
        bf16=_bf16(config.bf16),
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
        **vllm_kw,
    )
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.jsonl"
    if log_path.exists():
        log_path.unlink()
    curve = make_curve_callback(log_path)
    cbs = [curve, *callbacks]
    if config.time_limit_s is not None:
        cbs.append(TimeLimitCallback.make(config.time_limit_s))
    # With beta > 0, TRL builds its KL reference by loading ``model.config._name_or_path``: a
    # model built in memory has none, and a loaded one may have trained since. The reference is
    # the starting weights, saved for TRL to load (then the name is put back).
    name_or_path = getattr(model.config, "_name_or_path", "")
    if config.beta > 0:
        model.save_pretrained(out / "kl_reference")
        model.config._name_or_path = str(out / "kl_reference")
    try:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[EnvReward()],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=cbs,
        )
    finally:
        model.config._name_or_path = name_or_path
    trainer.train()
    trainer.hopgym_history = curve.history
    trainer.hopgym_rollout = rollout
    if config.plot:
        plot_curves(curve.history, out / "curves.png", title=f"GRPO ({config.loss_type})")
    return trainer


def _vllm_args(
    model: Any, tokenizer: Any, env_fn: Callable[[], gym.Env], config: GRPORunConfig, out: Path
) -> dict[str, Any]:
    """``GRPOConfig`` fields for TRL's vLLM integration, with per-turn sampling settings.

    TRL merges ``generation_kwargs`` into the sampling parameters in both modes, so each turn
    stops at the protocol's stop tokens / strings and at ``max_new_tokens`` (not at TRL's
    ``max_completion_length``, which bounds the whole multi-turn trajectory here).
    """
    env = env_fn()
    stop_ids, stop_strings = stop_token_ids(tokenizer, getattr(env.unwrapped.protocol, "stop", ()))
    env.close()
    gen: dict[str, Any] = {
        "max_tokens": config.max_new_tokens,
        "stop_token_ids": sorted(stop_ids),
        "skip_special_tokens": False,
    }
    if stop_strings:
        gen.update(stop=list(stop_strings), include_stop_str_in_output=True)
    if config.vllm_mode == "colocate" and not Path(str(model.name_or_path or "")).is_dir():
        # vLLM loads the weights by path (TRL passes model.name_or_path); a model built in
        # memory is saved first, then TRL syncs the live weights before every rollout.
        path = out / "vllm_init"
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        model.config._name_or_path = str(path)
        model.name_or_path = str(path)
    kw: dict[str, Any] = {
        "vllm_mode": config.vllm_mode,
        "generation_kwargs": gen,
        "vllm_gpu_memory_utilization": config.vllm_gpu_memory_utilization,
    }
    if config.vllm_server_base_url:
        kw["vllm_server_base_url"] = config.vllm_server_base_url
    return kw
