"""``hopgym eval``: evaluate one agent on an env; prints a table, writes JSON and trajectories.

Options: :class:`~hopgym.cli._common.EnvConfig` and the env options
(:data:`~hopgym.cli._common.ENV_OPTIONS`), :class:`EvalConfig` and, for ``--agent llm`` and
``--agent llm-direct`` (the closed-book baseline), :class:`LLMConfig` (its defaults are those of
:func:`hopgym.agents.llm.make_llm_agent`).
"""

from __future__ import annotations

import argparse
import inspect
import os
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgym._atomic import check_distinct, check_writable
from hopgym.agents.evaluation import failed_search_limit
from hopgym.agents.llm import BACKENDS, FORCE_ANSWER, MODES, make_llm_agent
from hopgym.agents.scripted import AGENTS
from hopgym.cli._common import (
    CommandError,
    EnvConfig,
    add_env_arguments,
    command_parser,
    console,
    env_kwargs,
    error_line,
    failed_searches_line,
    make_env,
    metrics_table,
    progress_label,
    terms_table,
    write_json,
)
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, config_from_args
from hopgym.errors import InvalidOptionError

__all__ = ["EvalConfig", "LLMConfig", "LLM_AGENTS", "add_parser", "make_cli_agent", "run"]

_LLM = inspect.signature(make_llm_agent).parameters
#: The LLM agents, by ``--agent`` name: searching, and the closed-book baseline.
LLM_AGENTS = ("llm", "llm-direct")


@dataclass
class EvalConfig:
    """Which agent, for how long, and where the results go."""

    agent: str = field(
        # A real baseline: the oracle reads the gold answers, and its EM 1.0 would read like a result.
        default="iterative",
        metadata={
            "help": f"A scripted agent ({', '.join(AGENTS)}; oracle reads the gold answers: an "
            f"upper bound, not a result), llm (a language model that searches; "
            f"needs --model) or llm-direct (the same model answering at once from memory, "
            f"without searching: the closed-book baseline)."
        },
    )
    episodes: int = field(default=100, metadata={"help": "Episodes to run."})
    max_failed_searches: str | None = field(
        default=None,
        metadata={
            "help": "Searches that may fail before the run exits with status 1 (a dead or refusing "
            "retrieval server): a count or a share of all searches (10%). Default: 0, any "
            "failed search fails the run. Any failed search is reported on stderr.",
            "metavar": "N|P%",
        },
    )
    stop_after_failed_searches: int = field(
        default=25,
        metadata={
            "help": "End the run once this many searches in a row failed (counted as episodes end; "
            "a search that works starts the count again): the finished episodes are scored and "
            "written, and the status is 1. 0: never.",
            "metavar": "N",
        },
    )
    num_envs: int = field(
        default=1,
        metadata={
            "help": "Episodes acted on side by side (llm agents): one batched generate call per "
            "turn for all of them."
        },
    )
    ray: bool = field(
        default=False,
        metadata={
            "help": "Run the --num-envs sub-envs in Ray workers (hopgym[ray]; a local Ray is "
            "started when none runs) instead of in this process: the same episodes and "
            "results (llm agents)."
        },
    )
    workers: int | None = field(
        default=None,
        metadata={"help": "With --ray: how many workers (default: one per 8 sub-envs).", "metavar": "W"},
    )
    time_limit: float | None = field(
        default=None,
        metadata={
            "help": "Stop after this many seconds (checked before each turn); the episodes finished "
            "by then are scored and written.",
            "metavar": "S",
        },
    )
    json: str | None = field(
        default=None, metadata={"help": "Write the metrics here as JSON (full precision).", "metavar": "PATH"}
    )
    trajectories: str | None = field(
        default=None,
        metadata={
            "help": "Write every episode, turn by turn, here (.jsonl; hopgym view reads it).",
            "metavar": "PATH",
        },
    )
    report: str | None = field(
        default=None,
        metadata={"help": "Write the HTML report of the run here (see hopgym view).", "metavar": "HTML"},
    )

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise InvalidOptionError(f"--episodes must be >= 1, got {self.episodes}")
        if self.stop_after_failed_searches < 0:
            raise InvalidOptionError(
                f"--stop-after-failed-searches must be >= 0 (0: never), got {self.stop_after_failed_searches}"
            )
        failed_search_limit(self.max_failed_searches, 1)  # refuse a bad value before any work


@dataclass
class LLMConfig:
    """The model behind ``--agent llm`` (:func:`hopgym.agents.llm.make_llm_agent`)."""

    model: str | None = field(
        default=None,
        metadata={
            "help": "Model path or hub id (transformers, vllm), or the served model name (openai).",
            "metavar": "ID",
        },
    )
    backend: str = field(
        default=_LLM["backend"].default, metadata={"help": "Generation backend.", "choices": BACKENDS}
    )
    base_url: str | None = field(
        default=None,
        metadata={"help": "API root of an OpenAI-compatible server (openai backend).", "metavar": "URL"},
    )
    temperature: float = field(
        default=_LLM["temperature"].default, metadata={"help": "Sampling temperature (0: greedy)."}
    )
    top_p: float = field(default=_LLM["top_p"].default, metadata={"help": "Nucleus sampling mass."})
    max_new_tokens: int = field(
        default=_LLM["max_new_tokens"].default, metadata={"help": "Longest model turn in tokens."}
    )
    mode: str = field(
        default=_LLM["mode"].default,
        metadata={
            "help": "chat: one chat message per turn and observation; continuation: the rollout as "
            "one growing assistant message (Search-R1's layout, and hopgym train sft's); "
            "auto: chat when the model has a chat template.",
            "choices": MODES,
        },
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "The system prompt: TEXT, or @FILE to read it from a file; '' for none. Default: "
            "the protocol's (or the closed-book one for llm-direct).",
            "metavar": "TEXT",
        },
    )
    force_answer: str = field(
        default=_LLM["force_answer"].default,
        metadata={
            "help": "When to prefill the answer tag so that the model answers: on the last turn, "
            "always, or never.",
            "choices": FORCE_ANSWER,
        },
    )
    few_shot: int = field(
        default=0,
        metadata={
            "help": "Worked examples shown to the model: the oracle's episodes on other questions, "
            "from the env made with --few-shot-kw on top of the evaluated env's "
            "arguments.",
            "metavar": "N",
        },
    )
    few_shot_kw: dict[str, Any] = field(
        default_factory=lambda: {"split": "train"},
        metadata={
            "help": "Env keyword arguments for the few-shot questions, e.g. split=train (the "
            "synthetic worlds) or start=0 limit=20 with the evaluated file sliced from "
            "start=20."
        },
    )

    def __post_init__(self) -> None:
        if self.few_shot < 0:
            raise InvalidOptionError(f"--few-shot must be >= 0, got {self.few_shot}")

    def read_system_prompt(self) -> str | None:
        """The system prompt, read from its file for ``@FILE``.

        Raises:
            CommandError: an unreadable file.
        """
        text = self.system_prompt
        if text is None or not text.startswith("@"):
            return text
        try:
            return Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(
                f"--system-prompt {text}: cannot read {text[1:]} ({exc.strerror or exc})"
            ) from None


LLM_SPEC = ConfigSpec(LLMConfig, title="llm agent")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``eval`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "eval",
        "evaluate one agent; prints a table, writes JSON",
        "Run one agent for N episodes on an env and print EM, F1, support "
        "recall, steps, searches (by source), invalid turns, reward and the mean "
        "of each reward term.",
        run=run,
    )
    add_env_arguments(p)
    add_config_arguments(p, ConfigSpec(EvalConfig, title="evaluation"))
    add_config_arguments(p, LLM_SPEC)
    from hopgym.cli.eval_suite import SUITE_SPEC

    add_config_arguments(p, SUITE_SPEC)
    return p


def make_cli_agent(
    name: str, env: Any, seed: int, llm: LLMConfig | None = None, few_shot_env: Any = None
) -> Any:
    """A scripted agent by name, or the LLM agent ``llm`` describes (``llm-direct``: closed book).

    Args:
        name: a scripted agent's name, ``llm`` or ``llm-direct``.
        env: the evaluated env.
        seed: the agent's seed.
        llm: the model and how it acts.
        few_shot_env: the env whose questions the few-shot examples use (``llm.few_shot > 0``).

    Raises:
        CommandError: an unknown name, ``llm`` without a model, or a bad LLM setting.
    """
    from hopgym.agents.scripted import agent_names, make_agent

    if name in LLM_AGENTS:
        if llm is None or not llm.model:
            raise CommandError(f"--agent {name} needs --model PATH_OR_ID")
        if llm.backend != "openai" and llm.model.startswith(("/", "./", "../", "~")):
            # A path, not a hub id: say so before a backend's long traceback would.
            if not Path(llm.model).expanduser().exists():
                raise CommandError(f"--model {llm.model}: no such model file or directory")
        closed_book = name == "llm-direct"
        try:
            few_shot = []
            if llm.few_shot:
                from hopgym.agents.llm import few_shot_examples

                few_shot = few_shot_examples(few_shot_env, llm.few_shot, seed=seed, closed_book=closed_book)
            return make_llm_agent(
                llm.model,
                backend=llm.backend,
                protocol=env.unwrapped.protocol.name,
                base_url=llm.base_url,
                temperature=llm.temperature,
                top_p=llm.top_p,
                max_new_tokens=llm.max_new_tokens,
                seed=seed,
                mode=llm.mode,
                system_prompt=llm.read_system_prompt(),
                closed_book=closed_book,
                force_answer=llm.force_answer,
                few_shot=few_shot,
                tools=env.unwrapped.tool_specs or None,
            )
        except ValueError as exc:  # e.g. the openai backend without --base-url
            raise CommandError(str(exc)) from None
    if ":" not in name and name not in agent_names():
        known = ", ".join((*agent_names(), *LLM_AGENTS))
        raise CommandError(f"unknown agent {name!r}; choose one of {known}, or give module:factory")
    try:
        return make_agent(name, env, seed=seed)
    except ValueError as exc:  # a module:factory that cannot be loaded
        raise CommandError(str(exc)) from None


def _workers(ev: EvalConfig) -> int | None:
    """How many Ray workers ``--ray`` asks for (``None``: the envs run in this process)."""
    from hopgym.envs.ray_vector import ENVS_PER_WORKER

    if not ev.ray:
        if ev.workers is not None:
            raise CommandError(f"--workers {ev.workers} is the number of Ray workers: add --ray")
        return None
    if ev.workers is None:
        return min(ev.num_envs, -(-ev.num_envs // ENVS_PER_WORKER))
    if not 1 <= ev.workers <= ev.num_envs:
        raise CommandError(f"--workers must be in [1, --num-envs {ev.num_envs}], got {ev.workers}")
    return ev.workers


def _llm_line(metrics: dict[str, Any]) -> str:
    """What the table leaves out for LLM agents: answered, cut and flawed turns, tokens."""

    def share(key: str) -> str:
        value = metrics.get(key)
        return "-" if value is None else f"{value:.3f}"

    parts = [
        f"answered {share('answered')}",
        f"turns cut at the token limit {share('truncated_rate')}",
        f"turns with format issues {share('format_issue_rate')}",
    ]
    tokens = metrics.get("tokens")
    if tokens:
        parts.append(
            f"tokens: prompt {tokens.get('prompt', 0)} (reused "
            f"{tokens.get('cached', 0)}), generated {tokens.get('completion', 0)}"
        )
    return "; ".join(parts)


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym eval``."""
    from hopgym.agents.evaluation import evaluate

    cfg = config_from_args(args, EnvConfig)
    ev = config_from_args(args, EvalConfig)
    kwargs = env_kwargs(args, cfg.kw)
    if getattr(args, "suite", None) or getattr(args, "compare", None):
        from hopgym.cli.eval_suite import run_suite_command

        llm = config_from_args(args, LLM_SPEC) if ev.agent in LLM_AGENTS else None
        return run_suite_command(
            args, ev, llm, lambda env: make_cli_agent(ev.agent, env, cfg.seed, llm), cfg.seed, kwargs
        )
    _check_outputs(ev)  # before the env, the model and the run: a bad path costs nothing
    env = make_env(cfg.env, kwargs)
    llm = config_from_args(args, LLM_SPEC)
    few_shot_env = (
        make_env(cfg.env, {**kwargs, **llm.few_shot_kw}) if ev.agent in LLM_AGENTS and llm.few_shot else None
    )
    agent = make_cli_agent(ev.agent, env, cfg.seed, llm, few_shot_env)
    agent_name = f"{ev.agent}:{llm.model}" if ev.agent in LLM_AGENTS else ev.agent
    if ev.num_envs > 1 and ev.agent not in LLM_AGENTS:
        raise CommandError(
            f"--num-envs {ev.num_envs} acts in batches, which only the llm agents do; {ev.agent} runs one env"
        )
    workers = _workers(ev)
    if workers is not None and ev.agent not in LLM_AGENTS:
        raise CommandError(
            f"--ray runs the envs in workers, which only the llm agents act on "
            f"(the scripted agents read their env in this process); {ev.agent} "
            f"runs one env"
        )
    with _Interrupts() as interrupts, tempfile.TemporaryDirectory() as tmp:
        # The report is built from a trajectory file; without --trajectories it is a temporary one.
        trajectories = ev.trajectories or (str(Path(tmp) / "run.jsonl") if ev.report else None)
        try:
            metrics = evaluate(
                env,
                agent,
                episodes=ev.episodes,
                seed=cfg.seed,
                trajectories=trajectories,
                agent_name=agent_name,
                progress=progress_label(cfg.env, ev.agent),
                time_limit=ev.time_limit,
                num_envs=ev.num_envs,
                workers=workers,
                stop_on_error=True,  # a crash keeps the finished episodes and the metrics
                stop_after_failed_searches=ev.stop_after_failed_searches or None,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        interrupts.writing = True  # from here a Ctrl-C or SIGTERM waits for the files
        # The files first: printing may fail (a closed stdout) and must not lose them.
        failures = _write_outputs(cfg, ev, metrics, trajectories)
        report = None if ev.report is None or "--report" in failures else ev.report
        _print_results(cfg, ev, env, metrics, report if metrics["episodes"] else None)
    status = _status(ev, metrics, failures)
    return status or (130 if interrupts.count else 0)


def _check_outputs(ev: EvalConfig) -> None:
    """Refuse, before the run, an output that cannot be written or two outputs on one path."""
    outputs = {"--json": ev.json, "--report": ev.report, "--trajectories": ev.trajectories}
    check_distinct(outputs)
    for path in outputs.values():
        if path is not None:
            check_writable(path)


def _write_outputs(
    cfg: EnvConfig, ev: EvalConfig, metrics: dict[str, Any], trajectories: str | None
) -> dict[str, str]:
    """Write ``--json`` and ``--report`` (each whole or not at all); returns ``{option: error}``
    for the outputs that could not be written, the trajectory file's among them."""
    failures: dict[str, str] = {}
    if metrics.get("trajectories_error"):
        failures["--trajectories" if ev.trajectories else "--report"] = metrics["trajectories_error"]
    if ev.json:
        try:
            write_json(ev.json, metrics)
        except OSError as exc:
            failures["--json"] = error_line(exc)
    if ev.report and metrics["episodes"] and "--report" not in failures:
        if "--trajectories" in failures:
            failures["--report"] = f"{ev.report}: not written: it is made from the trajectory file"
        else:
            from hopgym.viewer import write_report

            assert trajectories is not None  # with --report there is always a trajectory file
            try:
                write_report(
                    trajectories,
                    ev.report,
                    title=f"hopgym: {ev.agent} on {cfg.env}",
                    # a temporary file is not worth naming: it is gone when the report is read
                    names=None if ev.trajectories else ["(not kept: add --trajectories to keep it)"],
                )
            except OSError as exc:
                failures["--report"] = error_line(exc)
    return failures


def _print_results(cfg: EnvConfig, ev: EvalConfig, env: Any, metrics: dict[str, Any], report: Any) -> None:
    out = console()
    done = metrics["episodes"]
    if metrics["stopped"] == "time_limit":
        out.print(f"stopped by --time-limit {ev.time_limit:g} s after {done} of {ev.episodes} episodes")
    if metrics.get("worker_errors"):
        out.print(f"{metrics['worker_errors']} episodes were lost with a Ray worker and run again")
    if done:
        out.print(
            metrics_table(
                f"{cfg.env}, {done} episodes, seed {cfg.seed}",
                [(ev.agent, metrics)],
                getattr(env.unwrapped, "source_names", ()),
            )
        )
        if metrics["failed_searches"]:
            out.print(failed_searches_line(metrics))
        if ev.agent in LLM_AGENTS:
            out.print(_llm_line(metrics))
        if metrics["reward_terms"]:
            out.print(terms_table(metrics))
    if report is not None:
        out.print(f"report: {report}")


class _Interrupts:
    """Ctrl-C and SIGTERM (``kill``, a job scheduler's stop) while ``hopgym eval`` runs.

    The first one ends the run as Ctrl-C does (``KeyboardInterrupt``: the finished episodes are
    scored and written, instead of the process dying with nothing written); any further one, and
    any one that comes once the run is over (``writing``), waits until the metrics and files are
    written: a second Ctrl-C 20 ms after the first does not lose them. ``count`` says how many
    came.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.count = 0
        self.writing = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1 and not self.writing:
            raise KeyboardInterrupt
        if self.count == 2 or (self.count == 1 and self.writing):
            # os.write: print() from a handler can hit a buffer the interrupted code is writing.
            os.write(2, b"hopgym eval: writing the finished episodes' metrics and files first\n")

    def __enter__(self) -> _Interrupts:
        for sig in self.SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def _status(ev: EvalConfig, metrics: dict[str, Any], failures: dict[str, str]) -> int:
    """Warn on stderr about failed searches, a stopped run and outputs that could not be written;
    1 when the run cannot be trusted or an output is missing."""
    import sys

    status = 0
    if metrics["stopped"] in ("error", "interrupted"):
        done = metrics["episodes"]
        print(
            f"hopgym eval: error: the run stopped after {done} of {ev.episodes} episodes "
            f"({metrics.get('error') or metrics['stopped']}); the finished ones are scored and written",
            file=sys.stderr,
        )
        status = 130 if metrics["stopped"] == "interrupted" else 1
    elif metrics["stopped"] == "failed_searches":
        print(
            f"hopgym eval: error: the run stopped after {metrics['episodes']} of {ev.episodes} episodes: "
            f"{ev.stop_after_failed_searches} searches in a row failed (--stop-after-failed-searches); "
            "the finished ones are scored and written",
            file=sys.stderr,
        )
        status = 1
    for option, error in failures.items():
        print(f"hopgym eval: error: {option} {error}", file=sys.stderr)
        status = status or 1
    failed = metrics["failed_searches"]
    if failed:
        total = metrics["search_attempts"]
        limit = failed_search_limit(ev.max_failed_searches, total)
        level = "error" if failed > limit else "warning"
        print(
            f"hopgym eval: {level}: {failed_searches_line(metrics)}; first: "
            f"{' '.join(str(metrics['search_error']).split())}",
            file=sys.stderr,
        )
        if failed > limit:
            status = status or 1
    return status
