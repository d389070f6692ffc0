"""Rejection-sampling fine-tuning (RFT): sample, keep the correct episodes, SFT on them, repeat.

Classes: :class:`RFTRunConfig`, :class:`RFTResult`. Functions: :func:`train_rft`,
:func:`keep_correct`, :func:`keep_best`, :func:`trajectory_example`.

Each round draws ``questions_per_round`` training questions (a seeded shuffle, cycled), samples
``group_size`` episodes of each from the *current* policy with
:class:`~hopgym.agents.rollout.RolloutCollector` (the env's reward wrappers apply), keeps the
episodes the env marks correct (:func:`keep_correct`; with ``keep="best"`` only those of each
question's highest return, :func:`keep_best`, so cost terms of the reward decide too) and trains
on them with TRL's
``SFTTrainer`` (:func:`~hopgym.agents.sft.train_sft`), the env's tokens masked out of the loss
exactly as in GRPO. One AdamW optimizer lives across rounds. This is the baseline GRPO must beat
to show that the gradient through the advantages matters: it uses the same rollouts, the same
questions and the same reward, but only imitates its own successes (STaR / ReST-style expert
iteration; RAFT).

Budget: a round samples ``questions_per_round * group_size`` episodes, the same as a GRPO step
with the same ``B`` and ``G``, so ``max_rounds`` equal to GRPO's ``max_steps`` is the same number
of sampled episodes; ``time_limit_s`` stops it by seconds instead (``time_limit_clock``).

Checkpoints: with ``save_rounds``, the run's state after each round (weights, optimizer, the
history and counts) is written to ``<output_dir>/round-N`` (the newest only, written to a
temporary folder and renamed); ``resume_from_checkpoint="last"`` (TRL's word) goes on from the
newest one there is (none: afresh), with the same questions and sampling seeds as a run that
never stopped.

Logged each round (``log.jsonl``, the :class:`RFTResult` history and ``curves.png``): the same
``env/...`` and ``policy/...`` keys as GRPO (:func:`~hopgym.agents.rollout.summarize`,
:func:`~hopgym.agents.rollout.policy_stats`), plus ``rft/kept``, ``rft/kept_rate``, ``loss``,
``episodes``, ``optimizer_steps`` and ``cpu_seconds``.

Example:
    >>> RFTRunConfig(max_rounds=4, questions_per_round=2, group_size=4).episodes_per_round
    8
    >>> RFTRunConfig(group_size=0)
    Traceback (most recent call last):
    ...
    hopgym.errors.InvalidOptionError: group_size must be >= 1, got 0
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym._atomic import write_text
from hopgym.agents.lora import LoRAConfig, apply_lora
from hopgym.agents.progress import quiet_logs
from hopgym.agents.rollout import (
    RolloutCollector,
    RolloutConfig,
    Trajectory,
    frozen_copy,
    policy_stats,
    summarize,
)
from hopgym.agents.sft import CLOCKS, SFTRunConfig, check_time_limit, train_sft
from hopgym.errors import DependencyNotInstalled, InvalidOptionError

__all__ = ["RFTRunConfig", "RFTResult", "train_rft", "keep_correct", "keep_best", "trajectory_example"]

#: What a round keeps of its episodes (``RFTRunConfig.keep``).
KEEP: tuple[str, ...] = ("correct", "best")


#: The ``SFTConfig`` fields each round sets itself (``RFTRunConfig.trl`` may not hold them).
ROUND_FIELDS: tuple[str, ...] = (
    "max_steps",
    "per_device_train_batch_size",
    "learning_rate",
    "warmup_steps",
    "lr_scheduler_type",
    "max_length",
    "logging_steps",
    "seed",
)


@dataclass
class RFTRunConfig:
    """Settings of a rejection-sampling fine-tuning run."""

    output_dir: str = field(
        default="runs/rft",
        metadata={"help": "Where log.jsonl and curves.png go (and the model, from hopgym train rft)."},
    )
    max_rounds: int = field(
        default=100,
        metadata={"help": "Rounds of sample -> filter -> SFT (GRPO's max_steps for the same episodes)."},
    )
    questions_per_round: int = field(default=8, metadata={"help": "Questions per round (B)."})
    group_size: int = field(default=8, metadata={"help": "Episodes per question (G)."})
    min_reward: float | None = field(
        default=None,
        metadata={
            "help": "Keep an episode when its return is at least this; None keeps the episodes "
            "whose answer is an exact match (the env's correctness).",
            "cli_help": "Keep an episode when its return is at least this; left out (or none): "
            "keep the episodes whose answer is an exact match (the env's correctness).",
        },
    )
    keep: str = field(
        default="correct",
        metadata={
            "help": "'correct': every episode kept by that rule; 'best': of those, only each "
            "question's highest-return ones (ties kept), so the reward's cost terms choose too.",
            "choices": KEEP,
        },
    )
    epochs: int = field(default=1, metadata={"help": "Passes over each round's kept episodes."})
    batch_size: int = field(default=16, metadata={"help": "SFT examples per optimizer step."})
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (> 0)."})
    sample_top_k: int = field(
        default=0, metadata={"help": "Sample each token from the k likeliest (0: from all)."}
    )
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
    time_limit_s: float | None = field(
        default=None, metadata={"help": "Stop after this many seconds (checked between rounds)."}
    )
    time_limit_clock: str = field(
        default="process",
        metadata={"help": "'wall' or 'process' (CPU seconds of this process).", "choices": tuple(CLOCKS)},
    )
    seed: int = field(default=0, metadata={"help": "Seed for question order and sampling."})
    save_rounds: bool = field(
        default=False,
        metadata={"help": "Save the run's state after every round in output_dir/round-N (the newest)."},
    )
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "'last': go on from the newest round-N under output_dir (none: afresh), or a "
            "round-N folder; None: afresh.",
            "cli_help": "'last': go on from the newest round-N under output_dir (none: afresh), "
            "or a round-N folder; left out: afresh.",
        },
    )
    track_kl: bool = field(
        default=True,
        metadata={"help": "Log policy/kl_ref (to the starting model) and policy/entropy each round."},
    )
    plot: bool = field(default=True, metadata={"help": "Write curves.png next to the run."})
    trl: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Fields of TRL's SFTConfig for each round's SFT, e.g. --trl bf16=True "
            "weight_decay=0.01; values read as Python literals. The round sets "
            + ", ".join(ROUND_FIELDS)
            + " itself.",
            "metavar": "FIELD=VALUE",
        },
    )

    def __post_init__(self) -> None:
        for name in (
            "max_rounds",
            "questions_per_round",
            "group_size",
            "epochs",
            "batch_size",
            "max_new_tokens",
            "rollout_batch_size",
        ):
            if getattr(self, name) < 1:
                raise InvalidOptionError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise InvalidOptionError(f"learning_rate must be > 0, got {self.learning_rate}")
        if (
            isinstance(self.env_workers, bool)
            or not isinstance(self.env_workers, int)
            or self.env_workers < 0
        ):
            raise InvalidOptionError(f"env_workers must be an int >= 0, got {self.env_workers!r}")
        if self.temperature <= 0:
            raise InvalidOptionError(
                f"temperature must be > 0: rejection sampling needs diverse samples, got {self.temperature}"
            )
        if self.max_completion_tokens < self.max_new_tokens:
            raise InvalidOptionError(
                f"max_completion_tokens ({self.max_completion_tokens}) must be >= "
                f"max_new_tokens ({self.max_new_tokens})"
            )
        check_time_limit(self.time_limit_s, self.time_limit_clock)
        if self.keep not in KEEP:
            raise InvalidOptionError(f"keep must be one of {KEEP}, got {self.keep!r}")
        for key in self.trl:
            if key in ROUND_FIELDS:
                raise InvalidOptionError(
                    f"trl {key}={self.trl[key]!r}: each round sets {key} itself (from "
                    "batch_size, learning_rate, seed and the kept episodes)"
                )

    @property
    def episodes_per_round(self) -> int:
        """Episodes sampled per round: ``questions_per_round * group_size``."""
        return self.questions_per_round * self.group_size


@dataclass
class RFTResult:
    """What :func:`train_rft` did (the model is trained in place).

    Attributes:
        history: one log row per round.
        rounds: rounds run.
        episodes: episodes sampled (the budget).
        kept: episodes kept and trained on.
        optimizer_steps: SFT optimizer steps over all rounds.
        seconds, cpu_seconds: wall-clock and process CPU seconds of the whole run.
        rollout_seconds: wall-clock seconds spent sampling.
        model_tokens: model tokens sampled.
        model: the trained policy: the model given, or with ``lora`` a ``PeftModel`` over it.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    rounds: int = 0
    episodes: int = 0
    kept: int = 0
    optimizer_steps: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    rollout_seconds: float = 0.0
    model_tokens: int = 0
    model: Any = None


def _value(item: Any, name: str) -> float:
    return float(item[name] if isinstance(item, dict) else getattr(item, name))


def keep_correct(items: Iterable[Any], min_reward: float | None = None) -> list[Any]:
    """The episodes the env marks correct: exact match 1, or a return of at least ``min_reward``.

    Works on :class:`~hopgym.agents.rollout.Trajectory` objects and on teacher examples (dicts
    with ``em`` and ``reward`` from :func:`~hopgym.agents.sft.teacher_examples`), so RFT and the
    filtered-teacher baseline keep episodes by the same rule.

    Example:
        >>> keep_correct([{"em": 1.0, "reward": 1.0}, {"em": 0.0, "reward": 0.2}])
        [{'em': 1.0, 'reward': 1.0}]
        >>> len(keep_correct([{"em": 0.0, "reward": 0.2}], min_reward=0.1))
        1
    """
    if min_reward is None:
        return [x for x in items if _value(x, "em") >= 1.0]
    return [x for x in items if _value(x, "reward") >= min_reward]


def keep_best(trajs: Sequence[Trajectory], min_reward: float | None = None) -> list[Trajectory]:
    """Of each question's episodes that :func:`keep_correct` keeps, those of the highest return.

    With cost terms in the reward (searches, routing), this keeps the cheapest right episodes of
    each question's group (reward-ranked fine-tuning, RAFT), not every right one.

    Example:
        >>> ts = [Trajectory("a", [], em=1.0, reward=0.9), Trajectory("a", [], em=1.0, reward=0.7),
        ...       Trajectory("b", [], em=0.0, reward=0.0), Trajectory("b", [], em=1.0, reward=0.9)]
        >>> [(t.question_id, t.reward) for t in keep_best(ts)]
        [('a', 0.9), ('b', 0.9)]
    """
    kept = keep_correct(trajs, min_reward)
    best: dict[str, float] = {}
    for t in kept:
        best[t.question_id] = max(t.reward, best.get(t.question_id, -math.inf))
    return [t for t in kept if t.reward >= best[t.question_id]]


def trajectory_example(traj: Trajectory) -> dict[str, Any]:
    """A sampled episode as an SFT example: its own token ids, loss only on the model's tokens.

    Example:
        >>> t = Trajectory("q", [1, 2], completion_ids=[3, 4, 5], logprobs=[-1.0, 0.0, 0.0],
        ...                mask=[1, 0, 0])
        >>> trajectory_example(t)
        {'input_ids': [1, 2, 3, 4, 5], 'completion_mask': [0, 0, 1, 0, 0]}
    """
    return {
        "input_ids": list(traj.prompt_ids) + list(traj.completion_ids),
        "completion_mask": [0] * len(traj.prompt_ids) + list(traj.mask),
    }


def _question_stream(question_ids: Sequence[str], seed: int) -> Iterable[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    while True:
        for i in rng.permutation(len(question_ids)):
            yield str(question_ids[int(i)])


def train_rft(
    model: Any,
    tokenizer: Any,
    env_fn: Callable[[], gym.Env],
    question_ids: Sequence[str],
    config: RFTRunConfig,
    on_trajectories: Callable[[list[Trajectory]], None] | None = None,
    lora: LoRAConfig | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
) -> RFTResult:
    """Rejection-sampling fine-tuning of ``model`` on env episodes of ``question_ids``.

    Args:
        model: a causal LM (trained in place).
        tokenizer: its tokenizer.
        env_fn: builds one env with its reward wrappers.
        question_ids: the training questions (ids of the env's task).
        config: the run's settings.
        on_trajectories: hook called with every round's sampled trajectories.
        lora: train a LoRA adapter instead of every weight. The model is wrapped once, before
            the first round (:func:`~hopgym.agents.lora.apply_lora`), since the one optimizer
            that lives across rounds must hold the adapter's parameters; each round's
            ``SFTTrainer`` then gets the ``PeftModel`` itself.
        on_round: hook called with every round's log row, after the round (``hopgym train rft``
            shows progress with it).

    Returns:
        An :class:`RFTResult`; ``<output_dir>/log.jsonl`` and ``curves.png`` hold the curves.
    """
    try:
        import torch
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("torch", "train") from exc
    from hopgym.agents.grpo import plot_curves

    if not question_ids:
        raise InvalidOptionError("no training questions")
    SFTRunConfig(trl=config.trl).trl_config()  # refuses bad TRL fields before any sampling
    now = CLOCKS[config.time_limit_clock]
    t_wall, t_cpu, t_budget = time.perf_counter(), time.process_time(), now()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    resume = round_to_resume(config.resume_from_checkpoint, out)
    log_path = out / "log.jsonl"
    if resume is None and log_path.exists():  # resumed: replaced below by the saved rows
        log_path.unlink()
    ref_model = None
    if config.track_kl:
        ref_model = frozen_copy(model)
    model = apply_lora(model, lora)
    rollout_cfg = RolloutConfig(
        temperature=config.temperature,
        top_k=config.sample_top_k,
        max_new_tokens=config.max_new_tokens,
        max_completion_tokens=config.max_completion_tokens,
        batch_size=config.rollout_batch_size,
        env_workers=config.env_workers,
    )
    collector = RolloutCollector(model, tokenizer, env_fn, rollout_cfg)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.learning_rate, weight_decay=0.0
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    questions = iter(_question_stream(question_ids, config.seed))
    res = RFTResult(model=model)
    if resume is not None:
        _load_round(resume, model, optimizer, res)
        for _ in range(res.rounds * config.questions_per_round):  # the rounds' questions
            next(questions)
        # The clocks go on from the stopped run's (its time counts against time_limit_s too).
        t_wall, t_cpu = t_wall - res.seconds, t_cpu - res.cpu_seconds
        t_budget -= res.cpu_seconds if config.time_limit_clock == "process" else res.seconds
        # The log is replaced by the saved round's rows in one step (rows after it are run again).
        write_text(log_path, "".join(json.dumps(row) + "\n" for row in res.history))
    for rnd in range(res.rounds, config.max_rounds):
        if config.time_limit_s is not None and now() - t_budget >= config.time_limit_s:
            break
        qids = [next(questions) for _ in range(config.questions_per_round)]
        t0 = time.perf_counter()
        trajs = collector.collect(qids, group_size=config.group_size, seed=config.seed + 100_003 * rnd)
        res.rollout_seconds += time.perf_counter() - t0
        res.episodes += len(trajs)
        res.model_tokens += sum(sum(t.mask) for t in trajs)
        if on_trajectories is not None:
            on_trajectories(trajs)
        row: dict[str, Any] = {"step": rnd + 1}
        row.update({f"env/{k}": v for k, v in summarize(trajs).items()})
        row.update({f"policy/{k}": v for k, v in policy_stats(trajs, ref_model, config.temperature).items()})
        kept = (keep_best if config.keep == "best" else keep_correct)(trajs, config.min_reward)
        row["rft/kept"] = len(kept)
        row["rft/kept_rate"] = len(kept) / len(trajs)
        if kept:
            examples = [trajectory_example(t) for t in kept]
            steps = math.ceil(len(examples) * config.epochs / config.batch_size)
            trainer = train_sft(
                model,
                tokenizer,
                examples,
                SFTRunConfig(
                    output_dir=str(out / "sft_round"),
                    trl={
                        **config.trl,
                        "max_steps": steps,
                        "per_device_train_batch_size": min(config.batch_size, len(examples)),
                        "learning_rate": config.learning_rate,
                        "warmup_steps": 0,
                        "lr_scheduler_type": "constant",
                        "max_length": max(len(e["input_ids"]) for e in examples),
                        "logging_steps": steps,
                        "seed": config.seed + rnd,
                    },
                ),
                optimizers=(optimizer, scheduler),
                callbacks=[quiet_logs()],
            )
            res.optimizer_steps += trainer.state.global_step
            res.kept += len(kept)
            losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
            if losses:
                row["loss"] = float(losses[-1])
        res.rounds = rnd + 1
        row.update(
            episodes=res.episodes,
            optimizer_steps=res.optimizer_steps,
            cpu_seconds=time.process_time() - t_cpu,
        )
        res.history.append(row)
        with log_path.open("a") as fh:  # a progress log, appended a row at a time
            fh.write(json.dumps(row) + "\n")
        if config.save_rounds:
            res.seconds, res.cpu_seconds = time.perf_counter() - t_wall, time.process_time() - t_cpu
            _save_round(out, res.rounds, model, optimizer, res)
        if on_round is not None:
            on_round(row)
    res.seconds = time.perf_counter() - t_wall
    res.cpu_seconds = time.process_time() - t_cpu
    if config.plot:
        plot_curves(res.history, out / "curves.png", title="rejection sampling (RFT)")
    return res


#: What a round folder keeps of :class:`RFTResult` besides the weights and the optimizer.
_ROUND_COUNTS = (
    "rounds",
    "episodes",
    "kept",
    "optimizer_steps",
    "seconds",
    "cpu_seconds",
    "rollout_seconds",
    "model_tokens",
    "history",
)
#: Written last into a round folder: a folder without it is a save cut short.
_ROUND_STATE = "rft_state.json"


def round_to_resume(value: str | None, out: Path) -> Path | None:
    """The ``round-N`` folder that ``resume_from_checkpoint`` names, or ``None`` (afresh).

    ``value``: ``"last"``, the newest complete round folder under ``out`` (none: ``None``), or a
    folder path.

    Raises:
        hopgym.errors.InvalidOptionError: ``value`` names a folder that is not a saved round.
    """
    if value is None:
        return None
    if value == "last":
        found = sorted(
            (p for p in out.glob("round-*") if p.name[6:].isdigit() and (p / _ROUND_STATE).is_file()),
            key=lambda p: int(p.name[6:]),
        )
        return found[-1] if found else None
    path = Path(value)
    if not (path / _ROUND_STATE).is_file():
        raise InvalidOptionError(
            f"resume_from_checkpoint: {path} is not a saved RFT round (no {_ROUND_STATE})"
        )
    return path


def _save_round(out: Path, rounds: int, model: Any, optimizer: Any, res: RFTResult) -> None:
    """The run's state after ``rounds`` rounds, in ``out/round-<rounds>`` (older ones removed)."""
    import shutil

    import torch

    tmp = out / f".round-{rounds}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(model.state_dict(), tmp / "model.pt")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {k: getattr(res, k) for k in _ROUND_COUNTS}
    (tmp / _ROUND_STATE).write_text(json.dumps(state))
    final = out / f"round-{rounds}"
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in out.glob("round-*"):
        if old != final:
            shutil.rmtree(old)


def _load_round(path: Path, model: Any, optimizer: Any, res: RFTResult) -> None:
    """Weights, optimizer and counts of a saved round into ``model``, ``optimizer`` and ``res``."""
    import torch

    model.load_state_dict(torch.load(path / "model.pt", map_location="cpu"))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
    for key, value in json.loads((path / _ROUND_STATE).read_text()).items():
        setattr(res, key, value)
