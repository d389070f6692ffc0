"""The ``hopgym`` options are the config dataclasses' fields: walked, parsed, accumulated."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hopgym.agents.grpo import GRPORunConfig
from hopgym.agents.lora import LoRAConfig
from hopgym.agents.sft import SFTRunConfig
from hopgym.agents.teachers import TeacherConfig
from hopgym.agents.tiny_lm import TinyLMConfig
from hopgym.cli import COMMANDS, build_parser, main
from hopgym.cli._common import EnvConfig
from hopgym.cli._dataclass_args import ConfigError, config_from_args, config_specs, config_values
from hopgym.cli.bench import BenchConfig
from hopgym.cli.bench_rl import BenchRLConfig
from hopgym.cli.train_jobs import TrainConfig
from hopgym.envs.options import EnvOptions

ROOT = Path(__file__).resolve().parents[2]

#: Options that set no config field, and why.
COMMAND_ONLY = {"help": "argparse's -h/--help", "version": "hopgym --version"}
#: Config fields that get no option of their own, per (command, config), and why.
EXCLUDED = {
    ("data", "WorldConfig"): "every field through --kw KEY=VALUE: tuples such as hops=(2,3) are "
    "Python literals there",
    ("index build", "RetrieverSpec"): "urls, timeout, retries, backoff only serve an http "
    "retriever, which cannot be saved; show_progress is "
    "IndexBuildConfig.progress (on by default on the command "
    "line)",
}
EXCLUDED_FIELDS = {
    ("index build", "RetrieverSpec"): {"urls", "timeout", "retries", "backoff", "show_progress"}
}
for _name in ("eval", "bench", "play", "bench-rl", "train sft", "train grpo", "train rft"):
    EXCLUDED[(_name, "EnvOptions")] = "render_mode: the commands print what they show themselves"
    EXCLUDED_FIELDS[(_name, "EnvOptions")] = {"render_mode"}
EXCLUDED[("serve-env", "EnvOptions")] = "render_mode: a served env renders nothing (clients get the text)"
EXCLUDED_FIELDS[("serve-env", "EnvOptions")] = {"render_mode"}


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every parser that runs a command, with its command path."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaves(sub, (*path, name))


PARSER = build_parser()
LEAVES = dict(leaves(PARSER))


def test_every_command_is_there():
    assert set(LEAVES) == {
        "eval",
        "bench",
        "play",
        "view",
        "data",
        "index build",
        "index info",
        "index verify",
        "serve",
        "serve-env",
        "train sft",
        "train grpo",
        "train rft",
        "bench-rl",
    }
    assert len(COMMANDS) == 10


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_option_is_a_config_field_and_every_field_an_option(name):
    parser = LEAVES[name]
    specs = config_specs(parser)
    assert specs, f"hopgym {name} has no config"
    expected: dict[str, str] = {}
    for spec in specs:
        key = (name, spec.cls.__name__)
        listed = EXCLUDED_FIELDS.get(
            key, {f.name for f in dataclasses.fields(spec.cls)} if key in EXCLUDED else set()
        )
        assert spec.exclude == frozenset(listed), (
            f"hopgym {name}: {spec.cls.__name__} leaves out {sorted(spec.exclude)} without a "
            f"reason in EXCLUDED"
        )
        for f in spec.fields():
            expected[spec.dest(f.name)] = f"{spec.cls.__name__}.{f.name}"
        if spec.kv_dest:
            expected[spec.kv_dest] = f"{spec.cls.__name__} (KEY=VALUE)"
    dests = {a.dest for a in parser._actions}
    missing = set(expected) - dests
    assert not missing, f"hopgym {name}: fields without an option: {sorted(missing)}"
    stray = dests - set(expected) - set(COMMAND_ONLY)
    assert not stray, f"hopgym {name}: options without a config field: {sorted(stray)}"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_option_has_plain_help(name):
    parser = LEAVES[name]
    for action in parser._actions:
        assert action.help, f"hopgym {name}: {action.option_strings or action.dest} has no help"
    text = parser.format_help() + (parser.description or "")
    for markup in ("`", ":class:", ":func:", ":data:"):
        assert markup not in text, f"hopgym {name} --help shows {markup!r}"


def test_top_level_help_lists_commands_with_descriptions():
    text = PARSER.format_help()
    assert "`" not in text
    for name in ("eval", "bench", "play", "view", "data", "index", "serve", "serve-env", "train", "bench-rl"):
        lines = text.splitlines()
        # argparse puts the description of a long name on the next line.
        i = next(i for i, x in enumerate(lines) if x.split()[:1] == [name])
        line = lines[i] if len(lines[i].split()) > 1 else f"{lines[i]} {lines[i + 1]}"
        assert len(line.split()) > 2, line  # a name and words describing it


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_defaults_are_the_configs_defaults(name):
    parser = LEAVES[name]
    argv = name.split()
    for action in parser._actions:  # fill in required options with placeholders
        if action.required:
            argv += [action.option_strings[0], "x"] if action.option_strings else ["x"]
        elif not action.option_strings and action.dest not in COMMAND_ONLY:
            argv.append("x")
    args = PARSER.parse_args(argv)
    for spec in config_specs(parser):
        values = config_values(args, spec)
        for f in spec.fields():
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                continue
            if {**f.metadata, **spec.metadata.get(f.name, {})}.get("required"):
                continue  # a default for Python callers; the command requires the option
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert values[f.name] == default, (name, spec.cls.__name__, f.name)


def parse(*argv: str) -> argparse.Namespace:
    return PARSER.parse_args(list(argv))


def test_every_trl_option_is_reachable_and_hopgym_restates_none():
    from hopgym.agents.trl_config import trl_fields

    # hopgym's run configs keep only what TRL's configs lack.
    for cls, trl in ((GRPORunConfig, "GRPOConfig"), (SFTRunConfig, "SFTConfig")):
        own = {f.name for f in dataclasses.fields(cls)} - {"trl"}
        assert own & set(trl_fields(trl)) == {"output_dir"}, cls  # the run folder, handed to TRL
    args = parse(
        "train", "grpo", "--model", "tiny", "--trl", "epsilon=0.3", "loss_type='grpo'",
        "--trl", "scale_rewards=none", "beta=0.04", "--no-plot", "--steps", "3", "--sample-top-k", "5",
    )  # fmt: skip
    grpo = config_from_args(args, GRPORunConfig)
    assert not grpo.plot
    assert grpo.trl == {
        "epsilon": 0.3, "loss_type": "grpo", "scale_rewards": "none", "beta": 0.04,
        "max_steps": 3, "top_k": 5,
    }  # fmt: skip
    # Defaults come from hopgym's table, then TRL's own.
    trl = config_from_args(parse("train", "grpo", "--model", "tiny"), GRPORunConfig).trl_config()
    assert (trl.max_steps, trl.learning_rate, trl.loss_type, trl.epsilon) == (100, 1e-4, "dapo", 0.2)


def test_a_shortcut_and_the_trl_item_for_the_same_field_are_refused():
    args = parse("train", "sft", "--model", "tiny", "--steps", "2", "--trl", "max_steps=3")
    with pytest.raises(ConfigError, match="--steps and --trl max_steps=... both set max_steps"):
        config_from_args(args, SFTRunConfig)


@pytest.mark.parametrize(
    "argv, cls, key",
    [
        (["eval"], EnvConfig, "kw"),
        (["play"], EnvConfig, "kw"),
        (["bench"], BenchConfig, "kw"),
        (["bench-rl"], BenchRLConfig, "kw"),
        (["bench-rl"], BenchRLConfig, "eval_kw"),
        (["train", "grpo", "--model", "m"], TrainConfig, "kw"),
    ],
)
def test_repeated_kw_keeps_every_group(argv, cls, key):
    flag = "--" + key.replace("_", "-")
    args = parse(*argv, flag, "path='a b.json'", flag, "mode=open", "top_k=2")
    assert getattr(config_from_args(args, cls), key) == {"path": "a b.json", "mode": "open", "top_k": 2}


def test_repeated_key_value_and_list_options_accumulate():
    from hopgym.cli.data import WORLD_SPEC
    from hopgym.cli.train import TEACHER, TINY

    args = parse(
        "train",
        "sft",
        "--model",
        "tiny",
        "--teacher",
        "imperfect",
        "--tiny",
        "layers=1",
        "--tiny",
        "hidden=32",
        "heads=2",
        "--teacher-kw",
        "early_answer=0.5",
        "--teacher-kw",
        "never_route=True",
    )
    tiny = config_from_args(args, TINY)
    assert (tiny.layers, tiny.hidden, tiny.heads) == (1, 32, 2)
    teacher = config_from_args(args, TEACHER)
    assert (teacher.early_answer, teacher.never_route) == (0.5, True)
    args = parse("data", "--out", "w", "--kw", "seed=1", "--kw", "n_entities=300")
    assert config_from_args(args, WORLD_SPEC).n_entities == 300
    args = parse("bench", "--agents", "random", "--agents", "oracle,iterative")
    assert config_from_args(args, BenchConfig).agents == ("random", "oracle", "iterative")
    args = parse("bench-rl", "--seeds", "0,1", "--seeds", "2", "--baselines", "")
    cfg = config_from_args(args, BenchRLConfig)
    assert cfg.seeds == (0, 1, 2) and cfg.baselines == ()


def test_old_flags_from_the_readme_and_tests_still_work():
    args = parse(
        "train", "grpo", "--model", "runs/sft", "--out", "o", "--steps", "2", "--lr", "1e-2",
        "--max-length", "200", "--time-limit", "5", "--questions-per-step", "2", "--group-size", "2",
        "--max-new-tokens", "12",
    )  # fmt: skip
    g = config_from_args(args, GRPORunConfig)
    assert (g.output_dir, g.time_limit_s, g.questions_per_step, g.max_new_tokens) == ("o", 5.0, 2, 12)
    assert g.trl == {
        "max_steps": 2,
        "learning_rate": 1e-2,
        "max_completion_length": 200,
        "num_generations": 2,
    }
    args = parse(
        "train",
        "sft",
        "--env",
        "hopgym/Synthetic-v1",
        "--model",
        "tiny",
        "--out",
        "runs/sft",
        "--teacher",
        "imperfect",
        "--teacher-kw",
        "early_answer=0.5",
        "--kw",
        "hops=2",
        "kinds=bridge",
        "--split",
        "none",
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--max-length",
        "400",
        "--logging-steps",
        "1",
        "--tiny",
        "layers=1",
        "hidden=32",
        "heads=2",
        "ffn=64",
        "max_positions=512",
    )
    s = config_from_args(args, SFTRunConfig)
    assert s.output_dir == "runs/sft"
    assert s.trl == {"max_steps": 3, "per_device_train_batch_size": 4, "max_length": 400, "logging_steps": 1}
    train = config_from_args(args, TrainConfig)
    assert train.split is None and train.kw == {"hops": 2, "kinds": "bridge"}
    args = parse(
        "bench-rl",
        "--algos",
        "ppo,a2c,dqn,maskppo",
        "--seeds",
        "0,1,2",
        "--kw",
        "base_kwargs={'split': 'train'}",
        "--eval-kw",
        "base_kwargs={'split': 'test'}",
        "--baselines",
        "masked-random,random,iterative",
        "--json",
        "--no-progress",
    )
    b = config_from_args(args, BenchRLConfig)
    assert b.algos == ("ppo", "a2c", "dqn", "maskppo") and b.json == "-" and not b.progress
    assert b.eval_kw == {"base_kwargs": {"split": "test"}}
    args = parse(
        "index",
        "build",
        "--corpus",
        "c.jsonl",
        "--out",
        "idx",
        "--retriever",
        "hybrid",
        "--model",
        "hashing-32",
        "--index-type",
        "hnsw",
        "--no-progress",
        "--force",
        "--limit",
        "10",
    )
    assert (args.kind, args.model, args.index_type, args.progress, args.force, args.limit) == (
        "hybrid",
        "hashing-32",
        "hnsw",
        False,
        True,
        10,
    )
    args = parse(
        "serve",
        "--index",
        "idx",
        "--port",
        "8123",
        "--topk",
        "5",
        "--max-batch",
        "8",
        "--max-wait-ms",
        "1.5",
        "--verbose",
    )
    assert (args.port, args.topk, args.max_batch, args.max_wait_ms, args.verbose) == (8123, 5, 8, 1.5, True)
    assert parse("index", "info", "idx").index == "idx"


def test_underscore_spellings_are_accepted():
    args = parse(
        "train",
        "grpo",
        "--model",
        "m",
        "--max_new_tokens",
        "7",
        "--questions_per_step=5",
        "--eval_split",
        "test",
        "--kw",
        "a_b=1",
    )
    assert (args.max_new_tokens, args.questions_per_step, args.eval_split, args.kw) == (
        7,
        5,
        "test",
        [("a_b", 1)],
    )


def test_optional_numbers_take_none_and_choices_are_checked(capsys):
    assert parse("index", "build", "--corpus", "c", "--out", "o", "--threads", "none").threads is None
    for argv in (
        ["bench-rl", "--algos", "ppo,sac"],
        ["bench-rl", "--seeds", "a,b"],
        ["train", "grpo", "--model", "m", "--loss-type", "ppo"],
        ["index", "build", "--corpus", "c", "--out", "o", "--retriever", "splade"],
        ["eval", "--episodes", "many"],
        ["train", "grpo", "--out", "o"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse(*argv)
        assert exc.value.code == 2, argv
    err = capsys.readouterr().err
    assert "invalid choice 'sac'" in err and "expected an integer, got 'a'" in err
    assert "the following arguments are required: --model" in err


def test_a_config_refusal_is_one_line():
    def refused(argv: list[str], message: str) -> None:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        command = " ".join(argv[:2] if argv[0] == "train" else argv[:1])
        assert str(exc.value).startswith(f"hopgym {command}: error: ")
        assert message in str(exc.value), str(exc.value)

    refused(["train", "grpo", "--model", "tiny", "--group-size", "1"], "at least 2 generations")
    refused(["train", "grpo", "--model", "tiny", "--trl", "learnin_rate=1"], "did you mean 'learning_rate'")
    refused(
        ["train", "grpo", "--model", "tiny", "--kw", "reward='em'", "--reward", "r3rag"],
        "--kw reward='em' and --reward r3rag both set reward: give it once",
    )
    refused(
        ["train", "sft", "--model", "tiny", "--kw", "max_turns=4", "--max-turns", "3"],
        "--kw max_turns=4 and --max-turns 3 both set max_turns",
    )
    refused(
        ["train", "sft", "--model", "tiny", "--teacher-kw", "early_answer=0.5"], "add --teacher imperfect"
    )
    refused(
        ["train", "sft", "--model", "runs/x", "--tiny-layers", "2"], "--tiny-layers describe the tiny model"
    )
    refused(["train", "sft", "--model", "tiny", "--tiny", "depth=2"], "--tiny: unknown key(s) depth")
    refused(["data", "--out", "w", "--kw", "hops=7"], "hops must be ints in 1..4")


def run_py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_cli_import_and_help_stay_light():
    proc = run_py(
        "import sys, io, contextlib\n"
        "from hopgym.cli import build_parser\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: build_parser().parse_args(['train', 'grpo', '--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = ('torch', 'trl', 'transformers', 'faiss', 'stable_baselines3',\n"
        "         'sentence_transformers', 'matplotlib', 'datasets')\n"
        "print([m for m in heavy if m in sys.modules])"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "blocked, argv, extra",
    [
        (
            ("torch", "transformers", "trl"),
            ["train", "sft", "--model", "tiny", "--env", "hopgym/Tiny-v1", "--split", "none"],
            "train",
        ),
        (("stable_baselines3",), ["bench-rl", "--timesteps", "10"], "sb3"),
        (
            ("faiss",),
            [
                "index",
                "build",
                "--corpus",
                "tests/fixtures/wiki_corpus.jsonl",
                "--retriever",
                "dense",
                "--model",
                "hashing-32",
            ],
            "dense",
        ),
    ],
)
def test_a_missing_extra_is_listed_and_names_what_to_install(blocked, argv, extra, tmp_path):
    out = ["--out", str(tmp_path / "o")] if argv[0] != "bench-rl" else []
    proc = run_py(
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None  # as if not installed\n"
        "from hopgym.cli import main, build_parser\n"
        f"assert {argv[0]!r} in build_parser().format_help()\n"
        f"sys.exit(main({[*argv, *out]!r}))"
    )
    assert proc.returncode == 1, proc.stderr
    assert f"pip install 'hopgym[{extra}]'" in proc.stderr and ": error: " in proc.stderr
    assert "Traceback" not in proc.stderr


def test_configs_used_by_train_are_the_agents_own():
    from hopgym.cli.train import SUBCOMMANDS

    assert [s.cls for s in SUBCOMMANDS["grpo"].specs] == [
        TrainConfig,
        EnvOptions,
        GRPORunConfig,
        TinyLMConfig,
        LoRAConfig,
    ]
    assert TeacherConfig in [s.cls for s in SUBCOMMANDS["sft"].specs]


def test_env_options_are_options_and_only_those_given_reach_the_env():
    from hopgym.cli._common import CommandError, env_kwargs

    args = parse(
        "eval", "--top-k", "2", "--no-dedup", "--reward", "none", "--protocol", "r3", "--kw", "hops=3"
    )
    assert env_kwargs(args, config_from_args(args, EnvConfig).kw) == {
        "hops": 3,
        "top_k": 2,
        "dedup": False,
        "reward": "none",  # EnvOptions reads the word: the bare env
        "protocol": "r3",
    }
    # Not given: not passed, so an id's registered options (max_turns=6 ...) stay in force.
    assert env_kwargs(parse("bench"), {}) == {}
    args = parse("play", "--kw", "top_k=2", "--top-k", "3")
    with pytest.raises(CommandError, match="--kw top_k=2 and --top-k 3 both set top_k: give it once"):
        env_kwargs(args, config_from_args(args, EnvConfig).kw)
    with pytest.raises(SystemExit):
        parse("eval", "--protocol", "xml")


#: The commands that build an env, and so take the env options.
ENV_COMMANDS = ("eval", "bench", "play", "bench-rl", "serve-env", "train sft", "train grpo", "train rft")


@pytest.mark.parametrize("name", ENV_COMMANDS)
def test_every_command_that_builds_an_env_has_the_same_env_options(name):
    from hopgym.cli._common import ENV_OPTIONS

    assert ENV_OPTIONS in config_specs(LEAVES[name])
    flags = {a.option_strings[0]: a.help for a in LEAVES[name]._actions if a.option_strings}
    eval_flags = {a.option_strings[0]: a.help for a in LEAVES["eval"]._actions if a.option_strings}
    for f in ENV_OPTIONS.fields():
        option = ENV_OPTIONS.option(f.name)
        assert flags.get(option) == eval_flags[option], (name, option)


def test_train_takes_the_env_options_into_its_env_kwargs():
    from hopgym.cli.train import _train

    args = parse(
        "train", "grpo", "--model", "tiny", "--max-turns", "3", "--top-k", "2", "--reward", "none",
        "--kw", "hops=2", "--sample-top-k", "5",
    )  # fmt: skip
    train = _train(args)
    assert train.kw == {"hops": 2, "max_turns": 3, "top_k": 2, "reward": "none"}
    # --top-k is documents per search everywhere; sampling's top-k is --sample-top-k.
    assert config_from_args(args, GRPORunConfig).trl == {"top_k": 5}
    with pytest.raises(ValueError, match="split"):
        TrainConfig(model="tiny", kw={"split": "test"})


#: Values a command line cannot give: Python objects and Python's None (the command line says
#: "none" or leaves the option out).
PYTHON_ONLY = re.compile(r"\bNone\b|\binstance\b|\bProtocol\b|\bEmbedder\b|\bcallable\b|\bobject\b")


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_generated_help_names_only_values_a_command_line_can_give(name):
    for action in LEAVES[name]._actions:
        found = PYTHON_ONLY.search(action.help or "")
        assert not found, f"hopgym {name} {action.option_strings}: {found.group()!r} in {action.help!r}"


def test_index_kind_help_lists_its_choices_only():
    kind = next(a for a in LEAVES["index build"]._actions if "--kind" in a.option_strings)
    listed = kind.help.partition(":")[2].partition("(")[0]
    assert [k.strip() for k in listed.split(",")] == list(kind.choices)
