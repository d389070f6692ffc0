"""Tests for what makes LLM agents finish the job: KV-cache reuse across turns, reasoning fields
merged back, no ``n`` in requests, answer forcing, open tags closed, the closed-book baseline,
few-shot examples, and batched / time-capped evaluation. Offline: a tiny random Qwen2 model
(``tiny_llm.py``), scripted fake backends and a stub HTTP server on 127.0.0.1.
"""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from tiny_llm import backend, model, one_thread, tokenizer  # noqa: F401  (fixtures)

import hopgym  # noqa: F401  (registers the ids)
import hopgym.agents.evaluation as evaluation
from hopgym.agents import OracleAgent
from hopgym.agents.evaluation import evaluate
from hopgym.agents.llm import LLMAgent, few_shot_examples
from hopgym.agents.prompts import (
    CLOSED_BOOK_SYSTEM_PROMPTS,
    answer_prefix,
    closed_book_prompt,
    last_turn_message,
)
from hopgym.agents.trajectories import read_trajectories
from hopgym.backends import Completion, OpenAIBackend, SamplingParams, TransformersBackend

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _env(protocol: str = "tags", max_turns: int = 4, **kw) -> gym.Env:
    return gym.make("hopgym/Tiny-v1", reward=None, protocol=protocol, max_turns=max_turns, **kw)


class Fake:
    """A scripted backend: plays fixed completions and records each request."""

    has_chat_template = True
    supports_chat = True

    def __init__(self, results: list[Completion | str], *, prefill: bool = True) -> None:
        self.results = [r if isinstance(r, Completion) else Completion(r, "stop") for r in results]
        self.calls: list[list] = []
        self.supports_prefill = prefill

    def apply_chat_template(self, messages, *, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def complete(self, prompts, params):
        self.calls.append(list(prompts))
        return [self.results.pop(0) for _ in prompts]

    def generate(self, prompts, params):
        return [c.text for c in self.complete(prompts, params)]


# ------------------------------------------------------------------------------ KV-cache reuse
def _episodes(backend, n_envs: int = 3, max_turns: int = 3, mode: str = "continuation"):
    """Greedy batched episodes; returns each turn's (text, generated ids, cached tokens)."""
    envs = [_env(max_turns=max_turns) for _ in range(n_envs)]
    agent = LLMAgent(backend, sampling=SamplingParams(max_new_tokens=14), mode=mode, force_answer="never")
    firsts = [e.reset(options={"index": i}) for i, e in enumerate(envs)]
    obs, infos = [o for o, _ in firsts], [i for _, i in firsts]
    active = [True] * n_envs
    turns = []
    while any(active):
        texts = agent.act_batch(obs, infos, active=active)
        for i, env in enumerate(envs):
            if not active[i]:
                continue
            info = agent.turn_info[i]
            turns.append((i, texts[i], info["token_ids"], info["cached_tokens"]))
            obs[i], _, term, trunc, infos[i] = env.step(texts[i])
            active[i] = not (term or trunc)
    return turns


@pytest.mark.parametrize("mode", ["continuation", "chat"])
def test_prefix_cache_reuse_gives_the_same_tokens_as_full_prefill(model, tokenizer, mode):
    reuse = TransformersBackend(model, tokenizer, device="cpu")
    fresh = TransformersBackend(model, tokenizer, device="cpu", prefix_cache=0)
    assert reuse.prefix_cache is not None and fresh.prefix_cache is None
    a, b = _episodes(reuse, mode=mode), _episodes(fresh, mode=mode)
    assert [t[:3] for t in a] == [t[:3] for t in b]  # texts and generated token ids, turn by turn
    assert all(t[3] == 0 for t in b)
    later = [t[3] for t in a[3:]]  # the first batch of turns has nothing to reuse
    assert later and min(later) > 0
    assert reuse.stats["prompt_tokens"] == fresh.stats["prompt_tokens"]
    assert reuse.stats["cached_tokens"] > 0.3 * reuse.stats["prompt_tokens"]


def test_prefix_cache_matches_the_longest_prefix_and_respects_its_budget(model, tokenizer):
    be = TransformersBackend(model, tokenizer, device="cpu", prefix_cache=64)
    params = SamplingParams(max_new_tokens=4)
    first = be.complete(["Lorn is a city in"], params)[0]
    assert first.cached_tokens == 0 and first.prompt_tokens > 0
    # The same prompt reuses all but its last token; an extension reuses the prompt and the
    # tokens generated after it.
    again = be.complete(["Lorn is a city in"], params)[0]
    assert again.cached_tokens == first.prompt_tokens - 1 and again.text == first.text
    longer = be.complete(["Lorn is a city in" + first.text + " and Vashti"], params)[0]
    assert longer.cached_tokens >= first.prompt_tokens
    assert be.prefix_cache.tokens <= 64
    be.complete(["x " * 80], params)  # longer than the budget: not held
    assert be.prefix_cache.tokens <= 64
    with pytest.raises(ValueError, match="prefix_cache"):
        TransformersBackend(model, tokenizer, prefix_cache=-1)


def test_transformers_backend_reports_finish_reasons(backend):
    long = backend.complete(["Question: who founded Qelvor Dynamics?\n"], SamplingParams(max_new_tokens=3))[0]
    assert long.finish_reason == "length" and long.truncated and long.completion_tokens == 3
    free = backend.generate(["Question: who founded Qelvor Dynamics?\n"], SamplingParams(max_new_tokens=24))[
        0
    ]
    stop = free[2:5]
    cut = backend.complete(
        ["Question: who founded Qelvor Dynamics?\n"], SamplingParams(max_new_tokens=24, stop=(stop,))
    )[0]
    assert cut.finish_reason == "stop" and not cut.truncated


# ------------------------------------------------------------------------------ HTTP stub
class _Stub:
    """An OpenAI-compatible stub that answers every request with ``message`` (chat) or ``text``."""

    def __init__(self, message: dict, finish: str = "stop", usage: dict | None = None) -> None:
        self.bodies: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.bodies.append(body)
                choice = (
                    {"message": {"role": "assistant", **message}}
                    if self.path.endswith("/chat/completions")
                    else {"text": message.get("content", "")}
                )
                data = {"choices": [{**choice, "finish_reason": finish}], "usage": usage or {}}
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    servers: list[_Stub] = []

    def start(message: dict, **kw) -> _Stub:
        servers.append(_Stub(message, **kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


GREEDY = SamplingParams(max_new_tokens=9, stop=("</search>", "</route>", "</answer>"))


def test_openai_backend_sends_no_n_unless_asked(stub):
    server = stub({"content": "<answer>Oslo</answer>"})
    OpenAIBackend(server.url, "m").generate([[{"role": "user", "content": "q"}], "raw"], GREEDY)
    assert all("n" not in b for b in server.bodies) and len(server.bodies) == 2
    OpenAIBackend(server.url, "m", extra_body={"n": 1, "top_k": 5}).generate(["raw"], GREEDY)
    assert server.bodies[-1]["n"] == 1 and server.bodies[-1]["top_k"] == 5
    with pytest.raises(ValueError, match="extra_body"):
        OpenAIBackend(server.url, "m", extra_body=[("n", 1)])


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "thinking"])
def test_openai_backend_merges_reasoning_back_as_think(stub, field):
    server = stub(
        {"content": "<search>Acme founder", field: "who founded Acme?"},
        usage={"prompt_tokens": 12, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 8}},
    )
    be = OpenAIBackend(server.url, "m")
    chat = [{"role": "user", "content": "q"}]
    c = be.complete([chat], GREEDY)[0]
    assert c.text == "<search>Acme founder</search>" and c.reasoning == "who founded Acme?"
    assert (c.prompt_tokens, c.cached_tokens, c.completion_tokens) == (12, 8, 7)
    assert be.generate([chat], GREEDY) == ["<think>who founded Acme?</think><search>Acme founder</search>"]
    # The agent keeps the thought in its history, in its protocol's form.
    agent = LLMAgent(be, force_answer="never")
    assert agent.act("Question: who founded Acme?\n", {"turn": 0}).startswith(
        "<think>who founded Acme?</think><search>"
    )
    r3 = LLMAgent(be, protocol="r3", force_answer="never")
    assert r3.act("Q", {"turn": 0}).startswith("The problem analysis: who founded Acme?\n")


def test_openai_backend_leaves_a_thought_cut_at_the_limit_open(stub):
    server = stub({"content": "", "reasoning_content": "Acme was founded by"}, finish="length")
    be = OpenAIBackend(server.url, "m")
    assert be.generate([[{"role": "user", "content": "q"}]], GREEDY) == ["<think>Acme was founded by"]
    agent = LLMAgent(be, force_answer="never")
    assert agent.act("Q", {"turn": 0}) == "<think>Acme was founded by"
    assert agent.turn_info[0]["truncated"] and agent.turn_info[0]["closed"] is None


def test_openai_backend_prefill_needs_a_server_that_continues(stub):
    server = stub({"content": "Oslo"})
    prefilled = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>"}]
    with pytest.raises(ValueError, match="prefill=True"):
        OpenAIBackend(server.url, "m").generate([prefilled], GREEDY)
    OpenAIBackend(server.url, "m", prefill=True).generate([prefilled], GREEDY)
    body = server.bodies[-1]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    # Without prefill support, the agent asks for the answer in words on the last turn.
    agent = LLMAgent(OpenAIBackend(server.url, "m"))
    agent.act("Question: where?\n", {"turn": 0, "max_turns": 1})
    last = server.bodies[-1]["messages"][-1]
    assert last["role"] == "user" and last["content"].endswith(last_turn_message("tags"))


# ------------------------------------------------------------------------------ answer forcing
@pytest.mark.parametrize("protocol", ["tags", "r3"])
def test_answer_forcing_prefills_the_answer_on_the_last_turn_in_continuation(protocol):
    fake = Fake(
        [
            "<search>Lorn</search>"
            if protocol == "tags"
            else "The problem analysis: a\nThe retrieval query: Lorn",
            "Lorn</answer>",
        ]
    )
    agent = LLMAgent(fake, protocol=protocol, mode="continuation")
    env = _env(protocol, max_turns=2)
    obs, info = env.reset(options={"index": 0})
    obs, _, _, _, info = env.step(agent.act(obs, info))
    assert not fake.calls[0][0].endswith(answer_prefix(protocol))
    text = agent.act(obs, info)
    assert fake.calls[1][0].endswith(answer_prefix(protocol))
    assert text.startswith(answer_prefix(protocol)) and agent.turn_info[0]["forced"]
    _, _, terminated, _, info = env.step(text)
    assert terminated and info["answer"].startswith("Lorn")
    assert agent.transcript == env.unwrapped.transcript


def test_answer_forcing_in_chat_continues_a_final_assistant_message():
    fake = Fake(["<search>Lorn</search>", "Lorn</answer>"])
    agent = LLMAgent(fake)  # chat mode, prefill supported
    env = _env(max_turns=2)
    obs, info = env.reset(options={"index": 0})
    obs, _, _, _, info = env.step(agent.act(obs, info))
    assert fake.calls[0][0][-1]["role"] == "user"
    text = agent.act(obs, info)
    assert fake.calls[1][0][-1] == {"role": "assistant", "content": "<answer>"}
    assert text == "<answer>Lorn</answer>"
    assert env.step(text)[2]
    never = LLMAgent(Fake(["<search>x</search>"]), force_answer="never")
    never.act("Q", {"turn": 0, "max_turns": 1})
    assert never.backend.calls[0][0][-1]["role"] == "user"
    with pytest.raises(ValueError, match="force_answer"):
        LLMAgent(Fake([]), force_answer="sometimes")


def test_a_turn_cut_inside_an_open_action_is_closed_and_marked():
    fake = Fake(
        [
            Completion("<think>a</think><search>Sefa Quill fa", "length"),
            Completion("<think>the father is Aldo and", "length"),
            Completion("<answer>Emery", "stop"),
        ]
    )
    agent = LLMAgent(fake, force_answer="never")
    env = _env(max_turns=4)
    obs, info = env.reset(options={"question_id": "tiny-6"})
    text = agent.act(obs, info)
    assert text == "<think>a</think><search>Sefa Quill fa</search>"
    assert agent.turn_info[0]["truncated"] and agent.turn_info[0]["closed"] == "</search>"
    obs, _, _, _, info = env.step(text)
    assert info["action_type"] == "search"
    # An open thought with no action is left for the env to report.
    text = agent.act(obs, info)
    assert text == "<think>the father is Aldo and" and agent.turn_info[0]["closed"] is None
    obs, _, _, _, info = env.step(text)
    assert info["action_type"] == "invalid" and info["truncated_turn"]
    # A model that stops without closing its answer gets it closed too (not a truncation).
    text = agent.act(obs, info)
    assert text == "<answer>Emery</answer>" and not agent.turn_info[0]["truncated"]
    assert env.step(text)[4]["answer"] == "Emery"
    assert agent.transcript == env.unwrapped.transcript


# ------------------------------------------------------------------------------ closed book
def test_closed_book_agent_answers_at_once_from_the_bare_question():
    fake = Fake(["Emery Quill</answer>"])
    agent = LLMAgent(fake, closed_book=True)
    assert agent.force_answer == "always"
    assert agent.system_prompt == CLOSED_BOOK_SYSTEM_PROMPTS["tags"]
    env = _env()
    obs, info = env.reset(options={"question_id": "tiny-6"})
    _, _, terminated, _, info = env.step(agent.act(obs, info))
    assert terminated and info["answer"] == "Emery Quill"
    msgs = fake.calls[0][0]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[1]["content"] == closed_book_prompt(env.unwrapped.sample.question).strip()
    assert "<search>" not in msgs[1]["content"] and msgs[2]["content"] == "<answer>"
    cont = Fake(["Lorn</answer>"])
    LLMAgent(cont, closed_book=True, mode="continuation", protocol="r3").act(
        obs, {**info, "turn": 0, "question": "Where?"}
    )
    assert cont.calls[0][0].endswith("Question: Where?\n<assistant>" + answer_prefix("r3"))


# ------------------------------------------------------------------------------ few-shot
def test_few_shot_examples_come_from_the_oracle_and_guard_the_asked_question():
    train = _env(max_turns=4)
    examples = few_shot_examples(train, 2, seed=0)
    assert len(examples) == 2 and all("<answer>" in e[-1]["content"] for e in examples)
    fake = Fake(["<answer>x</answer>"] * 4)
    agent = LLMAgent(fake, few_shot=examples)
    env = _env(max_turns=4)
    asked = next(
        i
        for i in range(6)
        if all(env.reset(options={"index": i})[1]["question"] not in e[0]["content"] for e in examples)
    )
    obs, info = env.reset(options={"index": asked})
    agent.act(obs, info)
    msgs = fake.calls[0][0]
    assert msgs[0]["role"] == "system" and msgs[1]["content"] == examples[0][0]["content"].strip()
    assert msgs[-1]["content"] == obs.strip()
    n_example = sum(len(e) for e in examples)
    assert len(msgs) >= 1 + n_example + 1
    cont = LLMAgent(Fake(["<answer>x</answer>"]), few_shot=examples, mode="continuation")
    cont.act(obs, info)
    assert "Worked examples:" in cont.backend.calls[0][0]
    used = examples[0][0]["content"]
    with pytest.raises(ValueError, match="few-shot examples"):
        agent.act(used, {"turn": 0})
    closed = few_shot_examples(train, 1, closed_book=True)
    assert [m["role"] for m in closed[0]] == ["user", "assistant"]
    assert closed[0][0]["content"].startswith("Question: ")
    with pytest.raises(ValueError, match="ends with the model"):
        LLMAgent(Fake([]), few_shot=[[{"role": "user", "content": "Q"}]])
    with pytest.raises(ValueError, match="asked for 99"):
        few_shot_examples(train, 99)


# ------------------------------------------------------------------------------ evaluation
def test_batched_evaluation_matches_one_env_episode_for_episode(backend, tmp_path):
    env = _env(max_turns=3)
    agent = LLMAgent(backend, sampling=SamplingParams(max_new_tokens=10))
    one = evaluate(env, agent, episodes=5, seed=2, trajectories=tmp_path / "one.jsonl")
    many = evaluate(env, agent, episodes=5, seed=2, num_envs=3, trajectories=tmp_path / "many.jsonl")

    def records(name):
        # Token counts differ (the prefix cache holds other sequences); the episodes do not.
        eps = read_trajectories(tmp_path / name).episodes
        for ep in eps:
            ep.pop("tokens")
            assert all(t.pop("agent")["prompt_tokens"] > 0 for t in ep["turns"])
        return sorted(eps, key=lambda ep: ep["seed"])

    assert records("one.jsonl") == records("many.jsonl")
    for name in ("em", "f1", "avg_steps", "invalid_rate", "answered", "episodes", "truncated_rate"):
        assert one[name] == pytest.approx(many[name]), name
    assert many["tokens"]["completion"] == one["tokens"]["completion"] > 0
    with pytest.raises(ValueError, match="act_batch"):
        evaluate(env, OracleAgent(env), episodes=2, num_envs=2)
    with pytest.raises(ValueError, match="num_envs"):
        evaluate(env, agent, episodes=2, num_envs=0)


class Clock:
    """The clock :mod:`hopgym.agents.evaluation` reads: it moves only when an agent acts, so the
    time limit's effect is exact, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(evaluation, "time", fake)
    return fake


class Slow:
    """A scripted agent that takes ``delay`` seconds (of ``clock``) a turn and never answers."""

    def __init__(self, delay: float, clock: Clock) -> None:
        self.delay, self.clock = delay, clock

    def reset(self) -> None:
        pass

    def act(self, obs, info):
        self.clock.advance(self.delay)
        return "<think>hm</think><search>Lorn</search>"


def test_time_limit_stops_cleanly_and_keeps_what_finished(tmp_path, clock):
    env = _env(max_turns=2)
    path = tmp_path / "t.jsonl"
    # 2 turns of 0.125 s an episode: 4 episodes fit in 1 s, the 5th is not started.
    m = evaluate(env, Slow(0.125, clock), episodes=50, seed=0, time_limit=1.0, trajectories=path)
    assert m["stopped"] == "time_limit" and m["episodes_requested"] == 50
    assert m["episodes"] == 4 and m["seconds"] == pytest.approx(1.0)
    assert len(read_trajectories(path).episodes) == m["episodes"] and m["avg_steps"] == 2.0
    nothing = evaluate(env, Slow(0.2, clock), episodes=3, time_limit=0.1)
    assert nothing["episodes"] == 0 and nothing["em"] is None
    full = evaluate(env, Slow(0.0, clock), episodes=3, time_limit=60)
    assert full["stopped"] is None and full["episodes"] == 3
    with pytest.raises(ValueError, match="time_limit"):
        evaluate(env, Slow(0.0, Clock()), episodes=1, time_limit=0)


def test_batched_evaluation_honours_the_time_limit(backend, clock):
    class Sleepy(LLMAgent):
        def act_batch(self, *args, **kwargs):
            clock.advance(0.125)
            return super().act_batch(*args, **kwargs)

    agent = Sleepy(backend, sampling=SamplingParams(max_new_tokens=4))
    m = evaluate(_env(max_turns=2), agent, episodes=40, num_envs=2, time_limit=0.75)
    # 6 batched turns fit in 0.75 s, for 2 envs whose episodes last 1 or 2 turns: 12 at most.
    assert m["stopped"] == "time_limit" and 1 <= m["episodes"] <= 12
