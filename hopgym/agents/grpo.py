"""GRPO over multi-turn env rollouts, with TRL's ``GRPOTrainer`` and a ``rollout_func``.

Classes: :class:`GRPORunConfig` (hopgym's settings, and TRL's ``GRPOConfig`` fields in its ``trl``),
:class:`GRPOResult`, :class:`EnvRolloutFunc` (the ``rollout_func``), :class:`EnvReward`
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
- ``resample_rounds > 0`` (DAPO's dynamic sampling): the rollout function replaces each group
  whose rewards are all equal by a group of a question drawn from the training questions before
  TRL sees the rows, and logs ``env/groups_resampled`` and ``env/zero_std_kept``; ``env/*``
  stays the first draw's.
- ``trl={"use_vllm": False}`` (the default, and on CPU): the collector generates with the model itself; on
  a GPU the same code runs in bf16. ``use_vllm=True``: TRL builds its vLLM integration (``colocate``
  or ``server`` mode) and syncs the weights into it before each rollout; the rollout function then
  samples every turn through it (:class:`~hopgym.agents.rollout.TRLVLLMEngine`) and keeps the
  token ids and log-probs the engine returns. TRL's importance-sampling correction then uses those
  log-probs. Tested against a stand-in client; vLLM itself was not run in our tests.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hopgym._atomic import save_figure, write_json, write_text
from hopgym.agents.lora import LoRAConfig
from hopgym.agents.progress import drop_log_printer
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
from hopgym.agents.sft import TimeLimitCallback, check_time_limit, checkpoint_to_resume, train_from
from hopgym.envs.multihop_qa import qa_env
from hopgym.errors import DependencyNotInstalled, InvalidOptionError

__all__ = [
    "GRPORunConfig",
    "GRPOResult",
    "GRPO_DEFAULTS",
    "EnvRolloutFunc",
    "EnvReward",
    "train_grpo",
    "plot_curves",
    "make_curve_callback",
    "CURVE_KEYS",
]

#: What ``curves.png`` shows, one panel each: (log key, panel title).
CURVE_KEYS: tuple[tuple[str, str], ...] = (
    ("env/em", "sampled train EM"),
    ("env/reward", "reward"),
    ("env/searches_per_episode", "searches / episode"),
    ("policy/kl_ref", "KL to start"),
    ("policy/entropy", "entropy (sampled tokens)"),
)


_log = logging.getLogger(__name__)

#: The one line :class:`EnvRolloutFunc` warns with when no group of a step has reward variance.
NO_VARIANCE = (
    "GRPO step %d: none of its %d groups had reward variance (each question's %d episodes got "
    "the same reward), so every advantage is 0 and the step has no policy gradient; a denser "
    "reward (--reward f1), a larger --group-size, a higher --temperature or --resample-rounds N "
    "give groups variance"
)


#: hopgym's defaults for TRL ``GRPOConfig`` fields whose TRL default does not suit env rollouts
#: (``GRPORunConfig.trl`` goes over them; bf16 follows :func:`~hopgym.agents.trl_config.default_bf16`).
GRPO_DEFAULTS: dict[str, Any] = {
    "max_steps": 100,
    "learning_rate": 1e-4,
    "lr_scheduler_type": "constant",
    "max_completion_length": 1024,
    "logging_steps": 1,
    "save_strategy": "no",
    "seed": 0,
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


@dataclass
class GRPORunConfig:
    """Settings of a GRPO run: hopgym's own, and TRL's ``GRPOConfig`` fields in :attr:`trl`.

    hopgym's fields are those TRL has no field for (questions per step, the per-turn token limit,
    the rollout workers, a time limit, plots) and the run folder. Every ``GRPOConfig`` field
    (``learning_rate``, ``beta``, ``epsilon``, ``loss_type``, ``num_generations``, ``temperature``,
    ``top_k``, ``max_completion_length``, ``use_vllm``, ...) goes in :attr:`trl`, over
    :data:`GRPO_DEFAULTS`; TRL checks them. The rollouts sample with TRL's ``temperature``,
    ``top_k`` and ``max_completion_length``, so the sampled and trained distributions agree.

    Example:
        >>> cfg = GRPORunConfig(questions_per_step=2, trl={"num_generations": 4, "beta": 0.04})
        >>> cfg.trl["beta"]
        0.04
    """

    output_dir: str = field(
        default="runs/grpo", metadata={"help": "Run folder: model, log.jsonl, curves.png (TRL's output_dir)."}
    )
    questions_per_step: int = field(
        default=8,
        metadata={"help": "Questions per optimizer step (B); a step samples B x num_generations episodes."},
    )
    micro_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Episodes per loss forward and backward pass: a step's B x num_generations "
            "episodes go through the loss in passes of this many and their gradients add up "
            "(TRL's gradient_accumulation_steps): the same update and one rollout per step, in "
            "less memory. With chunked_logprobs, the passes take the episodes by length, each "
            "without its all-padding columns (less padding than TRL's shuffled passes). Unset: "
            "the whole step in one pass."
        },
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn (tokens)."})
    rollout_batch_size: int = field(default=64, metadata={"help": "Episodes sampled at once."})
    env_workers: int = field(
        default=0,
        metadata={
            "help": "Ray workers that step the rollouts' envs (0: in this process; needs hopgym[ray])."
        },
    )
    time_limit_s: float | None = field(
        default=None, metadata={"help": "Stop after this many seconds of training."}
    )
    resample_rounds: int = field(
        default=0,
        metadata={
            "help": "DAPO's dynamic sampling: a group whose episodes all earned the same reward "
            "(no advantage, so no gradient) is replaced by a group of another training question "
            "drawn at random, for up to this many rounds a step. env/* is logged over the first "
            "draw; env/groups_resampled and env/zero_std_kept count what was done. 0: off."
        },
    )
    chunked_logprobs: bool = field(
        default=True,
        metadata={
            "help": "Score the loss's per-token log-probs only at the positions it reads (the "
            "model's own tokens), through the LM head in small tiles "
            "(hopgym.agents.grpo_logprobs): the same loss and gradient as TRL's path, which "
            "off CUDA projects every position of the batch onto the vocabulary. Off: TRL's path."
        },
    )
    shared_prompt: bool = field(
        default=False,
        metadata={
            "help": "With chunked_logprobs and loss passes of one question's episodes "
            "(micro_batch_size dividing num_generations, no gradient checkpointing): the backbone "
            "runs over each prompt once for all its episodes' passes, which get its keys and "
            "values as a cache and send their gradients back through it once. The same loss and "
            "gradient, summed in another order, with fewer positions through the backbone."
        },
    )
    plot: bool = field(default=True, metadata={"help": "Write curves.png next to the run."})
    track_kl: bool = field(
        default=True,
        metadata={
            "help": "Log policy/kl_ref (KL to the starting model, which a frozen copy keeps) and "
            "policy/entropy every step."
        },
    )
    trl: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Any field of TRL's GRPOConfig, e.g. --trl learning_rate=1e-5 beta=0.04 "
            "num_generations=4 top_k=20 (sampling); values read as Python literals; repeat to add "
            "more. Over hopgym's defaults: " + ", ".join(f"{k}={v}" for k, v in GRPO_DEFAULTS.items()),
            "metavar": "FIELD=VALUE",
            "shortcuts": {
                "--steps": "max_steps",
                "--lr": "learning_rate",
                "--seed": "seed",
                "--group-size": "num_generations",
                "--temperature": "temperature",
                "--sample-top-k": "top_k",
                "--max-length": "max_completion_length",
                "--logging-steps": "logging_steps",
            },
        },
    )

    def __post_init__(self) -> None:
        for name in ("questions_per_step", "max_new_tokens", "rollout_batch_size"):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.resample_rounds < 0:
            raise InvalidOptionError(f"resample_rounds must be >= 0, got {self.resample_rounds}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise InvalidOptionError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if (
            isinstance(self.env_workers, bool)
            or not isinstance(self.env_workers, int)
            or self.env_workers < 0
        ):
            raise InvalidOptionError(f"env_workers must be an int >= 0, got {self.env_workers!r}")
        check_time_limit(self.time_limit_s, "wall")

    def loss_passes(self, num_generations: int) -> tuple[int, int]:
        """``(episodes per loss pass, passes per step)`` of a step of B x ``num_generations``.

        Raises:
            hopgym.errors.InvalidOptionError: :attr:`micro_batch_size` does not divide the step.
        """
        episodes = self.questions_per_step * num_generations
        micro = episodes if self.micro_batch_size is None else self.micro_batch_size
        if episodes % micro:
            raise InvalidOptionError(
                f"micro_batch_size ({micro}) must divide the {episodes} episodes of a step "
                f"(questions_per_step {self.questions_per_step} x num_generations {num_generations})"
            )
        return micro, episodes // micro

    def trl_config(self) -> Any:
        """TRL's ``GRPOConfig`` of this run: :data:`GRPO_DEFAULTS`, then :attr:`trl`, then what
        hopgym derives: ``output_dir``; ``per_device_train_batch_size`` (the episodes of one loss
        pass: :attr:`micro_batch_size`, or all B x ``num_generations`` episodes one step samples)
        and ``gradient_accumulation_steps`` (the passes of one step). TRL then samples one
        generation batch of B x ``num_generations`` rows per optimizer step.

        Raises:
            hopgym.errors.InvalidOptionError: an unknown field, a derived one, a value TRL refuses,
                a micro-batch that does not divide the step's episodes, or sampling settings the
                rollouts cannot use.
        """
        from hopgym.agents.trl_config import trl_config

        args = trl_config(
            "GRPOConfig",
            GRPO_DEFAULTS,
            self.trl,
            {
                "output_dir": (self.output_dir, "give it as output_dir (--out)"),
                "per_device_train_batch_size": (
                    lambda values: self.loss_passes(values["num_generations"])[0],
                    "micro_batch_size, or questions_per_step x num_generations",
                ),
                "gradient_accumulation_steps": (
                    lambda values: self.loss_passes(values["num_generations"])[1],
                    "questions_per_step x num_generations / micro_batch_size",
                ),
            },
        )
        if args.temperature <= 0:
            raise InvalidOptionError(f"temperature must be > 0 for GRPO sampling, got {args.temperature}")
        if self.shared_prompt:
            micro = self.loss_passes(args.num_generations)[0]
            if not self.chunked_logprobs or args.gradient_checkpointing or args.num_generations % micro:
                raise InvalidOptionError(
                    "shared_prompt needs chunked_logprobs, gradient_checkpointing=False and "
                    f"micro_batch_size dividing num_generations ({args.num_generations}); got "
                    f"chunked_logprobs={self.chunked_logprobs}, "
                    f"gradient_checkpointing={args.gradient_checkpointing}, micro_batch_size={micro}"
                )
        if args.max_completion_length < self.max_new_tokens:
            raise InvalidOptionError(
                f"max_completion_length ({args.max_completion_length}) must be >= "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        return args


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
    ) -> list[float | None]:  # TRL's reward_func type; hopgym always has a reward
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
        resample_rounds: DAPO's dynamic sampling (:attr:`GRPORunConfig.resample_rounds`): groups
            of ``num_generations`` consecutive rows whose rewards are all equal are replaced by
            groups of questions drawn from ``question_pool``, for up to this many rounds.
        question_pool: the questions replacement groups are drawn from (the training questions).

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
        resample_rounds: int = 0,
        question_pool: Sequence[str] = (),
    ) -> None:
        if resample_rounds and not question_pool:
            raise InvalidOptionError("resample_rounds needs a question_pool to draw from")
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
        self.resample_rounds = resample_rounds
        self.question_pool = [str(q) for q in question_pool]
        self._rng = np.random.default_rng(seed)
        self.groups_resampled = 0
        self.steps_without_variance = 0

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to go on as a run never stopped: the calls made (each call's
        seed follows from it), the counters, and the state of the draws of dynamic sampling."""
        return {
            "calls": self.calls,
            "episodes": self.episodes,
            "seconds": self.seconds,
            "groups_resampled": self.groups_resampled,
            "steps_without_variance": self.steps_without_variance,
            "rng": self._rng.bit_generator.state,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Go on from :meth:`state` (saved with a checkpoint)."""
        self.calls = int(state["calls"])
        self.episodes = int(state["episodes"])
        self.seconds = float(state["seconds"])
        self.groups_resampled = int(state["groups_resampled"])
        self.steps_without_variance = int(state["steps_without_variance"])
        self._rng.bit_generator.state = state["rng"]

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        start = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._collector is None:
            engine = TRLVLLMEngine(trainer.vllm_generation) if getattr(trainer, "use_vllm", False) else None
            self._collector = RolloutCollector(model, self.tokenizer, self.env_fn, self.config, engine=engine)
        self._collector.model = model
        qids = [p if isinstance(p, str) else str(p) for p in prompts]
        seed = self.seed + 100_003 * self.calls
        trajs = self._collector.collect(qids, group_size=1, seed=seed)
        self.calls += 1
        self.episodes += len(trajs)
        first_draw = summarize(trajs)
        mode = "train" if model.training else "eval"
        resampled = 0
        if self.resample_rounds and mode == "train":
            trajs, resampled = self._resample(trajs, trainer.num_generations, seed)
        if mode == "train":
            self._warn_without_variance(trajs, trainer)
        metrics = getattr(trainer, "_metrics", None)
        if metrics is not None:
            for key, value in first_draw.items():
                metrics[mode][f"env/{key}"].append(value)
            if self.resample_rounds:
                metrics[mode]["env/groups_resampled"].append(resampled)
                metrics[mode]["env/zero_std_kept"].append(len(_flat_groups(trajs, trainer.num_generations)))
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

    def _warn_without_variance(self, trajs: list[Trajectory], trainer: Any) -> None:
        """Count, and warn in one line about, a step none of whose groups has reward variance."""
        size = trainer.num_generations
        groups = len(trajs) // size
        if groups and len(_flat_groups(trajs, size)) == groups:
            self.steps_without_variance += 1
            _log.warning(NO_VARIANCE, trainer.state.global_step + 1, groups, size)

    def _resample(self, trajs: list[Trajectory], group_size: int, seed: int) -> tuple[list[Trajectory], int]:
        """Replace groups without reward variance by groups of questions drawn from the pool."""
        trajs = list(trajs)
        resampled = 0
        for round_ in range(1, self.resample_rounds + 1):
            flat = _flat_groups(trajs, group_size)
            if not flat:
                break
            drawn = [str(q) for q in self._rng.choice(self.question_pool, size=len(flat))]
            new = self._collector.collect(  # type: ignore[union-attr]
                [q for q in drawn for _ in range(group_size)], group_size=1, seed=seed + 7_919 * round_
            )
            self.episodes += len(new)
            for k, start in enumerate(flat):
                trajs[start : start + group_size] = new[k * group_size : (k + 1) * group_size]
            resampled += len(flat)
        self.groups_resampled += resampled
        return trajs, resampled


def _flat_groups(trajs: Sequence[Trajectory], group_size: int) -> list[int]:
    """First rows of the groups of ``group_size`` consecutive trajectories whose rewards are all equal."""
    return [
        start
        for start in range(0, len(trajs), group_size)
        if max(t.reward for t in trajs[start : start + group_size])
        - min(t.reward for t in trajs[start : start + group_size])
        <= 1e-9
    ]


def make_curve_callback(path: str | Path) -> Any:
    """A ``TrainerCallback`` that appends every log line to ``path`` (jsonl)."""
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    log = Path(path)

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
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a") as fh:  # a progress log, appended a row at a time
                    fh.write(json.dumps(row) + "\n")

    return _Curve()


def plot_curves(
    history: Sequence[dict[str, Any]] | Mapping[str, Sequence[dict[str, Any]]],
    path: str | Path,
    keys: Sequence[str | tuple[str, str]] = CURVE_KEYS,
    title: str = "GRPO",
    columns: int | None = None,
    dpi: int = 90,
) -> Path | None:
    """One panel per key of ``keys`` against ``step``, in one PNG; ``None`` without matplotlib.

    Args:
        history: a log history (rows with ``step`` and the keys), or ``{label: history}`` to
            draw several runs on the same panels (GRPO beside rejection sampling).
        path: the PNG.
        keys: log keys, or ``(key, panel title)`` pairs; a key no row has is left out.
        title: the figure's title.
        columns: panels per row (``None``: every panel in one row).
        dpi: pixels per inch of the PNG (a panel is 3.2 x 3.0 inches).
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
    ncols = min(columns or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    # Constrained layout places the title, the panels and a legend outside them without overlap.
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(3.2 * ncols, 3.0 * nrows), squeeze=False, layout="constrained"
    )
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    handles: dict[str, Any] = {}  # one per run, from the first panel it is drawn in
    for ax, (key, name) in zip(list(axes.flat)[: len(panels)], panels, strict=True):
        for i, (label, rows) in enumerate(runs.items()):
            pts = [(h["step"], h[key]) for h in rows if key in h]
            if pts:  # a run keeps its colour in every panel, also where another run has no curve
                (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i % 10}")
                handles.setdefault(label, line)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    # A tall figure has its legend at the top, not after several rows of panels, titled with the
    # figure's title (constrained layout would set a suptitle over it).
    top = len(runs) > 1 and nrows > 2
    if not top:
        fig.suptitle(title, fontsize=10)
    if len(runs) > 1:  # outside the panels, where it hides no curve; in the runs' order
        labels = [label for label in runs if label in handles]
        fig.legend(
            [handles[k] for k in labels],
            labels,
            loc="outside upper center" if top else "outside lower center",
            ncol=min(len(labels), 3),
            fontsize=8,
            **({"title": title, "title_fontsize": 10, "frameon": False} if top else {}),
        )
    try:
        return save_figure(fig, path, dpi=dpi)
    finally:
        plt.close(fig)


@dataclass
class GRPOResult:
    """What :func:`train_grpo` returns (the model is trained in place).

    Attributes:
        trainer: TRL's ``GRPOTrainer`` after training (``trainer.args`` is the ``GRPOConfig``).
        history: the log rows (also in ``<output_dir>/log.jsonl``).
        rollout: the rollout function (``episodes``, ``seconds``: over the whole run, the
            steps before a resumed checkpoint included).
        seconds, cpu_seconds: wall-clock and process CPU seconds of :func:`train_grpo`, over
            the whole run (a resumed run's include those of the runs before, up to the
            checkpoint it resumed from).
    """

    trainer: Any
    history: list[dict[str, Any]]
    rollout: EnvRolloutFunc
    seconds: float = 0.0
    cpu_seconds: float = 0.0


#: The file beside each GRPO checkpoint's own that holds the rollout function's state
#: (:meth:`EnvRolloutFunc.state`) and the run's seconds so far.
ROLLOUT_STATE = "hopgym_rollout.json"


def train_grpo(
    model: Any,
    tokenizer: Any,
    env_fn: Callable[[], gym.Env],
    question_ids: Sequence[str],
    config: GRPORunConfig,
    callbacks: Sequence[Any] = (),
    on_trajectories: Callable[[list[Trajectory]], None] | None = None,
    lora: LoRAConfig | None = None,
) -> GRPOResult:
    """GRPO on ``model`` over env episodes of ``question_ids``, with TRL's ``GRPOTrainer``.

    Args:
        model: a causal LM (trained in place).
        tokenizer: its tokenizer.
        env_fn: builds one env with its reward wrappers; the reward is its return.
        question_ids: the training questions (ids of the env's task).
        config: the run's settings (TRL's in ``config.trl``).
        callbacks: extra ``TrainerCallback`` objects.
        on_trajectories: hook called with every batch of trajectories.
        lora: train a LoRA adapter instead of every weight (TRL's ``peft_config``); the trained
            policy is then ``result.trainer.model``, a ``PeftModel`` over ``model``, and TRL's KL
            reference (``beta > 0``) is the model with the adapter switched off.

    Returns:
        A :class:`GRPOResult`; ``<output_dir>/curves.png`` has the per-step curves (with
        ``config.plot``). TRL warns that ``rollout_func`` is experimental; set
        ``TRL_EXPERIMENTAL_SILENCE=1`` to silence it.
    """
    args = config.trl_config()  # refuses bad options before anything is built
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOTrainer
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("trl/datasets", "train") from exc

    if not question_ids:
        raise InvalidOptionError("no training questions")
    ref_model = None
    if config.track_kl:
        ref_model = frozen_copy(model)
    rollout = EnvRolloutFunc(
        env_fn,
        tokenizer,
        RolloutConfig(
            temperature=args.temperature,
            top_k=args.top_k,
            max_new_tokens=config.max_new_tokens,
            max_completion_tokens=args.max_completion_length,
            batch_size=config.rollout_batch_size,
            env_workers=config.env_workers,
        ),
        seed=args.seed,
        on_trajectories=on_trajectories,
        ref_model=ref_model,
        resample_rounds=config.resample_rounds,
        question_pool=question_ids,
    )
    dataset = Dataset.from_list([{"prompt": str(q)} for q in question_ids])
    out = Path(config.output_dir)
    if args.use_vllm:
        _prepare_vllm(model, tokenizer, env_fn, config, args, out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.jsonl"
    # TRL's resume_from_checkpoint (a field TrainingArguments has but does not act on): a
    # checkpoint-N folder of this run, or "last", the newest under output_dir (none: afresh).
    resume = checkpoint_to_resume(args.resume_from_checkpoint, out)
    kept: list[dict[str, Any]] = []
    before = {"seconds": 0.0, "cpu_seconds": 0.0}  # the run's seconds up to the checkpoint

    def run_seconds() -> dict[str, float]:  # the whole run's, the steps before a resume included
        return {
            "seconds": before["seconds"] + time.perf_counter() - t0,
            "cpu_seconds": before["cpu_seconds"] + time.process_time() - c0,
        }

    if resume is not None:
        step = json.loads((resume / "trainer_state.json").read_text())["global_step"]
        if log_path.exists():  # rows after the checkpoint are done again
            rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
            kept = [r for r in rows if r.get("step", 0) <= step]
        if (resume / ROLLOUT_STATE).exists():
            saved = json.loads((resume / ROLLOUT_STATE).read_text())
            rollout.load_state(saved["rollout"])
            before = {k: float(saved[k]) for k in before}
        else:  # a checkpoint from before the state was saved
            rollout.calls = step // args.num_iterations  # one rollout per generation batch
            if config.resample_rounds:
                _log.warning(
                    "%s has no %s (saved before hopgym kept it): dynamic sampling's draws after "
                    "it differ from those of a run that never stopped",
                    resume,
                    ROLLOUT_STATE,
                )

    class SaveRolloutState(TrainerCallback):  # type: ignore[misc]
        """With each checkpoint, the rollout function's state and the run's seconds so far."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                write_json(folder / ROLLOUT_STATE, {"rollout": rollout.state(), **run_seconds()})

    curve = make_curve_callback(log_path)
    if kept:
        curve.history.extend(kept)
        # The old log is replaced by its kept rows in one step: a crash here keeps the old one.
        write_text(log_path, "".join(json.dumps(r) + "\n" for r in kept))
    elif log_path.exists():
        log_path.unlink()
    cbs = [curve, SaveRolloutState(), *callbacks]
    if config.time_limit_s is not None:
        cbs.append(TimeLimitCallback.make(config.time_limit_s))
    # With beta > 0, TRL builds its KL reference by loading ``model.config._name_or_path``: a
    # model built in memory has none, and a loaded one may have trained since. The reference is
    # the starting weights, saved for TRL to load (then the name is put back).
    name_or_path = getattr(model.config, "_name_or_path", "")
    peft_config = lora.peft_config() if lora is not None else None
    if args.beta > 0 and peft_config is None:
        model.save_pretrained(out / "kl_reference")
        model.config._name_or_path = str(out / "kl_reference")
    trainer_class: Any = GRPOTrainer
    if config.chunked_logprobs:
        from hopgym.agents.grpo_logprobs import chunked_grpo_trainer

        trainer_class = chunked_grpo_trainer()
    try:
        trainer = trainer_class(
            model=model,
            reward_funcs=[EnvReward()],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=cbs,
            peft_config=peft_config,
        )
    finally:
        model.config._name_or_path = name_or_path
    trainer.shared_prompt = config.shared_prompt
    drop_log_printer(trainer, cbs)
    train_from(trainer, resume)
    if config.plot:
        plot_curves(curve.history, out / "curves.png", title=f"GRPO ({args.loss_type})")
    return GRPOResult(trainer, curve.history, rollout, **run_seconds())


def _prepare_vllm(
    model: Any, tokenizer: Any, env_fn: Callable[[], gym.Env], config: GRPORunConfig, args: Any, out: Path
) -> None:
    """Set up ``args`` (TRL's ``GRPOConfig``) and ``model`` for TRL's vLLM integration.

    TRL merges ``generation_kwargs`` into the sampling parameters in both modes; hopgym adds the
    per-turn limits under the user's own, so each turn stops at the protocol's stop tokens /
    strings and at ``max_new_tokens`` (not at TRL's ``max_completion_length``, which bounds the
    whole multi-turn trajectory here).
    """
    env = env_fn()
    stop_ids, stop_strings = stop_token_ids(tokenizer, getattr(qa_env(env).protocol, "stop", ()))
    env.close()
    gen: dict[str, Any] = {
        "max_tokens": config.max_new_tokens,
        "stop_token_ids": sorted(stop_ids),
        "skip_special_tokens": False,
    }
    if stop_strings:
        gen.update(stop=list(stop_strings), include_stop_str_in_output=True)
    args.generation_kwargs = {**gen, **(args.generation_kwargs or {})}
    if args.vllm_mode == "colocate" and not Path(str(model.name_or_path or "")).is_dir():
        # vLLM loads the weights by path (TRL passes model.name_or_path); a model built in
        # memory is saved first, then TRL syncs the live weights before every rollout.
        path = out / "vllm_init"
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        model.config._name_or_path = str(path)
        model.name_or_path = str(path)
