"""The ``hopgym`` command: ``eval``, ``bench``, ``play``, ``view``, ``data`` and the commands of the extras
(``index``, ``serve``, ``train``, ``bench-rl``).

Run ``hopgym COMMAND --help`` for each command's options.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "parse_kwargs"]

# Modules that add their own subcommands with ``add_commands(subparsers)``. Each is imported only
# when present, so a partial install still has the core commands.
_PLUGINS = ("hopgym.corpora.commands", "hopgym.agents.train_cli", "hopgym.agents.rl_bench")

DEFAULT_ENV = "hopgym/Synthetic-v0"
BENCH_AGENTS = ("random", "direct", "single-search", "iterative", "oracle")


def parse_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` strings to a dict; values are Python literals where they parse, else strings.

    Example:
        >>> parse_kwargs(["hops=3", "sources=('local','web')", "protocol=r3"])
        {'hops': 3, 'sources': ('local', 'web'), 'protocol': 'r3'}
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"hopgym: --kw takes key=value, got {item!r}")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


def _make_env(env_id: str, kwargs: dict[str, Any], reward: str | None) -> Any:
    import gymnasium as gym

    import hopgym  # noqa: F401 - registers the ids

    if reward is not None:
        kwargs = {**kwargs, "reward": None if reward == "none" else reward}
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise SystemExit(f"hopgym: cannot make {env_id!r}: {exc}") from None


def _make_agent(args: argparse.Namespace, env: Any) -> Any:
    from hopgym.agents.scripted import make_agent

    if args.agent == "llm":
        if not args.model:
            raise SystemExit("hopgym: --agent llm needs --model PATH_OR_ID")
        from hopgym.agents.llm import make_llm_agent

        return make_llm_agent(args.model, backend=args.backend,
                              protocol=env.unwrapped.protocol.name, base_url=args.base_url,
                              temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                              seed=args.seed)
    try:
        return make_agent(args.agent, env, seed=args.seed)
    except ValueError as exc:
        raise SystemExit(f"hopgym: {exc} (or llm)") from None


def _console() -> Any:
    from rich.console import Console

    # Rich falls back to 80 columns when output is piped; tables need a little more.
    return Console(width=None if sys.stdout.isatty() else 120)


def _table(title: str, rows: list[tuple[str, dict[str, Any]]]) -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("agent", "EM", "F1", "support recall", "steps", "searches", "invalid", "reward",
                "episodes/s"):
        table.add_column(col, justify="left" if col == "agent" else "right")
    for name, m in rows:
        table.add_row(name, f"{m['em']:.3f}", f"{m['f1']:.3f}", f"{m['support_recall']:.3f}",
                      f"{m['avg_steps']:.2f}", f"{m['avg_searches']:.2f}",
                      f"{m['invalid_rate']:.3f}", f"{m['reward']:.3f}",
                      f"{m['episodes_per_s']:.0f}")
    return table


def _terms_table(metrics: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="reward terms (mean per episode)")
    table.add_column("term")
    table.add_column("mean", justify="right")
    for name, value in sorted(metrics["reward_terms"].items()):
        table.add_row(name, f"{value:+.4f}")
    return table


def cmd_eval(args: argparse.Namespace) -> int:
    import tempfile

    from hopgym.agents.evaluation import evaluate

    env = _make_env(args.env, parse_kwargs(args.kw), args.reward)
    agent = _make_agent(args, env)
    agent_name = f"llm:{args.model}" if args.agent == "llm" else args.agent
    with tempfile.TemporaryDirectory() as tmp:
        # The report is built from a trajectory file; without --trajectories it is a temporary one.
        trajectories = args.trajectories or (str(Path(tmp) / "run.jsonl") if args.report else None)
        metrics = evaluate(env, agent, episodes=args.episodes, seed=args.seed,
                           trajectories=trajectories, agent_name=agent_name,
                           progress=args.episodes >= 50)
        if args.report:
            from hopgym.viewer import write_report

            report = write_report(trajectories, args.report,
                                  title=f"hopgym: {args.agent} on {args.env}")
    console = _console()
    console.print(_table(f"{args.env}  seed={args.seed}", [(args.agent, metrics)]))
    if metrics["reward_terms"]:
        console.print(_terms_table(metrics))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(metrics, indent=2) + "\n")
    if args.report:
        console.print(f"report: {report}")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """Write the HTML report of one trajectory file, or the comparison of two."""
    from hopgym.agents.trajectories import TrajectoryFormatError
    from hopgym.viewer import write_report

    if len(args.runs) > 2:
        raise SystemExit(f"hopgym view: give one trajectory file, or two to compare; got "
                         f"{len(args.runs)}")
    try:
        path = write_report(args.runs, args.out)
    except (FileNotFoundError, TrajectoryFormatError) as exc:
        raise SystemExit(f"hopgym view: {exc}") from None
    print(path)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from hopgym.agents.evaluation import evaluate
    from hopgym.agents.scripted import make_agent

    console = _console()
    results: dict[str, dict[str, Any]] = {}
    for env_id in args.env:
        env = _make_env(env_id, parse_kwargs(args.kw), args.reward)
        rows = []
        for name in args.agents:
            metrics = evaluate(env, make_agent(name, env, seed=args.seed), episodes=args.episodes,
                               seed=args.seed, progress=True)
            rows.append((name, metrics))
            results[f"{env_id}:{name}"] = metrics
        console.print(_table(f"{env_id}  ({args.episodes} episodes, seed {args.seed})", rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


_PLAY_HELP = ("Type a turn as raw protocol text, or a shortcut: 's QUERY' search, 'r SOURCE' route, "
              "'a ANSWER' answer, 't TEXT' think, 'q' quit.")


def cmd_play(args: argparse.Namespace) -> int:
    from hopgym.envs.actions import Answer, Route, Search, Think

    env = _make_env(args.env, parse_kwargs(args.kw), args.reward)
    obs, info = env.reset(seed=args.seed)
    print(_PLAY_HELP)
    print(obs)
    total = 0.0
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print("\n(end of input)")
            return 0
        if line == "q":
            return 0
        head, _, rest = line.partition(" ")
        shortcut = {"s": Search, "r": Route, "a": Answer, "t": Think}.get(head)
        action: Any = shortcut(rest) if shortcut and rest else line
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if info.get("invalid_action"):
            print(f"[invalid: {info['invalid_action']}]")
        if obs:
            print(obs)
        if terminated or truncated:
            sample = env.unwrapped.sample
            print(f"Episode over ({'answered' if terminated else 'out of turns'}). "
                  f"Gold: {sample.answer}. Return: {total:.3f}. Terms: {info.get('reward_terms')}")
            return 0


def cmd_data(args: argparse.Namespace) -> int:
    """Write the synthetic world in FlashRAG layout: corpus.jsonl and questions.jsonl."""
    from hopgym.corpora.synthetic import export_flashrag

    paths = export_flashrag(Path(args.out), **parse_kwargs(args.kw))
    for path in paths:
        print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hopgym", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def env_args(p: argparse.ArgumentParser, multi: bool = False) -> None:
        if multi:
            p.add_argument("--env", nargs="+", default=[DEFAULT_ENV, "hopgym/SyntheticRouting-v0"],
                           help="env ids (default: the two synthetic worlds)")
        else:
            p.add_argument("--env", default=DEFAULT_ENV, help=f"env id (default {DEFAULT_ENV})")
        p.add_argument("--kw", nargs="*", default=[], metavar="KEY=VALUE",
                       help="env keyword arguments, e.g. --kw hops=3 protocol=r3")
        p.add_argument("--reward", default=None,
                       help="reward preset (default, searchr1, r3rag, kunlun, ...; 'none' = bare)")
        p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("eval", help="evaluate one agent; prints a table, writes JSON")
    env_args(p)
    p.add_argument("--agent", default="oracle", help="random, direct, single-search, iterative, "
                                                     "oracle or llm")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--json", default=None, help="write the metrics here")
    p.add_argument("--trajectories", default=None, help="write every episode here (.jsonl)")
    p.add_argument("--report", default=None, metavar="HTML",
                   help="write the HTML report of the run here (see `hopgym view`)")
    p.add_argument("--model", default=None, help="llm agent: model path or hub id")
    p.add_argument("--backend", default="transformers", help="llm agent: transformers, vllm, openai")
    p.add_argument("--base-url", default=None, help="llm agent: OpenAI-compatible server URL")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("bench", help="every scripted baseline on the synthetic worlds")
    env_args(p, multi=True)
    p.add_argument("--agents", nargs="+", default=list(BENCH_AGENTS))
    p.add_argument("--episodes", type=int, default=300)
    p.add_argument("--json", default=None)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("play", help="play an episode yourself in the terminal")
    env_args(p)
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("view", help="HTML report of a trajectory file (two: compare them)")
    p.add_argument("runs", nargs="+", metavar="RUN.jsonl",
                   help="trajectory file(s) of `hopgym eval --trajectories`; a second one is "
                        "compared with the first")
    p.add_argument("-o", "--out", default=None, metavar="HTML",
                   help="output file (default: RUN.html, or A-vs-B.html, beside the first file)")
    p.set_defaults(func=cmd_view)

    p = sub.add_parser("data", help="export the synthetic world as FlashRAG jsonl files")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--kw", nargs="*", default=[], metavar="KEY=VALUE",
                   help="world arguments, e.g. --kw seed=1 n_entities=5000")
    p.set_defaults(func=cmd_data)

    for module in _PLUGINS:
        try:
            plugin = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue  # that part of hopgym is not in this version
            raise
        plugin.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hopgym`` command."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
