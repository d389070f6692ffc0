"""The term contract over whole stacks: sums, order independence, clashes, pickling, resets."""

from __future__ import annotations

import copy
import itertools
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
from reward_helpers import (
    ADVERSARIES,
    ORACLE,
    TINY_IDS,
    ScriptedInfoEnv,
    answer,
    invalid,
    play,
    run,
    search,
    tiny,
)

from hopgym.envs import Answer, Route, Search, Think
from hopgym.rewards import (
    FormatReward,
    OutcomeReward,
    RedundancyReward,
    RelevanceReward,
    RewardTermError,
    SearchCostReward,
    reward_terms_of,
)

# Each wrapper of a full stack, as a function of the env below it.
LAYERS = {
    "outcome": lambda e: OutcomeReward(e, "f1", weight=2.0, no_answer=-0.25),
    "relevance": lambda e: RelevanceReward(e, "gold", weight=0.7, scaling=(1.6, 0.8, 0.9)),
    "format": lambda e: FormatReward(e, penalty=0.3, terminate=True, bonus=0.1),
    "cost": lambda e: SearchCostReward(e, weight=0.5, per_search=0.05),
    "redundancy": lambda e: RedundancyReward(e, query_penalty=0.2, doc_penalty=0.01),
}


def stack(env, order):
    for name in order:
        env = LAYERS[name](env)
    return env


def random_policy(seed):
    rng = np.random.default_rng(seed)
    pool = [
        "<search>Qelvor Dynamics founder</search>",
        "<search>Maren Oskdal born</search>",
        "<search>Lorn</search>",
        "<route>web</route>",
        "<route>local</route>",
        "<answer>Cardell</answer>",
        "<answer>Lorn or Cardell</answer>",
        "nonsense",
        "<think>hmm</think>",
        "<answer>Brenmark</answer>",
        "<search>Cardell country</search>",
    ]

    def act(obs, info, sample):
        return pool[int(rng.integers(len(pool)))]

    return act


@pytest.mark.parametrize(
    "order", list(itertools.permutations(LAYERS)), ids=lambda o: ">".join(x[:3] for x in o)
)
def test_stacking_order_does_not_change_episode_totals(order):
    # 120 orders x (oracle + 3 adversaries + 2 random rollouts); each total is compared with the
    # reference order's, exactly (the reward is an exact fsum of the same terms). The routing
    # question and the budget of 5 make the random rollouts hit truncation, invalid turns and
    # the forced end.
    env = stack(tiny(None, sources=("local", "web"), max_turns=5), order)
    ref = stack(tiny(None, sources=("local", "web"), max_turns=5), tuple(LAYERS))
    policies = [
        ORACLE,
        *[a for a in ADVERSARIES if a.name in ("stuff_or", "search_to_limit", "invalid_spam_then_correct")],
    ]
    for qid in ("tiny-5",):
        for p in policies:
            a, b = play(env, p, qid), play(ref, p, qid)
            assert a.total == b.total and a.terms == b.terms, (p, a.terms, b.terms)
        for seed in (1, 2):
            a = run(env, random_policy(seed), options={"question_id": qid})
            b = run(ref, random_policy(seed), options={"question_id": qid})
            assert a.total == b.total and dict(a.terms) == dict(b.terms)


def test_full_stack_sum_invariant_on_random_rollouts():
    env = stack(tiny(None, sources=("local", "web"), max_turns=6), tuple(LAYERS))
    for seed in range(30):
        ep = run(env, random_policy(seed), options={"question_id": TINY_IDS[seed % 6]})
        assert math.isclose(ep.total, math.fsum(ep.terms.values()), abs_tol=1e-9)
        assert set(ep.terms) == set(reward_terms_of(env))


def test_every_term_is_written_on_every_step():
    env = stack(tiny(None, max_turns=4), tuple(LAYERS))
    ep = play(env, ORACLE, "tiny-3")
    names = set(reward_terms_of(env))
    assert all(set(i["reward_terms"]) == names for i in ep.infos)


def test_the_same_term_name_twice_is_a_clear_error():
    env = OutcomeReward(tiny(None))
    with pytest.raises(RewardTermError, match="'outcome'.*already written.*name="):
        OutcomeReward(env, "f1")
    OutcomeReward(env, "f1", name="outcome_f1")  # a new name is fine
    with pytest.raises(RewardTermError, match="relevance"):
        RelevanceReward(RelevanceReward(tiny(None)))


class _AddsTerm(gym.Wrapper):
    """A foreign wrapper that writes a term the hopgym wrappers do not know about."""

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        info = dict(info, reward_terms={"outcome": 5.0})
        return obs, r + 5.0, te, tr, info


class _AddsReward(gym.Wrapper):
    """A foreign wrapper that changes the reward without a term."""

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        return obs, r + 0.5, te, tr, info


def test_a_clash_at_step_time_with_a_foreign_term_raises():
    env = OutcomeReward(_AddsTerm(tiny(None)))
    env.reset(seed=0)
    with pytest.raises(RewardTermError, match="already has \\['outcome'\\]"):
        env.step("<answer>x</answer>")


def test_reward_without_a_term_is_kept_as_unattributed():
    env = FormatReward(_AddsReward(tiny(None)), penalty=0.1)
    env.reset(seed=0)
    _, r, *_, info = env.step("garbage")
    assert info["reward_terms"] == {"unattributed": 0.5, "format": -0.1}
    assert r == pytest.approx(0.4)


def test_an_end_only_wrapper_mid_episode():
    # OutcomeReward scores no step: mid-episode it writes its term as 0.0, keeps a reward paid
    # below it without a term, and still refuses a term name written below it.
    env = OutcomeReward(tiny(None))
    env.reset(seed=0)
    _, r, te, tr, info = env.step("<think>first</think>")
    assert (r, te, tr, info["reward_terms"]) == (0.0, False, False, {"outcome": 0.0})
    env = OutcomeReward(_AddsReward(tiny(None)))
    env.reset(seed=0)
    _, r, *_, info = env.step("<think>first</think>")
    assert (r, info["reward_terms"]) == (0.5, {"unattributed": 0.5, "outcome": 0.0})
    env = OutcomeReward(_AddsTerm(tiny(None)))
    env.reset(seed=0)
    with pytest.raises(RewardTermError, match="already has \\['outcome'\\]"):
        env.step("<think>first</think>")


def test_pickling_and_deepcopy_of_wrapped_envs_keep_behaviour():
    env = stack(tiny(None, sources=("local", "web"), max_turns=5), tuple(LAYERS))
    env.reset(options={"question_id": "tiny-5"})
    env.step(Route("web"))
    clone = pickle.loads(pickle.dumps(env))
    twin = copy.deepcopy(env)
    for e in (env, clone, twin):  # mid-episode state travels too
        _, r1, *_ = e.step(Search("The Glass Orchard directed"))
        _, r2, *_, info = e.step(Answer("Lorn"))
        assert (r1, r2) == pytest.approx((-0.525 + 0.35, 2 + 0.1 + 0.6 * 0.35))


def test_reset_clears_episode_state():
    env = RedundancyReward(RelevanceReward(FormatReward(tiny(None), penalty=0.2)), query_penalty=0.3)
    first = play(env, ORACLE, "tiny-2")
    again = play(env, ORACLE, "tiny-2")
    assert first.total == again.total == pytest.approx(1.0)
    env.reset(options={"question_id": "tiny-2"})
    env.step("bad")
    env.reset(options={"question_id": "tiny-2"})
    assert env.get_wrapper_attr("invalid_turns") == 0


def test_constructor_args_are_recorded_in_the_spec():
    env = gym.make("hopgym/Tiny-v1", reward=None)
    env = OutcomeReward(env, "f1", weight=0.5)
    wrapper_spec = env.spec.additional_wrappers[-1]
    assert wrapper_spec.name == "OutcomeReward"
    assert wrapper_spec.kwargs["metric"] == "f1" and wrapper_spec.kwargs["weight"] == 0.5
    assert wrapper_spec.entry_point == "hopgym.rewards.answer_reward:OutcomeReward"


def test_episode_end_at_the_budget_is_settled():
    # The env truncates at its one budget (max_turns); the wrapper settles its end terms there.
    script = [search("q", ["d1"]), search("q2", [])]
    env = RelevanceReward(ScriptedInfoEnv(script * 3, max_turns=2), scaling=(2.0, 1.0, 0.5))
    ep = run(env, ["a", "b"])
    assert ep.truncated and ep.terms["relevance"] == 0.5
    assert ep.terms["relevance_scale"] == pytest.approx(-0.25)


def test_forced_end_settles_wrappers_below():
    # FormatReward(terminate) ends the episode; the relevance scaling below it is still settled.
    script = [search("q", ["d1", "d2"]), invalid(), answer("Cardell")]
    below = FormatReward(
        RelevanceReward(ScriptedInfoEnv(script), scaling=(1.6, 0.8, 0.9)), penalty=0.9, terminate=True
    )
    above = RelevanceReward(
        FormatReward(ScriptedInfoEnv(script), penalty=0.9, terminate=True), scaling=(1.6, 0.8, 0.9)
    )
    for env in (below, above):
        ep = run(env, ["a", "b", "c"])
        assert ep.terminated and ep.steps == 2
        assert dict(ep.terms) == pytest.approx({"relevance": 1.0, "relevance_scale": -0.1, "format": -0.9})


def test_terms_of_think_turns_are_zero():
    env = stack(tiny(None), tuple(LAYERS))
    env.reset(seed=0)
    _, r, *_, info = env.step(Think("let me think"))
    assert r == 0.0 and set(info["reward_terms"].values()) == {0.0}
