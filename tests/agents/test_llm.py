"""Tests for hopgym.agents.llm and hopgym.agents.prompts: no network, no downloads.

A tiny random Qwen2 model and a byte-level BPE tokenizer trained on the tiny corpus (built by
``tiny_llm.py``) stand in for a real model; the OpenAI-compatible backend talks to a stub HTTP
server on 127.0.0.1.
"""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import pytest
from tiny_llm import TEMPLATE, backend, model, one_thread, tokenizer  # noqa: F401  (fixtures)

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.llm import (
    BackendError,
    LLMAgent,
    OpenAIBackend,
    SamplingParams,
    TransformersBackend,
    make_llm_agent,
)
from hopgym.agents.prompts import (
    CONTINUE_MESSAGE,
    chat_messages,
    continuation_parts,
    default_system_prompt,
)
from hopgym.backends import close_open_tag, cut_at_stop

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


def _env(protocol: str = "tags", max_turns: int = 4) -> gym.Env:
    return gym.make("hopgym/Tiny-v1", reward=None, protocol=protocol, max_turns=max_turns)


GREEDY = SamplingParams(max_new_tokens=12)


# ------------------------------------------------------------------------------ prompts
def test_cut_at_stop_keeps_closing_tags_and_drops_env_headers():
    stops = ("</search>", "</route>", "</answer>")
    assert cut_at_stop("<search>a</search> junk </answer>", stops) == "<search>a</search>"
    assert cut_at_stop("no stop here", stops) == "no stop here"
    assert cut_at_stop("x</answer>y</search>", stops) == "x</answer>"
    r3 = ("\nThe retrieval documents:", "\nStep ")
    text = "The problem analysis: a\nThe retrieval query: b\nThe retrieval documents: (1) c"
    assert cut_at_stop(text, r3) == "The problem analysis: a\nThe retrieval query: b"


def test_close_open_tag_only_restores_an_open_tag():
    stops = ("</search>", "</route>", "</answer>")
    assert close_open_tag("<think>t</think><answer>Oslo", stops) == "<think>t</think><answer>Oslo</answer>"
    assert close_open_tag("<search>a</search>", stops) == "<search>a</search>"
    assert close_open_tag("The final answer: x", ("\nStep ",)) == "The final answer: x"


def test_chat_messages_from_env_transcript_alternate_roles():
    env = _env()
    obs, info = env.reset(options={"index": 0})
    env.step("<think>first I think</think>")  # think-only: empty observation, not recorded
    env.step("<search>Sefa Quill father</search>")
    t = env.unwrapped.transcript
    assert [m["role"] for m in t] == ["user", "assistant", "assistant", "user"]
    msgs = chat_messages(t, "SYS")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == obs.strip()
    assert msgs[3]["content"] == CONTINUE_MESSAGE
    assert msgs[5]["content"] == t[3]["content"].strip()
    assert msgs[5]["content"].startswith("<information>")
    assert chat_messages(t[:2], None, for_generation=False)[-1]["role"] == "assistant"
    assert chat_messages(t[:2], None)[-1] == {"role": "user", "content": CONTINUE_MESSAGE}
    prompt, rollout = continuation_parts(t)
    assert prompt == obs
    assert rollout == "".join(m["content"] for m in t[1:])
    with pytest.raises(ValueError, match="starts with the prompt"):
        chat_messages([{"role": "assistant", "content": "x"}])


def test_default_system_prompts_name_the_protocol_format():
    assert "<search>" in default_system_prompt("tags")
    assert "The retrieval query:" in default_system_prompt("r3")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"stop": "</a>"}, "stop"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


# ------------------------------------------------------------------------------ transformers
def test_transformers_backend_generates_strings(backend):
    out = backend.generate(
        [
            "Question: who founded Qelvor Dynamics?\n",
            [{"role": "user", "content": "Question: where is Lorn?"}],
        ],
        GREEDY,
    )
    assert len(out) == 2 and all(isinstance(t, str) and t for t in out)


def test_transformers_backend_batched_equals_unbatched_greedy(backend):
    prompts = [
        "Question: who founded Qelvor Dynamics?\n",
        "Lorn",
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "Who is the paternal grandfather of Sefa Quill?"},
        ],
    ]
    batched = backend.generate(prompts, GREEDY)
    single = [backend.generate([p], GREEDY)[0] for p in prompts]
    assert batched == single


def test_transformers_backend_respects_stop_strings(backend):
    prompt = "Question: who founded Qelvor Dynamics?\n"
    free = backend.generate([prompt], SamplingParams(max_new_tokens=24))[0]
    # Pick a stop string the model is known to write, after the start of its output.
    stop = next(
        free[i : i + 3]
        for i in range(2, len(free) - 3)
        if free[i : i + 3].strip() and free.find(free[i : i + 3]) == i
    )
    kept = f"</{stop}"  # closing-tag shape: kept; a plain stop string is dropped
    cut = backend.generate([prompt], SamplingParams(max_new_tokens=24, stop=(stop,)))[0]
    assert cut == free[: free.index(stop)]
    assert cut_at_stop(free + kept, (kept,)).endswith(kept)


def test_transformers_backend_seeded_sampling_is_reproducible_and_leaves_global_rng(backend):
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=3)
    state = torch.random.get_rng_state()
    a = backend.generate(["Lorn is", "Vashti is"], params)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert backend.generate(["Lorn is", "Vashti is"], params) == a
    others = {
        tuple(
            backend.generate(
                ["Lorn is", "Vashti is"], SamplingParams(temperature=1.0, max_new_tokens=10, seed=s)
            )
        )
        for s in range(4, 8)
    }
    assert len(others | {tuple(a)}) > 1


def test_transformers_backend_encode_has_no_double_bos(tokenizer, model):
    tok = tokenizer
    tok_bos = type(tok)(
        tokenizer_object=tok.backend_tokenizer, pad_token="<|pad|>", eos_token="<|end|>", bos_token="<|end|>"
    )
    tok_bos.chat_template = "<|end|>" + TEMPLATE
    be = TransformersBackend(model, tok_bos, device="cpu")
    ids = be.encode([{"role": "user", "content": "hi"}])
    assert ids[0] == tok_bos.bos_token_id and ids[1] != tok_bos.bos_token_id


def test_backend_without_template_rejects_chat(model, tokenizer):
    tok = type(tokenizer)(
        tokenizer_object=tokenizer.backend_tokenizer, pad_token="<|pad|>", eos_token="<|end|>"
    )
    be = TransformersBackend(model, tok, device="cpu")
    assert not be.has_chat_template
    with pytest.raises(ValueError, match="no chat template"):
        be.generate([[{"role": "user", "content": "x"}]], GREEDY)
    with pytest.raises(ValueError, match="mode='continuation'"):
        LLMAgent(be, mode="chat")
    agent = LLMAgent(be, system_prompt="SYS")
    assert agent.mode == "continuation"
    obs, info = _env().reset(options={"index": 1})
    agent.reset()
    agent.observe(obs, info)
    assert agent.build_prompt() == "SYS\n\n" + obs


# ------------------------------------------------------------------------------ agent
@pytest.mark.parametrize("protocol", ["tags", "r3"])
@pytest.mark.parametrize("mode", ["chat", "continuation"])
def test_llm_agent_episode_runs_and_mirrors_env_transcript(backend, tokenizer, protocol, mode):
    env = _env(protocol, max_turns=3)
    agent = LLMAgent(
        backend,
        protocol=protocol,
        sampling=SamplingParams(max_new_tokens=10),
        mode=mode,
        force_answer="never",
    )
    agent.reset()
    obs, info = env.reset(seed=0)
    done, steps = False, 0
    while not done:
        action = agent.act(obs, info)
        assert isinstance(action, str)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        steps += 1
        assert agent.transcript == env.unwrapped.transcript[: len(agent.transcript)]
    assert steps <= 3
    t = env.unwrapped.transcript
    # The agent has seen everything but a last observation after its final (truncated) turn.
    assert agent.transcript == t[: len(agent.transcript)]
    assert len(t) - len(agent.transcript) in (0, 1)
    prompt = agent.build_prompt()
    if mode == "chat":
        assert prompt == chat_messages(agent.transcript, default_system_prompt(protocol))
    else:
        head = tokenizer.apply_chat_template(
            [
                {"role": "system", "content": default_system_prompt(protocol)},
                {"role": "user", "content": t[0]["content"]},
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert prompt == head + "".join(m["content"] for m in agent.transcript[1:])


class Scripted:
    """A fake backend that plays fixed turns and records what it was asked."""

    has_chat_template = True
    supports_chat = True

    def __init__(self, turns: list[str]) -> None:
        self.turns, self.calls = list(turns), []

    def apply_chat_template(self, messages, *, add_generation_prompt=True):
        return "|".join(f"{m['role']}:{m['content']}" for m in messages) + "|assistant:"

    def generate(self, prompts, params):
        self.calls.append((prompts, params))
        return [self.turns.pop(0) for _ in prompts]


def test_llm_agent_plays_a_valid_episode_to_termination():
    backend = Scripted(
        [
            "<think>who is the father?</think><search>Sefa Quill father</search>"
            "<information>made up</information>",
            "<think>his father</think><search>Aldo Quill father</search>",
            "<think>done</think><answer>Emery Quill</answer> trailing",
        ]
    )
    env = _env(max_turns=5)
    agent = LLMAgent(backend, sampling=SamplingParams(seed=1))
    obs, info = env.reset(options={"question_id": "tiny-6"})
    agent.reset()
    kinds, terminated = [], False
    while not terminated:
        obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
        kinds.append(info["action_type"])
        assert not truncated
    assert kinds == ["search", "search", "answer"]
    assert info["answer"] == "Emery Quill"
    assert agent.transcript == env.unwrapped.transcript
    first_messages, params = backend.calls[0]
    assert first_messages[0][0] == {"role": "system", "content": default_system_prompt("tags")}
    assert params.stop == ("</search>", "</route>", "</answer>")
    seeds = [p.seed for _, p in backend.calls]
    assert len(set(seeds)) == 3  # one derived seed per call, from the agent's seed
    again = Scripted(["<answer>x</answer>"] * 3)
    a2 = LLMAgent(again, sampling=SamplingParams(seed=1))
    for _ in range(3):
        a2.act("Q", {"turn": 0})
    assert [p.seed for _, p in again.calls] == seeds


def test_llm_agent_continuation_without_template_is_raw_text():
    backend = Scripted(["<search>Lorn</search>", "<answer>9,000</answer>"])
    agent = LLMAgent(backend, mode="continuation", use_chat_template=False, system_prompt="")
    agent.act("PROMPT\n", {"turn": 0})
    agent.act("\n<information>docs</information>\n", {"turn": 1})
    assert backend.calls[1][0] == ["PROMPT\n<search>Lorn</search>\n<information>docs</information>\n"]


def test_llm_agent_new_episode_starts_a_new_conversation():
    backend = Scripted(["<search>a</search>", "<search>b</search>"])
    agent = LLMAgent(backend)
    agent.act("P1", {"turn": 0})
    agent.act("P2", {"turn": 0, "question": "q"})
    assert agent.transcript == [
        {"role": "user", "content": "P2"},
        {"role": "assistant", "content": "<search>b</search>"},
    ]


def test_act_batch_equals_act_for_greedy_decoding(backend):
    envs = [_env(max_turns=3) for _ in range(3)]
    firsts = [e.reset(options={"index": i}) for i, e in enumerate(envs)]
    batch_agent = LLMAgent(backend, sampling=GREEDY)
    texts = batch_agent.act_batch([o for o, _ in firsts], [i for _, i in firsts])
    singles = []
    for obs, info in firsts:
        agent = LLMAgent(backend, sampling=GREEDY)
        singles.append(agent.act(obs, info))
    assert texts == singles
    steps = [e.step(t) for e, t in zip(envs, texts, strict=True)]
    texts2 = batch_agent.act_batch([s[0] for s in steps], [s[4] for s in steps], active=[True, False, True])
    assert texts2[1] == ""
    for i in (0, 2):
        assert batch_agent.transcripts[i] == envs[i].unwrapped.transcript + [
            {"role": "assistant", "content": texts2[i]}
        ]


def test_act_batch_over_a_sync_vector_env(backend):
    n = 2
    venv = gym.vector.SyncVectorEnv(
        [lambda: _env(max_turns=2) for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    agent = LLMAgent(backend, sampling=SamplingParams(max_new_tokens=8))
    obs, infos = venv.reset(seed=0)
    episodes = 0
    for _ in range(5):
        actions = agent.act_batch(obs, infos)
        assert len(actions) == n and all(isinstance(a, str) for a in actions)
        obs, _, term, trunc, infos = venv.step(actions)
        episodes += int((term | trunc).sum())
        for i in range(n):
            if not (term[i] or trunc[i]):
                assert agent.transcripts[i][-1]["role"] == "assistant"
                sub = venv.envs[i].unwrapped.transcript
                assert agent.transcripts[i] == sub[: len(agent.transcripts[i])]
    assert episodes >= n  # the 2-turn budget ends episodes; new ones start without errors
    venv.close()


def test_make_llm_agent_checks_arguments():
    with pytest.raises(ValueError, match="unknown backend"):
        make_llm_agent("m", backend="tgi")
    with pytest.raises(ValueError, match="base_url"):
        make_llm_agent("m", backend="openai")
    agent = make_llm_agent(
        "m",
        backend="openai",
        base_url="http://127.0.0.1:9/v1",
        protocol="r3",
        temperature=0.5,
        max_new_tokens=7,
        seed=3,
    )
    assert agent.mode == "chat" and agent.sampling.max_new_tokens == 7
    assert agent.stop == ("\nThe retrieval documents:", "\nStep ")


def test_make_llm_agent_loads_a_saved_model(tmp_path, model, tokenizer):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    agent = make_llm_agent(str(tmp_path), max_new_tokens=5, device="cpu")
    assert isinstance(agent.backend, TransformersBackend)
    assert agent.backend.model.dtype == torch.float32
    assert isinstance(agent.act("Question: where is Lorn?\n", {"turn": 0}), str)


# ------------------------------------------------------------------------------ HTTP stub
class _Stub:
    """A canned OpenAI-compatible server; ``fail`` first replies 503, ``hang`` never replies."""

    def __init__(self, *, fail: int = 0, hang: bool = False, reply: str = "") -> None:
        self.requests: list[tuple[str, dict, dict]] = []
        self.fail, self.hang, self.reply = fail, hang, reply
        self.release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body, dict(self.headers)))
                if stub.hang:
                    stub.release.wait(10)
                    return
                if stub.fail > 0:
                    stub.fail -= 1
                    self.send_response(503)
                    self.end_headers()
                    self.wfile.write(b"busy")
                    return
                if self.path.endswith("/chat/completions"):
                    text = stub.reply or body["messages"][-1]["content"][:5]
                    data = {
                        "choices": [
                            {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ]
                    }
                else:
                    data = {"choices": [{"text": stub.reply or "raw", "finish_reason": "length"}]}
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    servers: list[_Stub] = []

    def start(**kwargs) -> _Stub:
        servers.append(_Stub(**kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_openai_backend_chat_and_completions(stub):
    server = stub(reply="<think>t</think><search>Acme founder")
    be = OpenAIBackend(server.url, "served-model", api_key="k", max_concurrency=2)
    params = SamplingParams(max_new_tokens=9, stop=("</search>", "</answer>"), seed=5)
    out = be.generate(
        [[{"role": "user", "content": "q1"}], [{"role": "user", "content": "q2"}], "raw prompt"], params
    )
    # The server drops the stop string; the backend restores the closing tag on finish "stop".
    assert out[:2] == ["<think>t</think><search>Acme founder</search>"] * 2
    assert out[2] == "<think>t</think><search>Acme founder"  # finish "length": left as is
    paths = sorted(p for p, _, _ in server.requests)
    assert paths == ["/v1/chat/completions", "/v1/chat/completions", "/v1/completions"]
    chat = [b for p, b, _ in server.requests if p.endswith("chat/completions")]
    assert {b["messages"][0]["content"] for b in chat} == {"q1", "q2"}
    assert {b["seed"] for b in chat} == {5, 6}
    body = chat[0]
    assert body["model"] == "served-model" and body["max_tokens"] == 9
    assert body["stop"] == ["</search>", "</answer>"] and body["temperature"] == 0.0
    raw = next(b for p, b, _ in server.requests if p == "/v1/completions")
    assert raw["prompt"] == "raw prompt"
    assert all(h.get("Authorization") == "Bearer k" for _, _, h in server.requests)


def test_openai_backend_retries_then_succeeds(stub):
    server = stub(fail=2, reply="<answer>Oslo</answer>")
    be = OpenAIBackend(server.url + "/v1/", "m", retries=2, backoff=0.01)
    assert be.generate([[{"role": "user", "content": "q"}]], GREEDY) == ["<answer>Oslo</answer>"]
    assert len(server.requests) == 3


def test_openai_backend_gives_up_after_retries(stub):
    server = stub(fail=5)
    be = OpenAIBackend(server.url, "m", retries=1, backoff=0.01)
    with pytest.raises(BackendError, match=r"after 2 attempt\(s\): HTTP 503"):
        be.generate(["x"], GREEDY)


def test_openai_backend_times_out_with_a_clear_error(stub):
    server = stub(hang=True)
    be = OpenAIBackend(server.url, "m", timeout=0.3, retries=1, backoff=0.01)
    with pytest.raises(BackendError, match=r"no reply within 0.3 s"):  # the timeout ended both attempts
        be.generate([[{"role": "user", "content": "q"}]], GREEDY)
    assert len(server.requests) == 2


def test_openai_backend_connection_refused_and_bad_status(stub):
    be = OpenAIBackend("http://127.0.0.1:9", "m", retries=0, timeout=2)
    with pytest.raises(BackendError, match="cannot connect|connection failed"):
        be.generate(["x"], GREEDY)
    with pytest.raises(ValueError, match="http"):
        OpenAIBackend("127.0.0.1:8000", "m")


def test_llm_agent_over_http_plays_the_env(stub):
    server = stub(reply="<think>t</think><answer>Emery Quill")
    agent = make_llm_agent("m", backend="openai", base_url=server.url)
    env = _env()
    obs, info = env.reset(options={"question_id": "tiny-6"})
    obs, _, terminated, _, info = env.step(agent.act(obs, info))
    assert terminated and info["answer"] == "Emery Quill"
    _, body, _ = server.requests[0]
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][1]["content"] == env.unwrapped.transcript[0]["content"].strip()


# ------------------------------------------------------------------------------ example script
def test_llm_eval_example_runs_batched_episodes(tmp_path, model, tokenizer):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "llm_eval.py"
    spec = importlib.util.spec_from_file_location("llm_eval_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    metrics = module.main(
        [
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            "reward=null",
            "max_turns=2",
            "--model",
            str(tmp_path / "m"),
            "--episodes",
            "3",
            "--num-envs",
            "2",
            "--max-new-tokens",
            "6",
            "--json",
            str(tmp_path / "m.json"),
            "--trajectories",
            str(tmp_path / "t.jsonl"),
        ]
    )
    assert metrics["episodes"] == 3
    assert json.loads((tmp_path / "m.json").read_text())["episodes"] == 3
    header, *lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(header)["format"] == "hopgym-trajectories"
    assert len(lines) == 3 and len({json.loads(x)["question_id"] for x in lines}) == 3
    assert all(1 <= json.loads(x)["steps"] <= 2 for x in lines)


def test_gguf_paths_resolve_to_directory_and_file(tmp_path):
    from hopgym.backends.transformers_backend import _resolve_gguf

    (tmp_path / "m.Q4.gguf").write_bytes(b"")
    assert _resolve_gguf(str(tmp_path), None) == (str(tmp_path), "m.Q4.gguf")
    assert _resolve_gguf(str(tmp_path / "m.Q4.gguf"), None) == (str(tmp_path), "m.Q4.gguf")
    assert _resolve_gguf("org/model", None) == ("org/model", None)
    (tmp_path / "other.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="several .gguf files"):
        _resolve_gguf(str(tmp_path), None)


def test_vllm_backend_names_the_extra_when_missing():
    import importlib.util

    from hopgym.agents.llm import VLLMBackend
    from hopgym.errors import DependencyNotInstalled

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    with pytest.raises(DependencyNotInstalled, match=r"hopgym\[vllm\]"):
        VLLMBackend("some/model")
    with pytest.raises(DependencyNotInstalled, match=r"hopgym\[vllm\]"):
        make_llm_agent("some/model", backend="vllm")
