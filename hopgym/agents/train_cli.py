"""``hopgym train sft|grpo|rft``: :func:`add_commands` for ``hopgym.cli``.

::

    hopgym train sft  --env hopgym/Synthetic-v0 --model tiny --out runs/sft
    hopgym train grpo --env hopgym/Synthetic-v0 --model runs/sft --reward r3rag --out runs/grpo
    hopgym train rft  --env hopgym/Synthetic-v0 --model runs/sft --out runs/rft

``--model tiny`` builds a small Llama from :class:`~hopgym.agents.tiny_lm.TinyLMConfig` (set its
fields with ``--tiny KEY=VALUE``) and a word-level tokenizer from the env's task; any other value is
a local folder or hub id loaded with ``AutoModelForCausalLM`` / ``AutoTokenizer``. ``train sft``
imitates a teacher (``--teacher oracle`` or an imperfect one with ``--teacher-kw early_answer=0.5``)
on the env's questions; ``train grpo`` improves the model with the env's reward (``--reward``
preset); ``train rft`` does rejection-sampling fine-tuning (:mod:`hopgym.agents.rft`: sample G
episodes per question, SFT on the correct ones, repeat). All save the model and tokenizer in
``--out`` (``grpo`` and ``rft`` also ``curves.png`` and ``log.jsonl``) and print held-out EM before
and after when ``--eval-split`` is given.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

__all__ = ["add_commands", "load_policy", "run_sft", "run_grpo", "run_rft"]


def _env_fn(env_id: str, kw: dict[str, Any], reward: str | None, split: str | None) -> Any:
    import gymnasium as gym

    import hopgym  # noqa: F401

    kwargs = dict(kw)
    if split is not None:
        kwargs["split"] = split
    kwargs["reward"] = None if reward in (None, "none") else reward

    def make() -> Any:
        return gym.make(env_id, **kwargs)

    return make


def load_policy(model: str, env: Any, tiny_kw: dict[str, Any] | None = None,
                seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a fresh tiny model for ``"tiny"``, else loaded from a path/hub id."""
    if model == "tiny":
        from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

        task = env.unwrapped.task
        proto = env.unwrapped.protocol.name
        tok = build_tokenizer(task_texts(task, (proto,), env.unwrapped.max_turns))
        return build_model(TinyLMConfig(**(tiny_kw or {})), tok, seed=seed), tok
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        from hopgym.corpora.retrieval import DependencyNotInstalled

        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(model), tok


def _question_ids(env: Any, limit: int | None) -> list[str]:
    ids = [s.id for s in env.unwrapped.task.samples]
    return ids[:limit] if limit else ids


def _eval_em(model: Any, tok: Any, env_fn: Any, qids: list[str], max_new_tokens: int,
             max_completion_tokens: int) -> dict[str, float]:
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig, summarize

    col = RolloutCollector(model, tok, env_fn, RolloutConfig(
        temperature=0.0, max_new_tokens=max_new_tokens,
        max_completion_tokens=max_completion_tokens))
    return summarize(col.collect(qids, 1, seed=0))


def _save(trainer: Any, model: Any, tok: Any, out: Path, meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "hopgym_train.json").write_text(json.dumps(meta, indent=2, default=str))


def run_sft(args: argparse.Namespace) -> dict[str, Any]:
    """``hopgym train sft``; returns the summary it prints."""
    import numpy as np

    from hopgym.agents.scripted import OracleAgent
    from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
    from hopgym.cli import parse_kwargs

    kw = parse_kwargs(args.kw)
    env_fn = _env_fn(args.env, kw, args.reward, args.split)
    env = env_fn()
    model, tok = load_policy(args.model, env, parse_kwargs(args.tiny), args.seed)
    qids = _question_ids(env, args.questions)
    rng = np.random.default_rng(args.seed)
    n = args.episodes or args.steps * args.batch_size
    draw = [qids[int(i)] for i in rng.integers(len(qids), size=n)]
    if args.teacher == "oracle":
        def agent_fn(e: Any) -> Any:
            return OracleAgent(e)
    else:
        tcfg = TeacherConfig(**parse_kwargs(args.teacher_kw))

        def agent_fn(e: Any) -> Any:
            return ImperfectTeacher(e, tcfg, seed=args.seed)
    examples = teacher_examples(env_fn, agent_fn, draw, tok, seed=args.seed)
    cfg = SFTRunConfig(output_dir=args.out, max_steps=args.steps, batch_size=args.batch_size,
                       learning_rate=args.lr, warmup_steps=min(10, args.steps - 1),
                       max_length=args.max_length, logging_steps=args.logging_steps,
                       seed=args.seed, time_limit_s=args.time_limit)
    before = [p.detach().clone() for p in model.parameters()]
    start = time.perf_counter()
    trainer = train_sft(model, tok, examples, cfg)
    seconds = time.perf_counter() - start
    changed = sum(not bool((a == b.detach()).all()) for a, b in zip(before, model.parameters(),
                                                                    strict=True))
    summary: dict[str, Any] = {
        "command": "sft", "examples": len(examples),
        "teacher_em": float(np.mean([e["em"] for e in examples])),
        "steps": trainer.state.global_step, "seconds": round(seconds, 2),
        "final_loss": next((h["loss"] for h in reversed(trainer.state.log_history)
                            if "loss" in h), None),
        "changed_tensors": changed, "out": args.out,
    }
    if args.eval_split:
        eval_fn = _env_fn(args.env, kw, args.reward, args.eval_split)
        summary["eval"] = _eval_em(model, tok, eval_fn, _question_ids(eval_fn(), args.eval_n),
                                   args.max_new_tokens, args.max_length)
    _save(trainer, model, tok, Path(args.out), {"args": vars(args), "summary": summary})
    print(json.dumps(summary, indent=2, default=str))
    return summary


def run_grpo(args: argparse.Namespace) -> dict[str, Any]:
    """``hopgym train grpo``; returns the summary it prints."""
    from hopgym.agents.grpo import GRPORunConfig, train_grpo
    from hopgym.cli import parse_kwargs

    kw = parse_kwargs(args.kw)
    reward = args.reward or "default"
    env_fn = _env_fn(args.env, kw, reward, args.split)
    env = env_fn()
    model, tok = load_policy(args.model, env, parse_kwargs(args.tiny), args.seed)
    qids = _question_ids(env, args.questions)
    cfg = GRPORunConfig(
        output_dir=args.out, max_steps=args.steps, questions_per_step=args.questions_per_step,
        group_size=args.group_size, learning_rate=args.lr, beta=args.beta,
        temperature=args.temperature, max_new_tokens=args.max_new_tokens,
        max_completion_tokens=args.max_length, logging_steps=args.logging_steps,
        save_steps=args.save_steps, seed=args.seed, time_limit_s=args.time_limit)
    summary: dict[str, Any] = {"command": "grpo", "reward": reward, "out": args.out}
    eval_fn = None
    if args.eval_split:
        eval_fn = _env_fn(args.env, kw, reward, args.eval_split)
        eval_q = _question_ids(eval_fn(), args.eval_n)
        summary["eval_before"] = _eval_em(model, tok, eval_fn, eval_q, args.max_new_tokens,
                                          args.max_length)
    before = [p.detach().clone() for p in model.parameters()]
    start = time.perf_counter()
    trainer = train_grpo(model, tok, env_fn, qids, cfg)
    summary["seconds"] = round(time.perf_counter() - start, 2)
    summary["steps"] = trainer.state.global_step
    summary["changed_tensors"] = sum(
        not bool((a == b.detach()).all()) for a, b in zip(before, model.parameters(), strict=True))
    summary["last_log"] = trainer.hopgym_history[-1] if trainer.hopgym_history else {}
    if eval_fn is not None:
        summary["eval_after"] = _eval_em(model, tok, eval_fn, eval_q, args.max_new_tokens,
                                         args.max_length)
    _save(trainer, model, tok, Path(args.out), {"args": vars(args), "summary": summary})
    print(json.dumps(summary, indent=2, default=str))
    return summary


def run_rft(args: argparse.Namespace) -> dict[str, Any]:
    """``hopgym train rft``; returns the summary it prints."""
    from hopgym.agents.rft import RFTRunConfig, train_rft
    from hopgym.cli import parse_kwargs

    kw = parse_kwargs(args.kw)
    reward = args.reward or "default"
    env_fn = _env_fn(args.env, kw, reward, args.split)
    env = env_fn()
    model, tok = load_policy(args.model, env, parse_kwargs(args.tiny), args.seed)
    qids = _question_ids(env, args.questions)
    cfg = RFTRunConfig(
        output_dir=args.out, max_rounds=args.steps, questions_per_round=args.questions_per_step,
        group_size=args.group_size, min_reward=args.min_reward, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.lr, temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, max_completion_tokens=args.max_length,
        time_limit_s=args.time_limit, seed=args.seed)
    summary: dict[str, Any] = {"command": "rft", "reward": reward, "out": args.out}
    eval_fn = None
    if args.eval_split:
        eval_fn = _env_fn(args.env, kw, reward, args.eval_split)
        eval_q = _question_ids(eval_fn(), args.eval_n)
        summary["eval_before"] = _eval_em(model, tok, eval_fn, eval_q, args.max_new_tokens,
                                          args.max_length)
    before = [p.detach().clone() for p in model.parameters()]
    res = train_rft(model, tok, env_fn, qids, cfg)
    summary.update(rounds=res.rounds, episodes=res.episodes, kept=res.kept,
                   optimizer_steps=res.optimizer_steps, seconds=round(res.seconds, 2),
                   cpu_seconds=round(res.cpu_seconds, 2))
    summary["changed_tensors"] = sum(
        not bool((a == b.detach()).all()) for a, b in zip(before, model.parameters(), strict=True))
    summary["last_log"] = res.history[-1] if res.history else {}
    if eval_fn is not None:
        summary["eval_after"] = _eval_em(model, tok, eval_fn, eval_q, args.max_new_tokens,
                                         args.max_length)
    _save(None, model, tok, Path(args.out), {"args": vars(args), "summary": summary})
    print(json.dumps(summary, indent=2, default=str))
    return summary


def _common(p: argparse.ArgumentParser, default_steps: int, default_lr: float) -> None:
    p.add_argument("--env", default="hopgym/Synthetic-v0", help="env id")
    p.add_argument("--kw", nargs="*", default=[], metavar="KEY=VALUE",
                   help="env keyword arguments, e.g. --kw hops=2 kinds=bridge")
    p.add_argument("--reward", default=None, help="reward preset (default: the env's default)")
    p.add_argument("--model", required=True,
                   help="'tiny' (build from scratch), or a local folder / hub id")
    p.add_argument("--tiny", nargs="*", default=[], metavar="KEY=VALUE",
                   help="TinyLMConfig fields for --model tiny, e.g. --tiny layers=2 hidden=64")
    p.add_argument("--out", required=True, help="output folder (model, tokenizer, logs)")
    p.add_argument("--split", default="train", help="questions to train on ('train', 'test' or "
                   "'none' for all); the env must accept split= (synthetic envs do)")
    p.add_argument("--questions", type=int, default=None, help="use only the first N questions")
    p.add_argument("--eval-split", default=None, help="evaluate greedy EM on this split")
    p.add_argument("--eval-n", type=int, default=100, help="questions to evaluate")
    p.add_argument("--steps", type=int, default=default_steps, help="optimizer steps")
    p.add_argument("--lr", type=float, default=default_lr, help="learning rate")
    p.add_argument("--max-length", type=int, default=1024, help="longest sequence in tokens")
    p.add_argument("--max-new-tokens", type=int, default=48, help="longest model turn")
    p.add_argument("--logging-steps", type=int, default=10)
    p.add_argument("--time-limit", type=float, default=None, help="stop after N seconds")
    p.add_argument("--seed", type=int, default=0)


def _split(args: argparse.Namespace) -> argparse.Namespace:
    if args.split in ("none", "all", ""):
        args.split = None
    return args


def add_commands(subparsers: Any) -> None:
    """Add ``train sft``, ``train grpo`` and ``train rft`` to the ``hopgym`` command."""
    train = subparsers.add_parser("train", help="SFT cold start, GRPO and rejection sampling "
                                  "(needs hopgym[train])")
    sub = train.add_subparsers(dest="train_command", required=True)

    sft = sub.add_parser("sft", help="imitate a scripted teacher on the env's questions")
    _common(sft, 300, 1e-3)
    sft.add_argument("--teacher", default="oracle", choices=("oracle", "imperfect"))
    sft.add_argument("--teacher-kw", nargs="*", default=[], metavar="KEY=VALUE",
                     help="TeacherConfig fields, e.g. early_answer=0.5 never_route=True")
    sft.add_argument("--batch-size", type=int, default=16)
    sft.add_argument("--episodes", type=int, default=None,
                     help="teacher episodes (default: steps x batch size, fresh every step)")
    sft.set_defaults(func=lambda a: run_sft(_split(a)) and 0)

    grpo = sub.add_parser("grpo", help="GRPO with the env's reward over multi-turn rollouts")
    _common(grpo, 50, 1e-4)
    grpo.add_argument("--questions-per-step", type=int, default=8)
    grpo.add_argument("--group-size", type=int, default=8)
    grpo.add_argument("--temperature", type=float, default=1.0)
    grpo.add_argument("--beta", type=float, default=0.0, help="KL coefficient")
    grpo.add_argument("--save-steps", type=int, default=0)
    grpo.set_defaults(func=lambda a: run_grpo(_split(a)) and 0)

    rft = sub.add_parser("rft", help="rejection-sampling fine-tuning: SFT on the policy's own "
                                     "correct episodes, round after round")
    _common(rft, 50, 1e-4)
    rft.add_argument("--questions-per-step", type=int, default=8, help="questions per round")
    rft.add_argument("--group-size", type=int, default=8, help="episodes per question")
    rft.add_argument("--temperature", type=float, default=1.0)
    rft.add_argument("--batch-size", type=int, default=16, help="SFT batch size")
    rft.add_argument("--epochs", type=int, default=1, help="passes over each round's keeps")
    rft.add_argument("--min-reward", type=float, default=None,
                     help="keep episodes with at least this return (default: exact match)")
    rft.set_defaults(func=lambda a: run_rft(_split(a)) and 0)
