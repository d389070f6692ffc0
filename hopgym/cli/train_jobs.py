"""What ``hopgym train sft``, ``train grpo`` and ``train rft`` run, as functions of their configs.

::

    hopgym train sft  --env hopgym/Synthetic-v1 --model tiny --out runs/sft
    hopgym train grpo --env hopgym/Synthetic-v1 --model runs/sft --reward r3rag --out runs/grpo
    hopgym train rft  --env hopgym/Synthetic-v1 --model runs/sft --out runs/rft

Classes: :class:`TrainConfig` (the env, its questions and the policy, shared by every command),
:class:`SFTDataConfig` (the teacher data of ``train sft``). Functions: :func:`load_policy`,
:func:`run_sft`, :func:`run_grpo`, :func:`run_rft`. The command line (:mod:`hopgym.cli.train`)
builds these configs and :class:`~hopgym.agents.sft.SFTRunConfig`,
:class:`~hopgym.agents.grpo.GRPORunConfig`, :class:`~hopgym.agents.rft.RFTRunConfig`,
:class:`~hopgym.agents.teachers.TeacherConfig` and :class:`~hopgym.agents.tiny_lm.TinyLMConfig`
from its options.

``model="tiny"`` builds a small Llama from a :class:`~hopgym.agents.tiny_lm.TinyLMConfig` and a
word-level tokenizer from the env's task; any other value is a local folder or hub id loaded with
``AutoModelForCausalLM`` / ``AutoTokenizer``. SFT imitates a teacher (the oracle, or an
:class:`~hopgym.agents.teachers.ImperfectTeacher`) on the env's questions; GRPO improves the model
with the env's reward (a preset); rejection-sampling fine-tuning (:mod:`hopgym.agents.rft`) samples
G episodes per question from the policy, keeps the correct ones and trains on them with TRL's
SFTTrainer, round after round. All save the model and tokenizer in the run config's
``output_dir`` (GRPO and RFT also ``curves.png`` and ``log.jsonl``) and report held-out EM (GRPO
and RFT: before and after) when ``eval_split`` is given.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hopgym._atomic import write_json
from hopgym.agents.rollout import RolloutConfig
from hopgym.cli._common import env_id_field, env_kw_field
from hopgym.errors import InvalidOptionError

if TYPE_CHECKING:
    from hopgym.agents.grpo import GRPORunConfig
    from hopgym.agents.lora import LoRAConfig
    from hopgym.agents.rft import RFTRunConfig
    from hopgym.agents.sft import SFTRunConfig
    from hopgym.agents.teachers import TeacherConfig
    from hopgym.agents.tiny_lm import TinyLMConfig

__all__ = ["SFTDataConfig", "TrainConfig", "load_policy", "run_grpo", "run_rft", "run_sft"]


@dataclass
class TrainConfig:
    """The env a policy trains on, which of its questions, and the policy to start from.

    ``kw`` holds every ``gym.make`` keyword, env options included (the command line merges its
    ``--max-turns``, ``--reward`` ... into it). Without ``reward`` in ``kw``, SFT trains on the bare
    env (its teacher needs no reward) and GRPO and RFT on the ``default`` preset; ``reward=None``
    is the bare env.
    """

    model: str = field(
        metadata={
            "help": "tiny (a small Llama built from scratch, see --tiny-*), or a local folder or hub id.",
            "metavar": "ID",
        }
    )
    env: str = env_id_field()
    kw: dict[str, Any] = env_kw_field()
    split: str | None = field(
        default="train",
        metadata={
            "help": "Questions to train on: train, test, or none for all; the env must accept "
            "split= (the synthetic envs do)."
        },
    )
    questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions of the split."}
    )
    eval_split: str | None = field(
        default=None, metadata={"help": "Evaluate greedy EM on this split (e.g. test)."}
    )
    eval_n: int = field(default=100, metadata={"help": "Questions to evaluate."})

    def __post_init__(self) -> None:
        if self.split in ("none", "all", ""):
            self.split = None
        if "split" in self.kw:
            raise InvalidOptionError(
                f"kw split={self.kw['split']!r} and split={self.split!r} both set the env's split: "
                "give it once, as split (--split)"
            )
        if self.questions is not None and self.questions < 1:
            raise InvalidOptionError(f"questions must be >= 1 or None, got {self.questions}")
        if self.eval_n < 1:
            raise InvalidOptionError(f"eval_n must be >= 1, got {self.eval_n}")


@dataclass
class SFTDataConfig:
    """The teacher trajectories of ``train sft`` and its held-out evaluation."""

    teacher: Literal["oracle", "imperfect"] = field(
        default="oracle",
        metadata={"help": "The scripted teacher: the oracle, or an imperfect one (see --teacher-*)."},
    )
    episodes: int | None = field(
        default=None,
        metadata={"help": "Teacher episodes (default: steps x batch size, fresh examples every step)."},
    )
    max_new_tokens: int = field(
        default=RolloutConfig.max_new_tokens,
        metadata={"help": "Longest model turn in the held-out evaluation, in tokens."},
    )

    def __post_init__(self) -> None:
        if self.episodes is not None and self.episodes < 1:
            raise InvalidOptionError(f"episodes must be >= 1 or None, got {self.episodes}")


def _env_fn(train: TrainConfig, split: str | None, reward: str | None = None) -> Any:
    """``gym.make(train.env, **train.kw)`` on ``split``, with ``reward`` where ``kw`` sets none."""
    import gymnasium as gym

    import hopgym  # noqa: F401

    kwargs = {"reward": reward, **train.kw}
    if split is not None:
        kwargs["split"] = split

    def make() -> Any:
        return gym.make(train.env, **kwargs)

    return make


def load_policy(
    model: str, env: Any, tiny: TinyLMConfig | dict[str, Any] | None = None, seed: int = 0
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a fresh tiny model for ``"tiny"``, else loaded from a path/hub id.

    Args:
        model: ``"tiny"`` or a local folder / hub id.
        env: the env whose task the tiny tokenizer is built from.
        tiny: the tiny model's :class:`~hopgym.agents.tiny_lm.TinyLMConfig` (or its fields).
        seed: seeds the tiny model's initial weights.
    """
    if model == "tiny":
        from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

        if not isinstance(tiny, TinyLMConfig):
            tiny = TinyLMConfig(**(tiny or {}))
        task = env.unwrapped.task
        proto = env.unwrapped.protocol.name
        tok = build_tokenizer(task_texts(task, (proto,), env.unwrapped.max_turns))
        return build_model(tiny, tok, seed=seed), tok
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        from hopgym.errors import DependencyNotInstalled

        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(model), tok


def _question_ids(env: Any, limit: int | None) -> list[str]:
    ids = [s.id for s in env.unwrapped.task.samples]
    return ids[:limit] if limit else ids


def _eval_em(
    model: Any, tok: Any, env_fn: Any, qids: list[str], max_new_tokens: int, max_completion_tokens: int
) -> dict[str, float]:
    from hopgym.agents.rollout import RolloutCollector, summarize

    col = RolloutCollector(
        model,
        tok,
        env_fn,
        RolloutConfig(
            temperature=0.0, max_new_tokens=max_new_tokens, max_completion_tokens=max_completion_tokens
        ),
    )
    return summarize(col.collect(qids, 1, seed=0))


def _snapshot(model: Any) -> list[tuple[Any, Any]]:
    """Every parameter of ``model`` with a copy of its value (a LoRA wrap keeps the same tensors)."""
    return [(p, p.detach().clone()) for p in model.parameters()]


def _changed(before: list[tuple[Any, Any]]) -> int:
    return sum(not bool((p.detach() == old).all()) for p, old in before)


def _train_summary(before: list[tuple[Any, Any]], policy: Any) -> dict[str, Any]:
    """``changed_tensors`` (of the starting model's) and, for a LoRA policy, its parameter counts."""
    from hopgym.agents.lora import is_peft_model, trainable_parameters

    out: dict[str, Any] = {"changed_tensors": _changed(before)}
    if is_peft_model(policy):
        trainable, total = trainable_parameters(policy)
        out["lora"] = {"trainable_params": trainable, "total_params": total}
    return out


def _save(policy: Any, tok: Any, out: Path, configs: dict[str, Any], summary: dict[str, Any]) -> None:
    from hopgym.agents.lora import save_policy

    save_policy(policy, tok, out)
    meta = {
        "configs": {name: dataclasses.asdict(cfg) for name, cfg in configs.items() if cfg is not None},
        "summary": summary,
    }
    write_json(out / "hopgym_train.json", meta, default=str)


def run_sft(
    train: TrainConfig,
    sft: SFTRunConfig,
    data: SFTDataConfig | None = None,
    *,
    teacher: TeacherConfig | None = None,
    tiny: TinyLMConfig | None = None,
    lora: LoRAConfig | None = None,
) -> dict[str, Any]:
    """SFT on teacher trajectories (what ``hopgym train sft`` runs); returns a summary.

    Args:
        train: env, questions and starting model.
        sft: the trainer's settings (``output_dir`` receives the model).
        data: teacher, number of teacher episodes, evaluation turn length.
        teacher: the flaws of the imperfect teacher (``data.teacher == "imperfect"``).
        tiny: the architecture when ``train.model == "tiny"``.
        lora: train a LoRA adapter instead of every weight (``output_dir`` gets the merged model
            and ``adapter/``).
    """
    import numpy as np

    from hopgym.agents.progress import progress_callback
    from hopgym.agents.scripted import OracleAgent
    from hopgym.agents.sft import teacher_examples, train_sft
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
    from hopgym.agents.tool_calls import speak_tools

    data = data or SFTDataConfig()
    args = sft.trl_config()  # TRL's SFTConfig: refuses bad options before anything is built
    env_fn = _env_fn(train, train.split)
    env = env_fn()
    model, tok = load_policy(train.model, env, tiny, args.seed)
    qids = _question_ids(env, train.questions)
    rng = np.random.default_rng(args.seed)
    n = data.episodes or args.max_steps * args.per_device_train_batch_size
    draw = [qids[int(i)] for i in rng.integers(len(qids), size=n)]
    if data.teacher == "oracle":

        def agent_fn(e: Any) -> Any:
            return speak_tools(OracleAgent(e), e)
    else:
        tcfg = teacher or TeacherConfig()

        def agent_fn(e: Any) -> Any:
            return speak_tools(ImperfectTeacher(e, tcfg, seed=args.seed), e)

    examples = teacher_examples(env_fn, agent_fn, draw, tok, seed=args.seed)
    before = _snapshot(model)
    start = time.perf_counter()
    trainer = train_sft(model, tok, examples, sft, lora=lora, callbacks=[progress_callback("sft")])
    seconds = time.perf_counter() - start
    summary: dict[str, Any] = {
        "command": "sft",
        "examples": len(examples),
        "teacher_em": float(np.mean([e["em"] for e in examples])),
        "steps": trainer.state.global_step,
        "seconds": round(seconds, 2),
        "final_loss": next((h["loss"] for h in reversed(trainer.state.log_history) if "loss" in h), None),
        **_train_summary(before, trainer.model),
        "out": sft.output_dir,
    }
    if train.eval_split:
        eval_fn = _env_fn(train, train.eval_split)
        summary["eval"] = _eval_em(
            model, tok, eval_fn, _question_ids(eval_fn(), train.eval_n), data.max_new_tokens, args.max_length
        )
    _save(
        trainer.model,
        tok,
        Path(sft.output_dir),
        {"train": train, "sft": sft, "data": data, "teacher": teacher, "tiny": tiny, "lora": lora},
        summary,
    )
    return summary


def _on_policy_setup(
    train: TrainConfig,
    cfg: Any,
    tiny: TinyLMConfig | None,
    command: str,
    seed: int,
    max_completion_tokens: int,
) -> tuple[Any, Any, Any, list[str], dict[str, Any], Any]:
    """What ``train grpo`` and ``train rft`` start from: the env factory (the default preset
    when ``train.kw`` sets no reward), the policy, the question ids, the summary so far, and
    ``held_out(key)``, which writes greedy EM on ``train.eval_split`` under ``key`` (a no-op
    without one); it is called with ``"eval_before"`` here."""
    reward = train.kw.get("reward", "default")
    env_fn = _env_fn(train, train.split, reward)
    env = env_fn()
    model, tok = load_policy(train.model, env, tiny, seed)
    qids = _question_ids(env, train.questions)
    summary: dict[str, Any] = {"command": command, "reward": reward, "out": cfg.output_dir}
    eval_fn = _env_fn(train, train.eval_split, reward) if train.eval_split else None
    eval_q = _question_ids(eval_fn(), train.eval_n) if eval_fn is not None else []

    def held_out(key: str) -> None:
        if eval_fn is not None:
            summary[key] = _eval_em(model, tok, eval_fn, eval_q, cfg.max_new_tokens, max_completion_tokens)

    held_out("eval_before")
    return env_fn, model, tok, qids, summary, held_out


def run_grpo(
    train: TrainConfig,
    grpo: GRPORunConfig,
    *,
    tiny: TinyLMConfig | None = None,
    lora: LoRAConfig | None = None,
) -> dict[str, Any]:
    """GRPO with the env's reward (what ``hopgym train grpo`` runs); returns a summary.

    Args:
        train: env, questions and starting model; without ``reward`` in ``train.kw``, the
            default preset.
        grpo: the trainer's settings (``output_dir`` receives the model, log and curves).
        tiny: the architecture when ``train.model == "tiny"``.
        lora: train a LoRA adapter instead of every weight.
    """
    from hopgym.agents.grpo import train_grpo
    from hopgym.agents.progress import progress_callback

    args = grpo.trl_config()  # TRL's GRPOConfig: refuses bad options before anything is built
    env_fn, model, tok, qids, summary, held_out = _on_policy_setup(
        train, grpo, tiny, "grpo", args.seed, args.max_completion_length
    )
    before = _snapshot(model)
    start = time.perf_counter()
    run = train_grpo(model, tok, env_fn, qids, grpo, lora=lora, callbacks=[progress_callback("grpo")])
    summary["seconds"] = round(time.perf_counter() - start, 2)
    summary["steps"] = run.trainer.state.global_step
    summary.update(_train_summary(before, run.trainer.model))
    # steps with no group of varying reward: no policy gradient (a reason for changed_tensors 0)
    summary["steps_without_reward_variance"] = run.rollout.steps_without_variance
    summary["last_log"] = run.history[-1] if run.history else {}
    held_out("eval_after")
    _save(
        run.trainer.model,
        tok,
        Path(grpo.output_dir),
        {"train": train, "grpo": grpo, "tiny": tiny, "lora": lora},
        summary,
    )
    return summary


def run_rft(
    train: TrainConfig,
    rft: RFTRunConfig,
    *,
    tiny: TinyLMConfig | None = None,
    lora: LoRAConfig | None = None,
) -> dict[str, Any]:
    """Rejection-sampling fine-tuning (what ``hopgym train rft`` runs); returns a summary.

    Args:
        train: env, questions and starting model; without ``reward`` in ``train.kw``, the default preset
            (whose exact match decides what is kept unless ``rft.min_reward`` is set).
        rft: the run's settings (``output_dir`` receives the model, log and curves).
        tiny: the architecture when ``train.model == "tiny"``.
        lora: train a LoRA adapter instead of every weight.
    """
    from hopgym.agents.progress import StepProgress
    from hopgym.agents.rft import train_rft

    env_fn, model, tok, qids, summary, held_out = _on_policy_setup(
        train, rft, tiny, "rft", rft.seed, rft.max_completion_tokens
    )
    before = _snapshot(model)
    bar = StepProgress("rft", rft.max_rounds)
    try:
        res = train_rft(
            model, tok, env_fn, qids, rft, lora=lora, on_round=lambda row: bar.update(row["step"], row)
        )
    finally:
        bar.close()
    summary.update(
        rounds=res.rounds,
        episodes=res.episodes,
        kept=res.kept,
        optimizer_steps=res.optimizer_steps,
        seconds=round(res.seconds, 2),
        cpu_seconds=round(res.cpu_seconds, 2),
    )
    summary.update(_train_summary(before, res.model))
    summary["last_log"] = res.history[-1] if res.history else {}
    held_out("eval_after")
    _save(
        res.model,
        tok,
        Path(rft.output_dir),
        {"train": train, "rft": rft, "tiny": tiny, "lora": lora},
        summary,
    )
    return summary
