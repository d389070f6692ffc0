# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]", "torch", "transformers", "trl==1.16.0", "datasets", "matplotlib"]
# ///
"""SFT cold start on an imperfect teacher, then GRPO with the env's reward, from scratch.

A tiny Llama (built from a config) with a word-level tokenizer made from the synthetic world's
vocabulary first imitates an *imperfect* teacher: in a share of episodes it answers one hop early,
with the bridge entity (a classic multi-hop error). GRPO then trains on the env's reward over
multi-turn rollouts (retrieved tokens masked out of the loss). Greedy exact match on held-out
questions (test entities of the world, never needed by a training question) is measured untrained,
after SFT, after GRPO, and after *continuing SFT for the same wall-clock time* as GRPO took, so the
RL gain is not overstated.

Run (one CPU thread, a few minutes per seed)::

    OMP_NUM_THREADS=1 python examples/grpo_synthetic.py --preset cpu-tiny --seeds 0 1 2 \\
        --json runs/grpo_synthetic/result.json

On a GPU: ``--preset gpu-small``. Output: ``{"em_untrained", "em_sft", "em_grpo",
"em_continue_sft", "seconds", ...}`` for the first seed, plus ``"runs"`` (every seed) and
``"summary"`` (mean and standard deviation over seeds); curves in ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@dataclass
class Args:
    """Settings of one run (a preset fills them; flags override)."""

    env: str = field(default="hopgym/Synthetic-v1", metadata={"help": "Env id."})
    world: dict[str, Any] = field(default_factory=lambda: dict(
        n_entities=300, hops=2, kinds="bridge", n_questions=800, distractors=0.0,
        phrasing_variety=1, passages_per_doc=3, web_noise=0.0), metadata={
        "help": "WorldConfig arguments of the synthetic world."})
    top_k: int = field(default=1, metadata={"help": "Documents per search."})
    reward: str = field(default="default", metadata={"help": "Reward preset for GRPO."})
    early_answer: float = field(default=0.5, metadata={
        "help": "Teacher flaw: share of episodes answered one hop early."})
    tiny: dict[str, Any] = field(default_factory=lambda: dict(
        layers=2, hidden=64, heads=4, ffn=256, max_positions=512), metadata={
        "help": "TinyLMConfig of the student."})
    sft_steps: int = field(default=300, metadata={"help": "SFT cold-start steps."})
    sft_batch: int = field(default=16, metadata={"help": "SFT batch size."})
    sft_lr: float = field(default=3e-3, metadata={"help": "SFT learning rate."})
    grpo_steps: int = field(default=30, metadata={"help": "GRPO steps."})
    questions_per_step: int = field(default=8, metadata={"help": "GRPO questions per step."})
    group_size: int = field(default=8, metadata={"help": "GRPO episodes per question."})
    grpo_lr: float = field(default=2e-4, metadata={"help": "GRPO learning rate."})
    temperature: float = field(default=1.0, metadata={"help": "GRPO sampling temperature."})
    max_new_tokens: int = field(default=16, metadata={"help": "Longest model turn."})
    max_length: int = field(default=400, metadata={"help": "Longest trajectory (tokens)."})
    n_eval: int = field(default=100, metadata={"help": "Held-out questions evaluated."})
    out: str = field(default="runs/grpo_synthetic", metadata={"help": "Output folder."})
    clock: str = field(default="process", metadata={
        "help": "Budget of the continue-SFT baseline: 'process' (CPU seconds GRPO used) or "
                "'wall' (its wall-clock seconds)."})

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO compares episodes within a group")
        if self.clock not in ("process", "wall"):
            raise ValueError("clock must be 'process' or 'wall'")
        if not 0 <= self.early_answer <= 1:
            raise ValueError("early_answer is a share in [0, 1]")
        if self.max_length > self.tiny.get("max_positions", 1024):
            raise ValueError(f"max_length ({self.max_length}) exceeds the model's max_positions "
                             f"({self.tiny.get('max_positions')}): raise tiny['max_positions']")


PRESETS: dict[str, dict[str, Any]] = {
    # Minutes on one CPU thread.
    "cpu-tiny": {},
    # Seconds: a smoke test of the whole pipeline (no learning expected).
    "smoke": dict(sft_steps=3, grpo_steps=2, questions_per_step=2, group_size=2, n_eval=4,
                  tiny=dict(layers=1, hidden=32, heads=2, ffn=64, max_positions=512)),
    # A GPU: a wider model, more steps.
    "gpu-small": dict(tiny=dict(layers=4, hidden=256, heads=8, ffn=1024, max_positions=1024),
                      sft_steps=600, sft_batch=32, grpo_steps=100, questions_per_step=16,
                      max_length=600, n_eval=300),
}


def evaluate_em(model: Any, tok: Any, env_fn: Any, qids: list[str], a: Args) -> dict[str, float]:
    """Greedy held-out metrics."""
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig, summarize

    col = RolloutCollector(model, tok, env_fn, RolloutConfig(
        temperature=0.0, max_new_tokens=a.max_new_tokens, max_completion_tokens=a.max_length))
    return summarize(col.collect(qids, 1, seed=0))


def run(a: Args, seed: int, log: Any = print) -> dict[str, Any]:
    """One seed: untrained -> SFT -> GRPO, and SFT -> continue SFT for GRPO's wall-clock time."""
    import gymnasium as gym
    import numpy as np
    import torch

    import hopgym  # noqa: F401
    from hopgym.agents.grpo import GRPORunConfig, train_grpo
    from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
    from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

    torch.manual_seed(seed)  # a script may seed globally (TRL's trainer seeds too)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(a.out) / f"seed{seed}"

    def env_fn(split: str | None, reward: str | None) -> Any:
        return lambda: gym.make(a.env, split=split, reward=reward, top_k=a.top_k, **a.world)

    world_env = env_fn(None, None)()
    tok = build_tokenizer(task_texts(world_env.unwrapped.task, ("tags",)))
    train_q = [s.id for s in env_fn("train", None)().unwrapped.task.samples]
    test_q = [s.id for s in env_fn("test", None)().unwrapped.task.samples][: a.n_eval]
    test_fn = env_fn("test", "default")
    model = build_model(TinyLMConfig(**a.tiny), tok, seed=seed)
    if torch.cuda.is_available():
        model.to("cuda")
    res: dict[str, Any] = {"seed": seed, "vocab": len(tok), "train_questions": len(train_q),
                           "test_questions": len(test_q),
                           "parameters": sum(p.numel() for p in model.parameters())}
    res["untrained"] = evaluate_em(model, tok, test_fn, test_q, a)
    log(f"[seed {seed}] untrained EM {res['untrained']['em']:.3f}")

    rng = np.random.default_rng(seed)
    tcfg = TeacherConfig(early_answer=a.early_answer, think=False)

    def sft_data(n: int, offset: int) -> list[dict[str, Any]]:
        draw = [train_q[int(i)] for i in rng.integers(len(train_q), size=n)]
        return teacher_examples(env_fn("train", None),
                                lambda e: ImperfectTeacher(e, tcfg, seed=seed + offset),
                                draw, tok, seed=seed + offset)

    t0 = time.perf_counter()
    data = sft_data(a.sft_steps * a.sft_batch, 0)
    res["teacher_em"] = float(np.mean([e["em"] for e in data]))
    sft_trainer = train_sft(model, tok, data, SFTRunConfig(
        output_dir=str(out / "sft"), max_steps=a.sft_steps, batch_size=a.sft_batch,
        learning_rate=a.sft_lr, warmup_steps=min(10, a.sft_steps - 1),
        max_length=a.max_length, logging_steps=max(a.sft_steps // 10, 1), seed=seed))
    res["sft_seconds"] = time.perf_counter() - t0
    runtime = next((h["train_runtime"] for h in sft_trainer.state.log_history
                    if "train_runtime" in h), None)
    tokens = next((h["num_tokens"] for h in reversed(sft_trainer.state.log_history)
                   if "num_tokens" in h), None)
    res["sft_train_tokens_per_s"] = tokens / runtime if tokens and runtime else None
    res["sft"] = evaluate_em(model, tok, test_fn, test_q, a)
    log(f"[seed {seed}] teacher EM {res['teacher_em']:.3f}  after SFT EM {res['sft']['em']:.3f}"
        f"  ({res['sft_seconds']:.0f}s)")
    sft_state = copy.deepcopy(model.state_dict())

    generated = {"model_tokens": 0, "tokens": 0}

    def count(trajs: list[Any]) -> None:
        generated["model_tokens"] += sum(sum(t.mask) for t in trajs)
        generated["tokens"] += sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajs)

    t0, c0 = time.perf_counter(), time.process_time()
    trainer = train_grpo(model, tok, env_fn("train", a.reward), train_q, GRPORunConfig(
        output_dir=str(out / "grpo"), max_steps=a.grpo_steps,
        questions_per_step=a.questions_per_step, group_size=a.group_size,
        learning_rate=a.grpo_lr, temperature=a.temperature, max_new_tokens=a.max_new_tokens,
        max_completion_tokens=a.max_length, rollout_batch_size=a.questions_per_step * a.group_size,
        seed=seed), on_trajectories=count)
    grpo_seconds = time.perf_counter() - t0
    grpo_cpu = time.process_time() - c0
    res["grpo_cpu_seconds"] = grpo_cpu
    rollout_s = trainer.hopgym_rollout.seconds
    res["grpo_rollout_seconds"] = rollout_s
    res["rollout_model_tokens_per_s"] = generated["model_tokens"] / max(rollout_s, 1e-9)
    res["grpo_train_tokens_per_s"] = generated["tokens"] / max(grpo_seconds - rollout_s, 1e-9)
    res["grpo_seconds"] = grpo_seconds
    res["grpo"] = evaluate_em(model, tok, test_fn, test_q, a)
    hist = trainer.hopgym_history
    res["grpo_train_em_first_last"] = [next((h["env/em"] for h in hist if "env/em" in h), None),
                                       next((h["env/em"] for h in reversed(hist)
                                             if "env/em" in h), None)]
    log(f"[seed {seed}] after GRPO EM {res['grpo']['em']:.3f}  ({grpo_seconds:.0f}s; sampled "
        f"train EM {res['grpo_train_em_first_last']})")

    # The same-time baseline: continue SFT from the SFT weights for as long as GRPO ran. The
    # budget is CPU time of this process (wall-clock on an idle core; fair when the machine is
    # shared) by default, or wall-clock with --clock wall; the teacher data is drawn first.
    model.load_state_dict(sft_state)
    more = sft_data(20 * a.sft_steps * a.sft_batch // 10, 1)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = train_sft(model, tok, more, SFTRunConfig(
        output_dir=str(out / "sft_more"), max_steps=10 * a.sft_steps, batch_size=a.sft_batch,
        learning_rate=a.sft_lr, warmup_steps=1, max_length=a.max_length,
        logging_steps=max(a.sft_steps // 10, 1), seed=seed + 1,
        time_limit_s=max(grpo_cpu if a.clock == "process" else grpo_seconds, 1.0),
        time_limit_clock=a.clock))
    res["continue_sft_steps"] = trainer.state.global_step
    res["continue_sft_seconds"] = time.perf_counter() - t0
    res["continue_sft_cpu_seconds"] = time.process_time() - c0
    res["continue_sft"] = evaluate_em(model, tok, test_fn, test_q, a)
    log(f"[seed {seed}] continue-SFT EM {res['continue_sft']['em']:.3f} "
        f"({res['continue_sft_steps']} steps, {res['continue_sft_seconds']:.0f}s)")
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-tiny", choices=sorted(PRESETS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--json", default=None, help="write the result here")
    for f in fields(Args):
        if f.type in ("int", "float", "str"):
            p.add_argument(f"--{f.name.replace('_', '-')}", default=None,
                           type={"int": int, "float": float, "str": str}[f.type],
                           help=f.metadata.get("help"))
    ns = p.parse_args(argv)
    overrides = {f.name: getattr(ns, f.name) for f in fields(Args)
                 if getattr(ns, f.name, None) is not None}
    a = Args(**{**PRESETS[ns.preset], **overrides})
    start = time.perf_counter()
    runs = [run(a, s) for s in ns.seeds]
    keys = ("untrained", "sft", "grpo", "continue_sft")

    def stats(k: str) -> dict[str, float]:
        xs = [r[k]["em"] for r in runs]
        return {"mean": statistics.fmean(xs), "std": statistics.pstdev(xs) if len(xs) > 1 else 0.0}

    result = {
        "em_untrained": runs[0]["untrained"]["em"], "em_sft": runs[0]["sft"]["em"],
        "em_grpo": runs[0]["grpo"]["em"], "em_continue_sft": runs[0]["continue_sft"]["em"],
        "seconds": time.perf_counter() - start, "preset": ns.preset, "args": asdict(a),
        "summary": {k: stats(k) for k in keys}, "runs": runs,
    }
    for k in keys:
        s = result["summary"][k]
        print(f"EM {k:>13}: {s['mean']:.3f} ± {s['std']:.3f}  over seeds {ns.seeds}")
    if ns.json:
        Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.json).write_text(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
