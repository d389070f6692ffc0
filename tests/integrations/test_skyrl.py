from __future__ import annotations

import math

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from episodes import oracle_turns, reference_episode  # noqa: E402

from hopgym.errors import HopgymError, InvalidOptionError, InvalidOptionTypeError  # noqa: E402
from hopgym.integrations.skyrl import ENV_ID, HopgymTextEnv, dataset_rows  # noqa: E402

CONFIG = {"env_id": "hopgym/Tiny-v1", "env_kwargs": {"reward": "searchr1"}}


def test_registered_and_made_through_skyrl_gym():
    env = skyrl_gym.make(ENV_ID, env_config=CONFIG, extras={"question_id": "tiny-6"})
    assert isinstance(env, HopgymTextEnv)
    assert isinstance(env, skyrl_gym.envs.base_text_env.BaseTextEnv)
    chat, meta = env.init([{"role": "user", "content": "ignored"}])
    assert chat[0]["role"] == "user" and "Sefa Quill" in chat[0]["content"]
    assert meta == {"question_id": "tiny-6"}


def test_scripted_episode_matches_hopgym(tiny_sample):
    env = skyrl_gym.make(ENV_ID, env_config=CONFIG, extras={"question_id": "tiny-6"})
    env.init([])
    turns = oracle_turns(tiny_sample)
    rewards, observations = [], []
    for turn in turns:
        out = env.step(turn)
        assert set(out) >= {"observations", "reward", "done", "metadata"}
        rewards.append(out["reward"])
        observations.append(out["observations"])
        if out["done"]:
            break
    assert out["done"] and out["metadata"]["action_type"] == "answer"
    total, terms, ref_obs = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    assert math.isclose(sum(rewards), total) and total > 0
    metrics = env.get_metrics()
    assert {f"reward/{k}": v for k, v in terms.items()} == {k: v for k, v in metrics.items() if "/" in k}
    assert metrics["answered"] == 1.0 and metrics["turns"] == len(turns)
    # the search results are hopgym's observations, as user messages; the final step appends none
    assert [o[0]["content"] for o in observations[:-1]] == ref_obs[:-1]
    assert observations[-1] == []


@pytest.mark.parametrize(
    "action", ["no tags", "", None, 42, "<search></search>", "<answer>a</answer><answer>b"]
)
def test_malformed_turns_get_hopgym_correction(action):
    env = skyrl_gym.make(ENV_ID, env_config=CONFIG, extras={"question_id": "tiny-6"})
    env.init([])
    out = env.step(action)
    if out["metadata"]["action_type"] == "invalid":
        assert not out["done"]
        assert "Invalid turn" in out["observations"][0]["content"]
        assert out["metadata"]["invalid_action"]
    assert env.get_metrics()["turns"] == 1


def test_budget_ends_episode():
    env = skyrl_gym.make(
        ENV_ID, env_config={"env_id": "hopgym/Tiny-v1", "env_kwargs": {"max_turns": 2}}, extras={}
    )
    env.init([])
    assert env.max_turns == 2
    assert not env.step("<search>Sefa Quill</search>")["done"]
    assert env.step("<search>Aldo Quill</search>")["done"]


@pytest.mark.parametrize(
    ("config", "extras", "error", "names"),
    [
        ({"env_id": "hopgym/Tinny-v1"}, {}, InvalidOptionTypeError, "hopgym/Tinny-v1"),
        ({"env_id": "hopgym/Tiny-v1", "env_kwargs": {"top_kk": 2}}, {}, InvalidOptionTypeError, "top_kk"),
        ({"env_id": "hopgym/Tiny-v1", "env_kwargs": {"top_k": 0}}, {}, InvalidOptionError, "top_k"),
        ({"env_idd": "hopgym/Tiny-v1"}, {}, InvalidOptionTypeError, "env_idd"),
        ({"env_id": "hopgym/Tiny-v1"}, {"question_id": "nope"}, InvalidOptionTypeError, "nope"),
    ],
)
def test_bad_config_fails_at_construction(config, extras, error, names):
    with pytest.raises(error, match=names) as info:
        skyrl_gym.make(ENV_ID, env_config=config, extras=extras)
    assert isinstance(info.value, HopgymError)


def test_dataset_rows_agree_with_init():
    rows = dataset_rows("hopgym/Tiny-v1")
    assert len(rows) == 18 or len(rows) > 0
    row = rows[0]
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(row["env_class"], env_config={"env_id": "hopgym/Tiny-v1"}, extras=extras)
    chat, _ = env.init(row["prompt"])
    assert chat == row["prompt"]


def _script(i, sample):
    if i % 4 == 0:
        return oracle_turns(sample)
    return ["no tags", f"<search>Quill {i}</search>", None, f"<answer>{i}</answer>"]


def test_64_concurrent_async_episodes_match_sequential_stepping(tiny_sample):
    """64 episodes on one event loop through init_async/step_async: the same transcripts,
    rewards and metrics as the same episodes stepped one at a time, and no step on the loop."""
    import asyncio
    import threading

    qids = ["tiny-6" if i % 4 == 0 else f"tiny-{1 + i % 6}" for i in range(64)]

    def make(i):
        return skyrl_gym.make(ENV_ID, env_config=CONFIG, extras={"question_id": qids[i]})

    def sequential(i):
        env = make(i)
        chat, _ = env.init([])
        outs = []
        for turn in _script(i, tiny_sample):
            outs.append(env.step(turn))
            if outs[-1]["done"]:
                break
        return chat, outs, env.get_metrics()

    expected = [sequential(i) for i in range(64)]
    stepped_on: set[int] = set()

    async def episode(i):
        env = make(i)
        step = env.env.step

        def spy(action):
            stepped_on.add(threading.get_ident())
            return step(action)

        env.env.step = spy
        chat, _ = await env.init_async([])
        outs = []
        for turn in _script(i, tiny_sample):
            outs.append(await env.step_async(turn))
            if outs[-1]["done"]:
                break
        return chat, outs, env.get_metrics()

    async def together():
        return threading.get_ident(), await asyncio.gather(*(episode(i) for i in range(64)))

    loop_thread, got = asyncio.run(together())
    assert got == expected
    assert sum(m["answered"] for _, _, m in got) == 64 and any(m["reward/outcome"] > 0 for _, _, m in got)
    assert stepped_on and loop_thread not in stepped_on


def _generator_rewards(env, turns):
    """The step rewards SkyRL's generator collects for ``turns``, and what it trains on: the last
    step's on its re-tokenizing path (``per_step_rewards[-1]``), their sum on its token paths."""
    env.init([])
    rewards = []
    for turn in turns:
        out = env.step(turn)
        rewards.append(out["reward"])
        if out["done"]:
            break
    return rewards


@pytest.mark.parametrize(("reward", "malformed"), [("r3rag", []), ("searchr1", ["no tags"])])
def test_both_generator_paths_get_the_whole_episode_reward(tiny_sample, reward, malformed):
    turns = [*malformed, *oracle_turns(tiny_sample)]
    total, terms, _ = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward=reward)
    config = {"env_id": "hopgym/Tiny-v1", "env_kwargs": {"reward": reward}}
    env = skyrl_gym.make(ENV_ID, env_config=config, extras={"question_id": "tiny-6"})
    rewards = _generator_rewards(env, turns)
    assert math.isclose(rewards[-1], total) and math.isclose(sum(rewards), total)
    assert rewards[:-1] == [0.0] * (len(rewards) - 1)
    assert math.isclose(sum(terms.values()), total) and env.reward_terms == pytest.approx(terms)
    # per-step rewards, on request: their sum is the episode's (the token paths' view)
    stepwise = skyrl_gym.make(
        ENV_ID, env_config={**config, "step_rewards": True}, extras={"question_id": "tiny-6"}
    )
    steps = _generator_rewards(stepwise, turns)
    assert math.isclose(sum(steps), total)
    if reward == "r3rag":  # r3rag rewards the first search's relevance: 2.6 on the last step, 3.6 in all
        assert steps[-1] == pytest.approx(2.6) and total == pytest.approx(3.6)


def test_the_generators_max_turns_is_the_budget():
    # SkyRL's generator writes generator.max_turns into every row's extras
    env = skyrl_gym.make(ENV_ID, env_config={"env_id": "hopgym/Tiny-v1"}, extras={"max_turns": 2})
    assert env.max_turns == 2 and env.env.unwrapped.max_turns == 2
    env.init([])
    assert not env.step("<search>Sefa Quill</search>")["done"]
    assert env.step("<search>Aldo Quill</search>")["done"]
    agreeing = {"env_id": "hopgym/Tiny-v1", "env_kwargs": {"max_turns": 3}}
    assert skyrl_gym.make(ENV_ID, env_config=agreeing, extras={"max_turns": 3}).max_turns == 3
    with pytest.raises(InvalidOptionError, match=r"generator.max_turns is 5 .* env_kwargs.max_turns is 3"):
        skyrl_gym.make(ENV_ID, env_config=agreeing, extras={"max_turns": 5})


def test_rows_carry_the_env_when_the_config_has_no_room_for_it(tmp_path):
    """skyrl 0.3.0 gives an env class it does not ship an empty env_config: the row's columns
    (written to SkyRL's parquet file and read back) say which env, with which options."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rows = dataset_rows("hopgym/Tiny-v1", reward="searchr1", max_turns=2)
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    row = pd.read_parquet(tmp_path / "train.parquet").iloc[5].to_dict()
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}  # as SkyRL's dataset does
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=extras)
    assert env.env.unwrapped.max_turns == 2 and row["question_id"] == "tiny-6"
    chat, _ = env.init(list(row["prompt"]))
    assert chat[0]["content"] == row["prompt"][0]["content"]
    assert env.step("<answer>x</answer>")["metadata"]["reward_terms"].keys() == {"outcome", "format_bonus"}


def _skyrl_generator_error() -> str | None:
    import importlib.util

    if importlib.util.find_spec("skyrl") is None:
        return (
            "SkyRL's trainer package is not installed "
            "(pip install 'skyrl==0.3.0'; see examples/skyrl_generator_check.py)"
        )
    try:
        _check_module()
        import skyrl.train.generators.skyrl_gym_generator  # noqa: F401
    except Exception as exc:  # SkyRL's own import chain: any failure means no generator here
        return f"SkyRL's generator does not import: {type(exc).__name__}: {exc}"
    return None


def _check_module():
    import importlib.util as iu
    import sys
    from pathlib import Path

    if "skyrl_generator_check" not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "examples" / "skyrl_generator_check.py"
        spec = iu.spec_from_file_location("skyrl_generator_check", path)
        module = iu.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["skyrl_generator_check"]


SKYRL_GENERATOR_ERROR = _skyrl_generator_error()


@pytest.mark.skipif(SKYRL_GENERATOR_ERROR is not None, reason=str(SKYRL_GENERATOR_ERROR))
def test_skyrls_own_generator_trains_on_hopgyms_episode_reward():
    """SkyRLGymGenerator.generate on every Tiny row, on its two token-in/token-out paths and its
    re-tokenizing path (Qwen3's template): each trajectory's reward is hopgym's episode reward
    (r3rag: 3.6, not the last step's 2.6), with generator.max_turns as the env's budget."""
    result = _check_module().run_check(presets=("r3rag",), max_turns=4)
    assert len(result["runs"]) == 3
    for run in result["runs"]:
        assert len(run["episodes"]) == 6 and run["engine_calls"] == sum(e["turns"] for e in run["episodes"])
        for e in run["episodes"]:
            assert e["skyrl_reward"] == pytest.approx(e["hopgym_reward"]) == pytest.approx(3.6)
            assert e["policy_tokens"] > 0
    forms = [run["episodes"][0]["skyrl_reward_form"] for run in result["runs"]]
    assert forms == ["per-token list (summed)", "per-token list (summed)", "scalar"]
    # with each step's own reward (env_config.step_rewards), the re-tokenizing path keeps the last: 2.6
    check = _check_module()
    (run,) = check.run_check(presets=("r3rag",), max_turns=4, paths=check.PATHS[2:], step_rewards=True)[
        "runs"
    ]
    assert [e["skyrl_reward"] for e in run["episodes"]] == pytest.approx([2.6] * 6)
