"""The async face (:mod:`hopgym.envs.async_pool`): concurrent async episodes equal sequential ones."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the ids
from hopgym.agents.scripted import OracleAgent
from hopgym.envs.async_pool import AsyncEnv, AsyncEnvPool, StepBatcher
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError

ENV_ID = "hopgym/Synthetic-v1"
EPISODES = 64


def _policy(env: gym.Env, seed: int):
    """An oracle that opens every third episode with a malformed turn (the corrective path)."""
    oracle = OracleAgent(env)
    first = [True]

    def act(obs: str, info: dict) -> object:
        action = oracle.act(obs, info)
        if first[0] and seed % 3 == 0:
            first[0] = False
            return "<search>two</search><answer>actions</answer>"
        first[0] = False
        return action

    return act


def _sequential(seed: int) -> tuple[list[dict], list[float]]:
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=seed)
    act, rewards, done = _policy(env, seed), [], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(act(obs, info))
        rewards.append(reward)
        done = terminated or truncated
    return list(env.unwrapped.transcript), rewards


async def _episode(env: AsyncEnv, seed: int, order: list[int]) -> tuple[list[dict], list[float]]:
    obs, info = await env.reset(seed=seed)
    act, rewards, done = _policy(env.env, seed), [], False
    while not done:
        obs, reward, terminated, truncated, info = await env.step(act(obs, info))
        order.append(seed)
        rewards.append(reward)
        done = terminated or truncated
    return list(env.unwrapped.transcript), rewards


def test_64_concurrent_async_episodes_equal_sequential_stepping():
    expected = [_sequential(seed) for seed in range(EPISODES)]
    order: list[int] = []

    async def run() -> list:
        async with AsyncEnvPool(ENV_ID, EPISODES, max_workers=8) as pool:
            return await asyncio.gather(*(_episode(env, i, order) for i, env in enumerate(pool)))

    got = asyncio.run(run())
    assert got == expected
    assert any(r > 0 for _, rewards in got for r in rewards)  # the oracle earns rewards
    # The episodes really interleaved on the loop (not one after the other).
    assert len(set(order[:EPISODES])) > 1


@pytest.mark.parametrize("max_batch", [1, 5, 64])
def test_batched_steps_equal_sequential_stepping(max_batch):
    """Steps of many envs sharing worker hops (StepBatcher) give the sequential episodes."""
    from concurrent.futures import ThreadPoolExecutor

    expected = [_sequential(seed) for seed in range(EPISODES)]
    order: list[int] = []
    hops: list[int] = []

    async def run() -> list:
        with ThreadPoolExecutor(4) as pool:
            batcher = StepBatcher(pool, max_batch)
            flush = batcher._flush

            def counting_flush() -> None:
                hops.append(len(batcher._pending))
                flush()

            batcher._flush = counting_flush  # type: ignore[method-assign]
            envs = [AsyncEnv(gym.make(ENV_ID), pool, batcher) for _ in range(EPISODES)]
            return await asyncio.gather(*(_episode(env, i, order) for i, env in enumerate(envs)))

    assert asyncio.run(run()) == expected
    assert max(hops) > 1  # steps of different envs arrived together and shared a flush


def test_a_batched_step_that_raises_fails_only_its_caller():
    from concurrent.futures import ThreadPoolExecutor

    class Broken(gym.Wrapper):
        def step(self, action):
            raise RuntimeError("boom")

    async def run() -> tuple:
        with ThreadPoolExecutor(2) as pool:
            batcher = StepBatcher(pool, 8)
            good = AsyncEnv(gym.make("hopgym/Tiny-v1"), pool, batcher)
            bad = AsyncEnv(Broken(gym.make("hopgym/Tiny-v1")), pool, batcher)
            await asyncio.gather(good.reset(seed=0), bad.reset(seed=0))
            return await asyncio.gather(
                good.step("<answer>x</answer>"), bad.step("x"), return_exceptions=True
            )

    ok, err = asyncio.run(run())
    assert ok[2] is True and isinstance(err, RuntimeError) and "boom" in str(err)
    with pytest.raises(InvalidOptionError, match="max_batch"):
        StepBatcher(None, 0)  # type: ignore[arg-type]


def test_the_loop_stays_free_while_a_step_runs():
    class Slow(gym.Env):
        observation_space = action_space = gym.spaces.Discrete(2)

        def __init__(self) -> None:
            import threading

            self.release = threading.Event()

        def reset(self, *, seed=None, options=None):
            return 0, {}

        def step(self, action):
            assert self.release.wait(10)
            return 0, 1.0, True, False, {}

    async def run() -> float:
        env = AsyncEnv(Slow())
        step = asyncio.ensure_future(env.step(0))
        await asyncio.sleep(0.01)
        assert not step.done()  # the step blocks its thread, not the loop that runs this line
        env.env.release.set()
        _, reward, *_ = await step
        await env.close()
        await env.close()  # idempotent
        return reward

    assert asyncio.run(run()) == 1.0


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidOptionTypeError, match="gymnasium.Env"):
        AsyncEnv("hopgym/Tiny-v1")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="num_envs"):
        AsyncEnvPool("hopgym/Tiny-v1", 0)
    with pytest.raises(InvalidOptionError, match="max_workers"):
        AsyncEnvPool("hopgym/Tiny-v1", 1, max_workers=0)
    with pytest.raises(InvalidOptionError, match="env id"):
        AsyncEnvPool(lambda: gym.make("hopgym/Tiny-v1"), 1, top_k=2)
