"""The site's figures, drawn from the committed results files (``benchmarks/results/*.json``).

    python benchmarks/docs_figures.py            # every figure into docs/img/
    python benchmarks/docs_figures.py --only student_grpo sb3_learning

Each figure is drawn for the docs' content column (about 720 px wide): few panels side by
side, large type, and a PNG at twice that width for a sharp full-size view when clicked. The
numbers come from the results files as the benchmark scripts wrote them; nothing is retyped.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from hopgym._atomic import save_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img"

plt.rcParams.update(
    {
        "font.size": 13,
        "axes.titlesize": 14,
        "axes.labelsize": 13,
        "legend.fontsize": 11,
        "xtick.labelsize": 12,
        "ytick.labelsize": 12,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
    }
)
COLORS = {
    "untrained": "#bbbbbb",
    "SFT": "#8c8c8c",
    "GRPO": "#1f77b4",
    "RFT": "#ff7f0e",
    "continue-SFT": "#9467bd",
    "filtered-teacher SFT": "#2ca02c",
}


def _load(name: str) -> Any:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def _save(fig: Any, name: str) -> Path:
    try:
        return save_figure(fig, OUT / f"{name}.png", dpi=200, bbox_inches="tight")
    finally:
        plt.close(fig)


def _smooth(values: list[float], window: int = 10) -> list[float]:
    """Trailing mean over ``window`` steps (fewer at the start)."""
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def student_grpo() -> Path:
    """The 1.17M-parameter student (``grpo_cpu_small``): held-out EM per method over 3 seeds, and
    the sampled training EM of GRPO and RFT per step."""
    d = _load("grpo_cpu_small")
    names = {
        "untrained": "untrained",
        "sft": "SFT",
        "continue_sft": "continue-SFT",
        "grpo": "GRPO",
        "rft": "RFT",
        "filtered_sft": "filtered-teacher SFT",
    }
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.1, 1]})
    labels = list(names.values())
    for i, (key, label) in enumerate(names.items()):
        s = d["summary"][key]
        ax.bar(i, s["mean"], yerr=s["std"], color=COLORS[label], capsize=4)
        ax.scatter([i] * len(s["per_seed"]), s["per_seed"], color="black", s=14, zorder=3)
    ax.set_xticks(
        range(len(labels)),
        [lab.replace("-", "-\n", 1).replace(" ", "\n", 1) for lab in labels],
        fontsize=10.5,
    )
    ax.set_ylabel("held-out greedy EM")
    ax.set_title(f"held-out EM, {len(d['seeds'])} seeds (dots)")
    for method, label in (("grpo", "GRPO"), ("rft", "RFT")):
        runs = [r[f"{method}_history"] for r in d["runs"]]
        steps = min(len(h) for h in runs)
        mean = [sum(h[i]["env/em"] for h in runs) / len(runs) for i in range(steps)]
        bx.plot(range(1, steps + 1), _smooth(mean), color=COLORS[label], lw=2.5, label=label)
    bx.set_xlabel("step (8 questions × 8 episodes)")
    bx.set_ylabel("sampled train EM")
    bx.set_title("sampled EM, mean of seeds, 10-step mean")
    bx.legend(loc="upper left")
    fig.tight_layout()
    return _save(fig, "student_grpo")


#: The SmolLM2 runs from checkpoint C (``docs/experiments.md``): results file, method, label.
SMOLLM2_C = (
    ("grpo_smollm2_cpu_seed2_long", "sft", "SFT (C)"),
    ("grpo_smollm2_cpu_seed2_long", "grpo", "GRPO\nseed 2"),
    ("grpo_smollm2_cpu_seed2_long_seed3", "grpo", "GRPO\nseed 3"),
    ("grpo_smollm2_cpu_seed2_dynamic", "grpo", "dynamic\nseed 2"),
    ("grpo_smollm2_cpu_seed2_dynamic_seed3", "grpo", "dynamic\nseed 3"),
    ("grpo_smollm2_cpu_seed2_long_rft", "rft", "RFT"),
    ("grpo_smollm2_cpu_seed2_long_continue_sft", "continue_sft", "continue-\nSFT"),
)


def smollm2_grpo() -> Path:
    """SmolLM2-135M-Instruct from SFT checkpoint C: held-out EM per method (± one standard error)
    and the sampled reward per GRPO step."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.3, 1]})
    color = {
        "sft": COLORS["SFT"],
        "grpo": COLORS["GRPO"],
        "rft": COLORS["RFT"],
        "continue_sft": COLORS["continue-SFT"],
    }
    n = set()
    for i, (name, method, _label) in enumerate(SMOLLM2_C):
        d = _load(name)
        em, q = d[method]["em"], d["test_questions"]
        n.add(q)
        se = (em * (1 - em) / q) ** 0.5
        ax.bar(i, em, yerr=se, color=color[method], capsize=4)
    ax.set_xticks(range(len(SMOLLM2_C)), [label for _, _, label in SMOLLM2_C], fontsize=10)
    ax.set_ylabel("held-out greedy EM")
    ax.set_ylim(0, 0.45)
    ax.set_title(f"held-out EM, {'/'.join(map(str, sorted(n)))} questions, ± 1 s.e.")
    for name, label, style in (
        ("grpo_smollm2_cpu_seed2_long", "GRPO seed 2", "-"),
        ("grpo_smollm2_cpu_seed2_long_seed3", "GRPO seed 3", "--"),
    ):
        hist = _load(name)["grpo_history"]
        rewards = [h.get("env/reward", 0.0) for h in hist]
        bx.plot(
            range(1, len(rewards) + 1),
            rewards,
            style,
            color=COLORS["GRPO"],
            lw=2,
            label=label,
            marker="o",
            ms=3,
        )
    bx.set_xlabel("GRPO step (2 questions × 8 episodes)")
    bx.set_ylabel("sampled reward (EM)")
    bx.set_title("sampled reward per step")
    bx.legend(loc="upper left")
    fig.tight_layout()
    return _save(fig, "smollm2_grpo")


def sb3_learning() -> Path:
    """PPO, A2C and DQN on the featurized env: held-out EM against env steps, mean ± std over seeds."""
    d = _load("sb3_learning")
    fig, ax = plt.subplots(figsize=(9, 4.6))
    colors = {"ppo": "#1f77b4", "a2c": "#ff7f0e", "dqn": "#2ca02c", "maskppo": "#d62728"}
    for algo in d["summary"]:
        curves = [r["curve"] for r in d["runs"] if r["algo"] == algo]
        xs = [x for x, _ in curves[0]]
        ys = [[c[i][1] for c in curves] for i in range(len(xs))]
        mean = [sum(y) / len(y) for y in ys]
        std = [(sum((v - m) ** 2 for v in y) / len(y)) ** 0.5 for y, m in zip(ys, mean, strict=True)]
        c = colors.get(algo, None)
        ax.plot(xs, mean, lw=2.5, color=c, label=f"{algo.upper()} ({len(curves)} seeds)")
        ax.fill_between(
            xs,
            [m - s for m, s in zip(mean, std, strict=True)],
            [m + s for m, s in zip(mean, std, strict=True)],
            color=c,
            alpha=0.15,
        )
    # each baseline's label where no curve runs: the rule-based reader's at the left, chance's at the right
    for name, style, x, ha in (("iterative", ":", xs[0], "left"), ("masked-random", "--", xs[-1], "right")):
        em = d["baselines"][name]["em"]
        ax.axhline(em, color="black", ls=style, lw=1.3)
        ax.text(x, em + 0.015, f"{name} agent ({em:.2f})", ha=ha, fontsize=11)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("held-out EM")
    ax.set_ylim(0, 1)
    ax.set_title(f"{d['env']}: {d['eval_episodes']} held-out episodes")
    ax.legend(loc="center right")
    fig.tight_layout()
    return _save(fig, "sb3_learning")


def retrieval_speed() -> Path:
    """Oracle env steps per CPU second by BM25 backend at 100k and 1M passages, and the peak memory
    per million passages of each retrieval step of a suite run."""
    e = _load("rollout_scale")["e"]
    mem = _load("suite_memory")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.4, 1]})
    backends = list(e["100000"]["steps_per_cpu_s"])
    width = 0.38
    for j, (size, label) in enumerate((("100000", "100k passages"), ("1000000", "1M passages"))):
        values = [e[size]["steps_per_cpu_s"][b] for b in backends]
        ax.bar(
            [i + (j - 0.5) * width for i in range(len(backends))],
            values,
            width,
            label=label,
            color=("#1f77b4", "#aec7e8")[j],
        )
    ax.set_yscale("log")
    ax.set_xticks(range(len(backends)), [b.replace(" ", "\n") for b in backends], fontsize=10.5)
    ax.set_ylabel("env steps per CPU second (log)")
    ax.set_title("oracle episodes, by BM25 backend")
    ax.legend(loc="lower left", framealpha=0.95)
    rows = mem["rows"]
    names = {
        "passages": "passages only",
        "bm25": "+ BM25 index",
        "bm25-tokens-first": "+ BM25, hopgym 0.2's way",
        "dense": "+ flat dense index",
    }
    bx.barh(
        [names.get(r["step"], r["step"]) for r in rows],
        [r["peak_mib_per_million"] for r in rows],
        color="#2ca02c",
    )
    bx.invert_yaxis()
    bx.set_xlabel("peak MiB per million passages")
    bx.set_title("peak memory of an index build")
    fig.tight_layout()
    return _save(fig, "retrieval_speed")


def peer_speed() -> Path:
    """CPU microseconds of one think-only turn: hopgym's env against SkyRL-gym's (``peer_turns``)."""
    d = _load("peer_turns")
    items = list(d["us_per_turn"].items())
    fig, ax = plt.subplots(figsize=(9, 2.8))
    colors = ["#1f77b4" if label.startswith("hopgym") else "#7f7f7f" for label, _ in items]
    ax.barh([label for label, _ in items], [us for _, us in items], color=colors)
    for k, (_, us) in enumerate(items):
        ax.text(us, k, f" {us:.1f} µs", va="center", fontsize=12)
    ax.invert_yaxis()
    ax.set_xlabel("client CPU µs per think-only turn (lower is faster)")
    ax.set_xlim(0, max(us for _, us in items) * 1.25)
    ax.set_title(f"one turn that searches nothing, median of {d['blocks']} blocks of {d['turns']:,}")
    fig.tight_layout()
    return _save(fig, "peer_speed")


def architecture() -> Path:
    """What hopgym is made of: turns, the env, retrieval, rewards, and what trains in it."""
    fig, ax = plt.subplots(figsize=(11, 5.2))
    ax.set_xlim(0, 110)
    ax.set_ylim(0, 55)
    ax.axis("off")
    ax.grid(False)

    def box(x: float, y: float, w: float, h: float, title: str, body: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.6", fc=color, ec="#444444", lw=1.2))
        ax.text(x + w / 2, y + h - 2.2, title, ha="center", va="top", fontsize=13.5, weight="bold")
        ax.text(x + w / 2, y + h - 6.6, body, ha="center", va="top", fontsize=9.8, linespacing=1.35)

    def arrow(a: tuple[float, float], b: tuple[float, float], text: str = "", dy: float = 1.2) -> None:
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=16, lw=1.6, color="#333333"))
        if text:
            ax.text(
                (a[0] + b[0]) / 2, (a[1] + b[1]) / 2 + dy, text, ha="center", fontsize=10.5, style="italic"
            )

    boxes = (
        (
            2,
            30,
            "trainers & agents",
            (
                "TRL GRPO / SFT / RFT",
                "verifiers · SkyRL · GEM · verl",
                "SB3 · PettingZoo · OpenEnv",
                "scripted & LLM agents",
            ),
            "#dbe9f6",
        ),
        (
            39,
            30,
            "turns",
            (
                "tags: <think> <search> <route>",
                "<answer>, or tool calls (JSON)",
                "lenient or strict parsing",
                "bad turn → corrective obs",
            ),
            "#fdebd0",
        ),
        (
            81,
            30,
            "env (Gymnasium)",
            (
                "step = one model turn",
                "obs = question + documents",
                "vector envs, Ray workers",
                "env server (OpenEnv)",
            ),
            "#d5f5e3",
        ),
        (
            2,
            3,
            "tasks & data",
            (
                "synthetic worlds",
                "HotpotQA · MuSiQue · 2Wiki",
                "Bamboogle · NQ · your own",
                "eval suites",
            ),
            "#fcf3cf",
        ),
        (
            39,
            3,
            "rewards",
            (
                "outcome: EM · F1 · cover-EM · judge",
                "process: relevance, format,",
                "search cost",
                "presets: searchr1, r3rag, ...",
            ),
            "#fadbd8",
        ),
        (
            81,
            3,
            "retrieval",
            (
                "BM25 · dense · hybrid",
                "HTTP server, fail-over",
                "sources to route between",
                "batched search, query cache",
            ),
            "#e8daef",
        ),
    )
    for x, y, title, body, color in boxes:
        box(x, y, 29 if x == 39 else 26 if x == 81 else 25, 17, title, "\n".join(body), color)
    arrow((28.5, 40), (38, 40), "model turn")
    arrow((69.5, 40), (80, 40), "action")
    ax.add_patch(
        FancyArrowPatch(
            (94, 48.5),
            (14, 48.5),
            connectionstyle="arc3,rad=0.08",
            arrowstyle="-|>",
            mutation_scale=16,
            lw=1.6,
            color="#333333",
        )
    )
    ax.text(54, 52.5, "observation: question, documents, notices", ha="center", fontsize=10.5, style="italic")
    arrow((91, 28.5), (91, 21.5))
    arrow((96, 21.5), (96, 28.5))
    ax.text(89.5, 24.5, "search", fontsize=10.5, style="italic", ha="right")
    ax.text(97.5, 24.5, "documents", fontsize=10.5, style="italic")
    arrow((80.5, 29), (69, 20.5), "step info", dy=-3.5)
    arrow((38.5, 20.5), (27.5, 29), "reward", dy=-3.5)
    arrow((28.5, 11), (38, 11), "gold")
    return _save(fig, "architecture")


def habit_fix_power(n_eval: int = 500) -> Path:
    """SmolLM2's habit-fixing methods on ``n_eval`` held-out questions (``paired_eval``), one
    panel a habit: each method of each seed at its habit measure's change from the SFT's (x; the
    seeds 2.5 points apart, so that methods at the same change stay apart) and
    its EM's difference from the SFT's with a 95% interval of the paired difference (y); filled
    where ``habit_fix.goal_met`` says the goal holds, hollow where not."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import habit_fix as hf

    color = {
        "grpo": COLORS["GRPO"],
        "grpo_unanswered": "#17becf",
        "rft": COLORS["RFT"],
        "continue_sft": COLORS["continue-SFT"],
    }
    label = {
        "grpo": "GRPO",
        "grpo_unanswered": "GRPO, unanswered priced",
        "rft": "RFT",
        "continue_sft": "continue-SFT",
    }
    markers = ["o", "s", "^", "D", "v"]
    panels = {
        "searches": "over-searching: redundant searches / episode",
        "routing": "routing: web-search cost / episode",
    }
    fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.6), sharey=True)
    seeds_seen: dict[int, str] = {}
    for ax, (family, title) in zip(axes, panels.items(), strict=True):
        habit = hf.HABITS[family]
        ax.axvspan(-100 * 1.05, -100 * habit.min_drop, color="#2ca02c", alpha=0.08, lw=0)
        ax.axvline(-100 * habit.min_drop, color="#2ca02c", lw=1, ls="--")
        ax.text(
            -100 * habit.min_drop - 2,
            0.98,
            f"goal: cut ≥ {habit.min_drop:.0%}",
            color="#2ca02c",
            ha="right",
            va="top",
            transform=ax.get_xaxis_transform(),
            fontsize=11,
        )
        ax.axhline(0, color="#555555", lw=1)
        for path in sorted(RESULTS.glob(f"habit_fix_{family}_seed*_eval{n_eval}.json")):
            d = json.loads(path.read_text(encoding="utf-8"))
            seed, ev = d["args"]["seed"], d["summary"]
            sft = ev.get("sft")
            if not sft or sft["questions"] < n_eval or not sft[habit.measure]:
                continue
            marker = seeds_seen.setdefault(seed, markers[len(seeds_seen) % len(markers)])
            for name, got in ev.items():
                if name == "sft" or got["questions"] < n_eval:
                    continue
                n = got["vs_sft_questions"]
                diff = (got["gained"] - got["lost"]) / n
                var = (got["gained"] + got["lost"] - n * diff**2) / (n * (n - 1))
                x = 100 * (got[habit.measure] - sft[habit.measure]) / sft[habit.measure]
                x += 2.5 * (list(seeds_seen).index(seed) - 1)  # seeds at one x side by side
                met = hf.goal_met(habit, sft, got, got)
                c = color.get(name, "#333333")
                ax.errorbar(x, diff, yerr=1.96 * var**0.5, fmt="none", ecolor=c, elinewidth=1.5, capsize=3)
                ax.plot(
                    x,
                    diff,
                    marker,
                    ms=9,
                    mew=2,
                    color=c,
                    mfc=c if met else "white",
                    label=label.get(name, name),
                )
        ax.set_title(title)
        ax.set_xlabel("habit measure vs SFT (%)")
        ax.set_xlim(-105, 10)
    axes[0].set_ylabel(f"EM − SFT's EM ({n_eval} q, 95% CI)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="none", marker="o", ms=9, color=c, label=label[m]) for m, c in color.items()]
    handles += [
        Line2D([], [], ls="none", marker=mk, ms=9, color="#555555", mfc="white", label=f"seed {seed}")
        for seed, mk in sorted(seeds_seen.items())
    ]
    handles.append(Line2D([], [], ls="none", marker="o", ms=9, color="#555555", label="filled: goal holds"))
    fig.legend(handles=handles, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.tight_layout()
    return _save(fig, "habit_fix_power")


FIGURES: dict[str, Callable[[], Path]] = {
    "architecture": architecture,
    "student_grpo": student_grpo,
    "smollm2_grpo": smollm2_grpo,
    "sb3_learning": sb3_learning,
    "retrieval_speed": retrieval_speed,
    "peer_speed": peer_speed,
    "habit_fix_power": habit_fix_power,
}


def main(argv: list[str] | None = None) -> int:
    """Draw the figures named by ``--only`` (all by default) into ``docs/img/``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="draw only these figures")
    args = p.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIGURES:
        print(FIGURES[name]().relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
