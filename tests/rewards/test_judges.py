"""Judges: protocol, parsing, CallableJudge, OpenAIJudge on a local stub, TransformersJudge."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hopgym.backends import BackendError, SamplingParams
from hopgym.httpclient import HTTPClient
from hopgym.rewards.judges import (
    CallableJudge,
    Judge,
    JudgeError,
    OpenAIJudge,
    PromptJudge,
    TransformersJudge,
    answer_prompt,
    as_score,
    judge_answers,
    judge_relevances,
    parse_relevance,
    parse_verdict,
    relevance_prompt,
)


# ----------------------------------------------------------------------------- pure parts
@pytest.mark.parametrize(("value", "score"), [(True, 1.0), (False, 0.0), (0.3, 0.3), (-2, 0.0), (5, 1.0)])
def test_as_score(value, score):
    assert as_score(value) == score


@pytest.mark.parametrize("value", [float("nan"), "yes", None, [1]])
def test_as_score_rejects(value):
    with pytest.raises(JudgeError):
        as_score(value)


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("yes", 1.0),
        ("Yes.", 1.0),
        ("  NO", 0.0),
        ("Correct", 1.0),
        ("incorrect!", 0.0),
        ("<think>no wait... yes</think>\nyes", 1.0),
    ],
)
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) == verdict


@pytest.mark.parametrize("reply", ["", "maybe", "I think yes"])
def test_parse_verdict_rejects(reply):
    with pytest.raises(JudgeError, match="yes/no"):
        parse_verdict(reply)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("8", 0.8),
        ("10", 1.0),
        ("0", 0.0),
        ("1", 0.1),
        ("0.7", 0.7),
        ("1.0", 1.0),
        ("7.5", 0.8),
        ("Score: 3/10", 0.3),
        ("42", 1.0),
        ("<think>maybe 2</think> 9", 0.9),
    ],
)
def test_parse_relevance(reply, score):
    assert parse_relevance(reply) == score


def test_prompts_carry_their_inputs_and_cut_long_documents():
    p = answer_prompt("Who?", "Ann", ["Ann Lee", "A. Lee"])
    assert "Who?" in p and "<<<Ann>>>" in p and "Ann Lee | A. Lee" in p
    r = relevance_prompt("Q?", "", "q", ["x" * 5000, "short"])
    assert "Reasoning so far: -" in r and "[2] short" in r and "x" * 2001 not in r


def test_callable_judge_and_batch_helpers():
    j = CallableJudge(lambda q, p, g: p in g, lambda q, r, s, d: len(d) / 10)
    assert isinstance(j, Judge)
    assert judge_answers(j, [("q", "a", ("a",)), ("q", "b", ("a",))]) == [1.0, 0.0]
    assert judge_relevances(j, [("q", "r", "s", ["d", "e"])]) == [0.2]
    only_answers = CallableJudge(answer_fn=lambda q, p, g: True)
    with pytest.raises(JudgeError, match="no relevance_fn"):
        only_answers.judge_relevance("q", "r", "s", [])
    with pytest.raises(ValueError, match="needs answer_fn"):
        CallableJudge()
    with pytest.raises(TypeError, match="callable"):
        CallableJudge(answer_fn="yes")


# ----------------------------------------------------------------------------- PromptJudge
class ScriptedBackend:
    """A real backend object: answers from the prompt's text, records what it was asked."""

    def __init__(
        self,
        *,
        chat: bool = True,
        fail_on: str | None = None,
        delay: float = 0.0,
        barrier: threading.Barrier | None = None,
    ):
        self.supports_chat = self.has_chat_template = chat
        self.fail_on, self.delay = fail_on, delay
        self.barrier = barrier  # every call waits here: passes only if its parties run at once
        self.calls: list[tuple[list, SamplingParams]] = []
        self.lock = threading.Lock()

    def __getstate__(self):  # picklable, as backends of judges held by envs must be
        return {k: v for k, v in self.__dict__.items() if k not in ("lock", "barrier")}

    def __setstate__(self, state):
        self.__dict__.update(state, lock=threading.Lock(), barrier=None)

    def apply_chat_template(self, messages, *, add_generation_prompt=True):
        return "".join(m["content"] for m in messages)

    def generate(self, prompts, params):
        with self.lock:
            self.calls.append((list(prompts), params))
        if self.barrier is not None:
            self.barrier.wait()
        time.sleep(self.delay)
        out = []
        for p in prompts:
            text = p[-1]["content"] if isinstance(p, list) else p
            if self.fail_on and self.fail_on in text:
                raise BackendError(f"server said no to {self.fail_on}")
            out.append(
                "7"
                if "Search query:" in text
                else "<think>checking</think>yes"
                if "<<<Cardell>>>" in text
                else "no"
            )
        return out


def test_prompt_judge_formats_prompts_and_parses_verdicts():
    backend = ScriptedBackend()
    judge = PromptJudge(backend)
    assert isinstance(judge, Judge)
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
    assert judge.judge_answer("Where?", "Lorn", ["Cardell"]) == 0.0
    assert judge.judge_relevance("Where?", "r", "q", ["doc"]) == 0.7
    (prompts, params), *_ = backend.calls
    assert prompts == [[{"role": "user", "content": answer_prompt("Where?", "Cardell", ["Cardell"])}]]
    assert params == SamplingParams(max_new_tokens=16) and params.greedy


def test_prompt_judge_sends_raw_text_to_a_backend_without_chat():
    backend = ScriptedBackend(chat=False)
    judge = PromptJudge(backend, params=SamplingParams(max_new_tokens=4, seed=3))
    assert judge.judge_relevance("Q?", "", "q", ["d"]) == 0.7
    ((prompts, params),) = backend.calls
    assert prompts == [relevance_prompt("Q?", "", "q", ["d"]) + "\n"]
    assert params.max_new_tokens == 4 and params.seed == 3


def test_prompt_judge_caches_and_batches_distinct_prompts_on_threads():
    # The 4 distinct prompts meet at a barrier of 4: one after another, the first would wait
    # alone until the barrier's timeout breaks it (BrokenBarrierError, then a JudgeError).
    backend = ScriptedBackend(barrier=threading.Barrier(4, timeout=30))
    judge = PromptJudge(backend, max_workers=4, cache_size=8)
    items = [("Where?", p, ["Cardell"]) for p in ("Cardell", "Lorn", "Halvik", "Vashti")] * 2
    assert judge.judge_answers(items) == [1.0, 0.0, 0.0, 0.0] * 2
    assert not backend.barrier.broken
    assert len(backend.calls) == 4 and judge.calls == 4
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
    assert len(backend.calls) == 4 and judge.cache_hits == 1
    serial = PromptJudge(ScriptedBackend())
    assert serial.judge_relevances([("q", "r", "s", ["d"])] * 3) == [0.7] * 3
    assert serial.calls == 1


def test_prompt_judge_backend_errors_raise_or_fall_back_and_are_not_cached():
    strict = PromptJudge(ScriptedBackend(fail_on="Halvik"))
    with pytest.raises(JudgeError, match="BackendError: server said no to Halvik"):
        strict.judge_answer("Where?", "Halvik", ["Cardell"])
    lenient = PromptJudge(ScriptedBackend(fail_on="Halvik"), on_error=0.5)
    with pytest.warns(RuntimeWarning, match="scoring 0.5 instead"):
        assert lenient.judge_answers([("Where?", "Halvik", ["C"]), ("Where?", "Cardell", ["Cardell"])]) == [
            0.5,
            1.0,
        ]
    assert lenient.failures == 1 and len(lenient._cache) == 1


def test_prompt_judge_pickles_with_its_backend_and_cache():
    judge = PromptJudge(ScriptedBackend(chat=False))
    judge.judge_answer("Where?", "Cardell", ["Cardell"])
    clone = pickle.loads(pickle.dumps(judge))
    assert clone.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0 and clone.cache_hits == 1


def test_prompt_judge_checks_its_arguments():
    with pytest.raises(TypeError, match="generate"):
        PromptJudge(object())
    with pytest.raises(TypeError, match="SamplingParams"):
        PromptJudge(ScriptedBackend(), params={"temperature": 0})
    with pytest.raises(ValueError, match="max_workers"):
        PromptJudge(ScriptedBackend(), max_workers=0)


# ----------------------------------------------------------------------------- stub server
class Stub:
    """A local OpenAI-compatible server with scripted failures."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.statuses: list[int] = []  # statuses to send before answering normally
        self.delay = 0.0
        self.reply = lambda prompt: (
            "7" if "Search query:" in prompt else "yes" if "<<<Cardell>>>" in prompt else "no"
        )
        self.raw: bytes | None = None
        self.retry_after: str | None = None
        self.barrier: threading.Barrier | None = None  # requests wait here before answering
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.requests.append(
                        {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                    )
                    status = stub.statuses.pop(0) if stub.statuses else 200
                    stub.active += 1
                    stub.max_active = max(stub.max_active, stub.active)
                try:
                    if stub.barrier is not None:
                        stub.barrier.wait()
                    time.sleep(stub.delay)
                    if status != 200:
                        self.send_response(status)
                        if stub.retry_after is not None:
                            self.send_header("Retry-After", stub.retry_after)
                        self.end_headers()
                        return
                    content = (
                        stub.raw
                        if stub.raw is not None
                        else json.dumps(
                            {
                                "choices": [
                                    {
                                        "message": {
                                            "role": "assistant",
                                            "content": stub.reply(body["messages"][0]["content"]),
                                        }
                                    }
                                ]
                            }
                        ).encode()
                    )
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left
                finally:
                    with stub.lock:
                        stub.active -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    s = Stub()
    yield s
    s.close()


def judge_for(stub: Stub, **kw) -> OpenAIJudge:
    kw.setdefault("backoff", 0.0)
    kw.setdefault("timeout", 5.0)
    return OpenAIJudge(stub.url, "tiny-judge", **kw)


def test_openai_judge_answers_and_relevance(stub):
    judge = judge_for(stub, api_key="sk-test")
    assert isinstance(judge, Judge)
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
    assert judge.judge_relevance("Where?", "r", "q", ["doc"]) == 0.7
    req = stub.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "tiny-judge" and req["body"]["temperature"] == 0.0
    assert "sk-test" not in repr(judge)


def test_openai_judge_caches_replies(stub):
    judge = judge_for(stub, cache_size=2)
    for _ in range(3):
        judge.judge_answer("Where?", "Cardell", ["Cardell"])
    assert len(stub.requests) == 1 and judge.calls == 1 and judge.cache_hits == 2
    judge.judge_answer("Where?", "A", ["Cardell"])
    judge.judge_answer("Where?", "B", ["Cardell"])  # evicts the oldest (LRU of 2)
    judge.judge_answer("Where?", "Cardell", ["Cardell"])
    assert len(stub.requests) == 4
    no_cache = judge_for(stub, cache_size=0)
    no_cache.judge_answer("Where?", "Cardell", ["Cardell"])
    no_cache.judge_answer("Where?", "Cardell", ["Cardell"])
    assert len(stub.requests) == 6


def test_openai_judge_batches_on_threads_and_dedupes(stub):
    # All 4 distinct requests must be in flight at once to pass the server's barrier of 4.
    stub.barrier = threading.Barrier(4, timeout=30)
    judge = judge_for(stub, max_workers=4, timeout=60.0)
    items = [("Where?", p, ["Cardell"]) for p in ("Cardell", "Lorn", "Halvik", "Vashti")] * 2
    verdicts = judge.judge_answers(items)
    assert verdicts == [1.0, 0.0, 0.0, 0.0] * 2
    assert len(stub.requests) == 4  # duplicates asked once
    assert stub.max_active == 4 and not stub.barrier.broken


def test_openai_judge_retries_transient_errors(stub):
    stub.statuses = [503, 429]
    judge = judge_for(stub, retries=2)
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
    assert len(stub.requests) == 3


def test_openai_judge_gives_up_after_retries_and_raises(stub):
    stub.statuses = [500, 500, 500]
    judge = judge_for(stub, retries=2)
    with pytest.raises(JudgeError, match="failed after 3 attempt"):
        judge.judge_answer("Where?", "Cardell", ["Cardell"])


def test_openai_judge_takes_no_old_argument_names():
    # hopgym keeps no shims before its first release: max_retries/retry_backoff are gone.
    for old in ("max_retries", "retry_backoff"):
        with pytest.raises(TypeError, match=old):
            OpenAIJudge("http://127.0.0.1:1/v1", "m", **{old: 1})
        assert not hasattr(OpenAIJudge, old)


def test_openai_judge_honours_retry_after(stub, monkeypatch):
    stub.statuses = [429]
    stub.retry_after = "0.2"
    waits: list[float] = []
    backoff_delay = HTTPClient.backoff_delay

    def recorded(self, retry, retry_after=None):  # the wait the client then sleeps
        waits.append(backoff_delay(self, retry, retry_after))
        return waits[-1]

    monkeypatch.setattr(HTTPClient, "backoff_delay", recorded)
    judge = judge_for(stub, retries=1)  # backoff=0: any wait comes from Retry-After
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
    assert waits == [0.2] and len(stub.requests) == 2


def test_openai_judge_does_not_retry_client_errors(stub):
    stub.statuses = [400]
    judge = judge_for(stub, retries=3)
    with pytest.raises(JudgeError, match="HTTP 400"):
        judge.judge_answer("Where?", "Cardell", ["Cardell"])
    assert len(stub.requests) == 1


def test_openai_judge_timeout_then_fallback_score(stub):
    stub.delay = 0.5
    judge = judge_for(stub, timeout=0.1, retries=1, on_error=0.25)
    with pytest.warns(RuntimeWarning, match="scoring 0.25 instead"):
        assert judge.judge_relevance("q", "r", "s", ["d"]) == 0.25
    assert judge.failures == 1 and len(judge._cache) == 0  # failures are not cached


def test_openai_judge_unreachable_endpoint():
    judge = OpenAIJudge("http://127.0.0.1:9/v1", "m", timeout=0.5, retries=0)
    with pytest.raises(JudgeError, match="failed after 1 attempt"):
        judge.judge_answer("q", "a", ["b"])


def test_openai_judge_malformed_and_unparseable_replies(stub):
    stub.raw = b'{"nope": 1}'
    judge = judge_for(stub)
    with pytest.raises(JudgeError, match="no choices"):
        judge.judge_answer("q", "a", ["b"])
    stub.raw = None
    stub.reply = lambda prompt: "perhaps"
    with pytest.raises(JudgeError, match="yes/no"):
        judge.judge_answer("q", "a2", ["b"])
    lenient = judge_for(stub, on_error=0.0)
    with pytest.warns(RuntimeWarning):
        assert lenient.judge_answer("q", "a3", ["b"]) == 0.0


def test_openai_judge_pickles_and_deepcopies_with_its_cache(stub):
    judge = judge_for(stub)
    judge.judge_answer("Where?", "Cardell", ["Cardell"])
    for clone in (pickle.loads(pickle.dumps(judge)), copy.deepcopy(judge)):
        assert clone.judge_answer("Where?", "Cardell", ["Cardell"]) == 1.0
        assert clone.cache_hits == 1
    assert len(stub.requests) == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on_error": "ignore"}, "on_error"),
        ({"on_error": 2.0}, "on_error"),
        ({"timeout": 0}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"max_workers": 0}, "max_workers"),
        ({"cache_size": -1}, "cache_size"),
    ],
)
def test_openai_judge_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OpenAIJudge("http://127.0.0.1:1/v1", "m", **kwargs)
    with pytest.raises(ValueError, match="http"):
        OpenAIJudge("127.0.0.1:1/v1", "m")


# ----------------------------------------------------------------------------- transformers
def test_import_does_not_pull_heavy_dependencies():
    code = (
        "import sys, hopgym.rewards, hopgym.rewards.trl; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def tiny_lm_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer

    path = tmp_path_factory.mktemp("tiny_judge")
    texts = [
        answer_prompt("Where?", "Cardell", ["Cardell"]),
        relevance_prompt("q", "r", "s", ["d"]),
        "yes no 0 1 2 3 4 5 6 7 8 9 10",
    ]
    tokenizer = build_tokenizer(texts)
    model = build_model(
        TinyLMConfig(arch="qwen2", layers=1, hidden=32, heads=2, ffn=64, max_positions=512), tokenizer
    )
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return str(path)


@pytest.mark.slow  # importing torch + transformers takes 10-20 s here
@pytest.mark.filterwarnings("ignore:TransformersJudge failed:RuntimeWarning")
def test_transformers_judge_on_a_local_tiny_model(tiny_lm_dir):
    judge = TransformersJudge(tiny_lm_dir, max_new_tokens=3, on_error=0.5)
    assert not judge.loaded  # loaded lazily
    # A random tiny model's reply is noise: either a parsed verdict or the fallback.
    v = judge.judge_answer("Where?", "Cardell", ["Cardell"])
    assert v in (0.0, 0.5, 1.0) and judge.loaded
    assert judge.judge_answer("Where?", "Cardell", ["Cardell"]) == v and judge.cache_hits == 1
    clone = pickle.loads(pickle.dumps(judge))
    assert not clone.loaded and clone.judge_answer("Where?", "Cardell", ["Cardell"]) == v
    judge._complete = lambda prompt: "9"  # the parsing path, deterministically
    assert judge.judge_relevance("q", "r", "s", ["d"]) == 0.9


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TransformersJudge failed:RuntimeWarning")
def test_transformers_judge_runs_on_the_transformers_backend(tiny_lm_dir):
    from hopgym.backends import TransformersBackend

    judge = TransformersJudge(tiny_lm_dir, max_new_tokens=3, on_error=0.5)
    judge.judge_answer("Where?", "Cardell", ["Cardell"])
    backend = judge.backend.get()
    assert isinstance(backend, TransformersBackend)
    prompt = answer_prompt("Where?", "Cardell", ["Cardell"])
    message = [{"role": "user", "content": prompt}] if backend.supports_chat else prompt + "\n"
    # The judge's cached reply is exactly what the shared backend generates for its prompt.
    assert judge._cache[prompt] == backend.generate([message], SamplingParams(max_new_tokens=3))[0]


@pytest.mark.slow
def test_transformers_judge_raises_on_unparseable_by_default(tiny_lm_dir, monkeypatch):
    judge = TransformersJudge(tiny_lm_dir)
    monkeypatch.setattr(judge, "_complete", lambda prompt: "blah")
    with pytest.raises(JudgeError, match="yes/no"):
        judge.judge_answer("q", "a", ["b"])


@pytest.mark.slow
def test_transformers_judge_missing_model_path():
    pytest.importorskip("transformers")
    judge = TransformersJudge("/nonexistent/model/dir")
    with pytest.raises(JudgeError):
        judge.judge_answer("q", "a", ["b"])
