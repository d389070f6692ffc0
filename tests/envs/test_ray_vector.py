"""RayVectorEnv on a local Ray (num_cpus=2, one per test file: Ray starts slowly on small machines):
step for step the same as SyncVectorEnv, and a worker killed or hung mid-episode ends its episodes
truncated with info["worker_error"] and is replaced, never a hang."""

from __future__ import annotations

import sys
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from vector_helpers import WORLD, assert_same_logs, drive

ray = pytest.importorskip("ray")

from hopgym.envs.ray_vector import RayVectorEnv, WorkerError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # The workers cannot import this test module: send its classes and functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def kill(actor) -> None:
    """``ray.kill``, then wait until the actor is gone: the kill is asynchronous, and a call sent
    before it lands is still answered (the tests are about a dead worker, not that race)."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError("the killed Ray actor still answers after 30 s")


def synthetic(**kwargs):
    return lambda: gym.make("hopgym/SyntheticRouting-v1", **WORLD, **kwargs)


class SlowOnCue(gym.Wrapper):
    """Sleeps for a minute when asked to (a hung worker)."""

    def step(self, action):
        if action == "hang":
            time.sleep(60)
        if action == "raise":
            raise KeyError("an env's own bug")
        return self.env.step(action)


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=lambda m: m.value
)
def test_the_same_as_sync_vector_env(mode):
    fns = [synthetic(protocol="r3" if mode == AutoresetMode.DISABLED else "tags")] * 6
    venv = RayVectorEnv(fns, workers=2, autoreset_mode=mode)
    assert venv.slices == [range(0, 3), range(3, 6)]
    assert len(set(venv.pids())) == 2
    assert_same_logs(drive(venv, 25, seed=5), drive(SyncVectorEnv(fns, autoreset_mode=mode), 25, seed=5))
    stats = venv.search_stats()
    assert 0 < stats.calls < stats.requests
    venv.close()


def test_a_killed_worker_ends_its_episodes_and_is_replaced():
    fns = [synthetic()] * 4
    venv = RayVectorEnv(fns, workers=2, autoreset_mode=AutoresetMode.SAME_STEP, timeout=60)
    ref = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    for v in (venv, ref):
        v.reset(seed=11)
    act = ["<think>first</think>"] * 4
    assert np.array_equal(venv.step(act)[0], ref.step(act)[0])
    old = venv.pids()
    kill(venv.workers[0])
    obs, rewards, terminated, truncated, infos = venv.step(["<search>Brenmark</search>"] * 4)
    assert list(truncated) == [True, True, False, False] and not terminated.any()
    assert list(infos["_final_info"]) == [True, True, False, False]
    errors = infos["final_info"]["worker_error"]
    assert "worker 0 died" in errors[0] and "worker 0 died" in errors[1]
    assert list(infos["_turn"]) == [True] * 4 and list(infos["turn"]) == [0, 0, 2, 2]
    assert venv.replacements == [1, 0]
    new = venv.pids()
    assert new[0] != old[0] and new[1] == old[1]
    # The other worker's episodes go on as SyncVectorEnv's.
    expected = ref.step(["<search>Brenmark</search>"] * 4)
    assert obs[2:] == expected[0][2:] and list(infos["turn"][2:]) == [2, 2]
    assert obs[0].startswith("Answer the question") and infos["turn"][0] == 0
    assert venv.step(["<think>x</think>"] * 4)[4]["turn"].tolist() == [1, 1, 3, 3]
    venv.close()
    # The new worker's envs start again from seeds derived from the old ones: reproducibly.
    again = RayVectorEnv(fns, workers=2, autoreset_mode=AutoresetMode.SAME_STEP)
    again.reset(seed=11)
    again.step(act)
    kill(again.workers[0])
    assert again.step(["<search>Brenmark</search>"] * 4)[0] == obs
    again.close()


def test_a_hung_worker_times_out_and_next_step_resets_it():
    fns = [lambda: SlowOnCue(gym.make("hopgym/Tiny-v1"))] * 2
    venv = RayVectorEnv(fns, workers=2, timeout=3)  # NEXT_STEP
    venv.reset(seed=0)
    obs, _, terminated, truncated, infos = venv.step(["<think>a</think>", "hang"])
    assert list(truncated) == [False, True] and obs[1] == ""
    assert "did not answer within 3 s" in infos["worker_error"][1]
    assert list(infos["_worker_error"]) == [False, True]
    obs, _, _, truncated, infos = venv.step(["<think>b</think>", "ignored"])
    assert infos["turn"].tolist() == [2, 0] and not truncated.any()  # autoreset on the new one
    with pytest.raises(KeyError, match="own bug"):
        venv.step(["raise", "<think>c</think>"])
    venv.close()


def test_step_subset_and_per_env_options_for_collectors():
    venv = gym.make_vec("hopgym/Tiny-v1", 3, ray_workers=2, autoreset_mode="Disabled")
    assert repr(venv) == "RayVectorEnv(hopgym/Tiny-v1, num_envs=3, workers=2)"
    ids = [s.id for s in venv.get_attr("task")[0].samples]
    _, infos = venv.reset(seed=[1, 2, 3], options=[{"question_id": ids[4]}, None, {"question_id": ids[1]}])
    assert infos["question_id"][0] == ids[4] and not infos["_question_id"][1]
    out = venv.step_subset([2, 0], ["<answer>x</answer>", "<search>Lorn</search>"])
    assert [r[2] for r in out] == [True, False] and out[1][4]["query"] == "Lorn"
    venv.set_attr("note", ["a", "b", "c"])
    assert venv.get_attr("note") == ("a", "b", "c")
    kill(venv.workers[1])
    with pytest.raises(WorkerError, match="worker 1 died"):
        venv.get_attr("note")
    assert venv.get_attr("max_turns") == (8, 8, 8)
    venv.close()


def test_workers_that_cannot_start_say_why():
    def broken():
        raise RuntimeError("no index here")

    with pytest.raises(WorkerError, match="could not start.*no index here"):
        RayVectorEnv([broken], timeout=60)
    with pytest.raises(ValueError, match="workers"):
        RayVectorEnv([broken], workers=2)


def test_the_rollout_collector_on_ray_workers_collects_the_same_trajectories():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig
    from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts

    def env_fn():
        return gym.make("hopgym/Tiny-v1", reward="searchr1")

    task = env_fn().unwrapped.task
    tok = build_tokenizer(task_texts(task))
    model = build_model(TinyLMConfig(layers=1, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=0)
    qids = [s.id for s in task.samples][:3]
    turns = ["<search> Sefa Quill father</search>", "<search> Lorn</search>", "<answer> Emery Quill</answer>"]

    def scripted(contexts, budgets, *_):
        # Turn k of every episode in flight: a search, another, then an answer; the
        # log-probs are the model's, as the sampler would give.
        k = scripted.calls
        scripted.calls += 1
        ids = [tok.encode(turns[min(k, 2)], add_special_tokens=False) for _ in contexts]
        return ids, [[-0.5] * len(x) for x in ids]

    out = {}
    for workers in (0, 2):
        cfg = RolloutConfig(
            temperature=1.0, max_new_tokens=10, max_completion_tokens=400, batch_size=4, env_workers=workers
        )
        col = RolloutCollector(model, tok, env_fn, cfg)
        out[workers] = col.collect(qids, group_size=2, seed=7)  # the sampler, not scripted
        col._sample, scripted.calls = scripted, 0
        out[workers] += col.collect(["tiny-6", qids[0]], group_size=2, seed=8)
        if workers:
            assert col._vector.num_envs == 4 and len(col._vector.workers) == 2
        col.close()
    assert [vars(t) for t in out[2]] == [vars(t) for t in out[0]]
    assert [t.searches for t in out[0][-4:]] == [2] * 4
    assert [t.em for t in out[0][-4:]] == [1.0, 1.0, 0.0, 0.0]
