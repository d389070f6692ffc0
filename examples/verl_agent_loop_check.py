"""hopgym's verl agent loop inside verl's own Ray workers, on a CPU: the reward verl receives.

What a verl trainer does for a rollout step, minus the GPU parts: the dataset file that
``python -m hopgym.integrations.verl`` writes is read by verl's ``create_rl_dataset`` and
``collate_fn``; verl's trainer config (``ppo_trainer.yaml``, composed with the recipe's
overrides, ``agent_loop_config_path`` among them) builds verl's ``AgentLoopManager``, which
starts its ``AgentLoopWorker`` Ray actors; each worker loads the agent-loop YAML, instantiates
``hopgym_agent`` through its registry and plays every row ``rollout.n`` times; the batch comes
back with verl's ``rm_scores`` (the reward the trainer's advantage reads). The one stand-in is the
LLM server (vLLM/SGLang need a GPU): a client that answers each turn with a scripted policy (one
malformed turn, then the gold searches and the answer of the question in the prompt), which is
enough to compare verl's reward for each episode with hopgym's own (plain ``gym.make``, the same
turns) term by term.

Run (in an environment with ``pip install -e ".[verl]"``; verl pins transformers < 5.11)::

    python examples/verl_agent_loop_check.py --out benchmarks/results/verl_agent_loop.json

``--model DIR`` takes a Hugging Face model folder for the tokenizer and config (none is
downloaded); without it a tiny tokenizer trained on the Tiny corpus (the tests' own) is saved with
a two-layer Qwen2 config. ``tests/integrations/test_verl_ray.py`` runs :func:`run_check`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hopgym._atomic import check_writable, write_text

ROOT = Path(__file__).resolve().parents[1]

#: The agent-loop config file of the recipe (docs/integrations.md shows the same two lines).
AGENT_LOOPS_YAML = "- name: hopgym_agent\n  _target_: hopgym.integrations.verl.HopgymAgentLoop\n"


def script(question_id: str, env_id: str) -> list[str]:
    """The scripted policy's turns for one question: a malformed turn, the gold searches, the answer."""
    import gymnasium as gym

    import hopgym  # noqa: F401

    sample = next(s for s in gym.make(env_id).unwrapped.task.samples if s.id == question_id)
    searches = [
        f"<think>hop {i}</think><search>{h.query}</search>" for i, h in enumerate(sample.decomposition)
    ]
    return ["no tags", *searches, f"<think>done</think><answer>{sample.answers[0]}</answer>"]


def _worker_state(worker: Any) -> dict[str, Any]:
    """Run inside an ``AgentLoopWorker`` actor: its process id and its registry entry for ``hopgym_agent``
    (loaded from the YAML: ``name`` and ``_target_``; verl's ``@register`` would give ``_target_`` alone)."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    entry = _agent_loop_registry.get("hopgym_agent")
    return {
        "pid": os.getpid(),
        "registered": sorted(_agent_loop_registry),
        "hopgym_agent_entry": None if entry is None else {str(k): str(v) for k, v in entry.items()},
        "hopgym_module_imported": "hopgym.integrations.verl" in sys.modules,
    }


class ScriptedClient:
    """verl's LLM client (``generate(request_id, prompt_ids, sampling_params) -> TokenOutput``).

    It decodes the prompt, finds the question (hopgym's prompt has ``Question: ...``) and the turn
    (the assistant messages so far) and answers with :func:`script`'s turn. Pickled into the Ray
    workers (by value), as verl pickles its own client.
    """

    def __init__(self, tokenizer_dir: str, env_id: str, assistant_tag: str) -> None:
        self.tokenizer_dir, self.env_id, self.assistant_tag = tokenizer_dir, env_id, assistant_tag
        self.calls = 0

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        import gymnasium as gym
        from transformers import AutoTokenizer
        from verl.workers.rollout.replica import TokenOutput

        import hopgym  # noqa: F401

        if not hasattr(self, "_tok"):
            self._tok = AutoTokenizer.from_pretrained(self.tokenizer_dir)
            samples = gym.make(self.env_id).unwrapped.task.samples
            self._ids = {s.question: s.id for s in samples}
        text = self._tok.decode(prompt_ids)
        question = text.split("Question:", 1)[1].strip().splitlines()[0].strip()
        question_id = self._ids[question]
        turn = text.count(self.assistant_tag) - 1  # the generation prompt opens one more
        self.calls += 1
        ids = self._tok.encode(script(question_id, self.env_id)[turn], add_special_tokens=False)
        return TokenOutput(token_ids=ids + [self._tok.eos_token_id], stop_reason="completed")


def tiny_model_dir(out: Path) -> Path:
    """The tests' tiny tokenizer (trained on the Tiny corpus) and a two-layer Qwen2 config."""
    sys.path.insert(0, str(ROOT / "tests" / "agents"))
    from tiny_llm import build_tokenizer
    from transformers import Qwen2Config

    tok = build_tokenizer()
    tok.save_pretrained(out)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        architectures=["Qwen2ForCausalLM"],
    )
    config.save_pretrained(out)
    return out


def verl_config(model_dir: Path, work: Path, data: Path, n: int, num_workers: int, yaml: bool = True) -> Any:
    """The trainer config of verl (its ``ppo_trainer.yaml``) with the recipe's overrides
    (``yaml=False``: without ``agent_loop_config_path``)."""
    import verl
    from hydra import compose, initialize_config_dir

    write_text(work / "agent_loops.yaml", AGENT_LOOPS_YAML)
    overrides = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data}",
        f"data.val_files={data}",
        "data.max_prompt_length=1024",
        "data.max_response_length=1024",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.rollout.agent.num_workers={num_workers}",
        *(
            [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={work / 'agent_loops.yaml'}"]
            if yaml
            else []
        ),
        "actor_rollout_ref.rollout.agent.default_agent_loop=hopgym_agent",
    ]
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides), overrides


def run_check(
    model_dir: Path | None = None,
    env_id: str = "hopgym/Tiny-v1",
    env_kwargs: dict[str, Any] | None = None,
    n: int = 2,
    num_workers: int = 2,
    rows: int = 3,
    agent_loop_yaml: bool = True,
) -> dict[str, Any]:
    """One rollout step of verl's agent-loop manager on hopgym rows; verl's rewards against hopgym's.

    Returns a JSON-able dict: the recipe (overrides, YAML), each episode's question, turns, verl's
    ``rm_scores`` sum, hopgym's reward and terms (verl's ``reward_terms`` beside), and which Ray
    worker (process id) played it.
    """
    import numpy as np
    import ray
    import verl
    from ray import cloudpickle
    from verl import DataProto
    from verl.experimental.agent_loop import AgentLoopManager
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.dataset.rl_dataset import collate_fn

    from hopgym.integrations._common import replay_episode
    from hopgym.integrations.verl import write_dataset

    env_kwargs = dict(env_kwargs or {"reward": "kunlun"})  # four reward terms, three of them non-zero
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = model_dir or tiny_model_dir(work / "model")
        data = write_dataset(work / "train.parquet", env_id, **env_kwargs)
        config, overrides = verl_config(model_dir, work, data, n, num_workers, yaml=agent_loop_yaml)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        tag = tok.apply_chat_template([{"role": "assistant", "content": "\x00"}], tokenize=False).split(
            "\x00"
        )[0]
        tag = tag.strip() or "assistant"
        dataset = create_rl_dataset([str(data)], config.data, tok, None, is_train=True)
        batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(rows)]))
        batch.non_tensor_batch["uid"] = np.array([f"row-{i}" for i in range(rows)], dtype=object)
        gen = batch.repeat(repeat_times=n, interleave=True)  # what the trainer does for rollout.n

        own_ray = not ray.is_initialized()
        if own_ray:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        cloudpickle.register_pickle_by_value(sys.modules[ScriptedClient.__module__])
        manager = AgentLoopManager.create(
            config=config,
            llm_client=ScriptedClient(str(model_dir), env_id, tag),
            reward_loop_worker_handles=None,
        )
        try:
            # each worker's process id and agent-loop registry, read inside the actor before any rollout
            workers = [ray.get(w.__ray_call__.remote(_worker_state)) for w in manager.agent_loop_workers]
            if not agent_loop_yaml:  # the launching process imported the module (write_dataset did)
                assert "hopgym.integrations.verl" in sys.modules
                try:
                    manager.generate_sequences(gen)
                except Exception as exc:  # what verl's workers raise, whatever its type
                    lines = [line for line in str(exc).splitlines() if "not registered" in line]
                    return {
                        "workers": workers,
                        "error": f"{type(exc).__name__}: {(lines or [str(exc)])[-1].strip()}",
                    }
                return {"workers": workers, "error": None}
            out = manager.generate_sequences(gen)
        finally:
            if own_ray:
                ray.shutdown()

    scores = out.batch["rm_scores"].sum(dim=-1).tolist()
    episodes = []
    for i in range(len(out)):
        extra = out.non_tensor_batch["extra_info"][i]
        qid = str(extra["question_id"])
        turns = script(qid, env_id)
        total, terms, _ = replay_episode(env_id, qid, turns, **env_kwargs)
        episodes.append(
            {
                "uid": str(out.non_tensor_batch["uid"][i]),
                "question_id": qid,
                "turns": len(turns),
                "verl_rm_score": scores[i],
                "verl_reward_terms": dict(out.non_tensor_batch["reward_terms"][i]),
                "verl_reward_extra_info": {
                    k: float(out.non_tensor_batch[k][i]) for k in out.meta_info.get("reward_extra_keys", [])
                },
                "verl_num_turns": int(out.non_tensor_batch["__num_turns__"][i]),
                "hopgym_reward": total,
                "hopgym_reward_terms": terms,
                "match": math.isclose(scores[i], total, rel_tol=1e-6, abs_tol=1e-6)
                and dict(out.non_tensor_batch["reward_terms"][i]) == terms
                and {k: float(out.non_tensor_batch[k][i]) for k in out.meta_info.get("reward_extra_keys", [])}
                == {f"reward/{k}": v for k, v in terms.items()},
                "policy_tokens": int(out.batch["response_mask"][i].sum()),
                "env_tokens": int(out.batch["attention_mask"][i, -out.batch["responses"].shape[1] :].sum())
                - int(out.batch["response_mask"][i].sum()),
            }
        )
    return {
        "what": "hopgym's agent loop in verl's AgentLoopManager / AgentLoopWorker Ray actors, "
        "loaded from agent_loop_config_path; scripted LLM client (no GPU server)",
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "rollout_n": n,
        "agent_loop_workers": num_workers,
        "driver_pid": os.getpid(),
        "workers": workers,
        "agent_loops_yaml": AGENT_LOOPS_YAML,
        "overrides": [o.replace(str(work), "<tmp>") for o in overrides],
        "episodes": episodes,
        "all_match": all(e["match"] for e in episodes),
        "groups_share_question": all(
            len({e["question_id"] for e in episodes if e["uid"] == uid}) == 1
            for uid in {e["uid"] for e in episodes}
        ),
        "versions": {
            "verl": verl.__version__,
            "ray": ray.__version__,
            "transformers": __import__("transformers").__version__,
            "python": platform.python_version(),
        },
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="a local model folder (tokenizer and config.json)")
    p.add_argument("--n", type=int, default=2, help="rollouts per row (rollout.n)")
    p.add_argument("--rows", type=int, default=3, help="dataset rows in the batch")
    p.add_argument("--workers", type=int, default=2, help="agent-loop workers (Ray actors)")
    p.add_argument("--out", type=Path, help="write the result JSON here")
    args = p.parse_args()
    if args.out:
        check_writable(args.out)  # before the run, not after it
    result = run_check(args.model, n=args.n, num_workers=args.workers, rows=args.rows)
    # the same step without the YAML, the module imported in the launching process only
    result["without_agent_loop_yaml"] = run_check(
        args.model, n=args.n, num_workers=args.workers, rows=args.rows, agent_loop_yaml=False
    )
    text = json.dumps(result, indent=1, sort_keys=False)
    if args.out:
        write_text(args.out, text + "\n")
    print(text)
    if not (result["all_match"] and result["groups_share_question"]):
        raise SystemExit("verl's reward differs from hopgym's (see the episodes above)")


if __name__ == "__main__":
    main()
