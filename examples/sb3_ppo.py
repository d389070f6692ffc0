"""Train Stable-Baselines3 PPO (or sb3-contrib MaskablePPO) on the featurized synthetic world.

    OMP_NUM_THREADS=1 python examples/sb3_ppo.py --total-timesteps 40000 --seed 0 \\
        --train-split train --eval-split test --eval-episodes 200 --save runs/ppo_hopgym.zip
    # with action masking (sb3-contrib) and another reward preset:
    OMP_NUM_THREADS=1 python examples/sb3_ppo.py --masked --reward searchr1

The env is ``hopgym/SyntheticFeaturized-v0``: the synthetic multi-hop world seen through a numeric
observation (hashed bag of words, step/budget/source features, per-candidate evidence) and a
``Discrete`` action over a per-state candidate list (search the question, search a candidate with
the relation to follow, route, answer a candidate). Rewards come from hopgym's reward wrappers.
The script trains on the world's train questions, then evaluates the greedy policy with
``hopgym.agents.evaluate`` on held-out test questions next to a random policy over the same actions.
About 2-4 minutes on one CPU thread for 40k steps.
"""

# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[sb3]"]
# ///

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, fields

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium.envs.registration import register, registry  # noqa: E402

import hopgym  # noqa: E402, F401  (registers the ids)
from hopgym.agents import evaluate  # noqa: E402
from hopgym.cli.bench_rl_jobs import MaskedRandomAgent, PolicyAgent, make_model  # noqa: E402

ENV_ID = "hopgym/SyntheticFeaturized-v0"
if ENV_ID not in registry:  # older checkouts: register it here
    register(id=ENV_ID, entry_point="hopgym.envs.featurized:make_featurized")


@dataclass
class Args:
    total_timesteps: int = 40_000
    """environment steps to train for"""
    seed: int = 0
    """seed of the policy, the training envs and the question order"""
    masked: bool = False
    """train sb3-contrib's MaskablePPO with the env's action masks instead of plain PPO"""
    reward: str = "default"
    """reward preset (default, searchr1, r3rag, kunlun, ...)"""
    max_turns: int = 6
    """step budget per question"""
    n_envs: int = 8
    """parallel training envs (DummyVecEnv)"""
    learning_rate: float = 1e-3
    """Adam learning rate"""
    ent_coef: float = 0.01
    """entropy bonus"""
    train_split: str = "train"
    """questions to train on (train, test or all)"""
    eval_split: str = "test"
    """questions to evaluate on"""
    eval_episodes: int = 200
    """evaluation episodes"""
    save: str = ""
    """where to save the trained model (.zip); empty: do not save"""

    def __post_init__(self) -> None:
        if self.total_timesteps < 1:
            raise ValueError("--total-timesteps must be >= 1")
        for name in ("train_split", "eval_split"):
            if getattr(self, name) not in ("train", "test", "all"):
                raise ValueError(f"--{name.replace('_', '-')} must be train, test or all")


def parse_args() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true")
        else:
            kind = {"int": int, "float": float}.get(f.type, str)
            parser.add_argument(flag, type=kind, default=f.default)
    return Args(**vars(parser.parse_args()))


def make_env(args: Args, split: str) -> gym.Env:
    return gym.make(
        ENV_ID,
        reward=args.reward,
        max_turns=args.max_turns,
        base_kwargs={"split": None if split == "all" else split},
    )


def main() -> None:
    args = parse_args()
    # TRY NOT TO MODIFY: seeding (global seeding is fine in a script)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    from stable_baselines3.common.env_util import make_vec_env

    envs = make_vec_env(lambda: make_env(args, args.train_split), n_envs=args.n_envs, seed=args.seed)
    algo = "maskppo" if args.masked else "ppo"
    model = make_model(
        algo, envs, args.seed, hyperparams={"learning_rate": args.learning_rate, "ent_coef": args.ent_coef}
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps, progress_bar=False)
    seconds = time.perf_counter() - start
    print(
        f"trained {algo} for {args.total_timesteps:,} steps in {seconds:.0f} s "
        f"({args.total_timesteps / seconds:.0f} steps/s)"
    )
    if args.save:
        os.makedirs(os.path.dirname(args.save) or ".", exist_ok=True)
        model.save(args.save)
        print(f"saved {args.save}")

    eval_env = make_env(args, args.eval_split)
    trained = evaluate(eval_env, PolicyAgent(model, eval_env), episodes=args.eval_episodes, seed=10_000)
    rnd = evaluate(eval_env, MaskedRandomAgent(seed=args.seed), episodes=args.eval_episodes, seed=10_000)
    for name, m in (("trained", trained), ("random (masked)", rnd)):
        print(
            f"{name:>16}: EM {m['em']:.3f}  F1 {m['f1']:.3f}  reward {m['reward']:.3f}  "
            f"searches {m['avg_searches']:.2f}  invalid {m['invalid_rate']:.3f}"
        )


if __name__ == "__main__":
    main()
