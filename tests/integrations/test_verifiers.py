"""The verifiers adapter: a scripted player, and verifiers' own eval against a served model.

Most tests hand ``HopgymEnv.run`` the ``agents.player.interaction(task)`` surface with scripted
replies (verifiers' own ``Segment``, ``Trace``, ``AssistantMessage`` and ``ToolCall`` types).
``test_verifiers_eval_against_a_served_model_scores_as_hopgym`` (slow) runs verifiers' own eval
entry against ``transformers serve`` instead: verifiers launches its null-harness chat program,
which talks to the model through verifiers' interception server. The one step it does not take
is installing that program's packages with ``uv`` from a package index (see
``chat_program_in_this_venv``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import threading
from pathlib import Path

import gymnasium as gym
import pytest

vf = pytest.importorskip("verifiers.v1")

from episodes import oracle_turns, reference_episode  # noqa: E402

from hopgym.errors import HopgymError, InvalidOptionError, InvalidOptionTypeError  # noqa: E402
from hopgym.integrations.verifiers import HopgymEnv, HopgymTaskset, load_environment  # noqa: E402


class ScriptedPlayer:
    """``agents.player``: ``interaction(task)`` replays ``replies`` and records what it was sent."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.sent = []
        self.trace = vf.Trace.model_construct(rewards={}, metrics={})

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        self.sent.append(task.data.prompt)
        player = self

        class _Interaction:
            trace = player.trace

            async def turn(self, message=None):
                if message is not None:
                    player.sent.append(message)
                if not player.replies:
                    return vf.Segment(messages=[], terminated=True)
                reply = player.replies.pop(0)
                if isinstance(reply, dict):  # an assistant message with structured tool calls
                    calls = [
                        vf.ToolCall(
                            id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"]
                        )
                        for c in reply["tool_calls"]
                    ]
                    message = vf.AssistantMessage(content=reply.get("content"), tool_calls=calls)
                    return vf.Segment(messages=[message])
                return vf.Segment(messages=[], root_reply=reply)

        yield _Interaction()


class Agents:
    def __init__(self, player):
        self.player = player


@pytest.fixture(scope="module")
def env():
    return load_environment("hopgym/Tiny-v1", reward="searchr1")


def _task(env, question_id):
    return next(t for t in env.taskset.load() if t.data.question_id == question_id)


def test_load_environment_is_a_verifiers_env(env):
    assert isinstance(env, vf.Env) and isinstance(env, HopgymEnv)
    assert isinstance(env.taskset, HopgymTaskset) and isinstance(env.taskset, vf.Taskset)
    tasks = list(env.taskset.load())
    assert len(tasks) == len(env.taskset.env.unwrapped.task.samples)
    assert all("Question:" in t.data.prompt for t in tasks)
    assert all(t.data.answers for t in tasks)  # gold answers ride on the task data, for reports


def test_scripted_episode_rewards_equal_hopgyms(env, tiny_sample):
    turns = oracle_turns(tiny_sample)
    player = ScriptedPlayer(turns)
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    total, terms, observations = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    trace = player.trace
    assert {k: r.score for k, r in trace.rewards.items()} == terms
    assert all(r.weight == 1.0 for r in trace.rewards.values())
    assert math.isclose(trace.reward, total) and total > 0
    assert trace.metrics == {"turns": len(turns), "invalid_turns": 0, "answered": 1}
    # the user turns are hopgym's observations; the last turn (the answer) gets no reply
    assert player.sent[1:] == observations[:-1]


def test_malformed_turns_get_corrections_and_budget_ends(env):
    replies = ["no tags at all", "<search></search>", "<answer>a</answer><search>b</search>"] * 3
    player = ScriptedPlayer(replies)
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    assert all("Invalid turn" in m for m in player.sent[1:3])
    assert player.trace.metrics["invalid_turns"] >= 2
    assert player.trace.metrics["turns"] <= 8  # hopgym's budget, not the script, ended it


def test_player_stopping_early_scores_what_happened(env):
    player = ScriptedPlayer([])
    asyncio.run(env.run(_task(env, "tiny-6"), Agents(player)))
    assert player.trace.reward == 0 and player.trace.metrics["turns"] == 0


@pytest.mark.parametrize(
    ("env_id", "kwargs", "error", "names"),
    [
        ("hopgym/Tinny-v1", {}, InvalidOptionTypeError, "hopgym/Tinny-v1"),
        ("hopgym/Tiny-v1", {"top_kk": 2}, InvalidOptionTypeError, "top_kk"),
        ("hopgym/Tiny-v1", {"reward": "nope"}, InvalidOptionError, "reward"),
    ],
)
def test_bad_env_fails_at_construction(env_id, kwargs, error, names):
    with pytest.raises(error, match=names) as info:
        load_environment(env_id, **kwargs)
    assert isinstance(info.value, HopgymError)


def tool_turns(sample) -> list[dict]:
    """The gold decomposition as assistant messages with OpenAI tool calls."""

    def call(i, name, **args):
        fn = {"name": name, "arguments": json.dumps(args)}
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
        }

    turns = [call(i, "search", query=hop.query) for i, hop in enumerate(sample.decomposition)]
    return [*turns, call(len(turns), "answer", answer=sample.answers[0])]


@pytest.fixture(scope="module")
def tools_env():
    return load_environment("hopgym/Tiny-v1", reward="searchr1", protocol="tools")


def test_tools_protocol_exposes_the_envs_tools(tools_env, env):
    specs = gym.make("hopgym/Tiny-v1", protocol="tools").unwrapped.tool_specs
    assert tools_env.tool_specs == specs and [s["function"]["name"] for s in specs] == ["search", "answer"]
    task = _task(tools_env, "tiny-6")
    assert task.data.tools == specs
    assert "<tools>" in task.data.system_prompt and '"name": "search"' in task.data.system_prompt
    # the tags protocol has no tools
    assert env.tool_specs == [] and _task(env, "tiny-6").data.tools == []
    assert _task(env, "tiny-6").data.system_prompt is None


def test_tools_protocol_passes_tool_calls_through(tools_env, tiny_sample):
    turns = tool_turns(tiny_sample)
    player = ScriptedPlayer(turns)
    asyncio.run(tools_env.run(_task(tools_env, "tiny-6"), Agents(player)))
    total, terms, observations = reference_episode(
        "hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1", protocol="tools"
    )
    assert {k: r.score for k, r in player.trace.rewards.items()} == terms
    assert math.isclose(player.trace.reward, total) and total > 0
    assert player.trace.metrics == {"turns": len(turns), "invalid_turns": 0, "answered": 1}
    assert player.sent[1:] == observations[:-1]
    assert all("<tool_response>" in m for m in player.sent[1:])


def test_tools_protocol_reads_calls_written_as_text_and_corrects_bad_ones(tools_env, tiny_sample):
    answer = tiny_sample.answers[0]
    replies = [
        '<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>',  # unknown tool
        f'<tool_call>{{"name": "answer", "arguments": {{"answer": "{answer}"}}}}</tool_call>',
    ]
    player = ScriptedPlayer(replies)
    asyncio.run(tools_env.run(_task(tools_env, "tiny-6"), Agents(player)))
    total, terms, observations = reference_episode(
        "hopgym/Tiny-v1", "tiny-6", replies, reward="searchr1", protocol="tools"
    )
    assert "serch" in player.sent[1] and player.sent[1:] == observations[:-1]
    assert math.isclose(player.trace.reward, total)
    assert player.trace.metrics == {"turns": 2, "invalid_turns": 1, "answered": 1}


def test_64_concurrent_episodes_match_sequential_ones_off_the_loop(tiny_sample):
    """64 episodes on one event loop: the same transcripts and rewards as one at a time, and no
    hopgym step runs on the loop's thread."""
    venv = load_environment("hopgym/Tiny-v1", reward="searchr1")
    tasks = list(venv.taskset.load())
    scripts = [
        oracle_turns(tiny_sample)
        if i % 3 == 0
        else ["no tags", f"<search>q{i}</search>", "<answer>x</answer>"]
        for i in range(64)
    ]

    def players():
        return [ScriptedPlayer(s) for s in scripts]

    sequential = players()
    for i, p in enumerate(sequential):
        asyncio.run(venv.run(tasks[0 if i % 3 == 0 else i % len(tasks)], Agents(p)))

    loop_thread, stepped_on = [], set()
    real_play = venv._env

    def spying_env():
        aenv = real_play()
        step = aenv.env.step

        def spy(action):
            stepped_on.add(threading.get_ident())
            return step(action)

        aenv.env.step = spy
        return aenv

    async def together():
        loop_thread.append(threading.get_ident())
        group = players()
        await asyncio.gather(
            *(venv.run(tasks[0 if i % 3 == 0 else i % len(tasks)], Agents(p)) for i, p in enumerate(group))
        )
        return group

    venv._env = spying_env
    concurrent = asyncio.run(together())
    assert [p.sent for p in concurrent] == [p.sent for p in sequential]
    assert [p.trace.metrics for p in concurrent] == [p.trace.metrics for p in sequential]
    assert [p.trace.reward for p in concurrent] == [p.trace.reward for p in sequential]
    assert stepped_on and loop_thread[0] not in stepped_on


def test_reasoning_returned_apart_goes_back_in_front_of_the_turn():
    """A server's ``reasoning_content`` is put back between the protocol's think delimiters."""
    from hopgym.integrations.verifiers import turn_action

    said = vf.Segment(messages=[vf.AssistantMessage(content="<answer>a</answer>", reasoning_content="hm")])
    assert turn_action(said, tools=False) == "<think>hm</think><answer>a</answer>"
    assert turn_action(said, tools=False, protocol="r3") == "The problem analysis: hm\n<answer>a</answer>"
    call = vf.ToolCall(id="c0", name="answer", arguments='{"answer": "a"}')
    called = vf.Segment(messages=[vf.AssistantMessage(content="", reasoning_content="hm", tool_calls=[call])])
    assert turn_action(called, tools=True)["content"] == "<think>hm</think>"
    plain = vf.Segment(messages=[vf.AssistantMessage(content="<think>x</think><answer>a</answer>")])
    assert turn_action(plain, tools=False) == "<think>x</think><answer>a</answer>"


# --- verifiers' own eval against a real OpenAI-compatible server ---------------------------------

#: What each served bigram model writes, every turn, whatever it is sent (see tests/served_models.py).
#: The searcher's query and the answer are single added tokens (a bigram chain repeats no token).
QUERY, ANSWER = "Qelvor Dynamics founded", "1962"
TURNS = {
    "searcher": (f"<think>hm</think><search>{QUERY}</search>", [QUERY]),
    "answerer": (f"<think>hm</think><answer>{ANSWER}</answer>", [ANSWER]),
    "rambler": ("no tags at all", ["no tags at all"]),
}


@pytest.fixture(scope="module")
def served_models(tmp_path_factory):
    """``transformers serve`` (one server) with the three bigram models of :data:`TURNS`; yields
    (base URL, {name: model path})."""
    for module in ("torch", "transformers", "fastapi", "uvicorn", "openai", "aiohttp"):
        pytest.importorskip(module)
    from served_models import build_bigram_model, serve

    root = tmp_path_factory.mktemp("verifiers_serve")

    def build(out):  # the server loads each model when a request first names it
        for name, (turn, extra) in TURNS.items():
            build_bigram_model(root / name, turn, extra)

    for url, _, _ in serve(root, build, pin=False):
        yield url, {name: str(root / name) for name in TURNS}


@pytest.fixture
def chat_program_in_this_venv(tmp_path, monkeypatch):
    """Provide verifiers' null-harness chat program with this interpreter instead of ``uv``.

    verifiers runs the null harness's program (``CHAT_PROGRAM_SOURCE``: verifiers' own chat loop
    as a PEP 723 script needing openai, mcp, httpx, httpx2, tenacity and certifi) through
    ``Runtime.prepare_uv_script``, which installs ``uv`` if it is missing and runs
    ``uv sync --script`` against a package index (with ``UV_OFFLINE=false``), then caches the
    interpreter it found per script path. Tests have no index, but this interpreter already has
    the script's packages (verifiers depends on them); so the script is written where
    ``prepare_uv_script`` looks for it and this interpreter is cached for it, which is what
    ``uv`` would have returned. The program itself, its launch, the interception server and the
    relay to the model are verifiers' own.
    """
    import hashlib
    import importlib.util

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    for module in ("openai", "mcp", "httpx", "httpx2", "tenacity", "certifi"):
        assert importlib.util.find_spec(module), f"the chat program needs {module}"
    assert isinstance(SubprocessRuntime._interpreters, dict)  # verifiers' per-path cache
    monkeypatch.setattr(SubprocessRuntime, "scripts_dir", str(tmp_path / "scripts"))
    data = CHAT_PROGRAM_SOURCE.encode()
    path = tmp_path / "scripts" / f"{hashlib.sha256(data).hexdigest()}.py"
    path.parent.mkdir()
    path.write_bytes(data)
    monkeypatch.setitem(SubprocessRuntime._interpreters, str(path), sys.executable)
    return path


def _eval(url, model, out, limit=None, **env_kwargs):
    """Run verifiers' own eval entry (``vf-eval``'s ``run_eval``) of the hopgym env on ``model``."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from hopgym.integrations.sse_relay import done_terminated
    from hopgym.integrations.verifiers import TASKSET_ID, HopgymEnvConfig, HopgymTasksetConfig

    taskset = HopgymTasksetConfig(id=TASKSET_ID, env_id="hopgym/Tiny-v1", env_kwargs=env_kwargs)

    async def run():
        async with done_terminated(url) as relay:
            config = EvalConfig(
                env=HopgymEnvConfig(taskset=taskset),
                model=model,
                client=vf.EvalClientConfig(base_url=f"{relay}/v1", api_key_var="HOPGYM_TEST_NO_KEY"),
                sampling={"max_tokens": 32},
                select={"limit": limit},
                push=False,
                rich=None,
                output_dir=out,
            )
            return await run_eval(config)

    return asyncio.run(run())


def _transcript(trace):
    """The user turns and the model's turns of a trace (thinking returned apart put back)."""
    from hopgym.backends import merge_reasoning

    messages = trace.branches[-1].messages
    sent = [m.content for m in messages if m.role == "user"]
    said = [merge_reasoning(m.content or "", m.reasoning_content) for m in messages if m.role == "assistant"]
    return sent, said


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "limit", "kwargs"),
    [
        ("answerer", None, {"reward": "searchr1"}),  # one turn per task: right on tiny-1, wrong elsewhere
        ("searcher", 2, {"reward": "searchr1", "max_turns": 3}),  # searches until the budget ends
        ("rambler", 2, {"reward": "searchr1", "max_turns": 2}),  # malformed turns: corrections, 0
    ],
)
def test_verifiers_eval_against_a_served_model_scores_as_hopgym(
    served_models, chat_program_in_this_venv, tmp_path, model, limit, kwargs
):
    """verifiers' eval runs hopgym episodes with a real model behind verifiers' own chat program,
    interception server and client; the rewards and reward terms it reports equal hopgym's for
    the same transcripts, replayed through ``gym.make``."""
    url, models = served_models
    episodes = _eval(url, models[model], tmp_path / "out", limit=limit, **kwargs)
    tasks = list(load_environment("hopgym/Tiny-v1", **kwargs).taskset.load())
    assert len(episodes) == (limit or len(tasks))
    rewards = []
    for episode in episodes:
        assert episode.ok and not episode.errors
        (trace,) = episode.traces
        assert trace.ok and not trace.errors, trace.errors
        sent, said = _transcript(trace)
        assert said and set(said) == {TURNS[model][0]}  # the model's own turns, thinking included
        question_id = episode.task.data.question_id
        total, terms, observations = reference_episode("hopgym/Tiny-v1", question_id, said, **kwargs)
        assert {k: r.score for k, r in trace.rewards.items()} == terms
        assert all(r.weight == 1.0 for r in trace.rewards.values())
        assert math.isclose(trace.reward, total)
        # the model was sent hopgym's prompt, then hopgym's observations (the last ends the episode)
        assert sent == [_task_prompt(tasks, question_id), *observations[:-1]]
        assert trace.metrics["turns"] == len(said)
        rewards.append((question_id, trace.rewards["outcome"].score, trace.reward, trace.metrics))
    if model == "answerer":  # right on tiny-1 only; the format bonus for every well-formed answer
        assert [q for q, outcome, _, _ in rewards if outcome > 0] == ["tiny-1"]
        assert all(total > 0 and m["answered"] == 1 for _, _, total, m in rewards)
    elif model == "searcher":
        assert all(m["turns"] == 3 and m["answered"] == 0 for _, _, _, m in rewards)
    else:
        assert all(total == 0 and m["invalid_turns"] == m["turns"] == 2 for _, _, total, m in rewards)
    # what vf-eval wrote to its run directory is what it returned
    (traces_file,) = (tmp_path / "out").glob("*/traces.jsonl")
    assert len(traces_file.read_text().splitlines()) == len(episodes)


def _task_prompt(tasks, question_id):
    return next(t.data.prompt for t in tasks if t.data.question_id == question_id)


# --- the `vf-eval` command itself ------------------------------------------------------------------


def test_vf_eval_command_resolves_the_taskset(tmp_path):
    """``vf-eval hopgym-verifiers`` (the console script, in a fresh process that has not imported
    hopgym) finds the taskset and its env through verifiers' plugin loader."""
    import shutil
    import subprocess

    from hopgym.integrations.verifiers import TASKSET_ID

    # The console script of the Python running the tests (a venv's bin/, activated or not), else PATH's.
    here = Path(sys.executable).with_name("vf-eval")
    vf_eval = str(here) if here.is_file() else shutil.which("vf-eval")
    if vf_eval is None:
        pytest.skip(f"the vf-eval console script is neither beside {sys.executable} nor on PATH")
    out = tmp_path / "out"
    argv = [vf_eval, TASKSET_ID, "--env.taskset.env-id", "hopgym/Tiny-v1", "--env.taskset.env-kwargs"]
    argv += ['{"reward": "searchr1"}', "--model", "m", "--dry-run", "--output-dir", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (resolved,) = out.glob("*/configs/resolved/eval.json")
    env = json.loads(resolved.read_text())["env"]
    assert env["taskset"] == {**env["taskset"], "id": TASKSET_ID, "env_id": "hopgym/Tiny-v1"}
    assert env["taskset"]["env_kwargs"] == {"reward": "searchr1"}
    assert env["player"]["harness"]["id"] == "null"  # HopgymEnvConfig's player, not verifiers' default


@pytest.mark.slow
def test_vf_eval_command_against_a_served_model_scores_as_hopgym(
    served_models, chat_program_in_this_venv, tmp_path
):
    """vf-eval's own entry point (``main(argv)``, the console script's) against ``transformers
    serve`` behind the shipped relay (``python -m hopgym.integrations.sse_relay``, a process of its
    own): the rewards it writes to ``traces.jsonl`` are hopgym's for the same transcripts."""
    import subprocess

    from served_models import free_port
    from verifiers.v1.cli.eval.main import main as vf_eval

    from hopgym.integrations.verifiers import TASKSET_ID

    url, models = served_models
    port = free_port()
    relay = subprocess.Popen(
        [sys.executable, "-m", "hopgym.integrations.sse_relay", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    out = tmp_path / "out"
    try:
        assert f"127.0.0.1:{port}" in relay.stdout.readline()  # listening
        argv = [TASKSET_ID, "--env.taskset.env-id", "hopgym/Tiny-v1", "--env.taskset.env-kwargs"]
        argv += ['{"reward": "searchr1"}', "--model", models["answerer"], "--no-push", "--select.limit", "3"]
        argv += ["--client.base-url", f"http://127.0.0.1:{port}/v1", "--client.api-key-var"]
        argv += ["HOPGYM_TEST_NO_KEY", "--sampling.max-tokens", "32", "--output-dir", str(out)]
        vf_eval(argv)
    finally:
        relay.terminate()
        relay.wait(timeout=20)
    (traces_file,) = out.glob("*/traces.jsonl")
    lines = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert len(lines) == 3
    assert sorted(line["task"]["data"]["question_id"] for line in lines) == ["tiny-1", "tiny-2", "tiny-3"]
    for line in lines:
        (trace,) = line["traces"]
        assert line["ok"] and trace["ok"] and not trace["errors"], trace["errors"]
        said = [TURNS["answerer"][0]]  # the answerer's one turn ends every episode
        question_id = line["task"]["data"]["question_id"]
        total, terms, _ = reference_episode("hopgym/Tiny-v1", question_id, said, reward="searchr1")
        assert {k: r["score"] for k, r in trace["rewards"].items()} == terms
        assert math.isclose(sum(r["score"] * r["weight"] for r in trace["rewards"].values()), total)
        assert trace["metrics"]["turns"] == 1 and trace["metrics"]["answered"] == 1
