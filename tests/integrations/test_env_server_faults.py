"""The env server under bad and hostile requests (issue 38): every bad body gets a 400 naming
its field and leaves no session behind; a session answers only its creator; a WebSocket the
server ends gets an error message and a close code that says why; a step runs off the event
loop within a time budget (issue 36)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

import hopgym  # noqa: E402, F401 - registers the ids
from hopgym.integrations import _env_sessions  # noqa: E402
from hopgym.integrations.openenv import EnvServer  # noqa: E402

ENV_ID = "hopgym/Tiny-v1"


class Client:
    """One keep-alive HTTP connection to the server (1,000 requests without 1,000 connects)."""

    def __init__(self, url: str) -> None:
        self.netloc = urllib.parse.urlsplit(url).netloc
        self.conn = http.client.HTTPConnection(self.netloc, timeout=30)

    def call(
        self, method: str, path: str, payload: Any = None, raw: bytes | None = None, **headers: str
    ) -> tuple[int, Any]:
        body = raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
        hdrs = {"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}}
        try:
            self.conn.request(method, path, body, hdrs)
            resp = self.conn.getresponse()
        except (http.client.HTTPException, OSError):  # the server closed a kept-alive connection
            self.conn = http.client.HTTPConnection(self.netloc, timeout=30)
            self.conn.request(method, path, body, hdrs)
            resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read())


def ws_connect(srv: EnvServer) -> Any:
    from websockets.sync.client import connect

    return connect(srv.url.replace("http", "ws", 1) + "/ws", open_timeout=10)


def ws_call(ws: Any, message: Any) -> dict[str, Any]:
    ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(ws.recv(timeout=30))


@pytest.fixture(scope="module")
def server():
    with EnvServer(env=ENV_ID, port=0, max_sessions=8).start() as srv:
        yield srv


@pytest.fixture()
def client(server):
    c = Client(server.url)
    yield c
    assert c.call("GET", "/health")[1]["sessions"] == 0  # every test leaves no session behind
    c.conn.close()


DEEP = b'{"options": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001
BAD_RESETS = [
    ({"env_options": {"top_k": 0}}, "env_options", "top_k"),
    ({"env_options": {"max_turns": "lots"}}, "env_options", "max_turns"),
    ({"env_options": {"protocol": "nope"}}, "env_options", "protocol"),
    ({"env_options": [1]}, "env_options", "object"),
    ({"session_id": ["a"]}, "session_id", "string"),
    ({"session_id": {"a": 1}}, "session_id", "string"),
    ({"options": {"index": [1]}}, "options.index", "int"),
    ({"options": {"index": -1}}, "options.index", "int"),
    ({"options": {"question_id": ["x"]}}, "options.question_id", "string"),
    ({"options": {"question_id": "no-such-question"}}, "options", "no-such-question"),
    ({"options": "index=1"}, "options", "object"),
    ({"episode_id": 5}, "episode_id", "string"),
    ({"seed": 1.5}, "seed", "int"),
    ({"seed": 2**70}, "seed", "int"),
    ({"bogus": 1}, "bogus", "reset takes"),
    (DEEP, "body", "deeper than 32"),
    (b"[" * 60_000, "body", "deeper than 32"),
    (b'{"seed": "\xff\xfe"}', "body", "JSON"),
]


@pytest.mark.parametrize(
    ("body", "field", "says"), BAD_RESETS, ids=[f"{i}-{f}" for i, (_, f, _) in enumerate(BAD_RESETS)]
)
def test_a_bad_reset_gets_400_naming_the_field_and_opens_no_session(client, body, field, says):
    raw = body if isinstance(body, bytes) else None
    status, err = client.call("POST", "/reset", None if raw else body, raw=raw)
    assert (status, err["limit"]) == (400, field), err
    assert says in err["error"]


def test_a_thousand_bad_resets_leave_no_session_and_no_server_error(server, client):
    bad = [b for b, _, _ in BAD_RESETS if not isinstance(b, bytes)]
    for i in range(1000):
        assert client.call("POST", "/reset", bad[i % len(bad)])[0] == 400
    metrics = client.call("GET", "/health")[1]
    assert metrics["stats"]["opened"] == metrics["stats"]["closed"]
    text = http.client.HTTPConnection(client.netloc, timeout=30)
    text.request("GET", "/metrics")
    assert "INTERNAL_ERROR" not in text.getresponse().read().decode()


def test_a_session_answers_only_its_creator(server, client):
    status, mine = client.call("POST", "/reset", {"seed": 1})
    assert status == 200 and len(mine["session_token"]) >= 32
    sid, token = mine["session_id"], mine["session_token"]
    step = {"session_id": sid, "action": {"message": "<think>x</think>"}}
    for headers, why in (({}, "needs the session_token"), ({"x_session_token": "guess"}, "needs")):
        status, err = client.call("POST", "/step", step, **headers)
        assert (status, err["code"], err["limit"]) == (403, "SESSION_FORBIDDEN", "session_token")
        assert why in err["error"]
    assert client.call("POST", "/step", {**step, "session_token": token})[0] == 200
    assert client.call("POST", "/step", step, x_session_token=token)[0] == 200
    assert client.call("GET", f"/state?session_id={sid}")[0] == 403
    assert client.call("POST", "/reset", {"session_id": sid})[0] == 403  # nor reset it
    assert client.call("DELETE", f"/sessions/{sid}")[0] == 403  # nor close it
    assert client.call("GET", f"/state?session_id={sid}", x_session_token=token)[1]["step_count"] == 2
    assert client.call("DELETE", f"/sessions/{sid}", x_session_token=token)[0] == 200
    status, err = client.call("POST", "/step", {"session_id": ["a", "b"], "action": {}})
    assert (status, err["limit"]) == (400, "session_id")


def test_a_websocket_session_cannot_be_driven_over_http(server, client):
    with ws_connect(server) as ws:
        ws_call(ws, {"type": "reset", "data": {"seed": 0}})
        sid = ws_call(ws, {"type": "state"})["data"]["session_id"]
        for token in ("", "x" * 32):
            status, err = client.call(
                "POST", "/step", {"session_id": sid, "session_token": token, "action": {"message": "x"}}
            )
            assert (status, err["code"]) == (403, "SESSION_FORBIDDEN") and "WebSocket" in err["error"]
        assert ws_call(ws, {"type": "state"})["data"]["step_count"] == 0  # nobody stepped it


def test_websocket_bad_resets_and_binary_frames(server):
    with ws_connect(server) as ws:
        for body, field, _ in BAD_RESETS:
            if isinstance(body, bytes) or "session_id" in body:
                continue
            reply = ws_call(ws, {"type": "reset", "data": body})
            assert reply["type"] == "error" and reply["data"]["limit"] == field, reply
        reply = ws_call(ws, '{"type": "reset", "data": ' + '{"a": ' * 100 + "1" + "}" * 101)
        assert reply["data"]["code"] == "INVALID_JSON" and "deeper than 32" in reply["data"]["message"]
        # a binary frame of UTF-8 JSON is read as a text frame
        reply = ws_call(ws, json.dumps({"type": "reset", "data": {"seed": 3}}).encode())
        assert reply["type"] == "observation"
        assert ws_call(ws, {"type": "step", "data": {"message": "<answer>x</answer>"}})["data"]["done"]
    from websockets.exceptions import ConnectionClosed

    with ws_connect(server) as ws:  # bytes that are not text: an error, then close 1003
        reply = ws_call(ws, b"\xff\xfe\x00garbage")
        assert reply["type"] == "error" and "UTF-8" in reply["data"]["message"]
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003


class _Gate(gym.Wrapper):
    """Steps whose turn is ``<block>`` wait in their worker thread until the test opens the gate."""

    gate = threading.Event()
    waiting = threading.Event()

    def step(self, action: Any) -> Any:
        if action == "<block>":
            self.waiting.set()
            self.gate.wait(timeout=30)
        return self.env.step(action)


@pytest.fixture()
def gated(monkeypatch):
    make = _env_sessions.Sessions._make
    monkeypatch.setattr(_env_sessions.Sessions, "_make", lambda self, opts: _Gate(make(self, opts)))
    _Gate.gate.clear()
    _Gate.waiting.clear()
    yield _Gate
    _Gate.gate.set()


def test_a_step_runs_off_the_loop_and_others_are_answered_meanwhile(gated):
    with EnvServer(env=ENV_ID, port=0, step_batch=1).start() as srv, ws_connect(srv) as slow:
        ws_call(slow, {"type": "reset", "data": {"seed": 0}})
        slow.send(json.dumps({"type": "step", "data": {"message": "<block>"}}))
        assert gated.waiting.wait(timeout=30)  # the slow step is in its worker thread now
        client = Client(srv.url)
        assert client.call("GET", "/health")[1]["stats"]["steps"] == 0
        with ws_connect(srv) as other:  # another session resets and plays a whole episode
            ws_call(other, {"type": "reset", "data": {"seed": 1}})
            assert ws_call(other, {"type": "step", "data": {"message": "<answer>x</answer>"}})["data"]["done"]
        gated.gate.set()
        assert json.loads(slow.recv(timeout=30))["type"] == "observation"


def test_a_step_past_step_timeout_gets_504_and_its_session_closes(gated):
    from websockets.exceptions import ConnectionClosed

    with EnvServer(env=ENV_ID, port=0, step_timeout=0.2).start() as srv:
        with ws_connect(srv) as ws:
            ws_call(ws, {"type": "reset", "data": {}})
            reply = ws_call(ws, {"type": "step", "data": {"message": "<block>"}})
            assert reply["type"] == "error" and reply["data"]["status"] == 504
            assert reply["data"]["limit"] == "step_timeout"
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        client = Client(srv.url)
        first = client.call("POST", "/reset", {})[1]
        key = {"session_id": first["session_id"], "session_token": first["session_token"]}
        status, err = client.call("POST", "/step", {**key, "action": {"message": "<block>"}})
        assert (status, err["code"]) == (504, "STEP_TIMEOUT")
        assert client.call("POST", "/step", {**key, "action": {"message": "x"}})[0] == 404
        gated.gate.set()
        assert client.call("GET", "/health")[1]["sessions"] == 0


def _batch(ws: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reply = ws_call(ws, {"type": "batch", "data": items})
    assert reply["type"] == "batch", reply
    return reply["data"]


def test_a_batch_steps_several_sessions_as_their_own_connections_would(server, client):
    turns = ["<search>founder</search>", "<answer>x</answer>"]
    plain = []
    for seed in (0, 1, 2):
        with ws_connect(server) as ws:
            plain.append([ws_call(ws, {"type": "reset", "data": {"seed": seed}})["data"]])
            plain[-1] += [ws_call(ws, {"type": "step", "data": {"message": t}})["data"] for t in turns]
    with ws_connect(server) as ws:
        got = [
            [r["data"]]
            for r in _batch(ws, [{"session": s, "type": "reset", "data": {"seed": s}} for s in range(3)])
        ]
        for t in turns:
            for s, r in enumerate(
                _batch(ws, [{"session": s, "type": "step", "data": {"message": t}} for s in range(3)])
            ):
                assert r["session"] == s and r["type"] == "observation"
                got[s].append(r["data"])
        assert got == plain  # same observations, rewards and info as one connection per session
        assert client.call("GET", "/health")[1]["sessions"] == 3
        # plain messages drive session 0, the one opened with the connection
        assert ws_call(ws, {"type": "state"})["data"]["step_count"] == 2
        replies = _batch(
            ws,
            [
                {"session": 1, "type": "state"},
                {"session": 1, "type": "step"},  # a second item for one session
                {"session": 5, "type": "step", "data": {"message": "x"}},  # never reset
                {"session": 6, "type": "reset", "data": {"seed": -1}},  # refused: opens nothing
                {"session": 7, "type": "step", "data": {"message": "y" * 70000}},
                {"session": 99, "type": "reset"},
                {"session": 2, "type": "dance"},
                "not an object",
            ],
        )
        assert replies[0]["data"]["step_count"] == 2
        assert [(r["data"].get("status"), r["data"].get("limit")) for r in replies[1:]] == [
            (400, "data[1].session"),
            (404, "session"),
            (400, "seed"),
            (413, "max_action_bytes"),
            (400, "data[5].session"),
            (400, "type"),
            (400, "data[7]"),
        ]
        assert _batch(ws, [{"session": 2, "type": "close"}]) == [{"session": 2, "type": "closed", "data": {}}]
        assert client.call("GET", "/health")[1]["sessions"] == 2
        bad = ws_call(ws, {"type": "batch", "data": [{"session": s} for s in range(9)]})
        assert (bad["type"], bad["data"]["limit"]) == ("error", "data")  # over max_sessions items
        # the connection's sessions are its own: over HTTP they are refused
        sid = _batch(ws, [{"session": 1, "type": "state"}])[0]["data"]["session_id"]
        assert client.call("GET", f"/state?session_id={sid}")[0] == 403
    # the connection ended: every session it opened is closed (the client fixture checks 0)


def test_a_batch_step_past_step_timeout_closes_only_its_session(gated):
    with EnvServer(env=ENV_ID, port=0, step_timeout=0.2, step_batch=1).start() as srv, ws_connect(srv) as ws:
        _batch(ws, [{"session": s, "type": "reset", "data": {"seed": s}} for s in range(2)])
        slow, fast = _batch(
            ws,
            [
                {"session": 0, "type": "step", "data": {"message": "<block>"}},
                {"session": 1, "type": "step", "data": {"message": "<answer>x</answer>"}},
            ],
        )
        assert (slow["data"]["status"], slow["data"]["limit"]) == (504, "step_timeout")
        assert fast["type"] == "observation" and fast["data"]["done"]
        gated.gate.set()
        again = _batch(ws, [{"session": 0, "type": "step", "data": {"message": "x"}}])[0]
        assert again["data"]["status"] == 404  # its session is gone; the connection is not
        assert _batch(ws, [{"session": 0, "type": "reset", "data": {}}])[0]["type"] == "observation"
        assert ws_call(ws, {"type": "step", "data": {"message": "<answer>x</answer>"}})["data"]["done"]
        assert Client(srv.url).call("GET", "/health")[1]["sessions"] == 2
