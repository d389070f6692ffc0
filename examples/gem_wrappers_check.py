"""hopgym's GEM envs through the wrapper stack and vector env GEM's trainers build, on a CPU.

GEM's trainer integrations build their envs as ``gem.make_vec([...], wrappers=get_wrapper_fns(
"concat_chat,episode_tracking", tokenizer=...), vec_kwargs=[{"seed": s}] * group)``: the chat so
far through the policy's chat template, the episode's step count and cumulative reward, and one
seed per GRPO group (its envs share their questions). The vector env resets a finished env in the
step that ends its episode (``SAME_STEP``). This script plays several episodes per env with a
scripted policy (one malformed turn, the gold searches, the answer of the question in the chat)
and records, per finished episode, the rewards the trainer read from the reward arrays, the
tracker's ``prev_ep_cumulative_rewards`` and hopgym's ``prev_ep_reward_terms``, against hopgym's
own episode reward and terms (plain ``gym.make``, the same turns).

Run (``pip install -e ".[gem]"``)::

    python examples/gem_wrappers_check.py --out benchmarks/results/gem_wrappers.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from hopgym._atomic import check_writable, write_text


class ChatML:
    """The one tokenizer method GEM's ``concat_chat`` wrapper calls (a ChatML template)."""

    def apply_chat_template(
        self, messages: list, tokenize: bool = False, add_generation_prompt: bool = True
    ) -> str:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def script(sample: Any) -> list[str]:
    """The scripted turns: a malformed turn, the gold searches, the answer."""
    searches = [
        f"<think>hop {i}</think><search>{h.query}</search>" for i, h in enumerate(sample.decomposition)
    ]
    return ["no tags", *searches, f"<think>done</think><answer>{sample.answers[0]}</answer>"]


def run_check(
    gem_env: str = "hopgym:Tiny-v1",
    reward: str = "kunlun",
    groups: tuple[int, ...] = (11, 12),
    group_size: int = 3,
    episodes: int = 2,
) -> dict[str, Any]:
    """``episodes`` episodes on every env of ``len(groups)`` GRPO groups (one seed each)."""
    import gem
    from gem.wrappers.wrapper_factory import get_wrapper_fns

    import hopgym.integrations.gem  # noqa: F401  (registers the ids)
    from hopgym.integrations._common import replay_episode

    started = time.perf_counter()
    env_id = gem_env.replace(":", "/", 1)
    wrappers = get_wrapper_fns("concat_chat,episode_tracking", tokenizer=ChatML())
    vec_kwargs = [{"seed": seed} for seed in groups for _ in range(group_size)]
    n = len(vec_kwargs)
    vec = gem.make_vec([gem_env] * n, wrappers=wrappers, vec_kwargs=vec_kwargs, reward=reward)
    samples = {s.question: s for s in vec.envs[0].unwrapped.env.unwrapped.task.samples}
    obs, infos = vec.reset()
    current = [samples[i["question"]] for i in infos]
    turn = [0] * n
    received = [0.0] * n
    played: list[dict[str, Any]] = []
    finished = [0] * n
    while min(finished) < episodes:
        actions = [script(current[i])[turn[i]] for i in range(n)]
        obs, rewards, terminated, truncated, infos = vec.step(actions)
        for i in range(n):
            received[i] += float(rewards[i])
            turn[i] += 1
            if not (terminated[i] or truncated[i]):
                continue
            sample, turns = current[i], script(current[i])[: turn[i]]
            total, terms, _ = replay_episode(env_id, sample.id, turns, reward=reward)
            info = infos[i]  # SAME_STEP: the next episode's reset info, the finished one as prev_ep_*
            if finished[i] < episodes:
                played.append(
                    {
                        "env": i,
                        "group": vec_kwargs[i]["seed"],
                        "episode": finished[i],
                        "question_id": sample.id,
                        "turns": len(turns),
                        "gem_reward_arrays_sum": received[i],
                        "gem_prev_ep_cumulative_rewards": float(info["prev_ep_cumulative_rewards"]),
                        "gem_prev_ep_reward_terms": dict(info["prev_ep_reward_terms"]),
                        "hopgym_reward": total,
                        "hopgym_reward_terms": terms,
                        "match": math.isclose(received[i], total, abs_tol=1e-9)
                        and math.isclose(float(info["prev_ep_cumulative_rewards"]), total, abs_tol=1e-9)
                        and dict(info["prev_ep_reward_terms"]) == terms,
                    }
                )
            finished[i] += 1
            current[i], turn[i], received[i] = samples[info["question"]], 0, 0.0
    by_group: dict[tuple[int, int], set] = {}
    for e in played:
        by_group.setdefault((e["group"], e["episode"]), set()).add(e["question_id"])
    return {
        "what": "hopgym's GEM envs in gem.make_vec with GEM's trainer wrappers (concat_chat, "
        "episode_tracking), SAME_STEP autoreset; a scripted policy",
        "gem_env": gem_env,
        "reward": reward,
        "groups": list(groups),
        "group_size": group_size,
        "episodes": played,
        "all_match": all(e["match"] for e in played),
        "groups_share_question": all(len(q) == 1 for q in by_group.values()),
        "versions": {"gem-llm": version("gem-llm"), "python": platform.python_version()},
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the result JSON here")
    args = p.parse_args()
    if args.out:
        check_writable(args.out)  # before the run, not after it
    result = run_check()
    text = json.dumps(result, indent=1)
    if args.out:
        write_text(args.out, text + "\n")
    print(text)
    if not (result["all_match"] and result["groups_share_question"]):
        raise SystemExit("GEM's reward differs from hopgym's, or a group's questions differ (see above)")


if __name__ == "__main__":
    main()
