"""Where a GRPO step's time goes, and sampled tokens/s of a group of 8 episodes batched vs one by one.

    OMP_NUM_THREADS=1 python benchmarks/grpo_step_profile.py --json benchmarks/results/grpo_step_profile.json
    OMP_NUM_THREADS=1 python benchmarks/grpo_step_profile.py --model runs/smollm2-135m-instruct

1. **Profile**: ``--steps`` GRPO steps (:func:`hopgym.agents.grpo.train_grpo`, ``questions_per_step``
   x ``num_generations`` episodes a step) on ``hopgym/Synthetic-v1`` (2-hop), with the methods
   that make up a step timed in place: the collector's batched sampling (*generation*), the rest
   of a model turn (decoding, the env's step and its batched searches, tokenising observations:
   *env*), the rest of the rollout function (env resets, the KL-to-start log-probs of
   ``track_kl``: *rollout other*), TRL's per-token log-prob passes outside the loss
   (old/reference log-probs: *logprobs*), the loss forward (*loss forward*), ``backward``
   (*backward*), and what is left of the step (optimizer, TRL's bookkeeping: *other*). Also the
   process's peak RSS, and per phase (sampled every 20 ms); ``--micro-batch N`` runs the
   step's loss in passes of N episodes (``GRPORunConfig.micro_batch_size``).
   ``--plain-logprobs`` scores the loss's log-probs through TRL's own path instead of hopgym's
   tiled one (``GRPORunConfig.chunked_logprobs``); ``--full-logits-kl`` scores ``track_kl``'s
   reference log-probs from full logits at every completion position (as before they were
   scored at the model's tokens only); ``--trl gradient_checkpointing=False`` keeps activations.
   ``--compare`` runs the profile once with the ``--before`` options (default: the step before
   this tiling, TRL's path and full-logits KL) and once per ``--after NAME=OPTIONS``, each in its
   own process (the same seed and so the same episodes), and writes them with their ratios::

       OMP_NUM_THREADS=1 python benchmarks/grpo_step_profile.py --compare --skip-throughput \
           --model runs/smollm2-135m-instruct --steps 1 --questions 2 --group 8 \
           --after "micro1=--micro-batch 1 --trl gradient_checkpointing=False" --json out.json
2. **Throughput**: ``--throughput-questions`` questions (the first of the train split), 8 episodes
   each, sampled by :class:`~hopgym.agents.rollout.RolloutCollector` a group at a time
   (``batch_size=8``: every turn of the 8 in one forward pass per token), two groups at a time
   (``batch_size=16``, as a GRPO step of 2 questions x 8 samples them), and one episode at a
   time (``batch_size=1``). The group and the single episode run both ways: with each episode's
   KV cache kept from one turn to the next (``keep_cache=True``, the default: a turn prefills
   only the new observation) and with the whole context prefilled at every turn
   (``keep_cache=False``, the collector before the cache was kept). Sampled model tokens per
   wall second, and per CPU second. With one batch size, the same seed gives the same episodes
   both ways; batches of other sizes draw their samples in another order, so their episodes
   differ (``distinct_first_turns``: how many different first turns each group wrote).

The default model is a small Llama built from a config (random weights: an untrained policy
writes the longest turns, the costly case); ``--model DIR`` loads a transformers folder instead
(SmolLM2-135M-Instruct converted by ``examples/smollm2_check.py``). Timings are of a shared
machine: read the shares and the ratio, not the absolute seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import argparse  # noqa: E402
import ast  # noqa: E402
import functools  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_json  # noqa: E402

ENV_KW = {"seed": 0, "n_entities": 300, "n_questions": 200, "hops": 2, "split": "train"}


def env_fn(reward: str | None = "default") -> gym.Env:
    return gym.make("hopgym/Synthetic-v1", reward=reward, **ENV_KW)


def load(model: str, hidden: int, layers: int) -> tuple:
    import torch

    if model == "config":
        from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

        env = env_fn(None)
        tok = build_tokenizer(task_texts(env.unwrapped.task, ("tags",), env.unwrapped.max_turns))
        cfg = TinyLMConfig(layers=layers, hidden=hidden, heads=max(1, hidden // 64), ffn=4 * hidden)
        return build_model(cfg, tok, seed=0), tok
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32), tok


class Timers:
    """Wall seconds per name, with nesting tracked so that inner time can be taken out of outer."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.nested: dict[tuple[str, str], float] = defaultdict(float)  # (outer, inner) -> s
        self.stack: list[str] = []

    def wrap(self, owner: object, name: str, key: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*a, **kw):
            t = time.perf_counter()
            self.stack.append(key)
            try:
                return fn(*a, **kw)
            finally:
                self.stack.pop()
                dt = time.perf_counter() - t
                self.total[key] += dt
                self.calls[key] += 1
                for outer in set(self.stack):
                    self.nested[outer, key] += dt

        setattr(owner, name, timed)


class PhaseRSS:
    """Peak resident memory (MiB) per phase: a thread reads the process's RSS every ``every`` s and
    charges it to the innermost timed phase running then (``outside``: model load, the optimizer
    step, TRL's bookkeeping)."""

    def __init__(self, timers: Timers, every: float = 0.02) -> None:
        import threading

        self.timers, self.every = timers, every
        self.peak: dict[str, float] = defaultdict(float)
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE") / 2**20
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with open("/proc/self/statm") as f:
            while not self._stop.wait(self.every):
                f.seek(0)
                rss = int(f.read().split()[1]) * self._page
                stack = self.timers.stack
                phase = stack[-1] if stack else "outside"
                self.peak[phase] = max(self.peak[phase], rss)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {k: round(v, 1) for k, v in sorted(self.peak.items())}


class ForwardPasses:
    """Wall seconds of a model's forward passes: prefills (more than one position per row) in all,
    and decoding steps (one position) by the number of rows they ran."""

    def __init__(self, model) -> None:
        self.prefill_s = 0.0
        self.prefill_positions = 0
        self.decode: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])  # rows -> [steps, s]
        self._shape: tuple = ()
        self._t = 0.0
        self.handles = [
            model.register_forward_pre_hook(self._pre, with_kwargs=True),
            model.register_forward_hook(self._post),
        ]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def _pre(self, module, args, kwargs) -> None:
        self._shape = tuple(kwargs["input_ids"].shape)
        self._t = time.perf_counter()

    def _post(self, module, args, output) -> None:
        dt = time.perf_counter() - self._t
        rows, width = self._shape
        if width > 1:
            self.prefill_s += dt
            self.prefill_positions += rows * width
        else:
            self.decode[rows][0] += 1
            self.decode[rows][1] += dt

    def summary(self) -> dict:
        steps = sum(n for n, _ in self.decode.values())
        return {
            "prefill_s": round(self.prefill_s, 2),
            "prefill_positions": self.prefill_positions,
            "decode_s": round(sum(s for _, s in self.decode.values()), 2),
            "decode_steps": steps,
            # The mean wall ms of a decoding step, by the rows it ran (a row: one episode).
            "decode_ms_by_rows": {
                str(r): round(1000 * s / n, 1) for r, (n, s) in sorted(self.decode.items())
            },
        }


def profile(args: argparse.Namespace) -> dict:
    from trl import GRPOTrainer

    from hopgym.agents.grpo import EnvRolloutFunc, GRPORunConfig, train_grpo
    from hopgym.agents.grpo_logprobs import chunked_grpo_trainer
    from hopgym.agents.rollout import RolloutCollector

    trainer_class = GRPOTrainer if args.plain_logprobs else chunked_grpo_trainer()
    if args.full_logits_kl:
        import hopgym.agents.rollout as rollout

        rollout._plain_head = lambda model: None  # every model then takes the full-logits path

    model, tok = load(args.model, args.hidden, args.layers)
    timers = Timers()
    timers.wrap(RolloutCollector, "_sample", "generation")
    timers.wrap(RolloutCollector, "_model_turn", "model_turn")
    timers.wrap(EnvRolloutFunc, "__call__", "rollout")
    timers.wrap(GRPOTrainer, "_generate_and_score_completions", "generate_and_score")
    timers.wrap(trainer_class, "_get_per_token_logps_and_entropies", "logps")
    timers.wrap(GRPOTrainer, "compute_loss", "loss")
    timers.wrap(trainer_class, "training_step", "step")  # with shared_prompt, its prompt backward too
    backward = {"s": 0.0}

    qids = [s.id for s in env_fn(None).unwrapped.task.samples]
    cfg = GRPORunConfig(
        output_dir=args.scratch,
        questions_per_step=args.questions,
        micro_batch_size=args.micro_batch,
        max_new_tokens=args.max_new_tokens,
        plot=False,
        track_kl=args.track_kl,
        chunked_logprobs=not args.plain_logprobs,
        shared_prompt=args.shared_prompt,
        trl={
            "max_steps": args.steps,
            "num_generations": args.group,
            "max_completion_length": 512,
            "learning_rate": 1e-5,
            "report_to": [],
            **args.trl,
        },
    )
    # Time accelerator.backward of the trainer TRL builds (one per run), and with shared_prompt
    # the backward through each prompt's shared pass.
    orig_init = GRPOTrainer.__init__

    def timed_backward(inner):
        def timed(*b, **kwb):
            t = time.perf_counter()
            timers.stack.append("backward")
            try:
                return inner(*b, **kwb)
            finally:
                timers.stack.pop()
                backward["s"] += time.perf_counter() - t

        return timed

    def init(self, *a, **kw):
        orig_init(self, *a, **kw)
        self.accelerator.backward = timed_backward(self.accelerator.backward)
        if hasattr(self, "_prompt_backward"):
            self._prompt_backward = timed_backward(self._prompt_backward)

    GRPOTrainer.__init__ = init
    episodes: list = []
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    phase_rss = PhaseRSS(timers)
    t0 = time.perf_counter()
    train_grpo(model, tok, env_fn, qids, cfg, on_trajectories=episodes.extend)
    wall = time.perf_counter() - t0
    rss_by_phase = phase_rss.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    T = timers.total
    gen, turn, roll = T["generation"], T["model_turn"], T["rollout"]
    # TRL's log-prob passes outside the loss (old / reference log-probs) run inside
    # _generate_and_score_completions; the loss's own runs inside compute_loss.
    old_ref = timers.nested["generate_and_score", "logps"]
    shares = {
        "generation": gen,
        "env": turn - gen,
        "rollout_other": roll - turn,
        "logprobs_old_ref": old_ref,
        "scoring_other": T["generate_and_score"] - roll - old_ref,
        "loss_forward": T["loss"],
        "backward": backward["s"],
    }
    shares["other"] = T["step"] - sum(shares.values())
    step_total = T["step"]
    return {
        "steps": args.steps,
        "episodes": len(episodes),
        "model_tokens": sum(sum(t.mask) for t in episodes),
        "step_s": round(step_total / args.steps, 3),
        "train_wall_s": round(wall, 2),
        "seconds": {k: round(v, 3) for k, v in shares.items()},
        "share": {k: round(v / step_total, 3) for k, v in shares.items()},
        "logps_calls_old_ref": timers.calls["logps"] - timers.calls["loss"],
        "micro_batch": args.micro_batch or len(episodes) // args.steps,
        "loss_passes_per_step": timers.calls["loss"] // args.steps,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        # Sampled every 20 ms, by the innermost phase running (generation, rollout, loss, backward...).
        "peak_rss_mib_by_phase": rss_by_phase,
        "logprobs": "trl" if args.plain_logprobs else "tiled",
        "track_kl": args.track_kl,
        "kl_logprobs": "full logits" if args.full_logits_kl else "tiled, model tokens",
        "gradient_checkpointing": getattr(cfg.trl_config(), "gradient_checkpointing", None),
        "shared_prompt": args.shared_prompt,
        # Of the training (model load excluded): user and kernel CPU seconds, minor page faults.
        "cpu_user_s": round(usage.ru_utime - usage0.ru_utime, 1),
        "cpu_system_s": round(usage.ru_stime - usage0.ru_stime, 1),
        "minor_page_faults": usage.ru_minflt - usage0.ru_minflt,
        # The same seed samples the same episodes: this digest shows it.
        "episodes_digest": hashlib.sha256(
            json.dumps([(t.question_id, t.completion_ids) for t in episodes]).encode()
        ).hexdigest()[:16],
    }


def compare(argv: list[str], sides: dict[str, list[str]]) -> dict:
    """The profile with each side's options (``before`` first), each in a fresh process; each
    later side's ratios to ``before``."""
    runs = {}
    for name, extra in sides.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run.json"
            cmd = [sys.executable, __file__, *argv, *extra, "--skip-throughput", "--json", str(out)]
            subprocess.run(cmd, check=True)
            runs[name] = {"options": extra, **json.loads(out.read_text())["profile"]}
        print(name, json.dumps(runs[name], indent=1), flush=True)
    b = runs["before"]

    def cpu(r: dict) -> float:
        return r["cpu_user_s"] + r["cpu_system_s"]

    def lfb(r: dict) -> float:
        return r["seconds"]["loss_forward"] + r["seconds"]["backward"]

    ratios = {}
    for name, a in runs.items():
        if name == "before":
            continue
        # After / before: below 1 is a gain.
        ratios[name] = {
            key: round(a[key] / b[key], 3)
            for key in ("step_s", "peak_rss_mib", "minor_page_faults", "cpu_system_s")
            if b[key]
        } | {"cpu_s": round(cpu(a) / cpu(b), 3), "loss_forward_backward": round(lfb(a) / lfb(b), 3)}
    return {
        "runs": runs,
        "same_episodes": len({r["episodes_digest"] for r in runs.values()}) == 1,
        "ratio": ratios,
    }


def throughput(args: argparse.Namespace) -> dict:
    import torch

    from hopgym.agents.rollout import RolloutCollector, RolloutConfig

    model, tok = load(args.model, args.hidden, args.layers)
    qids = [s.id for s in env_fn(None).unwrapped.task.samples[: args.throughput_questions]]
    rows: dict = {}
    runs = (
        ("batched_group_of_8", 8, True),
        ("batched_two_groups_of_8", 16, True),
        ("batched_group_of_8_full_prefill", 8, False),
        ("one_at_a_time", 1, True),
        ("one_at_a_time_full_prefill", 1, False),
    )
    for name, bs, keep in runs:
        col = RolloutCollector(
            model,
            tok,
            env_fn,
            RolloutConfig(
                temperature=1.0,
                max_new_tokens=args.max_new_tokens,
                max_completion_tokens=512,
                batch_size=bs,
                keep_cache=keep,
            ),
        )
        col.collect(qids[:1], group_size=1, seed=0)  # warm-up (env build, first forward)
        passes = ForwardPasses(model)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            with torch.no_grad():
                trajs = col.collect(qids, group_size=8, seed=1)
        finally:
            passes.remove()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tokens = sum(sum(t.mask) for t in trajs)
        groups = [trajs[i : i + 8] for i in range(0, len(trajs), 8)]
        rows[name] = {
            # How many of a group's episodes wrote different first turns (the rest share states).
            "distinct_first_turns": [len({t.turns[0] for t in g}) for g in groups],
            "episodes": len(trajs),
            "model_tokens": tokens,
            "turns": sum(t.steps for t in trajs),
            "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1),
            "tokens_per_cpu_s": round(tokens / cpu, 1),
            **passes.summary(),
        }
        col.close()

    rows["settings"] = {
        "questions": len(qids),
        "group": 8,
        "max_new_tokens": args.max_new_tokens,
        "threads": torch.get_num_threads(),
    }

    def ratio(a: str, b: str, key: str) -> float:
        return round(rows[a][key] / rows[b][key], 2)

    # Batched with kept caches against: one at a time with kept caches (the same code, one row),
    # one at a time with full prefills (the baseline of the run before the cache was kept), and
    # batched with full prefills (what keeping the cache adds).
    for suffix, key in (("", "tokens_per_s"), ("_cpu", "tokens_per_cpu_s")):
        rows["speedup" + suffix] = ratio("batched_group_of_8", "one_at_a_time", key)
        rows["speedup_vs_full_prefill_one_at_a_time" + suffix] = ratio(
            "batched_group_of_8", "one_at_a_time_full_prefill", key
        )
        rows["kept_cache_gain_batched" + suffix] = ratio(
            "batched_group_of_8", "batched_group_of_8_full_prefill", key
        )
        # A GRPO step samples all its episodes in one batch (2 questions x 8 by default).
        rows["speedup_two_groups" + suffix] = ratio("batched_two_groups_of_8", "one_at_a_time", key)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="config", help="A transformers causal LM folder, or config.")
    p.add_argument("--hidden", type=int, default=256, help="Width of the config model.")
    p.add_argument("--layers", type=int, default=4, help="Blocks of the config model.")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--questions", type=int, default=2, help="Questions per GRPO step.")
    p.add_argument("--group", type=int, default=8, help="num_generations.")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument(
        "--throughput-questions", type=int, default=1, help="Questions (groups of 8) of the throughput runs."
    )
    p.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="Episodes per loss pass (GRPORunConfig.micro_batch_size); default: the whole step.",
    )
    p.add_argument(
        "--plain-logprobs",
        action="store_true",
        help="The loss's log-probs through TRL's own path (GRPORunConfig.chunked_logprobs=False).",
    )
    p.add_argument(
        "--shared-prompt",
        action="store_true",
        help="Each prompt's backbone pass once for its group's loss passes (GRPORunConfig.shared_prompt; "
        "needs --micro-batch dividing --group and --trl gradient_checkpointing=False).",
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="Profile the step with the --before options, then with the --after ones, each in its "
        "own process (the same seed: the same episodes); no throughput.",
    )
    p.add_argument(
        "--before",
        default="--plain-logprobs --full-logits-kl",
        help="Options of --compare's first run (default: the step before the tiled scoring).",
    )
    p.add_argument(
        "--after",
        action="append",
        metavar="NAME=OPTIONS",
        help="A later run of --compare and its options (repeat for more; default: after=, the "
        "current defaults).",
    )
    p.add_argument(
        "--full-logits-kl",
        action="store_true",
        help="track_kl's reference log-probs from the model's full logits at every completion "
        "position (sequence_logprobs before it scored only the model's tokens through the LM head).",
    )
    p.add_argument(
        "--track-kl",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GRPORunConfig.track_kl (the KL-to-start log-probs of the rollout).",
    )
    p.add_argument("--note", default="", help="Recorded in the JSON (e.g. the machine's load).")
    p.add_argument("--json", default=None)
    p.add_argument("--scratch", default="/tmp/hopgym_grpo_profile")
    p.add_argument("--skip-profile", action="store_true")
    p.add_argument(
        "--skip-throughput",
        action="store_true",
        help="Profile only; an existing --json file keeps its throughput section.",
    )
    p.add_argument(
        "--trl",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="GRPOConfig fields of the profiled run (bf16=True use_cpu=True gradient_checkpointing=False).",
    )
    args = p.parse_args()
    args.trl = {k: ast.literal_eval(v) for k, _, v in (item.partition("=") for item in args.trl)}
    if args.json:
        check_writable(args.json)  # before the runs, not after them
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    result: dict = {
        "model": Path(args.model).name if args.model != "config" else f"config {args.layers}x{args.hidden}"
    }
    result["threads"] = torch.get_num_threads()
    result["trl"] = args.trl
    if args.compare:
        child = [
            *("--model", args.model, "--hidden", str(args.hidden), "--layers", str(args.layers)),
            *("--steps", str(args.steps), "--questions", str(args.questions), "--group", str(args.group)),
            *("--max-new-tokens", str(args.max_new_tokens), "--scratch", args.scratch),
            "--track-kl" if args.track_kl else "--no-track-kl",
            *(("--trl", *(f"{k}={v!r}" for k, v in args.trl.items())) if args.trl else ()),
        ]
        result["settings"] = {
            "questions": args.questions,
            "group": args.group,
            "episodes_per_step": args.questions * args.group,
            "steps": args.steps,
            "max_new_tokens": args.max_new_tokens,
            "track_kl": args.track_kl,
            "env": {"id": "hopgym/Synthetic-v1", **ENV_KW},
        }
        result["note"] = args.note
        sides = {"before": shlex.split(args.before)}
        for item in args.after or ["after="]:
            name, _, options = item.partition("=")
            sides[name] = shlex.split(options)
        result["compare"] = compare(child, sides)
        if args.json:
            write_json(args.json, result)
        return
    if args.skip_throughput:
        old = json.loads(Path(args.json).read_text()) if args.json and Path(args.json).exists() else {}
        if "throughput" in old:
            result["throughput"] = old["throughput"]
            result["throughput_model"] = old.get("throughput_model", old["model"])
    else:
        result["throughput"] = throughput(args)
        print("throughput:", json.dumps(result["throughput"], indent=1))
    if not args.skip_profile:
        result["profile"] = profile(args)
        print("profile:", json.dumps(result["profile"], indent=1))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
