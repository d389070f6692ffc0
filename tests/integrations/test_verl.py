"""The verl agent loop against verl itself (skipped where verl does not import).

verl is not in hopgym's ``all`` extra (its torch/Ray stack, transformers < 5.11); run these in an
environment with ``hopgym[verl]``: ``python3 -m venv /tmp/venv-verl && /tmp/venv-verl/bin/pip
install torch==2.13.0 && /tmp/venv-verl/bin/pip install -e ".[verl,train]" pytest`` and
``/tmp/venv-verl/bin/python -m pytest tests/integrations/test_verl.py``. The policy is a fake
server manager (or, in verl's Ray workers, a scripted LLM client) over a tiny offline tokenizer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from hopgym.errors import DependencyNotInstalled, HopgymError


def _verl_error() -> str | None:
    if importlib.util.find_spec("verl") is None:
        return "verl is not installed (pip install 'hopgym[verl]')"
    try:
        import verl.experimental.agent_loop.agent_loop  # noqa: F401
    except Exception as exc:  # verl's own import chain: any failure means no verl here
        return f"verl does not import: {type(exc).__name__}: {exc}"
    return None


VERL_ERROR = _verl_error()
needs_verl = pytest.mark.skipif(VERL_ERROR is not None, reason=str(VERL_ERROR))


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed")
def test_missing_verl_names_the_extra():
    with pytest.raises(DependencyNotInstalled, match=r"hopgym\[verl\]"):
        import hopgym.integrations.verl  # noqa: F401


def test_integrations_package_imports_no_framework():
    import subprocess

    code = (
        "import sys, hopgym.integrations; "
        "print(sorted(m for m in ('verifiers', 'skyrl_gym', 'gem', 'verl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class FakeServer:
    """verl's server manager: ``generate`` returns the next scripted reply as a ``TokenOutput``."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids + [self.tokenizer.eos_token_id])


def play(tokenizer, server, extra, response_length=2048):
    """One ``run`` of the agent loop, built inside the event loop as verl's worker builds it."""

    async def go():
        loop = make_loop(tokenizer, server, response_length)
        return await loop.run({"temperature": 1.0}, extra_info=extra)

    return asyncio.run(go())


def make_loop(tokenizer, server, response_length):
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from hopgym.integrations.verl import HopgymAgentLoop

    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": response_length}}}
    )
    return HopgymAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=object,
        data_config=DictConfigWrap(OmegaConf.create({})),
    )


@pytest.fixture(scope="module")
def tokenizer():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
    from tiny_llm import build_tokenizer

    return build_tokenizer()


@needs_verl
def test_registered_in_verls_registry():
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry

    from hopgym.integrations.verl import AGENT_NAME, HopgymAgentLoop

    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "hopgym.integrations.verl.HopgymAgentLoop"}
    assert issubclass(HopgymAgentLoop, AgentLoopBase)


@needs_verl
def test_scripted_episode_matches_hopgym(tokenizer, tiny_sample):
    from episodes import oracle_turns, reference_episode

    turns = ["no tags", *oracle_turns(tiny_sample)]
    server = FakeServer(tokenizer, turns)
    extra = {"env_id": "hopgym/Tiny-v1", "env_kwargs": {"reward": "searchr1"}, "question_id": "tiny-6"}
    out = play(tokenizer, server, extra)
    total, terms, observations = reference_episode("hopgym/Tiny-v1", "tiny-6", turns, reward="searchr1")
    assert math.isclose(out.reward_score, total) and total > 0
    assert out.extra_fields["reward_terms"] == terms
    assert out.extra_fields["reward_extra_info"] == {f"reward/{k}": v for k, v in terms.items()}
    assert len(out.extra_fields["turn_scores"]) == len(turns)
    assert len(out.response_ids) == len(out.response_mask) and out.num_turns == 2 * len(turns)
    # the policy's tokens carry loss, hopgym's observations (between them) do not
    assert out.response_mask[0] == 1 and 0 in out.response_mask and out.response_mask[-1] == 1
    env_text = tokenizer.decode(
        [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 0]
    )
    assert "Invalid turn" in env_text and "<information>" in env_text
    policy_text = tokenizer.decode(
        [t for t, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    )
    assert "no tags" in policy_text and tiny_sample.answers[0] in policy_text
    assert "Question:" in tokenizer.decode(out.prompt_ids)
    assert server.prompts[0] == out.prompt_ids


@needs_verl
def test_response_length_cuts_the_episode(tokenizer):
    server = FakeServer(tokenizer, ["<search>Sefa Quill</search>"] * 8)
    out = play(tokenizer, server, {"env_id": "hopgym/Tiny-v1", "question_id": "tiny-6"}, response_length=40)
    assert len(out.response_ids) <= 40 and len(server.prompts) < 8


@needs_verl
@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ({"env_id": "hopgym/Tinny-v1"}, "hopgym/Tinny-v1"),
        ({"env_id": "hopgym/Tiny-v1", "env_kwargs": {"top_kk": 2}}, "top_kk"),
        ({"env_id": "hopgym/Tiny-v1", "question_id": "nope"}, "nope"),
    ],
)
def test_bad_row_fails_with_hopgyms_error(tokenizer, extra, names):
    with pytest.raises(HopgymError, match=names):
        play(tokenizer, FakeServer(tokenizer, []), extra)


@needs_verl
def test_agent_loop_from_config_path_in_verls_ray_workers():
    """verl's own AgentLoopManager starts its AgentLoopWorker Ray actors from verl's trainer config
    (agent_loop_config_path = the recipe's YAML); they play rows of the parquet file hopgym writes
    (read by verl's dataset), rollout.n per row; verl's rm_scores equal hopgym's episode rewards,
    term by term. The LLM server is a scripted client (examples/verl_agent_loop_check.py)."""
    import os

    result = _check_module().run_check(n=2, num_workers=2, rows=2)
    for worker in result["workers"]:  # loaded from the YAML inside the actor, not by an import
        assert worker["pid"] != os.getpid()
        assert worker["hopgym_agent_entry"] == {
            "name": "hopgym_agent",
            "_target_": "hopgym.integrations.verl.HopgymAgentLoop",
        }
        assert not worker["hopgym_module_imported"]
    episodes = result["episodes"]
    assert len(episodes) == 4 and result["groups_share_question"]
    assert len({e["question_id"] for e in episodes}) == 2
    for e in episodes:
        assert math.isclose(e["verl_rm_score"], e["hopgym_reward"], abs_tol=1e-6)
        assert e["verl_reward_terms"] == e["hopgym_reward_terms"] and len(e["hopgym_reward_terms"]) > 1
        assert e["verl_reward_extra_info"] == {f"reward/{k}": v for k, v in e["hopgym_reward_terms"].items()}
        assert e["verl_num_turns"] == 2 * e["turns"] and e["policy_tokens"] > 0 and e["env_tokens"] > 0
    assert len({e["hopgym_reward"] for e in episodes}) == 2  # two questions, two different rewards


@needs_verl
def test_dataset_command_writes_one_row_per_question(tmp_path, capsys):
    import pandas as pd

    from hopgym.integrations.verl import main

    main(
        [
            str(tmp_path / "d" / "tiny.parquet"),
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            "reward=kunlun",
            "max_turns=4",
        ]
    )
    assert "tiny.parquet" in capsys.readouterr().out
    rows = pd.read_parquet(tmp_path / "d" / "tiny.parquet")
    assert len(rows) == 6 and set(rows["agent_name"]) == {"hopgym_agent"}
    extra = rows["extra_info"][5]
    assert extra["env_kwargs"] == {"reward": "kunlun", "max_turns": 4} and extra["question_id"] == "tiny-6"
    assert rows["prompt"][5][0]["role"] == "user" and rows["prompt"][5][0]["content"].endswith("?")
    with pytest.raises(HopgymError, match="max_turnz"):
        main([str(tmp_path / "x.parquet"), "--env", "hopgym/Tiny-v1", "--kw", "max_turnz=4"])


def _check_module():
    """``examples/verl_agent_loop_check.py`` as a module (Ray pickles its client by value)."""
    import importlib.util as iu

    if "verl_agent_loop_check" not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "examples" / "verl_agent_loop_check.py"
        spec = iu.spec_from_file_location("verl_agent_loop_check", path)
        module = iu.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["verl_agent_loop_check"]


@needs_verl
def test_an_import_in_the_launching_process_does_not_reach_verls_workers():
    """Without agent_loop_config_path, verl's Ray workers know no hopgym_agent, though the
    launching process imported hopgym.integrations.verl: why the recipe names the class in YAML."""
    result = _check_module().run_check(n=1, num_workers=1, rows=1, agent_loop_yaml=False)
    (worker,) = result["workers"]
    assert worker["hopgym_agent_entry"] is None and not worker["hopgym_module_imported"]
    assert "hopgym_agent not registered" in result["error"]
