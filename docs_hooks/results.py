"""MkDocs hook: tables of measured figures, read from ``benchmarks/results/*.json`` at build time.

A page asks for a table with an HTML comment on a line of its own, ``<!-- results: NAME -->``;
the hook puts the table :data:`RENDERERS` ``[NAME]`` builds in its place, so that the figures on
the site are the ones the benchmark scripts wrote, never retyped. An unknown name fails the build.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"^<!-- results: ([\w-]+) -->$", re.MULTILINE)


def _load(name: str) -> Any:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def sb3_learning() -> str:
    """Held-out EM of the classic RL algorithms and the baselines (``benchmarks/sb3_learning.py``)."""
    data = _load("sb3_learning")
    names = {
        "ppo": "PPO (`MlpPolicy`)",
        "a2c": "A2C",
        "dqn": "DQN (no masks)",
        "maskppo": "MaskablePPO (masks)",
    }
    n = len(data["seeds"])
    rows = [
        [
            names.get(algo, algo),
            f"{s['em']:.3f} ± {s['em_std']:.3f}",
            f"{s['avg_searches']:.2f}",
            f"{s['invalid_rate']:.3f}",
            f"{s['train_steps_per_s']:,.0f}",
        ]
        for algo, s in sorted(data["summary"].items(), key=lambda kv: -kv[1]["em"])
    ]
    rows += [
        [name, f"{b['em']:.3f}", f"{b['avg_searches']:.2f}", f"{b['invalid_rate']:.3f}", ""]
        for name, b in data["baselines"].items()
    ]
    header = [
        f"policy ({data['eval_episodes']} held-out episodes)",
        f"EM (mean ± std over {n} seeds)",
        "searches",
        "invalid-turn rate",
        "train steps/s",
    ]
    return _table(header, rows)


def smollm2_table() -> str:
    """SmolLM2-135M-Instruct before and after SFT (``benchmarks/smollm2_table.py``)."""
    data = _load("smollm2_table")
    questions = {"syn": "synthetic 2-hop test", "hot": "HotpotQA sample"}
    order = {
        "syn": 0,
        "hot": 1,
        "base": 0,
        "sft": 1,
        "llm-direct": 0,
        "llm": 1,
        None: 0,
        "lenient": 1,
        "strict": 2,
    }
    rows = []
    for row in sorted(data["rows"], key=lambda r: [order[x] for x in r["row"]]):
        where, model, agent, parse = row["row"]
        m = row["metrics"]
        direct = agent == "llm-direct"
        unforced = "–" if direct else f"{row['unforced_answered']:.2f}"
        rows.append(
            [
                f"{questions[where]} ({m['episodes']})",
                model,
                agent,
                parse or "–",
                f"{m['answered']:.2f} ({unforced})",
                f"{m['em']:.3f}",
                f"{m['f1']:.3f}",
                "–" if direct else f"{m['support_recall']:.2f}",
                f"{m['invalid_rate']:.2f}",
                f"{m['format_issue_rate']:.2f}",
                f"{m['truncated_rate']:.2f}",
                f"{m['avg_searches']:.2f}",
                f"{row['cpu_s']:.0f}",
            ]
        )
    header = ["questions", "model", "agent", "parse", "answered (unforced)", "EM", "F1", "support recall"]
    header += ["invalid turns", "format issues", "cut turns", "searches", "CPU s"]
    return _table(header, rows)


def llm_turns() -> str:
    """Prefix KV-cache reuse across turns (``benchmarks/llm_turns.py``)."""
    data = _load("llm_turns")
    without, with_ = data["rows"]["without reuse"], data["rows"]["with reuse"]
    same = f"yes, token for token ({with_['turns']} turns)" if data["same_turns"] else "**no**"
    rows = [
        [
            "without reuse (`prefix_cache=0`)",
            f"{without['prefilled_per_generated']:.1f}",
            f"{without['turns_per_cpu_s']:.2f}",
            "",
        ],
        [
            "with reuse (default)",
            f"{with_['prefilled_per_generated']:.1f}",
            f"{with_['turns_per_cpu_s']:.2f}",
            "",
        ],
        [
            "ratio",
            f"×{data['ratio']['prefilled_tokens']:.2f}",
            f"×{data['ratio']['turns_per_cpu_s']:.2f}",
            same,
        ],
    ]
    return _table(["", "prefilled tokens per generated token", "turns per CPU second", "same turns"], rows)


def dense_cpu() -> str:
    """Dense search speed by index backend on the CPU (``benchmarks/retrieval.py --only dense``)."""
    rows = [r for r in _load("dense_cpu") if r["part"] == "search"]
    cells: dict[tuple[int, int], dict[str, float]] = {}
    for r in rows:
        cells.setdefault((r["vectors"], r["batch"]), {})[r["index"]] = r["index_qps_per_cpu_s"]
    out = []
    for (vectors, batch), by_index in sorted(cells.items()):
        faiss, torch = by_index.get("faiss flat"), by_index.get("torch flat (float32)")
        size = f"{vectors // 1_000_000}M" if vectors >= 1_000_000 else f"{vectors // 1000}k"
        ratio = f"{torch / faiss:.2f}×" if faiss and torch else ""
        fmt = lambda q: f"{q:,.0f} q/s" if q and q >= 10 else (f"{q:.1f} q/s" if q else "")  # noqa: E731
        out.append([size, f"{batch:,}", fmt(faiss), fmt(torch), ratio])
    recall = sorted({r["recall_at_10"] for r in rows})
    header = ["passages", "batch", "FAISS flat (CPU)", "torch flat, float32 (CPU)", "torch / FAISS"]
    note = f"\n\nRecall@10 against exact float32 search: {', '.join(f'{x:.3f}' for x in recall)}."
    return _table(header, out) + note


def grpo_cpu_small() -> str:
    """Held-out greedy EM per method and seed (``examples/grpo_synthetic.py --preset cpu-small``)."""
    data = _load("grpo_cpu_small")
    names = {
        "untrained": "untrained",
        "sft": "after SFT",
        "grpo": "**after GRPO**",
        "rft": "RFT, same sampled episodes",
        "continue_sft": "continue SFT, same CPU-s",
        "filtered_sft": "filtered-teacher SFT, same CPU-s",
    }
    seeds = data["seeds"]
    rows = []
    for key, s in data["summary"].items():
        rows.append(
            [names.get(key, key), *(f"{x:.3f}" for x in s["per_seed"]), f"{s['mean']:.3f} ± {s['std']:.3f}"]
        )
    return _table(["held-out greedy EM", *(f"seed {k}" for k in seeds), "mean ± sd"], rows)


def _int(x: float) -> str:
    return f"{x:,.0f}"


def _size(label: str) -> str:
    return label.replace("dense MiniLM, random passages", "dense, MiniLM queries, random passages")


def rollout_scale_a() -> str:
    """(a) ``SyncVectorEnv`` against ``BatchedSearchVectorEnv`` (``benchmarks/rollout_scale.py``)."""
    data = _load("rollout_scale")["a"]
    order = ["BM25, 100,000", "dense MiniLM, 10,000", "dense MiniLM, random passages, 100,000"]
    rows = []
    for index in sorted(data, key=lambda k: order.index(k) if k in order else len(order)):
        for setting, r in data[index].items():
            envs, _, cache = setting.split()
            rows.append(
                [
                    _size(index),
                    envs,
                    cache,
                    _int(r["sync_steps_per_cpu_s"]),
                    _int(r["batched_steps_per_cpu_s"]),
                    f"{r['speed_up']:.2f}×",
                    f"{r['searches_per_vector_step']:.1f}",
                    f"{r['search_calls_per_vector_step']:.1f}",
                    "yes" if r["transcripts_identical"] else "**no**",
                ]
            )
    header = ["index", "envs", "query cache", "`SyncVectorEnv` steps/s", "batched steps/s", "speed-up"]
    return _table([*header, "searches / step", "search calls / step", "same transcripts"], rows)


def rollout_scale_b() -> str:
    """(b) The query cache on a GRPO-shaped workload (``benchmarks/rollout_scale.py``)."""
    data = _load("rollout_scale")["b"]
    rows = []
    for size, by_setting in data.items():
        for setting, r in by_setting.items():
            backend, noise = setting.split()
            off, on = r["steps_per_cpu_s_off"], r["steps_per_cpu_s_on"]
            rows.append(
                [
                    f"{int(size):,}",
                    f"`{backend}`",
                    f"{float(noise):.0%}",
                    _int(off),
                    _int(on),
                    f"{on / off:.2f}×",
                    f"{r['hit_rate']:.0%}",
                ]
            )
    return _table(
        ["passages", "BM25", "noise", "steps/s, cache off", "cache on", "speed-up", "hit rate"], rows
    )


def rollout_scale_c() -> str:
    """(c) The Ray vector env against the in-process ones (``benchmarks/rollout_scale.py``)."""
    data = {
        k: v
        for k, v in _load("rollout_scale")["c"].items()
        if isinstance(v, dict) and "steps_per_wall_s" in v
    }
    base = data["SyncVectorEnv"]["steps_per_wall_s"]
    rows = []
    for name, r in data.items():
        env, _, workers = name.partition(" ")
        rows.append(
            [f"`{env}`", workers or "-", _int(r["steps_per_wall_s"]), f"{r['steps_per_wall_s'] / base:.2f}×"]
        )
    return _table(["vector env", "workers", "steps/s (wall)", "vs `SyncVectorEnv`"], rows)


def rollout_scale_d() -> str:
    """(d) CPU microseconds of one think-only step (``benchmarks/rollout_scale.py``)."""
    data = _load("rollout_scale")["d"]
    turns = {
        "tags canonical": ("`tags`", "canonical"),
        "tags unclosed <think>": ("`tags`", "unclosed `<think>` (the general parser)"),
        "r3 analysis only": ("`r3`", "analysis only"),
    }
    rows = []
    for key, r in data.items():
        protocol, turn = turns.get(key, (key, ""))
        us = lambda x: f"{x:.1f} µs"  # noqa: E731
        rows.append(
            [protocol, turn, us(r["bare"]), us(r["budget"]), us(r["default"]), us(r["default"] - r["bare"])]
        )
    return _table(
        ["protocol", "turn", "bare env", "`gym.make(reward=None)`", '`reward="default"`', "wrappers add"],
        rows,
    )


def rollout_scale_e() -> str:
    """(e) The oracle through the env over the synthetic world, by BM25 backend."""
    data = _load("rollout_scale")["e"]
    names = {
        "sparse": "**`sparse`** (default)",
        "numpy": "`numpy`",
        "rank_bm25": "rank-bm25 (estimated¹)",
        "bm25s numba": "`numba` (bm25s; estimated²)",
        "numba exact": "exact numba kernel³ (estimated²)",
    }
    rows = []
    for size, r in data.items():
        steps, per_query = r["steps_per_cpu_s"], r["per_query_cpu_s"]
        for backend, rate in steps.items():
            q = per_query[backend]
            shown = f"{q * 1e3:.1f} ms" if q >= 1e-3 else f"{q * 1e6:.0f} µs"
            rows.append(
                [
                    f"{int(size):,}",
                    names.get(backend, backend),
                    shown,
                    _int(rate),
                    f"{rate / steps['numpy']:.2g}×"
                    if rate < steps["numpy"]
                    else f"{rate / steps['numpy']:.1f}×",
                    f"{rate / steps['rank_bm25']:,.0f}×",
                ]
            )
    return _table(["passages", "BM25", "per query", "oracle steps/s", "vs numpy", "vs rank-bm25"], rows)


def grpo_cpu_tiny() -> str:
    """Held-out greedy EM per seed, preset cpu-tiny (``examples/grpo_synthetic.py``)."""
    import statistics

    data = _load("grpo_cpu_tiny")
    runs = data["runs"]
    labels = {
        "untrained": "untrained",
        "sft": f"after SFT ({data['args']['sft_steps']} steps, imperfect teacher)",
        "grpo": f"after GRPO ({data['args']['grpo_steps']} steps)",
        "continue_sft": "continue SFT, same CPU time",
    }
    rows = []
    for key, label in labels.items():
        ems = [run[key]["em"] for run in runs]
        rows.append(
            [label, *(f"{x:.2f}" for x in ems), f"{statistics.mean(ems):.3f} ± {statistics.pstdev(ems):.3f}"]
        )
    return _table(["held-out greedy EM", *(f"seed {run['seed']}" for run in runs), "mean ± std"], rows)


def grpo_smollm2_timing() -> str:
    """Cost of each phase of ``examples/grpo_smollm2.py`` on SmolLM2-135M-Instruct (a short timed
    run), and the cpu-quick preset's time estimated from it (12 SFT steps, 5 GRPO steps, 20
    held-out questions evaluated twice) at the run's CPU/wall ratio."""
    data = _load("grpo_smollm2_timing")
    sft, grpo = data["sft_budget"], data["grpo_budget"]
    n = data["test_questions"]
    per = {
        "sft": sft["cpu_seconds"] / sft["steps"],
        "grpo": grpo["cpu_seconds"] / grpo["steps"],
        "eval": (data["sft_eval_cpu_seconds"] + data["grpo_eval_cpu_seconds"]) / (2 * n),
    }
    ratio = data["cpu_seconds"] / data["seconds"]
    quick = {"sft": 12, "grpo": 5, "eval": 2 * 20}
    rows = [
        ["SFT step", f"batch {data['args']['sft_batch']}", f"{per['sft']:.0f}", str(quick["sft"])],
        [
            "GRPO step",
            f"{grpo['episodes'] // grpo['steps']} episodes (rollout {grpo['rollout_seconds']:.0f} s wall)",
            f"{per['grpo']:.0f}",
            str(quick["grpo"]),
        ],
        ["greedy held-out question", f"{n} questions, twice", f"{per['eval']:.1f}", str(quick["eval"])],
    ]
    cpu = sum(per[k] * quick[k] for k in per)
    rows.append(
        [
            "cpu-quick, estimated",
            f"{data['threads']} threads, CPU/wall {ratio:.2f}",
            f"{cpu:.0f} in all",
            f"{cpu / ratio / 60:.0f} min wall",
        ]
    )
    return _table(["phase", "measured on", "CPU s each", "in cpu-quick"], rows)


def tools_vs_tags() -> str:
    """SmolLM2-135M-Instruct zero-shot and after the same SFT budget, tool calls vs tags
    (``benchmarks/tools_vs_tags.py``): the table it printed, each SFT's budget, and the run's notes."""
    data = _load("tools_vs_tags")
    budget = "; ".join(
        f"{p}: {s['steps']} steps on {s['examples']} oracle episodes, final loss {s['final_loss']:.3f}, "
        f"{s['cpu_s']:.0f} CPU s" + (f" ({s['source']})" if s.get("source") else "")
        for p, s in sorted(data["sft"].items())
    )
    notes = f"\n\n{data['notes']}" if data.get("notes") else ""
    return f"{data['table']}\n\nSFT (same budget for both): {budget}.{notes}"


def tools_vs_tags_current() -> str:
    """The same script rerun on the current tools rules (``tools_vs_tags_current.json``): its table,
    each SFT's budget (where it ran), its command and its notes."""
    data = _load("tools_vs_tags_current")
    budget = "; ".join(
        f"{p}: {s['steps']} steps on {s['examples']} oracle episodes, final loss {s['final_loss']:.3f}, "
        f"{s['cpu_s']:.0f} CPU s"
        for p, s in sorted(data["sft"].items())
    )
    out = data["table"] + (f"\n\nSFT (same budget for both): {budget}." if budget else "")
    out += f"\n\nCommand ({data['threads']} thread each): `{data['command']}`."
    return out + (f"\n\n{data['notes']}" if data.get("notes") else "")


#: The runs of ``examples/grpo_smollm2.py`` on SmolLM2-135M-Instruct, in the table's order: the
#: results file each wrote (``benchmarks/results/<name>.json``) and what the row changes.
GRPO_SMOLLM2_RUNS = {
    "grpo_smollm2_quick_seed0": "cpu-quick as first set (EM reward, T 1.0, 2×4 episodes, lr 1e-5)",
    "grpo_smollm2_f1_seed0": "from the same SFT: F1 reward, T 0.7, 4×4 episodes, lr 3e-5",
}


#: The ``cpu-quick`` preset as it is, timed end to end: on a CPU with bf16 instructions, and on
#: one without (fp32), as it is and with dynamic sampling.
GRPO_SMOLLM2_QUICK = {
    "grpo_smollm2_quick24_seed0": "`--preset cpu-quick`",
    "grpo_smollm2_quick24_seed0_fp32": "`--preset cpu-quick`",
    "grpo_smollm2_quick24_seed0_dynamic": "`--preset cpu-quick --set resample_rounds=2`",
}


def grpo_smollm2_runs() -> str:
    """SFT then GRPO on SmolLM2-135M-Instruct (``examples/grpo_smollm2.py``): held-out greedy EM
    before and after GRPO (the training side: :func:`grpo_smollm2_runs_training`)."""
    return _smollm2_runs(GRPO_SMOLLM2_RUNS, _RUN_OUTCOME)


def grpo_smollm2_runs_training() -> str:
    """The same runs' sampled episodes, reward over training and each phase's CPU time."""
    return _smollm2_runs(GRPO_SMOLLM2_RUNS, _RUN_TRAINING)


def grpo_smollm2_quick() -> str:
    """The ``cpu-quick`` preset's runs: the outcome, the paired comparison, precision and wall time."""
    return _smollm2_runs(GRPO_SMOLLM2_QUICK, _RUN_OUTCOME + _RUN_WALL)


def grpo_smollm2_quick_training() -> str:
    """The ``cpu-quick`` preset's runs: the training side."""
    return _smollm2_runs(GRPO_SMOLLM2_QUICK, _RUN_TRAINING)


#: The columns of the SmolLM2 run tables, by the table they go in: header and cell.
_RUN_OUTCOME: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("held-out questions", lambda d: f"{d['test_questions']}"),
    ("EM / F1 after SFT", lambda d: f"{d['em_sft']:.3f} / {d['sft']['f1']:.3f}"),
    ("EM / F1 after GRPO", lambda d: f"{d['em_grpo']:.3f} / {d['grpo']['f1']:.3f}"),
    ("searches after GRPO", lambda d: f"{d['grpo']['searches_per_episode']:.2f}"),
)
_RUN_WALL: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("GRPO against SFT, question by question", lambda d: _vs_sft(d.get("grpo_vs_sft"))),
    ("training", lambda d: _precision(d)),
    ("whole run, wall minutes", lambda d: f"{d['seconds'] / 60:.1f}"),
)
_RUN_TRAINING: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("sampled episodes", lambda d: f"{d['grpo_budget']['episodes']}"),
    (
        "sampled reward per GRPO step",
        lambda d: " → ".join(f"{h.get('env/reward', 0.0):.2f}" for h in d.get("grpo_history", [])),
    ),
    (
        "last entropy",
        lambda d: (
            f"{d['grpo_history'][-1].get('policy/entropy', float('nan')):.2f}"
            if d.get("grpo_history")
            else "–"
        ),
    ),
    (
        "SFT CPU s",
        lambda d: (
            "–" if "cpu_seconds" not in d.get("sft_budget", {}) else f"{d['sft_budget']['cpu_seconds']:.0f}"
        ),
    ),
    ("GRPO CPU s", lambda d: f"{d['grpo_budget']['cpu_seconds']:.0f}"),
)


def _smollm2_runs(
    runs: dict[str, str], columns: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...]
) -> str:
    rows = []
    for name, label in runs.items():
        d = _load(name)  # a missing results file fails the build, as for every table
        rows.append([label, str(d["args"]["seed"])] + [cell(d) for _, cell in columns])
    return _table(["run", "seed"] + [header for header, _ in columns], rows)


def _vs_sft(pair: dict[str, Any] | None) -> str:
    """Questions gained and lost against the SFT, and the exact McNemar p (``<method>_vs_sft``)."""
    if pair is None:  # runs made before the results file compared them
        return "–"
    return f"+{pair['gained']} −{pair['lost']} (p {pair['p_value']:.2f})"


def _precision(d: dict[str, Any]) -> str:
    """What GRPO trained in: bf16 autocast where the CPU had it, fp32 where not."""
    return _dtype(d["train_fields"]["grpo"].get("bf16"))


def _dtype(bf16: bool | None) -> str:
    """A trainer's ``bf16`` field in words."""
    return "bf16 autocast" if bf16 else "fp32"


def bf16_cpu() -> str:
    """bf16 autocast against fp32 on the CPU (``benchmarks/bf16_cpu.py``): wall seconds of a
    training step's forward and backward, and of a no-grad forward."""
    d = _load("bf16_cpu_smollm2")
    sec = d["seconds"]
    names = {
        "train_fp32_checkpointing": "forward + backward, fp32, checkpointing (TRL's default)",
        "train_fp32": "forward + backward, fp32",
        "train_bf16": "forward + backward, bf16 autocast",
        "train_bf16_checkpointing": "forward + backward, bf16 autocast, checkpointing",
        "prefill_fp32": "no-grad forward (a prefill), fp32",
        "prefill_bf16": "no-grad forward (a prefill), bf16 autocast",
    }
    rows = [[names[k], f"{v:.2f}"] for k, v in sec.items()]
    rows.append(["**fp32 with checkpointing / bf16 without** (training)", f"**{d['train_speedup']:.2f}x**"])
    rows.append(["**fp32 / bf16** (prefill)", f"**{d['prefill_speedup']:.2f}x**"])
    header = [
        f"{d['model']}, {d['batch']} x {d['tokens']} tokens, {d['threads']} thread(s)",
        "wall s (median)",
    ]
    return _table(header, rows)


#: The rollout-throughput runs of ``benchmarks/grpo_step_profile.py``: results file -> the model.
ROLLOUT_THROUGHPUT = {
    "grpo_step_profile": "small Llama from a config (4 x 256, random weights), before a group's "
    "prompt was prefilled once",
    "grpo_step_profile_smollm2_c": "SmolLM2-135M-Instruct after SFT (checkpoint C), 1 thread",
    "grpo_step_profile_smollm2_c_2t": "SmolLM2-135M-Instruct after SFT (checkpoint C), 2 threads",
}

#: The same runs on the collector before later turns were shared and decoding wrote into
#: reserved room: results file of the current code -> that of the code before.
ROLLOUT_THROUGHPUT_BEFORE = {
    "grpo_step_profile_smollm2_c": "grpo_step_profile_smollm2_c_before",
    "grpo_step_profile_smollm2_c_2t": "grpo_step_profile_smollm2_c_2t_before",
}


def rollout_throughput_change() -> str:
    """Batched and one-at-a-time tokens/s (kept cache) before and after shared later turns and
    decoding into reserved room, on the same episodes (``benchmarks/grpo_step_profile.py``)."""
    rows = []
    for name, before_name in ROLLOUT_THROUGHPUT_BEFORE.items():
        after, before = _load(name)["throughput"], _load(before_name)["throughput"]
        settings = after["settings"]
        label = f"{settings['threads']} thread(s), {settings['questions']} groups of {settings['group']}"
        for code, t in (("before", before), ("after", after)):
            rows.append(
                [
                    label,
                    code,
                    f"{t['batched_group_of_8']['tokens_per_s']:.1f}",
                    f"{t['one_at_a_time']['tokens_per_s']:.1f}",
                    f"{t['speedup']:.2f}x",
                    f"{t['speedup_cpu']:.2f}x",
                ]
            )
        gain = {
            key: after[key]["tokens_per_s"] / before[key]["tokens_per_s"]
            for key in ("batched_group_of_8", "one_at_a_time")
        }
        rows.append(
            [
                label,
                "**after / before**",
                f"**{gain['batched_group_of_8']:.2f}x**",
                f"{gain['one_at_a_time']:.2f}x",
                "",
                "",
            ]
        )
    header = [
        "SmolLM2 checkpoint C",
        "collector",
        "batched tokens / wall s",
        "one at a time tokens / wall s",
        "batched / one at a time (wall)",
        "(CPU)",
    ]
    return _table(header, rows)


def rollout_passes() -> str:
    """Where the sampling time of the throughput runs went: prefills, and decoding steps by the
    rows they ran (``benchmarks/grpo_step_profile.py``, runs that timed their forward passes)."""
    names = {
        "batched_group_of_8": "batched group of 8",
        "batched_two_groups_of_8": "two groups of 8 batched",
        "one_at_a_time": "one episode at a time",
    }
    rows = []
    for name, model in ROLLOUT_THROUGHPUT.items():
        t = _load(name)["throughput"]
        for key, label in names.items():
            r = t.get(key, {})
            if "decode_ms_by_rows" not in r:  # runs made before the passes were timed
                continue
            by_rows = r["decode_ms_by_rows"]
            rows.append(
                [
                    model,
                    label,
                    f"{r['wall_s']:.0f}",
                    f"{r['prefill_s']:.0f}",
                    str(r["prefill_positions"]),
                    f"{r['decode_s']:.0f}",
                    str(r["decode_steps"]),
                    ", ".join(f"{n}: {ms:.0f}" for n, ms in by_rows.items()),
                ]
            )
    header = [
        "model",
        "sampling",
        "wall s",
        "prefill s",
        "prefilled positions (padding included)",
        "decoding s",
        "decoding steps",
        "ms per decoding step, by rows",
    ]
    return _table(header, rows)


def prefill_buckets() -> str:
    """A turn's prefill in one pass against passes by the rows' lengths, on the same greedy
    evaluation (``benchmarks/prefill_buckets.py``): CPU seconds, prefill tokens fed and peak RSS
    per side, and whether both sampled the same tokens."""
    d = _load("prefill_buckets_smollm2")
    names = {"one_pass": "one pass, padded to the longest row", "buckets": "passes by length"}
    rows = [
        [
            label,
            str(s["buckets"]),
            f"{s['passes']:,}",
            f"{s['padded']:,}",
            f"{s['real']:,}",
            f"{s['cpu_s']:,.0f}",
            f"{s['peak_rss_mib']:,}",
            f"{s['em']:.3f}",
        ]
        for key, label in names.items()
        for s in [d["sides"][key]]
    ]
    header = [
        "prefill",
        "passes a turn, at most",
        "prefill passes",
        "prefill tokens fed",
        "of them real",
        "CPU s",
        "peak RSS MiB",
        "EM",
    ]
    same = "the same tokens" if d["same_tokens"] else "**different tokens**"
    return (
        _table(header, rows)
        + f"\n\n`{d['model']}`, {d['questions']} held-out questions in one batch, greedy, "
        f"{d['threads']} thread: {d['padded_tokens_ratio']:.2f}x the prefill tokens, "
        f"{d['cpu_speedup']:.2f}x faster in CPU seconds; both sides sampled {same}."
    )


def rollout_throughput() -> str:
    """Sampled model tokens per second of a GRPO group of 8 episodes: batched against one at a
    time, each with the KV cache kept across turns and with a full prefill every turn."""
    sides = [
        ("batched_group_of_8", "batched group of 8", "kept"),
        ("batched_two_groups_of_8", "two groups of 8 batched (a GRPO step's 16)", "kept"),
        ("batched_group_of_8_full_prefill", "batched group of 8", "full prefill each turn"),
        ("one_at_a_time", "one episode at a time", "kept"),
        ("one_at_a_time_full_prefill", "one episode at a time", "full prefill each turn"),
    ]
    rows = []
    for name, model in ROLLOUT_THROUGHPUT.items():
        t = _load(name)["throughput"]
        for key, sampling, cache in sides:
            if key not in t:  # runs made before two groups were measured
                continue
            r = t[key]
            rows.append(
                [
                    model,
                    sampling,
                    cache,
                    str(r["model_tokens"]),
                    str(r["turns"]),
                    ", ".join(map(str, r.get("distinct_first_turns", []))) or "-",
                    f"{r['tokens_per_s']:.1f}",
                    f"{r['tokens_per_cpu_s']:.1f}",
                ]
            )
        rows.append(
            [
                model,
                "**batched / one at a time** (both kept)",
                "",
                "",
                "",
                "",
                f"**{t['speedup']:.2f}x**",
                f"**{t['speedup_cpu']:.2f}x**",
            ]
        )
        if "speedup_two_groups" in t:
            rows.append(
                [
                    model,
                    "**two groups batched / one at a time** (both kept)",
                    "",
                    "",
                    "",
                    "",
                    f"**{t['speedup_two_groups']:.2f}x**",
                    f"**{t['speedup_two_groups_cpu']:.2f}x**",
                ]
            )
    header = [
        "model",
        "sampling",
        "KV cache across turns",
        "model tokens",
        "turns",
        "distinct first turns per group",
        "tokens / wall s",
        "tokens / CPU s",
    ]
    return _table(header, rows)


def lora_memory() -> str:
    """Full fine-tuning against a LoRA adapter on SmolLM2: parameters, memory and step time
    (``benchmarks/lora_memory.py``), with the ratios."""
    d = _load("lora_memory_smollm2")
    names = {"full": "full fine-tuning"}
    rows = [
        [
            names.get(r["mode"], r["mode"].replace("lora", "LoRA")),
            f"{r['trainable_params']:,}",
            f"{r['rss_loaded_mib']:.1f}",
            f"{r['peak_rss_mib']:.1f}",
            f"{r['step_wall_s']:.1f}",
            f"{r['step_cpu_s']:.1f}",
        ]
        for r in d["rows"]
    ]
    full, lora = d["rows"][0], d["rows"][1]
    rows.append(
        [
            "**LoRA / full**",
            "",
            "",
            f"**{d['peak_rss_ratio']:.2f}x**",
            f"**{d['step_time_ratio']:.2f}x**",
            f"**{lora['step_cpu_s'] / full['step_cpu_s']:.2f}x**",
        ]
    )
    header = ["side", "trainable params", "RSS loaded (MiB)", "peak RSS (MiB)", "step wall s", "step CPU s"]
    return _table(header, rows)


def logprob_memory() -> str:
    """The KL log's log-prob pass, packed under a bound against one pass
    (``benchmarks/logprob_memory.py``): peak memory and time."""
    d = _load("logprob_memory")
    rows = [
        [
            r["side"],
            f"{r['rss_before_mib']:.0f}",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['rise_mib']:.0f}",
            f"{r['seconds']:.1f}",
        ]
        for r in d["rows"]
    ]
    rows.append(
        ["**packed / one pass**", "", "", f"**{d['rise_ratio']:.2f}x**", f"**{d['time_ratio']:.2f}x**"]
    )
    return _table(["side", "RSS before (MiB)", "peak RSS (MiB)", "rise (MiB)", "wall s"], rows)


#: The step profiles of ``benchmarks/grpo_step_profile.py`` (``profile``): results file -> the model.
STEP_PROFILE = {
    "grpo_step_profile": "small Llama (config, random weights), fp32",
    "grpo_step_profile_smollm2_base": "SmolLM2-135M-Instruct before SFT, bf16 autocast, checkpointing",
    "grpo_step_profile_smollm2": "SmolLM2-135M-Instruct after the 24-step SFT (`cpu`'s), bf16 "
    "autocast, checkpointing",
}

_STEP_PARTS = {
    "generation": "generation (batched sampling, KV cache kept across turns)",
    "env": "env (decode, env step, batched search, tokenise observations)",
    "rollout_other": "rest of the rollout (env resets, `track_kl`'s KL-to-start log-probs)",
    "logprobs_old_ref": "TRL's old/reference log-probs (skipped with `beta=0` and one iteration)",
    "scoring_other": "rest of TRL's scoring (rewards, advantages)",
    "loss_forward": "loss forward",
    "backward": "backward",
    "other": "the rest (optimizer, TRL's bookkeeping)",
}


def grpo_step_profile() -> str:
    """Share of a GRPO step's wall time in each part, one column per profiled model."""
    runs = {label: _load(name) for name, label in STEP_PROFILE.items()}
    rows = [
        [part] + [f"{100 * d['profile']['share'][key]:.1f}%" for d in runs.values()]
        for key, part in _STEP_PARTS.items()
    ]
    rows.append(
        ["**a step** (episodes, sampled tokens, wall s)"]
        + [
            f"{d['profile']['episodes'] // d['profile']['steps']} episodes, "
            f"{d['profile']['model_tokens'] // d['profile']['steps']} tokens, "
            f"{d['profile']['step_s']:.0f} s"
            for d in runs.values()
        ]
    )
    return _table(["part", *runs], rows)


#: One GRPO step on SmolLM2, its loss in one pass, then in micro-batches
#: (``benchmarks/grpo_step_profile.py --micro-batch``).
GRPO_MICRO_BATCH = ("grpo_micro_batch_smollm2_whole", "grpo_micro_batch_smollm2_micro4")


def grpo_micro_batch() -> str:
    """Peak memory and time of one GRPO step on SmolLM2, the loss in one pass against passes of a
    few episodes whose gradients add up, with the ratios."""
    whole, micro = (_load(name)["profile"] for name in GRPO_MICRO_BATCH)
    rows = []
    for p in (whole, micro):
        passes = p["loss_passes_per_step"]
        rows.append(
            [
                "one loss pass over the step" if passes == 1 else f"`micro_batch_size={p['micro_batch']}`",
                f"{p['episodes']} / {p['micro_batch']}",
                str(passes),
                str(p["model_tokens"]),
                f"{p['peak_rss_mib']:,.0f}",
                f"{p['seconds']['loss_forward']:.1f}",
                f"{p['seconds']['backward']:.1f}",
                f"{p['step_s']:.1f}",
            ]
        )
    rows.append(
        [
            "**micro-batched / one pass**",
            "",
            "",
            "",
            f"**{micro['peak_rss_mib'] / whole['peak_rss_mib']:.2f}x**",
            "",
            "",
            f"**{micro['step_s'] / whole['step_s']:.2f}x**",
        ]
    )
    header = [
        "loss",
        "episodes (step / pass)",
        "passes",
        "sampled tokens",
        "peak RSS (MiB)",
        "loss forward s",
        "backward s",
        "step wall s",
    ]
    return _table(header, rows)


#: One GRPO step with TRL's log-prob path and hopgym's tiled one, the same episodes
#: (``benchmarks/grpo_step_profile.py --compare``).
GRPO_STEP_CHUNKED = ("grpo_step_chunked_smollm2_4ep", "grpo_step_chunked_smollm2_16ep")


def grpo_step_chunked() -> str:
    """Peak memory, time and page faults of one GRPO step on SmolLM2 with the loss's log-probs
    through TRL's path and through the tiled one (``GRPORunConfig.chunked_logprobs``)."""
    rows = []
    for name in GRPO_STEP_CHUNKED:
        d = _load(name)
        c = d["compare"]
        s = d["settings"]
        for key, label in (("trl", "TRL's path (every position)"), ("tiled", "tiled (the loss's positions)")):
            p = c[key]
            rows.append(
                [
                    f"{s['episodes_per_step']} episodes" if key == "trl" else "",
                    label,
                    str(p["model_tokens"]),
                    f"{p['peak_rss_mib']:,.0f}",
                    f"{p['seconds']['loss_forward']:.1f}",
                    f"{p['seconds']['backward']:.1f}",
                    f"{p['step_s']:.1f}",
                    f"{p['cpu_user_s'] + p['cpu_system_s']:.0f}",
                    f"{p['minor_page_faults'] / 1e6:.1f}M",
                ]
            )
        r = c["ratio"]
        cpu = [c[k]["cpu_user_s"] + c[k]["cpu_system_s"] for k in ("tiled", "trl")]
        rows.append(
            [
                "",
                "**tiled / TRL's**" + ("" if c["same_episodes"] else " (episodes differ)"),
                "",
                f"**{r['peak_rss_mib']:.2f}x**",
                "",
                f"**{c['ratio_loss_forward_backward']:.2f}x** (forward + backward)",
                f"**{r['step_s']:.2f}x**",
                f"**{cpu[0] / cpu[1]:.2f}x**",
                f"**{r['minor_page_faults']:.2f}x**",
            ]
        )
    header = [
        "step",
        "log-probs",
        "sampled tokens",
        "peak RSS (MiB)",
        "loss forward s",
        "backward s",
        "step wall s",
        "CPU s (user + system)",
        "minor page faults",
    ]
    return _table(header, rows)


#: One 16-episode GRPO step on SmolLM2 before and after the step's cost work, the same episodes
#: (``benchmarks/grpo_step_profile.py --compare``), and the issue's targets for it.
GRPO_STEP_COST = "grpo_step_cost_smollm2_16ep"
#: The same comparison with each prompt's backbone pass shared by its group's loss passes
#: (``GRPORunConfig.shared_prompt``), measured again beside the step before and the step without it.
GRPO_STEP_SHARED = "grpo_step_shared_smollm2_16ep"
#: The step under bf16 autocast (TRL's ``bf16=True``; on a CPU with bf16 instructions), beside
#: the step before and the cheapest fp32 step.
GRPO_STEP_BF16 = "grpo_step_bf16_smollm2_16ep"
#: The targets of a 16-episode step: peak RSS at most 4 GB, step time at most half of before.
GRPO_STEP_TARGETS = {"peak_rss_mib": 4096, "time_ratio": 0.5}


def grpo_step_cost(name: str = GRPO_STEP_COST) -> str:
    """Peak memory and time of one GRPO step on SmolLM2 with the settings before the step's cost
    work and after it, on the same episodes, with each after-row's ratios and the targets."""
    d = _load(name)
    c = d["compare"]
    runs, ratios = c["runs"], c["ratio"]
    rows = []
    for name, p in runs.items():
        sec = p["seconds"]
        rows.append(
            [
                f"**{name}**",
                "`" + " ".join(p["options"]) + "`" if p["options"] else "(the defaults)",
                f"{p['peak_rss_mib']:,.0f}",
                f"{sec['generation'] + sec['env']:.0f}",
                f"{sec['rollout_other']:.0f}",
                f"{sec['loss_forward']:.0f}",
                f"{sec['backward']:.0f}",
                f"{p['step_s']:.0f}",
                f"{p['cpu_user_s'] + p['cpu_system_s']:.0f}",
                f"{p['minor_page_faults'] / 1e6:.1f}M",
            ]
        )
        if name in ratios:
            r = ratios[name]
            rows.append(
                [
                    f"{name} / before",
                    "",
                    f"**{r['peak_rss_mib']:.2f}x**",
                    "",
                    "",
                    f"{r['loss_forward_backward']:.2f}x (forward + backward)",
                    "",
                    f"**{r['step_s']:.2f}x**",
                    f"**{r['cpu_s']:.2f}x**",
                    f"{r['minor_page_faults']:.2f}x",
                ]
            )
    header = [
        "run",
        "options",
        "peak RSS (MiB)",
        "sampling s",
        "rest of rollout (KL-to-start) s",
        "loss forward s",
        "backward s",
        "step wall s",
        "CPU s (user + system)",
        "minor page faults",
    ]
    lines = [_table(header, rows), ""]
    before = runs["before"]
    limit, half = GRPO_STEP_TARGETS["peak_rss_mib"], GRPO_STEP_TARGETS["time_ratio"]
    for name, r in ratios.items():
        p = runs[name]
        memory = "met" if p["peak_rss_mib"] <= limit else "not met"
        wall = "met" if r["step_s"] <= half else "not met"
        cpu = "met" if r["cpu_s"] <= half else "not met"
        line = (
            f"- **{name}**: peak RSS {p['peak_rss_mib']:,.0f} MiB against the {limit:,} MiB target: "
            f"**{memory}**; step time {r['step_s']:.2f}x of before in wall seconds and "
            f"{r['cpu_s']:.2f}x in CPU seconds against the {half}x target: **{wall}** (wall), "
            f"**{cpu}** (CPU)."
        )
        if "bf16=True" in p["options"]:
            line += (
                " Under bf16 autocast: its loss is before's up to bf16 rounding, not the same "
                "arithmetic, which the target asks for."
            )
        if p["episodes_digest"] != before["episodes_digest"]:
            line += (
                f" It sampled other episodes than before ({p['model_tokens']:,} model tokens against "
                f"{before['model_tokens']:,}), so its ratios compare different work."
            )
        lines.append(line)
    return "\n".join(lines)


#: The table of SFT -> GRPO / RFT / continue-SFT on SmolLM2 (``examples/grpo_smollm2.py``): each
#: results file with the SFT checkpoint its run started from (docs/training.md says which is which).
GRPO_SMOLLM2_TABLE = {
    "grpo_smollm2_cpu_seed0": "A",
    "grpo_smollm2_cpu_seed0_continue_sft": "A",
    "grpo_smollm2_cpu_sft_rerun": "B (the SFT run again)",
    "grpo_smollm2_cpu_seed1": "B",
    "grpo_smollm2_cpu_seed1_r3rag": "B",
    "grpo_smollm2_cpu_seed1_searchr1": "B",
    "grpo_smollm2_cpu_seed1_lora": "B",
    "grpo_smollm2_cpu_seed1_rft": "B",
    "grpo_smollm2_cpu_seed1_continue_sft": "B",
    "grpo_smollm2_cpu_seed2_long": "C",
    "grpo_smollm2_cpu_seed2_long_seed3": "C",
    "grpo_smollm2_cpu_seed2_long_rft": "C",
    "grpo_smollm2_cpu_seed2_long_continue_sft": "C",
    "grpo_smollm2_cpu_seed2_dynamic": "C",
    "grpo_smollm2_cpu_seed2_dynamic_seed3": "C",
}

_METHOD_NAMES = {"sft": "SFT", "grpo": "GRPO", "rft": "RFT", "continue_sft": "continue-SFT"}


def _smollm2_method_rows() -> list[dict[str, str]]:
    """One row per method of each run of :data:`GRPO_SMOLLM2_TABLE`, every column of both tables."""
    rows = []
    for name, label in GRPO_SMOLLM2_TABLE.items():
        d = _load(name)  # a missing results file fails the build, as for every table
        a = d["args"]
        methods = (["sft"] if "sft" in d else []) + [m for m in a["methods"] if m in d]
        for m in methods:
            ev, budget = d[m], d.get(f"{m}_budget", {})
            hist = d.get("grpo_history", []) if m == "grpo" else d.get(f"{m}_history", [])
            rewards = [h.get("env/reward", 0.0) for h in hist]
            half = len(rewards) // 2
            first, last = sum(rewards[:half]), sum(rewards[len(rewards) - half :])
            flat = [h["frac_reward_zero_std"] for h in hist if "frac_reward_zero_std" in h]
            lora = a.get("lora_r", 0) if m != "sft" else 0
            resample = a.get("resample_rounds", 0) if m == "grpo" else 0
            lr = a["sft_lr"] if m in ("sft", "continue_sft") else a[f"{m}_lr"]
            rows.append(
                {
                    "method": _METHOD_NAMES.get(m, m)
                    + (f" (LoRA r={lora})" if lora else "")
                    + (f" (dynamic sampling, ≤ {resample} rounds)" if resample else ""),
                    "checkpoint": label,
                    "seed": str(a["seed"]),
                    "lr": f"{lr:g}",
                    "reward": "–" if m in ("sft", "continue_sft") else f"`{a['reward']}`",
                    "em": f"{ev['em']:.3f}",
                    "f1": f"{ev['f1']:.3f}",
                    "searches": f"{ev['searches_per_episode']:.2f}",
                    "episodes": str(budget.get("episodes", budget.get("examples", "–"))),
                    "sampled": " → ".join(f"{r:.2f}" for r in rewards) if rewards else "–",
                    "trend": f"{last / first:.2f}x" if half and first > 0 else "–",
                    "flat": f"{sum(flat) / len(flat):.2f}" if flat else "–",
                    "cpu": f"{budget['cpu_seconds']:.0f}" if "cpu_seconds" in budget else "–",
                }
            )
    return rows


def grpo_smollm2_table() -> str:
    """Held-out greedy EM of SmolLM2-135M-Instruct after SFT and after each method on the same
    budget of sampled episodes (the training side of each run: :func:`grpo_smollm2_training`)."""
    n = {_load(name)["test_questions"] for name in GRPO_SMOLLM2_TABLE}
    columns = {
        "method": "method",
        "checkpoint": "checkpoint",
        "seed": "seed",
        "lr": "lr",
        "reward": "reward",
        "em": f"held-out EM ({'/'.join(map(str, sorted(n)))} questions)",
        "f1": "F1",
        "searches": "searches",
    }
    rows = _smollm2_method_rows()
    return _table(list(columns.values()), [[r[k] for k in columns] for r in rows])


def grpo_smollm2_training() -> str:
    """The training side of :func:`grpo_smollm2_table`'s rows: episodes, the sampled reward over
    training, the groups without reward variance and each method's CPU time."""
    columns = {
        "method": "method",
        "checkpoint": "checkpoint",
        "seed": "seed",
        "episodes": "episodes (GRPO, RFT: sampled; SFT: oracle)",
        "sampled": "sampled reward per step / round",
        "trend": "last half / first half",
        "flat": "groups without reward variance (GRPO)",
        "cpu": "CPU s",
    }
    rows = [r for r in _smollm2_method_rows() if r["sampled"] != "–" or r["episodes"] != "–"]
    return _table(list(columns.values()), [[r[k] for k in columns] for r in rows])


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def train_first_run() -> str:
    """Wall and CPU time of each command of the training page's first run
    (``benchmarks/train_first_run.py``)."""
    d = _load("train_first_run")
    rows = [
        [
            f"`{' '.join(c['command'].split()[:3])}`",
            _minutes(c["wall_s"]),
            f"{c['cpu_s']:.0f} s",
            f"{c['load_before']:.1f}",
        ]
        for c in d["commands"]
    ]
    total = [sum(c[k] for c in d["commands"]) for k in ("wall_s", "cpu_s")]
    rows.append(["both", _minutes(total[0]), f"{total[1]:.0f} s", ""])
    header = ["command", "wall time", "CPU time", f"load average before ({d['machine']['cpus']} cores)"]
    from hopgym.agents.sft import SFT_DEFAULTS  # the default the estimate is for, said once

    rate = [
        float(m.group(1))
        for line in d["commands"][0]["stderr"]
        if (m := re.search(r"^sft step \d+/\d+ · ([\d.]+) s/step", line))
    ][-1]
    steps = SFT_DEFAULTS["max_steps"]
    return (
        _table(header, rows)
        + f"\n\nAt this SFT's rate ({rate:.1f} s a step, its last progress line), the default "
        f"{steps} SFT steps take about {rate * steps / 3600:.1f} hours on the same machine."
    )


def train_first_run_log() -> str:
    """What the first run's commands printed on stderr, as they printed it."""
    d = _load("train_first_run")
    lines = [f"$ {c['command']}\n" + "\n".join(c["stderr"]) for c in d["commands"]]
    return "```text\n" + "\n".join(lines) + "\n```"


def train_expected_time() -> str:
    """Measured wall and CPU time of training runs on the CPU, from their results files."""
    first = _load("train_first_run")["commands"]
    small = _load("grpo_cpu_small")
    quick = _load("grpo_smollm2_quick24_seed0")
    long = _load("grpo_smollm2_cpu_seed2_long")
    a = small["args"]
    runs = small["runs"]

    def span(values: list[float]) -> str:
        return f"{min(values):,.0f}–{max(values):,.0f}"

    rows = [
        [
            "the first run above (tiny model)",
            " + ".join(f"`{c['command'].split()[2]}`" for c in first),
            f"{sum(c['wall_s'] for c in first) / 60:.1f} min wall, "
            f"{sum(c['cpu_s'] for c in first):,.0f} CPU s",
        ],
        [
            f"1.2M student, {len(runs)} seeds",
            f"SFT {a['sft_steps']} steps × {a['sft_batch']} episodes",
            f"{span([r['sft_seconds'] / 60 for r in runs])} min wall, "
            f"{span([r['sft_cpu_seconds'] for r in runs])} CPU s",
        ],
        [
            f"1.2M student, {len(runs)} seeds",
            f"GRPO {a['grpo_steps']} steps × {a['questions_per_step']} × {a['group_size']} episodes",
            f"{span([r['grpo_budget']['seconds'] / 60 for r in runs])} min wall, "
            f"{span([r['grpo_budget']['cpu_seconds'] for r in runs])} CPU s",
        ],
        [
            "SmolLM2-135M-Instruct, `--preset cpu-quick`",
            f"SFT {quick['sft_budget']['steps']} steps, GRPO {quick['grpo_budget']['steps']} steps × "
            f"{quick['args']['questions_per_step']} × {quick['args']['group_size']}, evaluations",
            f"{quick['seconds'] / 60:.0f} min wall (whole run, bf16)",
        ],
        [
            "SmolLM2-135M-Instruct, checkpoint C",
            f"GRPO {long['grpo_budget']['steps']} steps × {long['args']['questions_per_step']} × "
            f"{long['args']['group_size']} episodes",
            f"{long['grpo_budget']['seconds'] / 60:.0f} min wall, "
            f"{long['grpo_budget']['cpu_seconds']:,.0f} CPU s (fp32)",
        ],
    ]
    return _table(["model", "what ran", "2 CPU cores (shared with other jobs)"], rows)


def healthy_grpo_log() -> str:
    """Every tenth row of a GRPO run that learned (``grpo_cpu_small``, the seed run on the current
    rollout code): what its ``log.jsonl`` held."""
    d = _load("grpo_cpu_small")
    run = d["runs"][-1]
    hist = run["grpo_history"]
    keys = (
        ("env/em", "sampled EM"),
        ("env/reward", "reward"),
        ("env/searches_per_episode", "searches"),
        ("policy/kl_ref", "KL to start"),
        ("policy/entropy", "entropy"),
    )
    rows = [
        [str(h["step"])] + [f"{h[k]:.3f}" for k, _ in keys]
        for h in hist
        if h["step"] == 1 or h["step"] % 10 == 0
    ]
    return _table([f"step (seed {run['seed']})"] + [name for _, name in keys], rows)


def headline() -> str:
    """The headline results of the home page and the Results page, each from its results file."""
    small = _load("grpo_cpu_small")["summary"]
    sb3 = _load("sb3_learning")
    best = max(sb3["summary"], key=lambda k: sb3["summary"][k]["em"])
    b = sb3["summary"][best]
    c = {name: _load(name) for name, _, _ in _SMOLLM2_C_GRPO}
    sft = c["grpo_smollm2_cpu_seed2_long"]["sft"]["em"]
    grpo = [c[name]["grpo"]["em"] for name, _, _ in _SMOLLM2_C_GRPO]
    q = c["grpo_smollm2_cpu_seed2_long"]["test_questions"]
    se = (sft * (1 - sft) / q) ** 0.5
    n = len(_load("grpo_cpu_small")["seeds"])
    params = _load("grpo_cpu_small")["runs"][0]["parameters"] / 1e6

    def ms(key: str) -> str:
        return f"{small[key]['mean']:.3f} ± {small[key]['std']:.3f}"

    rows = [
        [
            f"{params:.1f}M-parameter student, synthetic 2-hop questions ({n} seeds)",
            f"SFT {ms('sft')} → **GRPO {ms('grpo')}**; RFT {ms('rft')}, "
            f"filtered-teacher SFT {ms('filtered_sft')}",
        ],
        [
            f"SmolLM2-135M-Instruct, {q} held-out questions ({len(grpo)} GRPO runs from one SFT)",
            f"SFT {sft:.3f} → GRPO {min(grpo):.3f}–{max(grpo):.3f}: within about one s.e. ({se:.3f})",
        ],
        [
            f"{best.upper()} (Stable-Baselines3), featurized env ({len(sb3['seeds'])} seeds)",
            f"{b['em']:.3f} ± {b['em_std']:.3f}, against {sb3['baselines']['iterative']['em']:.2f} for the "
            "rule-based reader",
        ],
    ]
    return _table(["what", "held-out exact match"], rows)


#: The GRPO runs from SmolLM2 checkpoint C that the headline counts: results file, seed, sampling.
_SMOLLM2_C_GRPO = (
    ("grpo_smollm2_cpu_seed2_long", 2, "plain"),
    ("grpo_smollm2_cpu_seed2_long_seed3", 3, "plain"),
    ("grpo_smollm2_cpu_seed2_dynamic", 2, "dynamic"),
    ("grpo_smollm2_cpu_seed2_dynamic_seed3", 3, "dynamic"),
)


def _ratio(r: dict[str, Any]) -> str:
    """A row's ratio to in-process, and the range of its runs' ratios when there is one."""
    if r["vs_in_process"] is None:
        return "—"
    low_high = r.get("vs_in_process_range")
    spread = f" ({low_high[0]:.2f}–{low_high[1]:.2f})" if low_high else ""
    return f"{r['vs_in_process']:.2f}{spread}"


def env_server_load() -> str:
    """``benchmarks/env_server_load.py``: episodes/s over the env server against in-process."""
    data = _load("env_server_load")
    header = ["run", "episodes/s", "steps/s", "vs in-process", "p50 step (ms)", "p99 step (ms)"]
    header += ["server CPU µs/step", "client CPU µs/step", "errors"]
    rows = [
        [
            r["run"],
            f"{r['episodes_per_s']:,}",
            f"{r['steps_per_s']:,}",
            _ratio(r),
            f"{r['p50_step_ms']}",
            f"{r['p99_step_ms']}",
            "—" if r.get("server_cpu_us_per_step") is None else f"{r['server_cpu_us_per_step']:.0f}",
            "—" if r.get("client_cpu_us_per_step") is None else f"{r['client_cpu_us_per_step']:.0f}",
            str(r["errors"]),
        ]
        for r in data["rows"]
    ]
    adv = data.get("adversary")
    note = (
        f"\n\n{data['cpus']} CPU cores, load average {data['load_average']:.1f} at the end of the run; "
        f"{data['episodes']} episodes a run, median of {data['repeats']} runs (in brackets: the lowest "
        f"and highest ratio of a run to the in-process run just before it); server "
        f"`--workers {data['workers']} --step-batch {data['step_batch']}`."
    )
    if adv:
        note += (
            f" The adversarial client's own steps: {adv['steps']}, p50 {adv['p50_step_ms']} ms, "
            f"slowest {adv['max_step_ms']} ms, {adv['errors']} errors."
        )
    return _table(header, rows) + note


def serve_big_reply() -> str:
    """``benchmarks/serve_big_reply.py``: the largest allowed reply in flight, others' latency."""
    d = _load("serve_big_reply")
    big, alone, during, rss = (
        d["big_replies"],
        d["small_requests_alone_ms"],
        d["small_requests_during_ms"],
        d["rss_mb"],
    )
    rows = [
        [
            "largest request allowed",
            f"{d['largest_request']['queries']} queries x topk {d['largest_request']['topk']}",
        ],
        ["its reply", f"{big['bytes'] / 1e6:.1f} MB in {big['median_s']} s (median of {big['count']})"],
        ["one query more", f"HTTP {d['one_query_more']}, before any search"],
        ["small requests alone: p50 / p99", f"{alone['p50']} / {alone['p99']} ms"],
        ["small requests beside it: p50 / p99", f"{during['p50']} / {during['p99']} ms"],
        ["server memory before / peak / after", f"{rss['before']} / {rss['peak']} / {rss['after']} MB"],
        ["after vs before", f"{d['rss_after_vs_before']:.3f}"],
    ]
    return _table(["", "measured"], rows)


def _retrieval_scale() -> dict[str, Any]:
    return _load("retrieval_scale")


def retrieval_scale() -> str:
    """Dense index types at scale (``benchmarks/retrieval_scale.py``): memory, build, speed, recall."""
    data = _retrieval_scale()
    real: dict[str, Any] = {}
    for r in data["real"]:  # an IVF type's first row: nprobe the same share of nlist as at 1M
        real.setdefault(r["name"], r)
    flat = next(r["bytes_per_vector"] for r in data["scale"] if r["name"] == "flat")
    rows = []
    for r in data["scale"]:
        s = {k: v for k, v in r["settings"].items() if k != "index_type"}
        name = f"`{r['settings']['index_type']}`" + (
            " (" + ", ".join(f"{k}={v}" for k, v in s.items()) + ")" if s else ""
        )
        q = real.get(r["name"], {})
        rows.append(
            [
                name,
                f"{r['bytes_per_vector']:,}",
                f"{flat / r['bytes_per_vector']:.1f}×",
                f"{r['build_s']:,.0f} s / {r['build_peak_mib']:,.0f} MiB",
                f"{r['index_mapped_rss_mib']:,.0f} MiB",
                f"{r['qps_single']:,.0f} / {r['qps_batched']:,.0f}",
                f"{r.get('recall@3', 1.0):.3f} / {r.get('recall@10', 1.0):.3f}",
                f"{q.get('recall@3', float('nan')):.3f} / {q.get('recall@10', float('nan')):.3f}",
            ]
        )
    header = [
        "index (settings)",
        "bytes per vector",
        "smaller than flat",
        "build: time / peak",
        "resident (mapped)",
        "q/s single / batched",
        f"recall@3 / @10, {data['passages'] // 1000:,}k derived",
        f"recall@3 / @10, {data['real_slice']:,} MiniLM",
    ]
    return _table(header, rows)


def retrieval_scale_real() -> str:
    """Recall of every index type and setting on the MiniLM slice, against the 1/8-of-flat,
    0.95-recall goal."""
    data = _retrieval_scale()
    flat = next(r["bytes_per_vector"] for r in data["real"] if r["name"] == "flat")
    rows = []
    for r in data["real"]:
        s = {k: v for k, v in r["settings"].items() if k != "index_type"}
        name = f"`{r['settings']['index_type']}`" + (
            " (" + ", ".join(f"{k}={v}" for k, v in s.items()) + ")" if s else ""
        )
        share = r["bytes_per_vector"] / flat
        meets = share <= 1 / 8 and r["recall@3"] >= 0.95
        rows.append(
            [
                name,
                f"{r['bytes_per_vector']:,}",
                f"{share:.3f}",
                f"{r['recall@3']:.3f} / {r['recall@10']:.3f}",
                f"{r['qps_batched']:,.0f}",
                "yes" if meets else "",
            ]
        )
    header = [
        f"index (settings), {data['real_slice']:,} MiniLM vectors",
        "bytes per vector",
        "of flat",
        "recall@3 / @10",
        "q/s (batch of all queries)",
        "≤ 1/8 of flat and recall@3 ≥ 0.95",
    ]
    return _table(header, rows)


def retrieval_scale_cold() -> str:
    """Resident pages of the binary index's files, cold, after N queries (re-ranking from disk)."""
    data = _retrieval_scale()["cold"]
    rows = [
        [
            "random (hopgym's)" if r["advise"] == "random" else "normal (the kernel's read-ahead)",
            str(a["queries"]),
            f"{a['vectors_rss_mib']:,.1f} MiB",
            f"{a['short_list_pages_mib']:,.1f} MiB",
            f"{a['codes_rss_mib']:,.1f} MiB",
            f"{a['process_rss_mib']:,.0f} MiB",
        ]
        for r in data["rows"]
        for a in r["after"]
    ]
    header = [
        "madvise of the float vectors",
        "queries",
        f"float vectors resident (of {data['rows'][0]['file_mib']:,.0f} MiB)",
        "pages the short lists' rows lie in",
        "binary codes resident",
        "process resident (with the corpus)",
    ]
    return _table(header, rows)


def retrieval_scale_ray() -> str:
    """Resident memory of Ray Serve replicas on one index (Rss and Pss)."""
    data = _retrieval_scale()
    rows = [
        [
            f"`{r['index'].rsplit('-', 1)[1]}`",
            str(r["ray_replicas"]),
            f"{r['rss_mib_total']:,.0f} MiB",
            f"{r['pss_mib_total']:,.0f} MiB",
            f"{r['uss_mib_total']:,.0f} MiB",
            f"{r['index_rss_mib_total']:,.0f} MiB",
            f"{r['index_pss_mib_total']:,.0f} MiB",
            f"{r['ray_session_pss_mib']:,.0f} MiB ({r['ray_session_processes']} processes)",
        ]
        for r in data["ray"]
    ]
    header = [
        f"index ({data['serve_passages']:,} passages)",
        "Ray Serve replicas",
        "Rss, all replicas",
        "Pss, all replicas",
        "Uss, all replicas",
        "index file Rss, summed",
        "index file Pss, summed",
        "Pss of the whole Ray session",
    ]
    return _table(header, rows)


def retrieval_scale_projection() -> str:
    """The measured bytes per vector projected to wiki-18 with E5 (768 dimensions)."""
    rows = [
        [
            f"`{r['name']}`",
            r["arithmetic"],
            f"{r['resident_gb']:,.1f} GB",
            f"{r['vs_flat']:.3f}",
            f"{r['disk_extra_gb']:,.1f} GB" if r["disk_extra_gb"] else "",
        ]
        for r in _retrieval_scale()["projection"]
    ]
    return _table(
        ["index", "arithmetic (bytes per vector x passages)", "resident", "of flat", "float vectors on disk"],
        rows,
    )


def retrieval_scale_workers() -> str:
    """Resident memory of 1, 2 and 4 ``hopgym serve`` workers on one index (Rss and Pss)."""
    data = _retrieval_scale()
    rows = [
        [
            f"`{r['index'].rsplit('-', 1)[1]}`",
            str(r["workers"]),
            f"{r['rss_mib_total']:,.0f} MiB",
            f"{r['pss_mib_total']:,.0f} MiB",
            f"{r['uss_mib_total']:,.0f} MiB",
            f"{r['index_rss_mib_total']:,.0f} MiB",
            f"{r['index_pss_mib_total']:,.0f} MiB",
        ]
        for r in data["workers"]
    ]
    header = [
        f"index ({data['serve_passages']:,} passages)",
        "workers",
        "Rss, all workers",
        "Pss, all workers",
        "Uss, all workers",
        "index file Rss, summed",
        "index file Pss, summed",
    ]
    return _table(header, rows)


def retrieval_scale_bm25() -> str:
    """BM25's build peak and serving memory per million passages (``retrieval_scale.py --bm25``)."""
    data = _load("retrieval_scale_bm25")
    names = {
        "build": "build (hopgym)",
        "build-bm25s": "build (`bm25s.BM25.index`, before)",
        "serve": "search from disk (memory-mapped)",
    }
    rows = []
    for r in data["rows"]:
        per = r.get("resident_growth_gib_per_million", r["peak_gib_per_million"])
        what = "resident growth" if r["step"] == "serve" else "peak"
        rows.append([names[r["step"]], f"{r['seconds']:,.0f} s", f"{what}: {per:.2f} GiB"])
    return _table(
        [f"BM25, {data['passages']:,} passages", "time", "per million passages, above the passages"], rows
    )


def trl_grpo_tools() -> str:
    """SmolLM2 with TRL's GRPOTrainer on hopgym's tools, after an SFT warm-up
    (``examples/trl_grpo_tools.py``): each GRPO step's mean reward, its spread and cost."""
    data = _load("trl_grpo_tools_smollm2")
    s, env, hist = data["settings"], data["env_kwargs"], data["grpo_history"]
    nan = float("nan")
    rows = [
        [
            str(h["step"]),
            f"{h['reward']:.3f}",
            f"{h['reward_std']:.3f}",
            f"{h.get('frac_reward_zero_std', nan):.2f}",
            f"{h.get('tools/call_frequency', nan):.2f}",
            f"{h.get('completions/mean_length', nan):.0f}",
            f"{h.get('grad_norm', nan):.3f}",
            f"{h.get('step_time', nan):.0f}",
            f"{h.get('load_average', nan):.1f}",
        ]
        for h in hist
    ]
    header = [
        "GRPO step",
        f"mean reward ({s['rollouts_per_step']} rollouts)",
        "reward std",
        "groups with equal rewards",
        "tool calls per rollout",
        "completion tokens",
        "grad norm",
        "step s",
        "load average",
    ]
    sft = data["sft_losses"]

    def n(count: int, noun: str) -> str:
        return f"{count} {noun}" + ("" if count == 1 else "s")

    note = (
        f"{data['model']} on `{data['env']}` (train split, `{env['reward']}` reward, {env['max_turns']} "
        f"turns, top {n(env['top_k'], 'document')} per search): {len(sft)} SFT steps (loss "
        f"{sft[0]:.2f} to {sft[-1]:.2f}), then {len(hist)} of {s['steps']} GRPO steps, each "
        f"{n(s['groups_per_step'], 'group')} of {s['group']} "
        f"rollouts (lr {s['lr']:g}, constant), {n(s['threads'], 'torch thread')}, "
        f"{data['seconds_per_grpo_step']:.0f} s a step on average on a 2-core CPU shared with other jobs. "
        f"Completion budget {s['max_completion_length']} tokens, tool replies included; the warm-up's "
        f"oracle episodes take up to {max(data['sft_completion_tokens'])} with their closing reply (after "
        "the `answer` call, which has settled the reward)."
    )
    if len(hist) >= 4:
        k = len(hist) // 4
        first, last = data["reward_first_quarter"], data["reward_last_quarter"]
        verdict = "higher" if last > first else "not higher"
        import statistics

        spread = statistics.stdev(h["reward"] for h in hist)
        note += (
            f" Mean reward of the first {k} steps {first:.3f}, of the last {k} {last:.3f}: the last "
            f"quarter's is {verdict} by {abs(last - first):.3f} (the steps' means spread by {spread:.3f}, "
            "one standard deviation)."
        )
    if s.get("resume"):
        note += f" The last part of the run went on from a checkpoint (`--resume --steps {s['steps']}`)."
    if not data["complete"]:
        note += (
            f" The run stopped after step {hist[-1]['step'] if hist else 0} of {s['steps']} (a time limit); "
            "the same command with `--resume` goes on from its last checkpoint."
        )
    return note + "\n\n" + _table(header, rows)


def verl_agent_loop() -> str:
    """The agent loop in verl's own Ray workers (``examples/verl_agent_loop_check.py``): verl's
    ``rm_scores`` against hopgym's episode reward, per rollout."""
    data = _load("verl_agent_loop")
    rows = [
        [
            f"`{e['question_id']}`",
            e["uid"],
            str(e["turns"]),
            f"{e['verl_rm_score']:.4f}",
            f"{e['hopgym_reward']:.4f}",
            ", ".join(f"{k} {v:+.3f}" for k, v in e["verl_reward_terms"].items()),
            "yes" if e["match"] else "**no**",
        ]
        for e in data["episodes"]
    ]
    header = ["question", "group", "turns", "verl rm_scores", "hopgym reward", "verl's reward terms", "equal"]
    loaded = all(
        w["hopgym_agent_entry"] and "name" in w["hopgym_agent_entry"] and not w["hopgym_module_imported"]
        for w in data["workers"]
    )
    v = data["versions"]
    note = (
        f"verl {v['verl']}, Ray {v['ray']}, transformers {v['transformers']}, CPU: "
        f"{data['agent_loop_workers']} `AgentLoopWorker` actors (process ids "
        f"{', '.join(str(w['pid']) for w in data['workers'])}; the driver {data['driver_pid']}) "
        + (
            "each found `hopgym_agent` in its registry as the YAML's entry, without an import of the module; "
            if loaded
            else "did **not** all load `hopgym_agent` from the YAML; "
        )
        + f"`rollout.n={data['rollout_n']}`, `{data['env_id']}` with `{data['env_kwargs']}`, "
        f"{data['seconds']:.0f} s."
    )
    without = data.get("without_agent_loop_yaml")
    if without:
        note += (
            " The same step without `agent_loop_config_path`, `hopgym.integrations.verl` imported in the "
            f"launching process only: `{without['error']}`."
        )
    return note + "\n\n" + _table(header, rows)


def skyrl_generator() -> str:
    """The env through SkyRL's ``SkyRLGymGenerator.generate`` (``examples/skyrl_generator_check.py``):
    the reward each generator path trains on against hopgym's episode reward."""
    data = _load("skyrl_generator")
    rows = []
    for run in data["runs"]:
        eps = run["episodes"]
        rows.append(
            [
                f"`{run['preset']}`",
                run["path"],
                str(len(eps)),
                eps[0]["skyrl_reward_form"],
                " / ".join(f"{e['skyrl_reward']:.3f}" for e in eps),
                " / ".join(f"{e['hopgym_reward']:.3f}" for e in eps),
                "yes" if run["all_match"] else "**no**",
            ]
        )
    header = [
        "preset",
        "generator path",
        "episodes",
        "reward form",
        "SkyRL's reward",
        "hopgym's reward",
        "equal",
    ]
    v = data["versions"]
    note = (
        f"skyrl {v['skyrl']}, skyrl-gym {v['skyrl_gym']}, transformers {v['transformers']}, Python "
        f"{v['python']}, CPU; `{data['env_id']}`, every row, "
        f"`generator.max_turns={data['generator_max_turns']}`."
    )
    for run in data.get("with_step_rewards", []):
        note += (
            f" With `env_config.step_rewards: true` (each step's own reward), the {run['path']} path "
            f"trains `{run['preset']}` on "
            + " / ".join(f"{e['skyrl_reward']:.3f}" for e in run["episodes"])
            + " (hopgym: "
            + " / ".join(f"{e['hopgym_reward']:.3f}" for e in run["episodes"])
            + ")."
        )
    return note + "\n\n" + _table(header, rows)


def trl_under_verl_extra() -> str:
    """The TRL tests in an install of ``hopgym[train,verl]``: the pytest summary."""
    data = _load("trl_under_verl_extra")
    v = data["versions"]
    header = ["transformers", "TRL", "verl", "jmespath", "passed", "failed", "skipped", "seconds"]
    row = [
        v["transformers"],
        v["trl"],
        v["verl"],
        v["jmespath"],
        str(data["passed"]),
        str(data["failed"]),
        f"{data['skipped']}" + (f" ({'; '.join(data['skip_reasons'])})" if data["skip_reasons"] else ""),
        f"{data['seconds']:.0f}",
    ]
    return _table(header, [row])


def gem_wrappers() -> str:
    """The GEM envs in GEM's trainer wrapper stack (``examples/gem_wrappers_check.py``): the reward
    the trainer reads per finished episode against hopgym's, one row per group and episode."""
    data = _load("gem_wrappers")
    rows: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in data["episodes"]:
        rows.setdefault((e["group"], e["episode"]), []).append(e)
    table = []
    for (group, episode), eps in rows.items():
        table.append(
            [
                str(group),
                str(episode + 1),
                str(len(eps)),
                ", ".join(sorted({f"`{e['question_id']}`" for e in eps})),
                " / ".join(f"{e['gem_reward_arrays_sum']:.4f}" for e in eps),
                " / ".join(f"{e['gem_prev_ep_cumulative_rewards']:.4f}" for e in eps),
                f"{eps[0]['hopgym_reward']:.4f}",
                "yes" if all(e["match"] for e in eps) else "**no**",
            ]
        )
    header = [
        "group (seed)",
        "episode",
        "envs",
        "question",
        "reward arrays, summed",
        "prev_ep_cumulative_rewards",
        "hopgym reward",
        "equal (terms too)",
    ]
    note = (
        f"gem-llm {data['versions']['gem-llm']}, `{data['gem_env']}` with the `{data['reward']}` reward, "
        f"{len(data['groups'])} groups of {data['group_size']} envs, `SAME_STEP` autoreset."
    )
    return note + "\n\n" + _table(header, table)


def verifiers_eval() -> str:
    """``vf-eval`` on hopgym's taskset against served bigram models (``examples/verifiers_eval_check.py``):
    the rewards it wrote to ``traces.jsonl`` against hopgym's, per episode."""
    data = _load("verifiers_eval")
    rows = [
        [
            run["model"],
            f"`{run['turn']}`",
            f"`{e['question_id']}`",
            str(e["turns"]),
            f"{e['vf_reward']:.2f}",
            ", ".join(f"{k} {v:.2f}" for k, v in e["vf_reward_terms"].items()),
            f"{e['hopgym_reward']:.2f}",
            "yes" if e["match"] else "**no**",
        ]
        for run in data["runs"]
        for e in run["episodes"]
    ]
    header = [
        "model",
        "its every turn",
        "question",
        "turns",
        "vf-eval reward",
        "terms",
        "hopgym reward",
        "equal",
    ]
    v = data["versions"]
    note = (
        f"verifiers {v['verifiers']}, transformers {v['transformers']} (`transformers serve` on the CPU), "
        f"{data['seconds']:.0f} s for the three runs."
    )
    return note + "\n\n" + _table(header, rows)


def _script(name: str) -> Any:
    """``benchmarks/<name>.py`` as a module, without the environment defaults it sets for a
    training process (``OMP_NUM_THREADS``...): the docs build is not one."""
    before = set(os.environ)
    try:
        spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        module.example = module.load_example() if hasattr(module, "load_example") else None
    finally:
        for key in set(os.environ) - before:
            del os.environ[key]
    return module


#: The habit-fixing runs (``benchmarks/habit_fix.py``): one results file per habit and seed; and
#: their re-evaluations on more held-out questions (``benchmarks/paired_eval.py``).
HABIT_FIX_GLOB = "habit_fix_*_seed*.json"
HABIT_FIX_EVAL_GLOB = "habit_fix_*_seed*_eval*.json"
#: What RFT kept of its episodes (``RFTRunConfig.keep``), in words.
_RFT_KEEPS = {"correct": "right episodes", "best": "highest-return right episodes of each question"}
#: The per-step curves of their GRPO and RFT runs: (log key, panel title); a key no row has is
#: left out (runs before the reward terms were kept per step have none).
HABIT_FIX_CURVES = (
    ("env/reward", "reward"),
    ("env/reward_terms/redundant_query", "repeated-query term"),
    ("env/reward_terms/search_cost", "search-cost term"),
    ("env/reward_terms/unanswered", "unanswered term"),
    ("env/searches_per_episode", "searches / episode"),
    ("env/right_source_rate", "right-source rate"),
    ("env/em", "sampled EM"),
    ("policy/kl_ref", "KL to start"),
    ("policy/entropy", "entropy"),
)


def _p_value(p: float) -> str:
    """A p-value to three places, or "< 0.001" below that."""
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


#: A habit-fix goal's cell: met, not met, or undefined (the SFT did not learn the habit).
_GOAL = {True: "**met**", False: "not met", None: "undefined: no habit to fix"}


def habit_fix(files: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The habit-fixing runs, one row per method of each results file (``files``: name -> the
    file's contents; default: every committed ``habit_fix_*_seed*.json``): the habit's measure
    and its change from the SFT's, held-out EM, gained / lost against the SFT and McNemar p, CPU
    seconds, and the goal, computed from the file by ``habit_fix.summary``; then each run's
    settings and the phases it has not finished (a run still going), and the goals. The per-step
    curves are drawn by :func:`habit_fix_curves`."""
    hf = _script("habit_fix")
    files = _habit_fix_runs() if files is None else files
    header = [
        "habit",
        "seed",
        "method",
        "habit measure (change from the SFT)",
        "right-source rate",
        "held-out EM",
        "gained / lost vs SFT",
        "McNemar p",
        "CPU s (phase)",
        "goal",
    ]
    rows, notes = [], []
    for name, d in files.items():
        habit_name = d.get("habit", "searches")  # files before --habit: the over-searching one
        habit = hf.HABITS[habit_name]
        phases_all = ("sft", *habit.methods)
        a, phases = d["args"], d.get("phases", {})
        summary = hf.summary(d, hf.example, habit)
        for m in phases_all:
            method = _METHOD_NAMES[m]
            if m not in phases:
                rows.append([habit_name, str(a["seed"]), method, "not run yet", *["–"] * 6])
                continue
            ev = hf.measures(d, m, hf.example)
            s = summary.get(m, {})
            drop = s.get(f"{habit.short}_drop")
            pct = "" if drop is None else f" ({-drop:+.0%})".replace("-", "−")
            change = " (no change)" if drop == 0 else pct
            rises = f"{ev[habit.rises[0]]:.3f}" if habit.rises and habit.rises[0] in ev else "–"
            rows.append(
                [
                    habit_name,
                    str(a["seed"]),
                    method,
                    f"{ev[habit.measure]:.2f}{change}",
                    rises,
                    f"{ev['em']:.3f}",
                    f"+{s['gained']} / −{s['lost']}" if s else "–",
                    _p_value(s["p_value"]) if s else "–",
                    f"{phases[m]['cpu_seconds']:,.0f}"
                    + (
                        " (evaluation only)"
                        if m == "sft" and habit.sft_of
                        else " (resumed)"
                        if "resumed_from" in phases[m]
                        else ""
                    ),
                    _GOAL[s["goal_met"]] if s else "–",
                ]
            )
        todo = [_METHOD_NAMES[m] for m in phases_all if m not in phases]
        state = f"still to run: {', '.join(todo)}" if todo else "every phase done"
        sft = d.get("sft_budget", {})
        cut = (
            f" ({sft['cut_examples']} of {sft['examples']} SFT examples longer)"
            if sft.get("cut_examples")
            else ""
        )
        untaught = (
            f"; its SFT did not learn the habit (its {habit.label} is 0), so the goal, a share of "
            "it cut, is undefined"
            if any(s["goal_met"] is None for s in summary.values())
            else ""
        )
        resumed = "".join(
            f"; its {_METHOD_NAMES[m]} went on from `{p['resumed_from']}` after a stop, and its CPU "
            "seconds count only what came after"
            for m, p in phases.items()
            if "resumed_from" in p and not (m == "sft" and habit.sft_of)
        )
        if habit.sft_of:
            resumed += (
                f"; its SFT is the {habit.sft_of} run's (`{d.get('sft_checkpoint')}`), evaluated "
                "again under this reward (its CPU seconds: that evaluation only)"
            )
        notes.append(
            f"- `{name}.json`: {habit_name}, seed {a['seed']}, model `{a['model']}`, `{a['env']}` "
            f"`{json.dumps(a['env_kw'])}`, teacher `{json.dumps(a['teacher'])}`, cost terms "
            f"`{json.dumps(a['costs'])}`, {a['max_length']} tokens a trajectory{cut}, "
            + (
                f"RFT keeping the {_RFT_KEEPS[a.get('rft', {}).get('keep', 'correct')]}, "
                if "rft" in habit.methods
                else ""
            )
            + f"{d['test_questions']} held-out questions, {_phases_precision(phases)}; "
            + f"{state}{untaught}{resumed}."
        )
    if not rows:
        rows.append(["no results file yet", *["–"] * (len(header) - 1)])
    goals = [f"- **{n}**: {h.goal}." for n, h in hf.HABITS.items()]
    return "\n".join([_table(header, rows), "", *notes, "", "Goals:", "", *goals])


def _phases_precision(phases: Mapping[str, Mapping[str, Any]]) -> str:
    """How a habit-fix run's phases trained: in fp32, in bf16 autocast, each phase's where they
    differ, or "precision not recorded" (files from before ``phases.<name>.train_fields``; with
    ``bf16=None`` a run follows its CPU)."""
    got = {m: p["train_fields"].get("bf16") for m, p in phases.items() if p.get("train_fields")}
    if not got:
        return "precision not recorded"
    if len(set(got.values())) == 1:
        return f"trained in {_dtype(next(iter(got.values())))}"
    return "trained in " + ", ".join(f"{_dtype(v)} ({_METHOD_NAMES[m]})" for m, v in got.items())


def _family(hf: Any, habit_name: str) -> tuple[str, str]:
    """A habit's family (the habit whose SFT it starts from, or itself) and what it prices on top
    (``routing_unanswered`` -> ``("routing", "unanswered")``; ``routing`` -> ``("routing", "")``)."""
    family = hf.HABITS[habit_name].sft_of or habit_name
    return family, habit_name.removeprefix(f"{family}_") if family != habit_name else ""


def _habit_fix_runs() -> dict[str, dict[str, Any]]:
    """Every committed habit-fix run's results file (not the re-evaluations), name -> contents."""
    evals = set(RESULTS.glob(HABIT_FIX_EVAL_GLOB))
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob(HABIT_FIX_GLOB)) if p not in evals}


def habit_fix_curves(files: Mapping[str, dict[str, Any]] | None = None) -> str:
    """One picture per habit of the per-step curves of every GRPO and RFT run of it (the
    unanswered-priced GRPO beside the plain one): reward, each cost term, searches, right-source
    rate, sampled EM, KL to the start and entropy (:data:`HABIT_FIX_CURVES`), from the runs'
    results files (``files``: name -> contents; default: :func:`habit_fix`'s)."""
    hf = _script("habit_fix")
    curves: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for d in (_habit_fix_runs() if files is None else files).values():
        family, suffix = _family(hf, d.get("habit", "searches"))  # files before --habit: searches
        priced = f", {suffix} priced" if suffix else ""
        for key, label in (("grpo_history", "GRPO"), ("rft_history", "RFT")):
            if d.get(key):
                curves.setdefault(family, {})[f"{label}{priced}, seed {d['args']['seed']}"] = d[key]
    parts = []
    for family, runs in sorted(curves.items(), key=lambda kv: kv[0] != "searches"):
        png = _curves_png(
            dict(sorted(runs.items())), f"{family}: per-step curves of GRPO and RFT after the SFT"
        )
        alt = f"Per-step curves of the {family} runs (GRPO, RFT)"
        parts += ["", f"![{alt}](data:image/png;base64,{png})" if png else f"({alt}: needs matplotlib.)"]
    return "\n".join(parts[1:]) if parts else "(no habit-fix run has per-step curves yet)"


def _curves_png(runs: dict[str, list[dict[str, Any]]], title: str) -> str | None:
    """The curves of ``runs`` as a base64 PNG (``hopgym.agents.grpo.plot_curves``); ``None``
    without matplotlib."""
    from hopgym.agents.grpo import plot_curves

    with tempfile.TemporaryDirectory() as tmp:
        # Two panels a row at 110 dpi: about the content column's width, so shown at full size.
        path = plot_curves(runs, Path(tmp) / "curves.png", HABIT_FIX_CURVES, title=title, columns=2, dpi=110)
        return base64.b64encode(path.read_bytes()).decode("ascii") if path else None


#: The names of the re-evaluated checkpoints that are not one of :data:`_METHOD_NAMES`.
_POWER_NAMES = {
    "grpo_seed3": "GRPO, seed 3",
    "grpo_dynamic": "GRPO, dynamic sampling",
    "grpo_dynamic_seed3": "GRPO, dynamic sampling, seed 3",
    "grpo_unanswered": "GRPO, unanswered priced",
}


def paired_evals(pattern: str, files: Mapping[str, dict[str, Any]] | None = None) -> str:
    """Checkpoints re-evaluated on more held-out questions (``benchmarks/paired_eval.py``;
    ``files``: name -> contents, default every committed results file matching ``pattern``): per
    checkpoint the questions done, EM, the habit's measure (a habit-fix run's), each against the
    SFT question by question (gained / lost, McNemar p, whether it holds at p < 0.05), how many
    of the run's own held-out questions it answered as the run did, the weights evaluated (the
    start of their sha256; files from before the fingerprints have none), and CPU seconds."""
    hf = _script("habit_fix")
    if files is None:
        files = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob(pattern))}
    header = [
        "habit",
        "seed",
        "checkpoint",
        "questions",
        "held-out EM",
        "habit measure",
        "right-source rate",
        "gained / lost vs SFT",
        "McNemar p",
        "holds at p < 0.05",
        "run's questions answered alike",
        "weights (sha256)",
        "CPU s",
    ]
    rows = []
    for d in files.values():
        habit = hf.HABITS.get(d.get("habit") or "")
        for m, s in d["summary"].items():
            vs = "p_value" in s
            measure = f"{s[habit.measure]:.2f}" if habit and habit.measure in s else "–"
            rises = f"{s[habit.rises[0]]:.3f}" if habit and habit.rises and habit.rises[0] in s else "–"
            rows.append(
                [
                    d.get("habit") or "–",
                    str(d["args"]["seed"]),
                    _METHOD_NAMES.get(m) or _POWER_NAMES.get(m, m),
                    f"{s['questions']} of {d['settings']['n_eval']}",
                    f"{s['em']:.3f}",
                    measure,
                    rises,
                    f"+{s['gained']} / −{s['lost']}" if vs else "–",
                    _p_value(s["p_value"]) if vs else "–",
                    (_holds(s) if s["holds"] else "no") if vs else "–",
                    f"{s['first_n_agree']} of {s['first_n']}" if "first_n" in s else "–",
                    _weights(d.get("fingerprints", {}).get(m, []), s["questions"]),
                    f"{d['seconds'].get(m, 0.0):,.0f}",
                ]
            )
    if not rows:
        return _table(["checkpoint", "questions", "held-out EM"], [["no re-evaluation yet", "–", "–"]])
    # A habit's columns only where some file is of a habit (checkpoint C's runs are of none).
    keep = [
        i for i, name in enumerate(header) if name not in _HABIT_COLUMNS or any(r[i] != "–" for r in rows)
    ]
    return _table([header[i] for i in keep], [[r[i] for i in keep] for r in rows])


#: :func:`paired_evals`' columns that only a habit-fix run's files fill.
_HABIT_COLUMNS = ("habit", "habit measure", "right-source rate")


def _holds(row: dict[str, Any]) -> str:
    """A difference that holds at p < 0.05, with its direction."""
    return "**yes: a gain**" if row["gained"] > row["lost"] else "**yes: a loss**"


def _weights(entries: list[dict[str, Any]], questions: int) -> str:
    """The weights a re-evaluated row's questions came from (``paired_eval``'s fingerprints):
    the start of their sha256, and for weights made again, from which question and on how many
    of the first questions they were checked to act alike."""
    if not entries:
        return "not recorded"
    if len(entries) == 1 and not entries[0]["from_question"]:
        return f"`{entries[0]['sha256'][:12]}`"
    parts = [f"1–{entries[0]['from_question']}: not recorded"] if entries[0]["from_question"] else []
    for i, w in enumerate(entries):
        end = entries[i + 1]["from_question"] if i + 1 < len(entries) else questions
        alike = f", alike on the first {w['same_outcomes_on']}" if w.get("same_outcomes_on") else ""
        if end > w["from_question"]:
            parts.append(f"{w['from_question'] + 1}–{end}: `{w['sha256'][:8]}`{alike}")
        else:  # weights made again, checked (the SFT of methods made again), no question of theirs
            parts.append(f"made again: `{w['sha256'][:8]}`{alike}")
    return "; ".join(parts)


def habit_fix_power(files: Mapping[str, dict[str, Any]] | None = None) -> str:
    """The habit-fixing runs' checkpoints on 500 held-out questions (:func:`paired_evals`)."""
    return paired_evals(HABIT_FIX_EVAL_GLOB, files)


def habit_fix_goals(files: Mapping[str, dict[str, Any]] | None = None, n_eval: int = 500) -> str:
    """Each habit-fixing method's goal on its run's own held-out questions and on ``n_eval``
    (``files``: name -> contents of every ``habit_fix`` results file and re-evaluation; default:
    the committed ones). One row per method of each run (an ``_unanswered`` run's GRPO beside its
    habit's), the habit's measure from the SFT's to the method's, EM question by question against
    the SFT, and the goal, each judged by ``habit_fix.goal_met`` (the run's summary; the
    re-evaluation's rows)."""
    hf = _script("habit_fix")
    if files is None:
        files = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob(HABIT_FIX_GLOB))}
    runs = {n: d for n, d in files.items() if "_eval" not in n and "habit" in d and "args" in d}
    own = "/".join(sorted({str(d.get("test_questions", "?")) for d in runs.values()}))
    header = [
        "habit",
        "seed",
        "method",
        f"habit measure: SFT → method ({own} q)",
        f"EM: SFT → method, gained / lost (p) ({own} q)",
        f"goal ({own} q)",
        f"habit measure ({n_eval} q)",
        f"EM ({n_eval} q)",
        f"goal ({n_eval} q)",
    ]
    order = {m: i for i, m in enumerate(hf.METHODS)}
    rows: list[tuple[tuple[Any, ...], list[str]]] = []
    for d in runs.values():
        habit_name = d["habit"]
        habit, seed = hf.HABITS[habit_name], d["args"]["seed"]
        family, suffix = _family(hf, habit_name)
        ev = files.get(f"habit_fix_{family}_seed{seed}_eval{n_eval}", {}).get("summary", {})
        for m, row in hf.summary(d, hf.example, habit).items():
            if m not in habit.methods:
                continue
            key = f"{m}_{suffix}" if suffix else m
            cells = [
                family,
                str(seed),
                _METHOD_NAMES[m] + (f", {suffix} priced" if suffix else ""),
                _change(habit, row[f"{habit.short}_sft"], row[habit.short], *_rising(habit, row, 1)),
                _em_pair(row["em_sft"], row["em"], row),
                _GOAL[row["goal_met"]],
            ]
            got, sft = ev.get(key), ev.get("sft")
            if not got or not sft or min(got["questions"], sft["questions"]) < n_eval:
                done = min(got["questions"], sft["questions"]) if got and sft else 0
                cells += ["–", "–", f"evaluating: {done} of {n_eval}" if done else "not evaluated yet"]
            else:
                cells += [
                    _change(
                        habit, sft[habit.measure], got[habit.measure], *_rising(habit, {**got, "sft": sft})
                    ),
                    _em_pair(sft["em"], got["em"], got),
                    _GOAL[hf.goal_met(habit, sft, got, got)],
                ]
            rows.append(((family, seed, order[m], suffix), cells))
    return _table(header, [cells for _, cells in sorted(rows)])


def _rising(habit: Any, row: Mapping[str, Any], name: int = 0) -> tuple[Any, Any]:
    """The measure that must rise, the SFT's and the method's: a run summary's ``<name>_sft`` and
    ``<name>`` (``name=1``: the summary's name), or a re-evaluation row's key with the SFT's row
    under ``"sft"``; ``(None, None)`` for a habit without one."""
    if not habit.rises:
        return None, None
    key = habit.rises[name]
    return (row.get(f"{key}_sft"), row.get(key)) if name else (row["sft"].get(key), row.get(key))


def _change(habit: Any, base: float, got: float, rise_before: Any = None, rise_after: Any = None) -> str:
    """A habit's measure from the SFT's to a method's with its change, and the measure that must
    rise from ``rise_before`` to ``rise_after`` (where both are known)."""
    text = f"{base:.2f} → {got:.2f}" + (f" ({(got - base) / base:+.0%})".replace("-", "−") if base else "")
    if habit.rises and rise_before is not None and rise_after is not None:
        text += f"; {habit.rises[2]} {rise_before:.2f} → {rise_after:.2f}"
    return text


def _em_pair(sft: float, got: float, pair: Mapping[str, Any]) -> str:
    """EM from the SFT's to a method's, and the questions gained and lost (McNemar p)."""
    return f"{sft:.3f} → {got:.3f}, +{pair['gained']} / −{pair['lost']} ({_p_value(pair['p_value'])})"


def smollm2_power(files: Mapping[str, dict[str, Any]] | None = None) -> str:
    """Checkpoint C and its runs, made again, on 500 held-out questions (``benchmarks/power_c.py``)."""
    return paired_evals("grpo_smollm2_c_eval*.json", files)


def smollm2_remake(data: Mapping[str, Any] | None = None) -> str:
    """Checkpoint C's runs made again beside the table's (``benchmarks/power_c.py``'s comparison
    file; ``data``: its contents): per run and phase, held-out EM on the run's questions, the final
    loss, how many steps of the per-step log agree, the largest difference of KL to the start and
    of entropy, how each trained, and CPU seconds with their threads."""
    d = _load("grpo_smollm2_c_remake") if data is None else data
    names = {"grpo": "GRPO, seed 2, after C's SFT", **_POWER_NAMES}

    def label(name: str) -> str:
        return names.get(name) or _METHOD_NAMES.get(name, name)

    header = [
        "run",
        "phase",
        "held-out EM (table → remake)",
        "final loss (table / remake)",
        "steps alike",
        "largest KL / entropy difference",
        "trained (table / remake)",
        "CPU s (table / remake)",
    ]
    rows = []
    for name, run in d["runs"].items():
        threads = run["threads"]
        for phase, e in run["phases"].items():
            steps = e.get("steps")
            diff = steps["max_difference"] if steps else {}
            loss = e["final_loss"]
            rows.append(
                [
                    label(name),
                    _METHOD_NAMES.get(phase, phase),
                    f"{e['em'][0]:.3f} → {e['em'][1]:.3f} ({run['test_questions'][1]} questions)",
                    f"{loss[0]:.6f} / {loss[1]:.6f}" if None not in loss else "–",
                    f"{steps['same_steps']} of {steps['table_steps']}" if steps else "no per-step log",
                    " / ".join(f"{diff[k]:.1e}" for k in ("policy/kl_ref", "policy/entropy") if k in diff)
                    or "–",
                    " / ".join(
                        (_dtype(f["bf16"]) + (", checkpointing" if f["gradient_checkpointing"] else ""))
                        if f
                        else "not recorded"
                        for f in e["train_fields"]
                    ),
                    " / ".join(
                        f"{c:,.0f} ({t} thread{'s' * (t != 1)})" if c is not None else "–"
                        for c, t in zip(e["cpu_seconds"], threads, strict=True)
                    ),
                ]
            )
    if not rows:
        return "No run of C has been made again yet."
    made = len(d["runs"])
    total = made + len(d["to_make"])
    cpu = sum(e["cpu_seconds"][1] or 0.0 for run in d["runs"].values() for e in run["phases"].values())
    differ = [
        f"{label(name)}, {_METHOD_NAMES.get(phase, phase)} phase"
        for name, run in d["runs"].items()
        for phase, e in run["phases"].items()
        if e["em"][0] != e["em"][1]
        or (s := e.get("steps"))
        and not s["same_steps"] == s["table_steps"] == s["made_steps"]
    ]
    head = (
        f"{made} of {total} runs made again so far"
        + (f" (to make: {'; '.join(label(n) for n in d['to_make'])})" if d["to_make"] else "")
        + f"; their training took {cpu:,.0f} CPU s here. "
        + (
            "Each phase repeated the table's: the same held-out EM, and every step of its log alike"
            if not differ
            else f"Not all repeat the table's: {'; '.join(differ)}"
        )
        + f". A step is alike when its sampled reward, EM, searches, KL to the start and entropy all "
        f"agree with the table's to {d['same_to']:g}. The CPU seconds are two machines' and thread "
        "counts, not a side-by-side measurement (that is the [step-cost benchmark](#grpo-step-cost))."
    )
    return head + "\n\n" + _table(header, rows)


RENDERERS: dict[str, Callable[[], str]] = {
    "sb3_learning": sb3_learning,
    "smollm2_table": smollm2_table,
    "llm_turns": llm_turns,
    "dense_cpu": dense_cpu,
    "grpo_cpu_small": grpo_cpu_small,
    "grpo_cpu_tiny": grpo_cpu_tiny,
    "grpo_smollm2_timing": grpo_smollm2_timing,
    "tools_vs_tags": tools_vs_tags,
    "tools_vs_tags_current": tools_vs_tags_current,
    "grpo_smollm2_runs": grpo_smollm2_runs,
    "grpo_smollm2_quick": grpo_smollm2_quick,
    "grpo_smollm2_quick_training": grpo_smollm2_quick_training,
    "grpo_smollm2_runs_training": grpo_smollm2_runs_training,
    "grpo_smollm2_table": grpo_smollm2_table,
    "grpo_smollm2_training": grpo_smollm2_training,
    "train_first_run": train_first_run,
    "headline": headline,
    "healthy_grpo_log": healthy_grpo_log,
    "train_first_run_log": train_first_run_log,
    "train_expected_time": train_expected_time,
    "rollout_throughput": rollout_throughput,
    "prefill_buckets": prefill_buckets,
    "rollout_throughput_change": rollout_throughput_change,
    "rollout_passes": rollout_passes,
    "grpo_step_profile": grpo_step_profile,
    "grpo_micro_batch": grpo_micro_batch,
    "grpo_step_chunked": grpo_step_chunked,
    "grpo_step_cost": grpo_step_cost,
    "grpo_step_shared": lambda: grpo_step_cost(GRPO_STEP_SHARED),
    "grpo_step_bf16": lambda: grpo_step_cost(GRPO_STEP_BF16),
    "habit_fix": habit_fix,
    "habit_fix_power": habit_fix_power,
    "habit_fix_goals": habit_fix_goals,
    "habit_fix_curves": habit_fix_curves,
    "smollm2_power": smollm2_power,
    "smollm2_remake": smollm2_remake,
    "lora_memory": lora_memory,
    "logprob_memory": logprob_memory,
    "bf16_cpu": bf16_cpu,
    "rollout_scale_a": rollout_scale_a,
    "rollout_scale_b": rollout_scale_b,
    "rollout_scale_c": rollout_scale_c,
    "rollout_scale_d": rollout_scale_d,
    "rollout_scale_e": rollout_scale_e,
    "trl_grpo_tools": trl_grpo_tools,
    "verl_agent_loop": verl_agent_loop,
    "skyrl_generator": skyrl_generator,
    "trl_under_verl_extra": trl_under_verl_extra,
    "gem_wrappers": gem_wrappers,
    "verifiers_eval": verifiers_eval,
    "env_server_load": env_server_load,
    "serve_big_reply": serve_big_reply,
    "retrieval_scale": retrieval_scale,
    "retrieval_scale_projection": retrieval_scale_projection,
    "retrieval_scale_workers": retrieval_scale_workers,
    "retrieval_scale_real": retrieval_scale_real,
    "retrieval_scale_cold": retrieval_scale_cold,
    "retrieval_scale_ray": retrieval_scale_ray,
    "retrieval_scale_bm25": retrieval_scale_bm25,
}


def render(markdown: str) -> str:
    """``markdown`` with every results marker replaced by its table."""

    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise KeyError(f"unknown results table {name!r}; known: {', '.join(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The MkDocs event: tables in place of markers."""
    return render(markdown)
