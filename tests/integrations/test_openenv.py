"""The env server (:mod:`hopgym.integrations.openenv`): OpenEnv's client drives it, its limits
answer with 4xx naming them, idle and abandoned sessions are closed, SIGTERM shuts it down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("websockets")

import hopgym  # noqa: E402, F401 - registers the ids
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.errors import InvalidOptionError  # noqa: E402
from hopgym.integrations.openenv import EnvServer, EnvServerConfig, EnvServerError  # noqa: E402
from hopgym.turns import Answer, Search  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "hopgym/Synthetic-v1"


def http(
    method: str, url: str, payload: Any = None, raw: bytes | None = None, token: str | None = None
) -> tuple[int, Any]:
    body = raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
    headers = {"Content-Type": "application/json"}
    if token is not None:  # the session's creator shows its token
        headers["X-Session-Token"] = token
    req = urllib.request.Request(url, body, headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def close_session(srv: EnvServer, first: dict[str, Any]) -> int:
    """Close an HTTP session as its creator does (with the reset's ``session_token``)."""
    return http("DELETE", f"{srv.url}/sessions/{first['session_id']}", token=first["session_token"])[0]


def ws_connect(srv: EnvServer) -> Any:
    from websockets.sync.client import connect

    return connect(srv.url.replace("http", "ws", 1) + "/ws", open_timeout=10)


def ws_call(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=30))


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture(scope="module")
def server():
    with EnvServer(env=ENV_ID, port=0, max_sessions=4, max_action_bytes=4096).start() as srv:
        yield srv


def sessions_open(srv: EnvServer) -> int:
    return http("GET", f"{srv.url}/health")[1]["sessions"]


@pytest.mark.slow  # importing openenv-core (gradio, fastmcp) takes ~15 s
def test_openenv_client_plays_an_episode_with_hopgym_rewards(server):
    openenv = pytest.importorskip("openenv.core")
    from hopgym.integrations.openenv import openenv_client

    local = gym.make(ENV_ID)
    oracle = OracleAgent(local)
    obs, info = local.reset(seed=5)
    with openenv.GenericEnvClient(base_url=server.url).sync() as client:
        first = client.reset(seed=5)
        assert first.observation["text"] == obs and first.done is False
        local_rewards, remote_rewards, done = [], [], False
        actions = ["<search>one</search><answer>two</answer>"]  # malformed first: corrected
        while not done:
            action = actions.pop() if actions else local.unwrapped.protocol.render(oracle.act(obs, info))
            obs, reward, terminated, truncated, info = local.step(action)
            result = client.step({"message": action})
            assert result.observation["text"] == obs
            assert result.observation["info"]["invalid_action"] == info["invalid_action"]
            local_rewards.append(reward)
            remote_rewards.append(result.reward)
            done = terminated or truncated
            assert result.done is done
        assert remote_rewards == local_rewards and sum(local_rewards) > 0
        state = client.state()
        assert state["step_count"] == len(local_rewards) and state["done"] is True
        assert state["question_id"] == local.unwrapped.sample.id
    # The typed client takes hopgym's structured actions.
    with openenv_client(server.url).sync() as client:
        client.reset(seed=5, options={"index": 0})
        result = client.step(Search("anything"))
        assert result.observation["info"]["action_type"] == "search"
        assert client.step(Answer("x")).done is True
    # A server that is full answers OpenEnv's client with an error naming the limit.
    opened = [http("POST", f"{server.url}/reset", {})[1] for _ in range(4)]
    try:
        with pytest.raises(RuntimeError, match="max-sessions.*CAPACITY_REACHED"):
            with openenv.GenericEnvClient(base_url=server.url).sync() as client:
                client.reset()
    finally:
        for first in opened:
            close_session(server, first)
    assert wait_for(lambda: sessions_open(server) == 0)


def test_http_sessions_and_corrective_observations(server):
    status, first = http("POST", f"{server.url}/reset", {"seed": 1, "episode_id": "e1"})
    assert status == 200 and "Question:" in first["observation"]["text"] and first["done"] is False
    sid, key = (
        first["session_id"],
        {"session_id": first["session_id"], "session_token": first["session_token"]},
    )
    typo = {"mesage": "typo"}  # codespell:ignore mesage
    for bad in ({"message": 5}, {}, typo, "just text", [1, 2]):
        status, res = http("POST", f"{server.url}/step", {**key, "action": bad})
        assert status == 200, res
        assert res["observation"]["info"]["action_type"] == "invalid"
        assert res["observation"]["info"]["invalid_action"]
    status, state = http("GET", f"{server.url}/state?session_id={sid}", token=key["session_token"])
    assert status == 200 and state["episode_id"] == "e1" and state["step_count"] == 5
    status, res = http("POST", f"{server.url}/step", {**key, "action": {"message": "<answer>x</answer>"}})
    assert res["done"] is True and res["observation"]["terminated"] is True
    assert "reward_terms" in res["observation"]["info"]
    assert close_session(server, first) == 200


def test_each_limit_answers_4xx_naming_it(server):
    # unknown session: 404
    status, err = http("POST", f"{server.url}/step", {"session_id": "nope", "action": {"message": "x"}})
    assert (status, err["limit"], err["code"]) == (404, "session_id", "SESSION_ERROR")
    assert http("GET", f"{server.url}/state?session_id=nope")[0] == 404
    # oversized action: 413, and the session lives on
    first = http("POST", f"{server.url}/reset", {})[1]
    key = {"session_id": first["session_id"], "session_token": first["session_token"]}
    big = {**key, "action": {"message": "x" * 5000}}
    status, err = http("POST", f"{server.url}/step", big)
    assert (status, err["limit"]) == (413, "max_action_bytes")
    assert http("POST", f"{server.url}/step", {**key, "action": {"message": "<think>a</think>"}})[0] == 200
    # bad reset arguments: 400 naming them
    assert http("POST", f"{server.url}/reset", {**key, "seed": -1})[1]["limit"] == "seed"
    status, err = http("POST", f"{server.url}/reset", {**key, "env_options": {"topk": 2}})
    assert status == 400 and "topk" in err["error"]
    # per-session env options
    status, res = http("POST", f"{server.url}/reset", {**key, "env_options": {"max_turns": 2}})
    assert status == 200 and res["observation"]["info"]["max_turns"] == 2
    # max sessions: 429
    others = [http("POST", f"{server.url}/reset", {})[1] for _ in range(3)]
    status, err = http("POST", f"{server.url}/reset", {})
    assert (status, err["limit"], err["code"]) == (429, "max_sessions", "CAPACITY_REACHED")
    with ws_connect(server) as ws:  # over WebSocket too
        reply = ws_call(ws, {"type": "reset", "data": {}})
        assert reply["type"] == "error" and reply["data"]["status"] == 429
        assert reply["data"]["limit"] == "max_sessions"
    for s in [first, *others]:
        close_session(server, s)
    # WebSocket: oversized message 413, unknown type, bad JSON; the session survives them all
    with ws_connect(server) as ws:
        ws_call(ws, {"type": "reset", "data": {"seed": 0}})
        reply = ws_call(ws, {"type": "step", "data": {"message": "y" * 5000}})
        assert (reply["data"]["status"], reply["data"]["limit"]) == (413, "max_action_bytes")
        assert ws_call(ws, {"type": "dance"})["data"]["code"] == "UNKNOWN_TYPE"
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "INVALID_JSON"
        reply = ws_call(ws, {"type": "step", "data": {"message": "<answer>z</answer>"}})
        assert reply["type"] == "observation" and reply["data"]["done"] is True
    metrics = urllib.request.urlopen(f"{server.url}/metrics", timeout=10).read().decode()
    assert 'hopgym_env_errors_total{code="CAPACITY_REACHED"}' in metrics
    assert "hopgym_env_step_seconds_bucket" in metrics
    assert wait_for(lambda: sessions_open(server) == 0)


def test_a_client_killed_mid_episode_leaks_nothing(server):
    with ws_connect(server) as ws:
        ws_call(ws, {"type": "reset", "data": {"seed": 2}})
        ws_call(ws, {"type": "step", "data": {"message": "<search>x</search>"}})
        assert sessions_open(server) == 1
        ws.socket.close()  # the process dies: no close frame, the TCP connection just ends
        assert wait_for(lambda: sessions_open(server) == 0)
    health = http("GET", f"{server.url}/health")[1]
    assert health["stats"]["opened"] == health["stats"]["closed"]


def test_idle_sessions_are_reaped():
    with EnvServer(env="hopgym/Tiny-v1", port=0, session_timeout=0.3).start() as srv:
        first = http("POST", f"{srv.url}/reset", {})[1]
        sid = first["session_id"]
        with ws_connect(srv) as ws:
            ws_call(ws, {"type": "reset", "data": {}})
            assert sessions_open(srv) == 2
            assert wait_for(lambda: sessions_open(srv) == 0)
            key = {"session_id": sid, "session_token": first["session_token"]}
            status, err = http("POST", f"{srv.url}/step", {**key, "action": {"message": "x"}})
            assert status == 404 and sid in err["error"]
            notice = json.loads(ws.recv(timeout=10))
            assert notice["data"]["limit"] == "session_timeout"
        text = urllib.request.urlopen(f"{srv.url}/metrics", timeout=10).read().decode()
        assert 'hopgym_env_sessions_closed_total{reason="idle"} 2.0' in text


def test_bad_env_id_or_option_fails_at_construction():
    with pytest.raises(InvalidOptionError, match="hopgym/Nope-v1"):
        EnvServer(env="hopgym/Nope-v1", port=0)
    with pytest.raises(InvalidOptionError, match="top_k"):
        EnvServer(env="hopgym/Tiny-v1", kw={"top_k": 0}, port=0)
    with pytest.raises(InvalidOptionError, match="max_sessions"):
        EnvServerConfig(max_sessions=0)
    assert issubclass(EnvServerError, InvalidOptionError)


def test_serve_env_command_stops_gracefully_on_sigterm():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "hopgym.cli",
        "serve-env",
        "--env",
        "hopgym/Tiny-v1",
        "--port",
        "0",
        "--max-turns",
        "3",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split()[0]
        status, res = http("POST", f"{url}/reset", {})
        assert status == 200 and res["observation"]["info"]["max_turns"] == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_wire_json_equals_jsonable():
    """The server writes ``info`` with :func:`dumps` (orjson when installed): the same JSON as
    ``json.dumps(jsonable(info))``, Passage objects, tuples, sets and NaN included."""
    import math as _math

    import numpy as np

    from hopgym.corpora.types import Passage
    from hopgym.integrations._env_sessions import dumps, jsonable, loads

    env = gym.make(ENV_ID)
    env.reset(seed=3)
    _, _, _, _, info = env.step("<search>anything</search>")
    extra = {
        1: ("a", "b"),
        "s": {"y", "x"},
        "nan": _math.nan,
        "np": np.float64(0.5),
        "p": [Passage("d", "T", "text")],
        "obj": object,
    }
    for value in (info, extra):
        assert loads(dumps(value)) == json.loads(json.dumps(jsonable(value)))
