"""Do classic RL algorithms learn hopgym? PPO, A2C and DQN over 3 seeds vs baseline agents.

    OMP_NUM_THREADS=1 python benchmarks/sb3_learning.py                       # the README table
    OMP_NUM_THREADS=1 python benchmarks/sb3_learning.py --algos ppo,maskppo --timesteps 20000
    OMP_NUM_THREADS=1 python benchmarks/sb3_learning.py --json runs/sb3.json --plot runs/sb3.png

Trains each algorithm (Stable-Baselines3 ``MlpPolicy``, the hyper-parameters of
``hopgym.cli.bench_rl_jobs.HYPERPARAMS``) on the *train* questions of the default synthetic world
through ``hopgym/SyntheticFeaturized-v0`` (reward preset ``default``: exact match; 6 turns), then
evaluates the greedy policies and the baselines on the same held-out *test* questions (entities no
training question's documents describe). Prints EM as mean ± std over the seeds with the
per-seed values, the EM ratio to the ``iterative`` scripted agent, and the training speed.
One thread; each training run takes a few minutes on an idle core.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402

from gymnasium.envs.registration import register, registry  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_json  # noqa: E402
from hopgym.cli.bench_rl_jobs import bench_rl  # noqa: E402

ENV_ID = "hopgym/SyntheticFeaturized-v0"
if ENV_ID not in registry:  # older checkouts: register it here
    register(id=ENV_ID, entry_point="hopgym.envs.featurized:make_featurized")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", default="ppo,a2c,dqn")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--timesteps", type=int, default=60_000)
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=200,
        help="held-out test questions (the default world has about 200)",
    )
    parser.add_argument("--baselines", default="masked-random,random,single-search,iterative,oracle")
    parser.add_argument("--reward", default="default")
    parser.add_argument("--json", default=None, help="write all results here")
    parser.add_argument("--plot", default=None, help="write the learning curves here (PNG)")
    args = parser.parse_args()
    for out in (args.json, args.plot):
        if out:
            check_writable(out)  # before the training runs, not after them

    algos = [a for a in args.algos.split(",") if a]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    result = bench_rl(
        ENV_ID,
        env_kwargs={"reward": args.reward, "base_kwargs": {"split": "train"}},
        eval_env_kwargs={"reward": args.reward, "base_kwargs": {"split": "test"}},
        algos=algos,
        seeds=seeds,
        timesteps=args.timesteps,
        eval_episodes=args.eval_episodes,
        baselines=[b for b in args.baselines.split(",") if b],
        curve_episodes=100,
        progress=True,
        plot=args.plot,
    )

    ref = result["baselines"].get("iterative", {}).get("em")
    table = Table(
        title=f"{ENV_ID}: {args.timesteps:,} training steps per run, "
        f"{args.eval_episodes} held-out test questions, 1 thread"
    )
    for col in (
        "agent",
        "EM (mean ± std)",
        "EM per seed",
        "vs iterative",
        "reward",
        "searches",
        "invalid",
        "train steps/s",
        "train s",
    ):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for algo, s in result["summary"].items():
        runs = [r for r in result["runs"] if r["algo"] == algo]
        table.add_row(
            algo,
            f"{s['em']:.3f} ± {s['em_std']:.3f}",
            " ".join(f"{r['em']:.3f}" for r in runs),
            f"{s['em'] / ref:.2f}×" if ref else "-",
            f"{s['reward']:.3f}",
            f"{s['avg_searches']:.2f}",
            f"{s['invalid_rate']:.3f}",
            f"{s['train_steps_per_s']:.0f}",
            f"{sum(r['train_s'] for r in runs) / len(runs):.0f}",
        )
    for name, b in result["baselines"].items():
        table.add_row(
            f"[dim]{name}[/dim]",
            f"{b['em']:.3f}",
            "-",
            f"{b['em'] / ref:.2f}×" if ref else "-",
            f"{b['reward']:.3f}",
            f"{b['avg_searches']:.2f}",
            f"{b['invalid_rate']:.3f}",
            "-",
            "-",
        )
    console = Console(width=160)
    console.print(table)
    for algo in result["summary"]:
        for r in (r for r in result["runs"] if r["algo"] == algo):
            curve = "  ".join(f"{t // 1000}k:{e:.2f}" for t, e in r["curve"])
            console.print(f"[dim]{algo} seed {r['seed']} learning curve (EM):[/dim] {curve}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
