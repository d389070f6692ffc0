"""Token-level rollouts: masks, log-probs and the no-re-tokenisation contract."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hopgym  # noqa: E402,F401
from hopgym.agents.rollout import (  # noqa: E402
    RolloutCollector,
    RolloutConfig,
    Trajectory,
    encode_prompt,
    policy_stats,
    sequence_logprobs,
    stop_token_ids,
    summarize,
)
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import teacher_examples  # noqa: E402
from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig  # noqa: E402
from hopgym.agents.tiny_lm import (  # noqa: E402
    TinyLMConfig,
    build_model,
    build_tokenizer,
    normalize_text,
    task_texts,
)

TINY = TinyLMConfig(layers=1, hidden=32, heads=2, ffn=64, max_positions=512)


def make_env(reward: str | None = "searchr1") -> gym.Env:
    return gym.make("hopgym/Tiny-v1", reward=reward)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(task_texts(make_env(None).unwrapped.task))


@pytest.fixture(scope="module")
def model(tok):
    return build_model(TINY, tok, seed=0)


@pytest.fixture(scope="module")
def qids():
    return [s.id for s in make_env(None).unwrapped.task.samples]


def test_tokenizer_round_trips_normalised_text_and_tags_are_single_tokens(tok):
    text = "<think>Who?</think><search>Sefa Quill father</search>"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == normalize_text(text)
    for tag in ("<search>", "</search>", "<answer>", "</answer>", "<information>"):
        assert len(tok.encode(tag, add_special_tokens=False)) == 1
    # A name right after a tag gets the same token as inside a sentence (copyable).
    a = tok.encode("<answer>Emery Quill</answer>", add_special_tokens=False)
    b = tok.encode("father is Emery Quill.", add_special_tokens=False)
    assert a[1:3] == b[2:4]
    assert tok.unk_token_id not in a


def test_stop_ids_cover_the_tags_protocol(tok):
    ids, strings = stop_token_ids(tok, ("</search>", "</route>", "</answer>"))
    assert strings == ()
    assert tok.eos_token_id in ids and len(ids) == 4


def check_layout(traj: Trajectory, tok, env_eos: bool = True) -> None:
    """Every invariant of a trajectory's token layout."""
    n = len(traj.completion_ids)
    assert len(traj.mask) == len(traj.logprobs) == n
    # Spans tile the completion in order; masks and log-probs follow the span kind.
    pos = 0
    for kind, start, end in traj.spans:
        assert start == pos and end > start
        pos = end
        for i in range(start, end):
            assert traj.mask[i] == (1 if kind == "model" else 0)
            if kind == "env":
                assert traj.logprobs[i] == 0.0
            else:
                assert traj.logprobs[i] <= 0.0 and math.isfinite(traj.logprobs[i])
    assert pos == n
    model_spans = [(s, e) for k, s, e in traj.spans if k == "model"]
    env_spans = [(s, e) for k, s, e in traj.spans if k == "env"]
    # Decoding the mask-1 tokens of each model turn gives exactly the text the env read.
    assert len(model_spans) == len(traj.turns) == traj.steps
    for (s, e), turn in zip(model_spans, traj.turns, strict=True):
        assert tok.decode(traj.completion_ids[s:e], skip_special_tokens=True) == turn
    # The mask-0 tokens are the tokenised observations (then the closing EOS); the observation
    # of the last step is not shown, as the episode is over.
    shown = [o for o in traj.observations[:-1] if o]
    if not traj.truncated:
        assert len(env_spans) == len(shown) + 1
    for (s, e), obs in zip(env_spans, shown, strict=False):
        ids = tok.encode(obs, add_special_tokens=False)
        assert traj.completion_ids[s:e] == ids[: e - s]
    assert traj.completion_ids[-1] == tok.eos_token_id
    assert traj.mask[-1] == 0


def test_collector_masks_and_logprobs_are_exact(tok, model, qids):
    cfg = RolloutConfig(temperature=1.0, max_new_tokens=10, max_completion_tokens=240)
    col = RolloutCollector(model, tok, lambda: make_env("searchr1"), cfg)
    trajs = col.collect(qids[:3], group_size=2, seed=0)
    assert [t.question_id for t in trajs] == [q for q in qids[:3] for _ in range(2)]
    for t in trajs:
        check_layout(t, tok)
        assert len(t.completion_ids) <= cfg.max_completion_tokens
        assert math.isclose(t.reward, sum(t.reward_terms.values()), abs_tol=1e-9)
    # The sampling log-probs are what a forward pass over prompt + completion gives (what TRL
    # recomputes), token for token, on every model token.
    t = trajs[0]
    ids = torch.tensor([t.prompt_ids + t.completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float() / cfg.temperature
    logp = torch.log_softmax(logits, -1)
    p = len(t.prompt_ids)
    for i, (tok_id, m) in enumerate(zip(t.completion_ids, t.mask, strict=True)):
        if m:
            assert abs(logp[p + i - 1, tok_id].item() - t.logprobs[i]) < 1e-4


@pytest.mark.parametrize("max_positions", [1, 60, 10**6])
def test_sequence_logprobs_are_the_sampling_logprobs_in_any_packing(tok, model, qids, max_positions):
    """The log-prob pass packs trajectories of similar length under a bound on the positions
    projected onto the vocabulary (1: each alone; 10**6: all in one pass); every packing gives
    the sampling log-probs back on the model tokens, in the trajectories' own order."""
    cfg = RolloutConfig(temperature=0.7, max_new_tokens=10, max_completion_tokens=240)
    trajs = RolloutCollector(model, tok, lambda: make_env(None), cfg).collect(qids[:3], 2, seed=1)
    assert len({len(t.prompt_ids) + len(t.completion_ids) for t in trajs}) > 1  # padding is exercised
    got = sequence_logprobs(model, trajs, cfg.temperature, max_positions=max_positions)
    for t, lps in zip(trajs, got, strict=True):
        assert len(lps) == len(t.completion_ids)
        for lp, sampled, m in zip(lps, t.logprobs, t.mask, strict=True):
            if m:
                assert abs(lp - sampled) < 1e-4
    assert policy_stats(trajs, model, cfg.temperature)["kl_ref"] < 1e-6  # the model against itself


def test_sequence_logprobs_tiled_head_matches_full_logits(tok, model, qids, monkeypatch):
    """The backbone-and-tiled-head pass gives the full-logits pass's values at every completion
    token; with model_tokens_only, the model's tokens keep them and env tokens are 0.0."""
    import hopgym.agents.rollout as rollout

    cfg = RolloutConfig(temperature=0.7, max_new_tokens=10, max_completion_tokens=240)
    trajs = RolloutCollector(model, tok, lambda: make_env(None), cfg).collect(qids[:2], 2, seed=2)
    assert any(0 in t.mask for t in trajs)  # observation tokens inside the completions
    assert rollout._plain_head(model) is not None
    monkeypatch.setattr(rollout, "LOGPROB_TILE_BYTES", 4 * len(tok) * 3)  # tiles of 3 positions
    tiled = sequence_logprobs(model, trajs, cfg.temperature)
    only = sequence_logprobs(model, trajs, cfg.temperature, model_tokens_only=True)
    monkeypatch.setattr(rollout, "_plain_head", lambda m: None)
    full = sequence_logprobs(model, trajs, cfg.temperature)
    for t, a, b, c in zip(trajs, tiled, full, only, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
        assert c == pytest.approx([x if m else 0.0 for x, m in zip(a, t.mask, strict=True)], abs=1e-5)
        assert all(x == 0.0 for x, m in zip(c, t.mask, strict=True) if not m)


def test_collect_is_reproducible_by_seed(tok, model, qids):
    col = RolloutCollector(
        model,
        tok,
        lambda: make_env(None),
        RolloutConfig(temperature=1.0, max_new_tokens=8, max_completion_tokens=120),
    )
    a = col.collect(qids[:2], 2, seed=3)
    b = col.collect(qids[:2], 2, seed=3)
    c = col.collect(qids[:2], 2, seed=4)
    assert [x.completion_ids for x in a] == [x.completion_ids for x in b]
    assert [x.completion_ids for x in a] != [x.completion_ids for x in c]


class ScriptedLM(torch.nn.Module):
    """A fake causal LM that emits a fixed token script (batch of one), to pin the ids exactly."""

    def __init__(self, vocab: int, turns: list[list[int]]) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.turns = vocab, turns
        self.turn, self.j = -1, 0

    def forward(
        self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None
    ):
        if input_ids.shape[1] > 1:  # a new turn starts with a prefill
            self.turn, self.j = self.turn + 1, 0
        script = self.turns[self.turn]
        nxt = script[min(self.j, len(script) - 1)]
        self.j += 1
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -30.0)
        logits[:, -1, nxt] = 30.0

        class Out:
            pass

        out = Out()
        out.logits, out.past_key_values = logits, None
        return out


def test_model_ids_are_kept_as_generated_not_retokenised(tok, qids):
    # "Sefa" without the space marker is a valid token, but tokenising the decoded text would
    # give "▁Sefa" instead: the trajectory must keep the id the model produced.
    bare = tok.convert_tokens_to_ids("Sefa")
    spaced = tok.convert_tokens_to_ids("▁Sefa")
    assert bare != tok.unk_token_id and spaced != tok.unk_token_id
    ids = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    turn1 = [ids("<search>")[0], bare, *ids(" Quill father"), ids("</search>")[0]]
    turn2 = [*ids("<answer> Emery Quill"), ids("</answer>")[0]]
    assert tok.encode(tok.decode(turn1), add_special_tokens=False) != turn1  # not canonical
    lm = ScriptedLM(len(tok), [turn1, turn2])
    col = RolloutCollector(
        lm,
        tok,
        lambda: make_env("default"),
        RolloutConfig(temperature=0.0, max_new_tokens=12, max_completion_tokens=400),
    )
    qid = next(q for q in qids if q == "tiny-6")  # the grandfather of Sefa Quill
    (t,) = col.collect([qid], 1, seed=0)
    model_ids = [i for i, m in zip(t.completion_ids, t.mask, strict=True) if m]
    assert model_ids == turn1 + turn2
    assert t.turns[0] == tok.decode(turn1)
    assert t.answer == "Emery Quill" and t.em == 1.0 and t.reward == 1.0
    assert all(abs(lp) < 1e-6 for lp, m in zip(t.logprobs, t.mask, strict=True) if m)
    check_layout(t, tok)


def test_token_budget_cuts_the_episode(tok, model, qids):
    col = RolloutCollector(
        model,
        tok,
        lambda: make_env(None),
        RolloutConfig(temperature=1.0, max_new_tokens=8, max_completion_tokens=40),
    )
    for t in col.collect(qids[:2], 2, seed=1):
        assert len(t.completion_ids) <= 40
        assert t.completion_ids[-1] == tok.eos_token_id and t.mask[-1] == 0
        assert t.truncated or t.terminated


def test_rollout_config_rejects_bad_values():
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=-1)
    with pytest.raises(ValueError, match="max_completion_tokens"):
        RolloutConfig(max_new_tokens=64, max_completion_tokens=10)
    assert RolloutConfig(temperature=0).greedy


def test_summarize_means():
    a = Trajectory(
        "q", [1], reward=1.0, reward_terms={"outcome": 1.0}, em=1.0, searches=2, steps=3, answer="x"
    )
    b = Trajectory("q", [1], reward=0.0, reward_terms={"outcome": 0.0}, invalid=1, steps=1)
    s = summarize([a, b])
    assert s["em"] == 0.5 and s["reward_terms/outcome"] == 0.5
    assert s["invalid_rate"] == 0.25 and s["answered"] == 0.5


# ------------------------------------------------------------------ teachers and SFT data
def test_sft_examples_mask_exactly_the_teacher_turns(tok, qids):
    exs = teacher_examples(lambda: make_env(None), lambda e: OracleAgent(e), qids, tok, seed=0)
    assert [e["em"] for e in exs] == [1.0] * len(qids)
    for ex in exs:
        ids, mask, msgs = ex["input_ids"], ex["completion_mask"], ex["messages"]
        assert len(ids) == len(mask)
        prompt = encode_prompt(tok, msgs[0]["content"])
        assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)])
        trained = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
        turns = [m["content"] for m in msgs if m["role"] == "assistant"]
        assert trained == normalize_text("".join(turns))
        env_part = [i for i, m in zip(ids[len(prompt) :], mask[len(prompt) :], strict=True) if not m]
        obs = [m["content"] for m in msgs[1:] if m["role"] == "user"]
        assert env_part == [i for o in obs for i in tok.encode(o, add_special_tokens=False)] + [
            tok.eos_token_id
        ]


def test_imperfect_teacher_flaws():
    env = make_env("default")
    early = ImperfectTeacher(env, TeacherConfig(early_answer=1.0, think=False), seed=0)
    obs, info = env.reset(options={"question_id": "tiny-2"})  # 2 hops: founder -> birthplace
    action = early.act(obs, info)
    assert action.think == ""
    while True:
        obs, r, term, trunc, info = env.step(action)
        if term or trunc:
            break
        action = early.act(obs, info)
    assert info["answer"] == "Maren Oskdal" and r == 0.0  # the bridge entity, one hop early
    with pytest.raises(ValueError, match="contradict"):
        TeacherConfig(never_route=True, random_route=0.5)
    routed = gym.make("hopgym/Tiny-v1", sources=("local", "web"), reward="default")
    never = ImperfectTeacher(routed, TeacherConfig(never_route=True), seed=0)
    for q in ("tiny-5", "tiny-6"):
        never.reset()
        obs, info = routed.reset(options={"question_id": q})
        done = False
        while not done:
            a = never.act(obs, info)
            assert type(a).__name__ != "Route"
            obs, r, term, trunc, info = routed.step(a)
            done = term or trunc


def test_env_workers_is_checked():
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="env_workers"):
            RolloutConfig(env_workers=bad)


class Counting:
    """Counts the input tokens (padding included) of every forward pass of a model."""

    def __init__(self, model) -> None:
        self.tokens = 0
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs) -> None:
        self.tokens += kwargs["input_ids"].numel()


@pytest.mark.parametrize(
    ("protocol", "temperature"), [("tags", 0.0), ("tags", 1.0), ("r3", 0.0), ("r3", 1.0)]
)
def test_kept_cache_gives_the_trajectories_of_a_full_prefill(tok, qids, protocol, temperature):
    # Two layers, so that a held state feeds the next layer's keys; batches of 4 over 12 episodes
    # (each batch keeps its own cache), and a token budget that cuts some episodes.
    model = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=1)
    runs, fed = {}, {}
    for keep in (False, True):
        cfg = RolloutConfig(
            temperature=temperature,
            max_new_tokens=10,
            max_completion_tokens=200,
            batch_size=4,
            keep_cache=keep,
        )
        col = RolloutCollector(model, tok, lambda: gym.make("hopgym/Tiny-v1", protocol=protocol), cfg)
        count = Counting(model)
        try:
            runs[keep] = col.collect(qids[:4], group_size=3, seed=7)
        finally:
            count.handle.remove()
            col.close()
        fed[keep] = count.tokens
    full, kept = runs[False], runs[True]
    assert sum(t.steps for t in kept) > len(kept)  # multi-turn episodes
    assert [t.prompt_ids for t in kept] == [t.prompt_ids for t in full]
    assert [t.completion_ids for t in kept] == [t.completion_ids for t in full]
    assert [t.mask for t in kept] == [t.mask for t in full]
    assert [t.spans for t in kept] == [t.spans for t in full]
    assert [t.turns for t in kept] == [t.turns for t in full]
    assert [t.reward for t in kept] == [t.reward for t in full]
    for a, b in zip(kept, full, strict=True):
        check_layout(a, tok)
        # The same log-probs, up to float rounding (the states are summed in another order).
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # Only the new tokens of each turn were prefilled.
    assert fed[True] < 0.6 * fed[False]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prefill_in_buckets_gives_the_trajectories_of_one_pass(tok, qids, temperature, monkeypatch):
    """A turn's prefill split into passes by the rows' lengths (every split taken: no minimum
    saving, no pass cost) samples what one pass padded to the longest row does, feeding fewer
    padding tokens."""
    import hopgym.agents.rollout as rollout

    model = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=1)
    runs, fed, passes = {}, {}, {}
    for buckets in (1, 4):
        monkeypatch.setattr(rollout, "PREFILL_BUCKETS", buckets)
        monkeypatch.setattr(rollout, "PREFILL_MIN_SAVING", 0.0)
        monkeypatch.setattr(rollout, "PREFILL_PASS_TOKENS", 0)
        cfg = RolloutConfig(
            temperature=temperature, max_new_tokens=10, max_completion_tokens=200, batch_size=6
        )
        col = RolloutCollector(model, tok, lambda: gym.make("hopgym/Tiny-v1"), cfg)
        widths: list = []
        handle = model.register_forward_pre_hook(
            lambda module, args, kwargs, widths=widths: widths.append(kwargs["input_ids"].shape),
            with_kwargs=True,
        )
        try:
            runs[buckets] = col.collect(qids[:6], group_size=2, seed=5)
        finally:
            handle.remove()
            col.close()
        fed[buckets] = sum(a * b for a, b in widths if b > 1)
        passes[buckets] = sum(b > 1 for _, b in widths)
    one, split = runs[1], runs[4]
    assert sum(t.steps for t in split) > len(split)  # multi-turn episodes
    assert [t.completion_ids for t in split] == [t.completion_ids for t in one]
    assert [t.mask for t in split] == [t.mask for t in one]
    assert [t.reward for t in split] == [t.reward for t in one]
    for a, b in zip(split, one, strict=True):
        check_layout(a, tok)
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert passes[4] > passes[1] and fed[4] < fed[1]


def test_kept_cache_is_not_used_without_a_plain_cache(tok, qids):
    # ScriptedLM has no config: its cache cannot be cut and stacked, so every turn is prefilled
    # from the start (the fake counts a turn at each prefill of more than one token).
    ids = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    turn1 = [*ids("<search> Sefa Quill father"), ids("</search>")[0]]
    turn2 = [*ids("<answer> Emery Quill"), ids("</answer>")[0]]
    lm = ScriptedLM(len(tok), [turn1, turn2])
    col = RolloutCollector(lm, tok, lambda: make_env("default"), RolloutConfig(temperature=0.0))
    assert col.config.keep_cache
    (t,) = col.collect(["tiny-6"], 1, seed=0)
    assert [i for i, m in zip(t.completion_ids, t.mask, strict=True) if m] == turn1 + turn2


def _collect_both_ways(tok, qids, temperature):
    """Two questions x 4 episodes with and without the kept cache: ``{keep: (trajectories,
    input_ids shapes of every forward pass)}``."""
    model = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=1)
    out = {}
    for keep in (False, True):
        cfg = RolloutConfig(
            temperature=temperature, max_new_tokens=10, max_completion_tokens=200, keep_cache=keep
        )
        col = RolloutCollector(model, tok, lambda: gym.make("hopgym/Tiny-v1"), cfg)
        seen: list = []
        handle = model.register_forward_pre_hook(
            lambda module, args, kwargs, seen=seen: seen.append(tuple(kwargs["input_ids"].shape)),
            with_kwargs=True,
        )
        try:
            out[keep] = col.collect(qids[:2], group_size=4, seed=3), seen
        finally:
            handle.remove()
            col.close()
    return out


def test_a_group_prefills_its_prompt_once(tok, qids):
    # The first turn of G episodes of one question: one prompt, prefilled for one row and its
    # states copied to the G rows; the episodes still sample apart and match a full prefill.
    (full, full_shapes), (kept, kept_shapes) = _collect_both_ways(tok, qids, 1.0).values()
    prompt = max(len(t.prompt_ids) for t in kept)
    assert full_shapes[0] == (8, prompt)
    assert kept_shapes[0] == (2, prompt)  # two questions: two distinct prompts
    assert [t.completion_ids for t in kept] == [t.completion_ids for t in full]
    assert len({tuple(t.completion_ids) for t in kept}) > 2  # the copies sampled apart


def test_episodes_with_the_same_turns_so_far_are_prefilled_once(tok, qids):
    # Greedy episodes of one question write the same turns, so every prefill after the first turn
    # has one row per question, not per episode; the trajectories are those of a full prefill.
    (full, full_shapes), (kept, kept_shapes) = _collect_both_ways(tok, qids, 0.0).values()
    assert sum(t.steps for t in kept) > len(kept)  # episodes with more than one turn
    # The batch sizes of the prefills (passes of more than one position).
    assert {n for n, width in full_shapes if width > 1} == {8}
    assert {n for n, width in kept_shapes if width > 1} == {2}
    assert sum(width > 1 for _, width in kept_shapes) > 1  # later turns were prefilled too
    assert [t.completion_ids for t in kept] == [t.completion_ids for t in full]
    for a, b in zip(kept, full, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_roomy_cache_writes_decoded_states_in_place(tok):
    # The collector's cache reserves room after the prefill: decoding writes into it (one buffer
    # for the whole turn) and gives the logits of transformers' concatenating cache.
    from transformers import DynamicCache

    from hopgym.agents.rollout import _roomy_cache
    from hopgym.backends.transformers_backend import _cache_kwarg

    model = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=1)
    kw = _cache_kwarg(model)
    ids = torch.randint(5, len(tok), (3, 12), generator=torch.Generator().manual_seed(0))
    out = {}
    with torch.no_grad():
        for name, cache in (("roomy", _roomy_cache(model.config, 4)), ("dynamic", DynamicCache())):
            logits, pointers = [], []
            model(input_ids=ids[:, :8], use_cache=True, **{kw: cache})
            for i in range(8, 12):
                res = model(input_ids=ids[:, i : i + 1], use_cache=True, **{kw: cache})
                logits.append(res.logits[:, -1])
                pointers.append(cache.layers[0].keys.data_ptr())
            out[name] = torch.stack(logits), pointers, cache.layers[0].keys.shape[-2]
        assert out["roomy"][2] == out["dynamic"][2] == 12
        assert len(set(out["roomy"][1])) == 1  # the decoded states went into the reserved room
        # A concatenation per step: each step's buffer is new (the allocator may hand an address
        # back two steps later, but never the one still alive while the next is written).
        dyn = out["dynamic"][1]
        assert all(a != b for a, b in zip(dyn[:-1], dyn[1:], strict=True))
        assert torch.allclose(out["roomy"][0], out["dynamic"][0], atol=1e-6)

        # Rows selected from outside (as the collector does between turns) move into a new
        # buffer at the next update, with room again: the step after it writes in place.
        roomy, rows = _roomy_cache(model.config, 2), torch.tensor([2, 0])
        model(input_ids=ids[:, :8], use_cache=True, **{kw: roomy})
        for layer in roomy.layers:
            layer.keys, layer.values = layer.keys.index_select(0, rows), layer.values.index_select(0, rows)
        model(input_ids=ids[rows, 8:9], use_cache=True, **{kw: roomy})
        moved = roomy.layers[0].keys.data_ptr()
        res = model(input_ids=ids[rows, 9:10], use_cache=True, **{kw: roomy})
        assert roomy.layers[0].keys.shape[-2] == 10
        assert roomy.layers[0].keys.data_ptr() == moved
        whole = model(input_ids=ids[rows, :10]).logits[:, -1]
        assert torch.allclose(res.logits[:, -1], whole, atol=1e-5)


def test_a_tool_call_turn_counts_every_search_it_made():
    # A tools-protocol turn may run several calls; info["calls"] holds each call's info, and
    # every search among them counts (a turn of one action counts itself, as before).
    from types import SimpleNamespace

    from hopgym.agents.rollout import RolloutCollector, Trajectory, _Episode

    collector = object.__new__(RolloutCollector)
    collector.config = SimpleNamespace(max_completion_tokens=64)
    collector.tokenizer = SimpleNamespace(
        eos_token_id=None, encode=lambda text, add_special_tokens=False: [1] * len(text.split())
    )
    ep = _Episode(0, ["x"], Trajectory("q", [1]))
    calls = [{"action_type": "search"}, {"action_type": "search"}, {"action_type": "invalid"}]
    collector._env_step(
        ep, "turn", ("two results", 0.0, False, False, {"action_type": "invalid", "calls": calls})
    )
    assert (ep.traj.searches, ep.traj.invalid) == (2, 1)
    collector._env_step(ep, "turn", ("a result", 0.0, False, False, {"action_type": "search"}))
    assert (ep.traj.searches, ep.traj.steps) == (3, 2)


def test_right_source_searches_count_where_the_oracle_would_search_next():
    # With two sources, a search is right when it is made on the source of the first gold hop
    # whose document the episode has not seen: the oracle always is; a teacher that routes at
    # random is not when it searches the web for local documents (or local for web ones).
    from types import SimpleNamespace

    from hopgym.agents.rollout import _Episode

    collector = object.__new__(RolloutCollector)
    collector.config = SimpleNamespace(max_completion_tokens=10_000)
    collector.tokenizer = SimpleNamespace(
        eos_token_id=None, encode=lambda text, add_special_tokens=False: [1]
    )
    env = gym.make(
        "hopgym/SyntheticRouting-v1", hops=2, n_entities=100, n_questions=60, max_turns=6, reward=None
    )
    qids = [s.id for s in env.unwrapped.task.samples][:24]

    def episodes(agent):
        for q in qids:
            agent.reset()
            obs, info = env.reset(seed=0, options={"question_id": q})
            sample = env.unwrapped.sample
            ep = _Episode(0, sample.answers, Trajectory(q, [1]), sample.decomposition)
            while not ep.done:
                text = env.unwrapped.protocol.render(agent.act(obs, info))
                result = env.step(text)
                collector._env_step(ep, text, result)
                obs, info = result[0], result[-1]
            yield sample, ep.traj, info["searches_by_source"]

    oracle = list(episodes(OracleAgent(env)))
    assert all(t.right_source_searches == t.searches > 0 for _, t, _ in oracle)
    assert summarize([t for _, t, _ in oracle])["right_source_rate"] == 1.0
    wrong = 0
    for sample, t, by_source in episodes(ImperfectTeacher(env, TeacherConfig(random_route=1.0), seed=0)):
        assert 0 <= t.right_source_searches <= t.searches
        if by_source["web"] and all(h.source == "local" for h in sample.decomposition):
            assert t.right_source_searches == 0  # paid the web for local documents
            wrong += 1
    assert wrong > 0
    # One source: nothing to route, no count and no rate.
    single = Trajectory("q", [1], searches=2)
    assert _Episode(0, ["x"], single).traj.right_source_searches is None
    assert "right_source_rate" not in summarize([single])


def test_greedy_episodes_in_one_batch_are_the_episodes_one_at_a_time(tok, qids):
    # Evaluation samples every held-out episode's turns in batches (batch_size, 64 by default):
    # greedy, the batch gives each episode what it gets alone (padding and shared prefills
    # change nothing but float rounding).
    model = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64, max_positions=512), tok, seed=3)
    runs = {}
    for batch in (1, 64):
        cfg = RolloutConfig(temperature=0.0, max_new_tokens=10, max_completion_tokens=200, batch_size=batch)
        col = RolloutCollector(model, tok, lambda: make_env("default"), cfg)
        runs[batch] = col.collect(qids, 1, seed=0)
        col.close()
    one, batched = runs[1], runs[64]
    assert sum(t.steps for t in batched) > len(batched)  # multi-turn episodes
    assert [t.completion_ids for t in batched] == [t.completion_ids for t in one]
    assert [(t.reward, t.em, t.searches) for t in batched] == [(t.reward, t.em, t.searches) for t in one]
    for a, b in zip(batched, one, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
