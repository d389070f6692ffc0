# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]", "torch", "transformers", "trl==1.16.0", "datasets", "matplotlib"]
# ///
"""SFT cold start on an imperfect teacher, then GRPO, against same-budget baselines, from scratch.

A small Llama (built from a config) with a word-level tokenizer made from the synthetic world's
vocabulary first imitates an *imperfect* teacher: in a share of episodes it answers one hop early,
with the bridge entity (a classic multi-hop error). From that SFT checkpoint, with the same
training questions:

- ``grpo``: GRPO on the env's reward over multi-turn rollouts (retrieved tokens masked out);
- ``rft``: rejection-sampling fine-tuning (sample G episodes per question from the current policy,
  SFT on the correct ones, repeat), the **same number of sampled episodes** as GRPO;
- ``continue_sft``: more SFT on the same teacher, the **same CPU seconds** as GRPO took;
- ``filtered_sft``: SFT on the teacher's correct episodes only, the same CPU seconds.

Greedy exact match on held-out questions (the world's test entities, never needed by a training
question) is measured for each, and untrained / after SFT. Budgets are CPU seconds of this process
(``--clock process``, fair on a shared machine) or wall-clock (``--clock wall``).

Run (one CPU thread)::

    OMP_NUM_THREADS=1 python examples/grpo_synthetic.py --preset cpu-small --seeds 0 1 2 \\
        --json runs/grpo_synthetic/result.json

Seeds can run side by side in separate processes (``--seeds 1 --out A --json a.json``, ...) and
be merged afterwards: ``--merge a.json b.json --json result.json`` (summary and targets over all).
``--methods grpo`` runs GRPO alone (a sweep; the SFT checkpoint is cached per seed and settings
under ``--out``). ``--set KEY=VALUE`` overrides any field of :class:`Args` (``--set grpo_lr=3e-4
tiny.layers=2``). On a GPU: ``--preset gpu-small``. Output: ``{"summary", "runs", "targets"}``;
per seed, ``<out>/seed<k>/{grpo,rft}/curves.png`` and ``<out>/seed<k>/curves.png`` (both runs on
the same panels).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

METHODS = ("grpo", "rft", "continue_sft", "filtered_sft")

#: The synthetic world of the CPU presets: 2-hop bridge questions, one phrasing, no distractors.
WORLD: dict[str, Any] = dict(
    n_entities=300,
    hops=2,
    kinds="bridge",
    n_questions=800,
    distractors=0.0,
    phrasing_variety=1,
    passages_per_doc=3,
    web_noise=0.0,
)


@dataclass
class Args:
    """Settings of one run (a preset fills them; ``--set`` overrides)."""

    # -v0: 0.1's turn handling (no repeated-query or last-turn notices), what the README's
    # measurements used; -v1 adds the notices to the observations.
    env: str = field(default="hopgym/Synthetic-v0", metadata={"help": "Env id."})
    world: dict[str, Any] = field(
        default_factory=lambda: dict(WORLD),
        metadata={"help": "WorldConfig arguments of the synthetic world."},
    )
    top_k: int = field(default=1, metadata={"help": "Documents per search."})
    reward: str = field(default="default", metadata={"help": "Reward preset for GRPO and RFT."})
    brief_prompt: bool = field(
        default=False,
        metadata={
            "help": "First observation is only 'Question: ...' (the tags protocol's instructions "
            "carry no information for a model trained from scratch, and halve the tokens)."
        },
    )
    teacher: dict[str, Any] = field(
        default_factory=lambda: dict(early_answer=0.5),
        metadata={"help": "TeacherConfig of the imperfect teacher (think is always off)."},
    )
    rename_entities: bool = field(
        default=False,
        metadata={
            "help": "Re-draw the facts of every SFT example (a random renaming of its entity names, "
            "hopgym.agents.sft.EntityRenamer), so the student learns to copy instead of "
            "memorising the training world; used by every SFT run (cold start and the SFT "
            "baselines). GRPO and RFT sample the real world."
        },
    )
    tiny: dict[str, Any] = field(
        default_factory=lambda: dict(layers=2, hidden=64, heads=4, ffn=256, max_positions=512),
        metadata={"help": "TinyLMConfig of the student."},
    )
    sft_steps: int = field(default=300, metadata={"help": "SFT cold-start steps."})
    sft_batch: int = field(default=16, metadata={"help": "SFT batch size."})
    sft_lr: float = field(
        default=3e-3,
        metadata={"help": "SFT learning rate (cold start, continue-SFT and filtered-teacher SFT)."},
    )
    grpo_steps: int = field(default=30, metadata={"help": "GRPO steps."})
    questions_per_step: int = field(default=8, metadata={"help": "Questions per GRPO step / RFT round (B)."})
    group_size: int = field(default=8, metadata={"help": "Episodes per question (G)."})
    grpo_lr: float = field(default=2e-4, metadata={"help": "GRPO learning rate."})
    loss_type: str = field(default="dapo", metadata={"help": "TRL loss_type."})
    beta: float = field(default=0.0, metadata={"help": "GRPO KL coefficient."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (GRPO, RFT)."})
    rft_lr: float = field(default=3e-4, metadata={"help": "RFT learning rate."})
    rft_batch: int = field(default=16, metadata={"help": "RFT SFT batch size."})
    rft_epochs: int = field(default=1, metadata={"help": "RFT passes over each round's keeps."})
    max_new_tokens: int = field(default=16, metadata={"help": "Longest model turn."})
    max_length: int = field(default=400, metadata={"help": "Longest trajectory (tokens)."})
    n_eval: int = field(default=100, metadata={"help": "Held-out questions evaluated."})
    methods: tuple[str, ...] = field(
        default=METHODS, metadata={"help": "What to run from the SFT checkpoint."}
    )
    out: str = field(default="runs/grpo_synthetic", metadata={"help": "Output folder."})
    clock: str = field(
        default="process",
        metadata={"help": "Budget of the SFT baselines: 'process' (CPU seconds GRPO used) or 'wall'."},
    )
    progress_every: int = field(
        default=10, metadata={"help": "Print a progress line every N GRPO steps / RFT rounds."}
    )

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO compares episodes within a group")
        if self.clock not in ("process", "wall"):
            raise ValueError("clock must be 'process' or 'wall'")
        self.methods = tuple(self.methods)
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}: choose from {METHODS}")
        if any(m != "grpo" for m in self.methods) and "grpo" not in self.methods:
            raise ValueError("the baselines take GRPO's budget: include 'grpo' in methods")
        if self.max_length > self.tiny.get("max_positions", 1024):
            raise ValueError(
                f"max_length ({self.max_length}) exceeds the model's max_positions "
                f"({self.tiny.get('max_positions')}): raise tiny['max_positions']"
            )

    def sft_key(self, seed: int) -> str:
        """A key of everything the SFT checkpoint depends on (its cache file name)."""
        keys = (
            "env",
            "world",
            "top_k",
            "brief_prompt",
            "teacher",
            "rename_entities",
            "tiny",
            "sft_steps",
            "sft_batch",
            "sft_lr",
            "max_length",
        )
        blob = json.dumps({k: getattr(self, k) for k in keys} | {"seed": seed}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


# The cpu-small settings; the GPU preset scales them up (same question, larger size).
_CPU_SMALL: dict[str, Any] = dict(
    world={**WORLD, "passages_per_doc": 1},
    brief_prompt=True,
    teacher=dict(early_answer=0.6),
    rename_entities=True,
    tiny=dict(layers=4, hidden=128, heads=4, ffn=512, max_positions=512),
    sft_steps=800,
    sft_batch=32,
    sft_lr=1e-3,
    grpo_steps=60,
    questions_per_step=8,
    group_size=8,
    grpo_lr=1e-4,
    loss_type="dapo",
    beta=0.0,
    rft_lr=3e-4,
    n_eval=200,
    max_length=256,
)

PRESETS: dict[str, dict[str, Any]] = {
    # Minutes on one CPU thread; the earlier README table (no learning to speak of).
    "cpu-tiny": {},
    # GRPO's gain outside seed noise, with every baseline (about 30 CPU-minutes per seed).
    "cpu-small": _CPU_SMALL,
    # Seconds: a smoke test of the whole pipeline (no learning expected).
    "smoke": dict(
        sft_steps=3,
        grpo_steps=2,
        questions_per_step=2,
        group_size=2,
        n_eval=4,
        brief_prompt=True,
        tiny=dict(layers=1, hidden=32, heads=2, ffn=64, max_positions=512),
    ),
    # One GPU: cpu-small's question and settings at a larger size (a 10x world, a wider and
    # deeper student, twice the questions per step, more held-out questions); sized for
    # benchmarks/gpu_grpo.sh's 7 minutes with GRPO and continue-SFT.
    "gpu-small": {
        **_CPU_SMALL,
        "world": {**_CPU_SMALL["world"], "n_entities": 3000, "n_questions": 8000},
        "tiny": dict(layers=6, hidden=256, heads=8, ffn=1024, max_positions=512),
        "questions_per_step": 16,
        "n_eval": 500,
    },
}


def brief_protocol(env_id: str) -> Any:
    """The tags protocol with a first observation of only ``Question: ...``, reading turns in
    the parse mode that ``env_id`` registers (``-v0``: strict, 0.1's turn handling)."""
    import gymnasium as gym

    from hopgym.turns import TagsProtocol

    class BriefTags(TagsProtocol):
        def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
            return f"Question: {question}\n"

    parse = gym.spec(env_id).kwargs.get("parse")
    return BriefTags(parse) if parse else BriefTags()


def evaluate_em(model: Any, tok: Any, env_fn: Any, qids: list[str], a: Args) -> dict[str, float]:
    """Greedy held-out metrics."""
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig, summarize

    col = RolloutCollector(
        model,
        tok,
        env_fn,
        RolloutConfig(temperature=0.0, max_new_tokens=a.max_new_tokens, max_completion_tokens=a.max_length),
    )
    return summarize(col.collect(qids, 1, seed=0))


def _compact(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The curve keys of a log history, rounded (what the result JSON keeps)."""
    from hopgym.agents.grpo import CURVE_KEYS

    keep = ("step", "loss", "rft/kept", *(k for k, _ in CURVE_KEYS))
    return [
        {k: round(h[k], 5) if isinstance(h[k], float) else h[k] for k in keep if k in h}
        for h in history
        if "env/em" in h
    ]


def _first_last(history: list[dict[str, Any]], key: str = "env/em", n: int = 10) -> list[float]:
    xs = [h[key] for h in history if key in h]
    if not xs:
        return [float("nan"), float("nan")]
    return [statistics.fmean(xs[:n]), statistics.fmean(xs[-n:])]


def run(a: Args, seed: int, log: Any = print) -> dict[str, Any]:
    """One seed: untrained -> SFT, then each method of ``a.methods`` from the SFT checkpoint."""
    import gymnasium as gym
    import numpy as np
    import torch

    import hopgym  # noqa: F401
    from hopgym._atomic import atomic_write
    from hopgym.agents.grpo import GRPORunConfig, plot_curves, train_grpo
    from hopgym.agents.rft import RFTRunConfig, keep_correct, train_rft
    from hopgym.agents.sft import EntityRenamer, SFTRunConfig, teacher_examples, train_sft
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
    from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

    torch.manual_seed(seed)  # a script may seed globally (TRL's trainer seeds too)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(a.out) / f"seed{seed}"
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    extra = {"protocol": brief_protocol(a.env)} if a.brief_prompt else {}

    def env_fn(split: str | None, reward: str | None) -> Any:
        return lambda: gym.make(a.env, split=split, reward=reward, top_k=a.top_k, **extra, **a.world)

    world_env = env_fn(None, None)()
    tok = build_tokenizer(task_texts(world_env.unwrapped.task, ("tags",)))
    train_q = [s.id for s in env_fn("train", None)().unwrapped.task.samples]
    test_q = [s.id for s in env_fn("test", None)().unwrapped.task.samples][: a.n_eval]
    test_fn = env_fn("test", "default")
    model = build_model(TinyLMConfig(**a.tiny), tok, seed=seed)
    if cuda:
        model.to("cuda")
    res: dict[str, Any] = {
        "seed": seed,
        "vocab": len(tok),
        "train_questions": len(train_q),
        "test_questions": len(test_q),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    res["untrained"] = evaluate_em(model, tok, test_fn, test_q, a)
    log(
        f"[seed {seed}] {res['parameters']:,} parameters, vocabulary {len(tok)}; "
        f"untrained EM {res['untrained']['em']:.3f}"
    )

    rng = np.random.default_rng(seed)
    tcfg = TeacherConfig(**{**a.teacher, "think": False})

    def episodes(qids: list[str], offset: int) -> list[dict[str, Any]]:
        return teacher_examples(
            env_fn("train", None),
            lambda e: ImperfectTeacher(e, tcfg, seed=seed + offset),
            qids,
            tok,
            seed=seed + offset,
        )

    # Renaming draws only from the name words of the training questions' episodes (held-out
    # entities' names and facts never appear in SFT data).
    renamer = (
        EntityRenamer(tok, world_env.unwrapped.task, episodes(train_q, 999)) if a.rename_entities else None
    )

    def teacher_data(n: int, offset: int) -> list[dict[str, Any]]:
        data = episodes([train_q[int(i)] for i in rng.integers(len(train_q), size=n)], offset)
        return renamer.apply(data, seed=1000 * seed + offset) if renamer else data

    # --- SFT cold start (cached: a sweep of what follows reuses it)
    cache = Path(a.out) / "sft_cache" / f"{a.sft_key(seed)}.pt"
    if cache.exists():
        saved = torch.load(cache, map_location=next(model.parameters()).device)
        model.load_state_dict(saved["state"])
        res.update(saved["res"])
        rng = np.random.default_rng(saved["rng_seed"])
        log(f"[seed {seed}] SFT checkpoint from {cache}")
    else:
        c0 = time.process_time()
        data = teacher_data(a.sft_steps * a.sft_batch, 0)
        res["teacher_em"] = float(np.mean([e["em"] for e in data]))
        res["teacher_data_cpu_seconds"] = time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        sft_trainer = train_sft(
            model,
            tok,
            data,
            SFTRunConfig(
                output_dir=str(out / "sft"),
                trl={
                    "max_steps": a.sft_steps,
                    "per_device_train_batch_size": a.sft_batch,
                    "learning_rate": a.sft_lr,
                    "warmup_steps": min(20, a.sft_steps - 1),
                    "max_length": a.max_length,
                    "logging_steps": max(a.sft_steps // 10, 1),
                    "seed": seed,
                },
            ),
        )
        res["sft_seconds"] = time.perf_counter() - t0
        res["sft_cpu_seconds"] = time.process_time() - c0
        hist = sft_trainer.state.log_history
        runtime = next((h["train_runtime"] for h in hist if "train_runtime" in h), None)
        tokens = next((h["num_tokens"] for h in reversed(hist) if "num_tokens" in h), None)
        res["sft_train_tokens_per_s"] = tokens / runtime if tokens and runtime else None
        res["sft"] = evaluate_em(model, tok, test_fn, test_q, a)
        cache.parent.mkdir(parents=True, exist_ok=True)
        keep = {
            k: res[k]
            for k in (
                "teacher_em",
                "teacher_data_cpu_seconds",
                "sft_seconds",
                "sft_cpu_seconds",
                "sft_train_tokens_per_s",
                "sft",
            )
        }
        with atomic_write(cache, "wb") as fh:  # a cut cache would be loaded by the next run
            torch.save({"state": model.state_dict(), "res": keep, "rng_seed": seed + 7}, fh)
        rng = np.random.default_rng(seed + 7)
    log(
        f"[seed {seed}] teacher EM {res['teacher_em']:.3f}; after SFT EM {res['sft']['em']:.3f} "
        f"(searches {res['sft']['searches_per_episode']:.2f}; SFT {res['sft_cpu_seconds']:.0f} "
        f"CPU-s)"
    )
    sft_state = copy.deepcopy(model.state_dict())
    sft_per_step = res["sft_cpu_seconds" if a.clock == "process" else "sft_seconds"] / a.sft_steps

    histories: dict[str, list[dict[str, Any]]] = {}
    budget = {}
    # --- GRPO
    if "grpo" in a.methods:
        generated = {"model_tokens": 0, "tokens": 0}

        def count(trajs: list[Any]) -> None:
            generated["model_tokens"] += sum(sum(t.mask) for t in trajs)
            generated["tokens"] += sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajs)

        from transformers import TrainerCallback

        class Progress(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
                if logs and "env/em" in logs and state.global_step % a.progress_every == 0:
                    log(
                        f"[seed {seed}] GRPO step {state.global_step}: sampled EM "
                        f"{logs['env/em']:.3f}, searches {logs['env/searches_per_episode']:.2f}"
                        f", KL {logs.get('policy/kl_ref', float('nan')):.4f}"
                    )

        t0, c0 = time.perf_counter(), time.process_time()
        run = train_grpo(
            model,
            tok,
            env_fn("train", a.reward),
            train_q,
            GRPORunConfig(
                output_dir=str(out / "grpo"),
                questions_per_step=a.questions_per_step,
                max_new_tokens=a.max_new_tokens,
                rollout_batch_size=a.questions_per_step * a.group_size,
                trl={
                    "max_steps": a.grpo_steps,
                    "num_generations": a.group_size,
                    "learning_rate": a.grpo_lr,
                    "loss_type": a.loss_type,
                    "beta": a.beta,
                    "temperature": a.temperature,
                    "max_completion_length": a.max_length,
                    "seed": seed,
                },
            ),
            on_trajectories=count,
            callbacks=[Progress()],
        )
        trainer = run.trainer
        grpo_seconds = time.perf_counter() - t0
        budget = {
            "cpu_seconds": time.process_time() - c0,
            "seconds": grpo_seconds,
            "episodes": run.rollout.episodes,
            "steps": trainer.state.global_step,
        }
        res["grpo_budget"] = budget
        rollout_s = run.rollout.seconds
        res["grpo_rollout_seconds"] = rollout_s
        res["rollout_model_tokens_per_s"] = generated["model_tokens"] / max(rollout_s, 1e-9)
        res["grpo_train_tokens_per_s"] = generated["tokens"] / max(grpo_seconds - rollout_s, 1e-9)
        res["grpo"] = evaluate_em(model, tok, test_fn, test_q, a)
        histories["GRPO"] = run.history
        res["grpo_train_em_first_last10"] = _first_last(run.history)
        res["grpo_history"] = _compact(run.history)
        log(
            f"[seed {seed}] after GRPO EM {res['grpo']['em']:.3f} (searches "
            f"{res['grpo']['searches_per_episode']:.2f}; {budget['cpu_seconds']:.0f} CPU-s, "
            f"{budget['episodes']} episodes; sampled train EM first/last 10 steps "
            f"{res['grpo_train_em_first_last10']})"
        )
    cpu_budget = budget.get("cpu_seconds" if a.clock == "process" else "seconds", 0.0)

    # --- RFT: the same questions and number of sampled episodes
    if "rft" in a.methods:
        model.load_state_dict(sft_state)
        rft = train_rft(
            model,
            tok,
            env_fn("train", a.reward),
            train_q,
            RFTRunConfig(
                output_dir=str(out / "rft"),
                max_rounds=budget["steps"],
                questions_per_round=a.questions_per_step,
                group_size=a.group_size,
                learning_rate=a.rft_lr,
                batch_size=a.rft_batch,
                epochs=a.rft_epochs,
                temperature=a.temperature,
                max_new_tokens=a.max_new_tokens,
                max_completion_tokens=a.max_length,
                rollout_batch_size=a.questions_per_step * a.group_size,
                seed=seed,
            ),
        )
        res["rft"] = evaluate_em(model, tok, test_fn, test_q, a)
        res["rft_budget"] = {
            "cpu_seconds": rft.cpu_seconds,
            "seconds": rft.seconds,
            "episodes": rft.episodes,
            "rounds": rft.rounds,
            "kept": rft.kept,
            "optimizer_steps": rft.optimizer_steps,
        }
        histories["RFT"] = rft.history
        res["rft_train_em_first_last10"] = _first_last(rft.history)
        res["rft_history"] = _compact(rft.history)
        log(
            f"[seed {seed}] after RFT EM {res['rft']['em']:.3f} (searches "
            f"{res['rft']['searches_per_episode']:.2f}; {rft.cpu_seconds:.0f} CPU-s, "
            f"{rft.episodes} episodes, {rft.kept} kept, {rft.optimizer_steps} steps)"
        )

    # --- SFT baselines: the same CPU seconds as GRPO (teacher data is drawn before the clock
    # starts, which favours them slightly).
    for name in ("continue_sft", "filtered_sft"):
        if name not in a.methods:
            continue
        model.load_state_dict(sft_state)
        # Enough teacher episodes for the budget at the cold start's speed, and some to spare.
        need = a.sft_batch * (math.ceil(1.3 * cpu_budget / max(sft_per_step, 1e-6)) + 10)
        if name == "continue_sft":
            data = teacher_data(need, 1)
        else:
            data, drawn = [], 0
            while len(data) < need and drawn < 50 * need:
                batch = teacher_data(need, 2 + drawn)
                drawn += len(batch)
                data += keep_correct(batch)
            res["filtered_teacher_kept_rate"] = len(data) / max(drawn, 1)
        t0, c0 = time.perf_counter(), time.process_time()
        trainer = train_sft(
            model,
            tok,
            data,
            SFTRunConfig(
                output_dir=str(out / name),
                time_limit_s=max(cpu_budget, 1.0),
                time_limit_clock=a.clock,
                trl={
                    "max_steps": len(data) // a.sft_batch,
                    "per_device_train_batch_size": a.sft_batch,
                    "learning_rate": a.sft_lr,
                    "warmup_steps": 1,
                    "max_length": a.max_length,
                    "logging_steps": max(a.sft_steps // 10, 1),
                    "seed": seed + 1,
                },
            ),
        )
        res[name] = evaluate_em(model, tok, test_fn, test_q, a)
        res[f"{name}_budget"] = {
            "steps": trainer.state.global_step,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        }
        log(
            f"[seed {seed}] {name} EM {res[name]['em']:.3f} (searches "
            f"{res[name]['searches_per_episode']:.2f}; {trainer.state.global_step} steps, "
            f"{res[f'{name}_budget']['cpu_seconds']:.0f} CPU-s)"
        )
    if histories:
        plot_curves(histories, out / "curves.png", title=f"seed {seed}: sampled training episodes")
    if cuda:
        res["gpu_max_memory_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return res


def targets(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, per seed: GRPO vs SFT (+0.10), vs each baseline, train-EM rise."""
    per_seed = []
    for r in runs:
        if "grpo" not in r:
            continue
        g = r["grpo"]["em"]
        row: dict[str, Any] = {"seed": r["seed"], "grpo_minus_sft": g - r["sft"]["em"]}
        row["grpo_beats_sft_by_0.10"] = row["grpo_minus_sft"] >= 0.10 - 1e-9
        for b in ("continue_sft", "filtered_sft", "rft"):
            if b in r:
                row[f"grpo_minus_{b}"] = g - r[b]["em"]
        first, last = r["grpo_train_em_first_last10"]
        row["train_em_ratio_last_first"] = (
            last / first if first > 0 else float("inf") if last > 0 else float("nan")
        )
        row["train_em_rise_1.5x"] = bool(row["train_em_ratio_last_first"] >= 1.5)
        per_seed.append(row)
    return {
        "per_seed": per_seed,
        "all_seeds": {
            k: all(r.get(k, False) for r in per_seed)
            for k in ("grpo_beats_sft_by_0.10", "train_em_rise_1.5x")
        }
        | {
            f"grpo_above_{b}": all(r[f"grpo_minus_{b}"] > 0 for r in per_seed)
            for b in ("continue_sft", "filtered_sft", "rft")
            if per_seed and all(f"grpo_minus_{b}" in r for r in per_seed)
        },
    }


def make_args(preset: str, sets: dict[str, Any]) -> Args:
    """``Args`` of ``preset`` with ``sets`` applied (``tiny.layers=2`` sets one dict entry)."""
    kw = copy.deepcopy(PRESETS[preset])
    names = {f.name for f in fields(Args)}
    for key, value in sets.items():
        head, _, sub = key.partition(".")
        if head not in names:
            raise SystemExit(f"unknown setting {head!r}; known: {sorted(names)}")
        if sub:
            base = kw.get(head, getattr(Args(), head))
            kw[head] = {**base, sub: value}
        else:
            kw[head] = value
    return Args(**kw)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default="cpu-tiny", choices=sorted(PRESETS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS)
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        dest="sets",
        help="override Args fields, e.g. grpo_lr=3e-4 loss_type=grpo tiny.layers=2",
    )
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="JSON",
        help="run nothing: merge the runs of these result files (one seed each, run "
        "side by side) into one result, with the summary and targets over all",
    )
    ns = p.parse_args(argv)
    from hopgym._atomic import check_writable, write_json
    from hopgym.cli import parse_kwargs

    if ns.json:
        check_writable(ns.json)  # before the seeds' runs, not after them

    sets = parse_kwargs(ns.sets, "--set")
    if ns.methods:
        sets["methods"] = tuple(ns.methods)
    if ns.out:
        sets["out"] = ns.out
    a = make_args(ns.preset, sets)
    start, c_start = time.perf_counter(), time.process_time()
    runs: list[dict[str, Any]] = []
    parts = [json.loads(Path(f).read_text()) for f in ns.merge or ()]
    for f, part in zip(ns.merge or (), parts, strict=True):
        if part["args"] != parts[0]["args"] | {"out": part["args"]["out"]}:
            raise SystemExit(
                f"{f}: its settings differ from {ns.merge[0]}'s; merge runs of one configuration only"
            )

    def stats(k: str) -> dict[str, float]:
        xs = [r[k]["em"] for r in runs]
        return {
            "mean": statistics.fmean(xs),
            "std": statistics.pstdev(xs) if len(xs) > 1 else 0.0,
            "per_seed": xs,
        }

    def finish() -> dict[str, Any]:
        keys = [
            k
            for k in ("untrained", "sft", "grpo", "rft", "continue_sft", "filtered_sft")
            if all(k in r for r in runs)
        ]
        result = {
            "preset": parts[0]["preset"] if parts else ns.preset,
            "seeds": [r["seed"] for r in runs],
            "args": parts[0]["args"] if parts else asdict(a),
            "seconds": sum(p["seconds"] for p in parts) or time.perf_counter() - start,
            "cpu_seconds": sum(p["cpu_seconds"] for p in parts) or time.process_time() - c_start,
            "summary": {k: stats(k) for k in keys},
            "targets": targets(runs),
            "runs": runs,
        }
        if ns.json:
            write_json(ns.json, result, indent=1, default=str)
        return result

    if parts:
        runs = sorted((r for p in parts for r in p["runs"]), key=lambda r: r["seed"])
        result = finish()
    for s in () if parts else ns.seeds:  # the JSON is rewritten after every seed
        runs.append(run(a, s))
        result = finish()
    keys = list(result["summary"])
    for k in keys:
        s = result["summary"][k]
        print(
            f"EM {k:>13}: {s['mean']:.3f} ± {s['std']:.3f}  per seed "
            f"{' '.join(f'{x:.2f}' for x in s['per_seed'])}"
        )
    print("targets:", json.dumps(result["targets"]["all_seeds"]))
    return result


if __name__ == "__main__":
    main()
