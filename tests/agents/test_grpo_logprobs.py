"""GRPO's tiled log-probs (``hopgym.agents.grpo_logprobs``) give TRL's per-token log-probs,
entropies, gradient and training step."""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

import contextlib
import copy
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from test_train import LengthReward, make_env, snapshot, tiny_model  # noqa: E402
from train_fixtures import tiny_grpo  # noqa: E402,F401  (fixtures)
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402

import hopgym.agents.grpo_logprobs as grpo_logprobs  # noqa: E402
from hopgym.agents.grpo import train_grpo  # noqa: E402
from hopgym.agents.rollout import Trajectory  # noqa: E402
from hopgym.agents.tiny_lm import TinyLMConfig, build_model, build_tokenizer, task_texts  # noqa: E402

TEMPERATURE = 0.7


def _trainer_state(mask=None, fp32_head: bool = False) -> types.SimpleNamespace:
    """What the two log-prob methods read of a trainer (a CPU run: no wrapper, no autocast, a
    pass of no prompt's shared pass)."""
    state = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(
            autocast=contextlib.nullcontext, unwrap_model=lambda m: m, is_main_process=True
        ),
        temperature=TEMPERATURE,
        args=types.SimpleNamespace(cast_lm_head_to_fp32=fp32_head),
        _score_mask=mask,
        _current_pass=None,
        _in_loss=False,
    )
    state._backbone = types.MethodType(grpo_logprobs.chunked_grpo_trainer()._backbone, state)
    return state


def _batch(vocab: int):
    """3 rows: a left-padded prompt of 5 and a right-padded completion of 9, and an env mask."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (3, 14), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # prompt padding
    attn[1, -3:] = 0  # completion padding
    env_mask = (torch.rand((3, 9), generator=g) < 0.6).long()
    env_mask[2] = 0  # a row with no model token
    return ids, attn, env_mask


@pytest.mark.parametrize("with_env_mask", [False, True])
def test_tiled_logprobs_and_gradient_match_trl(monkeypatch, with_env_mask: bool):
    # Tiles of 4 positions x 64 entries, so that both tilings run several times over the batch.
    monkeypatch.setattr(grpo_logprobs, "TOKENS_PER_TILE", 4)
    monkeypatch.setattr(grpo_logprobs, "VOCAB_PER_TILE", 64)
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    plain = build_model(TinyLMConfig(layers=2, hidden=32, heads=2, ffn=64), tok, seed=0)
    tiled = copy.deepcopy(plain)
    add_fused_lm_head(plain, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    ids, attn, env_mask = _batch(len(tok))
    assert len(tok) > 64
    score = env_mask * attn[:, -9:] if with_env_mask else attn[:, -9:]
    weights = torch.randn(score.shape, generator=torch.Generator().manual_seed(1))

    results = []
    for model, method, state in (
        (plain, GRPOTrainer._get_per_token_logps_and_entropies, _trainer_state()),
        (
            tiled,
            grpo_logprobs.chunked_grpo_trainer()._get_per_token_logps_and_entropies,
            _trainer_state(env_mask if with_env_mask else None),
        ),
    ):
        logps, entropies, aux = method(state, model, ids, attn, 9, batch_size=2, compute_entropy=True)
        assert aux is None and logps.shape == entropies.shape == (3, 9)
        # A loss of the kind GRPO's is: masked log-probs with per-token weights, an entropy bonus.
        loss = (logps * weights * score).sum() + 0.1 * (entropies * score).sum()
        loss.backward()
        results.append((logps.detach(), entropies.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (lp_a, ent_a, grad_a), (lp_b, ent_b, grad_b) = results
    read = score.bool()
    assert read.sum() > 5
    torch.testing.assert_close(lp_b[read], lp_a[read], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b[read], ent_a[read], atol=1e-5, rtol=1e-5)
    assert (lp_b[~read] == 0).all() and (ent_b[~read] == 0).all()  # left out: 0, as TRL leaves padding
    assert (lp_a[read] < 0).all()
    assert grad_a.keys() == grad_b.keys()
    for name, grad in grad_a.items():
        torch.testing.assert_close(grad_b[name], grad, atol=1e-6, rtol=1e-4, msg=name)


def _sgd_step(tiny_grpo, out: Path, model, tok, qids, trl: dict, **fields) -> tuple:
    """One GRPO step of plain SGD (3 episodes a question, the test reward, no KL logging) with
    ``trl`` and ``fields`` over that: the run and the episodes it sampled."""
    seen: list[Trajectory] = []
    trl = {
        "max_steps": 1,
        "num_generations": 3,
        "learning_rate": 1e-1,
        "optim": "sgd",
        "max_completion_length": 400,
        **trl,
    }
    run = train_grpo(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        qids,
        tiny_grpo(out, track_kl=False, trl=trl, **fields),
        on_trajectories=seen.extend,
    )
    return run, seen


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_step_is_the_same_with_tiled_logprobs(tmp_path: Path, beta: float, tiny_grpo):
    # One GRPO step (plain SGD) with TRL's log-prob path and with the tiled one: the same
    # episodes, the same weights after it, the same logged loss and entropy. beta > 0 brings
    # TRL's reference log-probs (every completion position is then scored).
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    runs = []
    # The tiled path in one loss pass, and in passes of 2 episodes re-cut by length (whose
    # gradients add up to the same update).
    for chunked, micro in ((False, None), (True, None), (True, 2)):
        model = tiny_model(tok)
        run, seen = _sgd_step(
            tiny_grpo,
            tmp_path / f"{chunked}{micro}",
            model,
            tok,
            qids,
            {"beta": beta},
            micro_batch_size=micro,
            chunked_logprobs=chunked,
        )
        assert isinstance(run.trainer, grpo_logprobs.chunked_grpo_trainer()) == chunked
        if micro:  # 3 passes of 2 rows, shortest first, each as wide as its longest completion
            passes = run.trainer._buffered_inputs
            lengths = [m["completion_mask"].sum(1).tolist() for m in passes]
            assert len(passes) == 3 and sum(lengths, []) == sorted(len(t.completion_ids) for t in seen)
            assert [m["completion_ids"].size(1) for m in passes] == [max(n) for n in lengths]
        runs.append((snapshot(model), [(t.completion_ids, t.mask) for t in seen], run.history[0]))
    (w_plain, eps_plain, log_plain), (w_tiled, eps_tiled, log_tiled), (w_micro, eps_micro, _) = runs
    assert eps_plain == eps_tiled == eps_micro
    # The episodes differ in length: the micro-batches are cut from sorted rows, with less padding.
    assert len({len(ids) for ids, _ in eps_plain}) > 1
    # Observation tokens inside the completions: the env mask leaves positions out of the tiled path.
    assert any(0 in mask[:-1] for _, mask in eps_plain)
    start = snapshot(tiny_model(tok))
    assert max((a - b).abs().max().item() for a, b in zip(start, w_plain, strict=True)) > 1e-3
    for a, b, c in zip(w_plain, w_tiled, w_micro, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-6)
    for key in ("loss", "entropy"):
        assert log_tiled[key] == pytest.approx(log_plain[key], rel=1e-4, abs=1e-6), key


def test_grpo_step_is_the_same_with_a_shared_prompt_pass(tmp_path: Path, tiny_grpo):
    # One GRPO step (plain SGD) through TRL's path and with each prompt's backbone pass shared by
    # the loss passes of its episodes, in passes of 1 and of a whole group: the same weights
    # after it, while the backbone sees each prompt once.
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    runs = []
    for shared, micro in ((False, None), (True, 1), (True, 3)):
        model = tiny_model(tok)
        widths: list[int] = []  # positions (rows x columns) per backbone forward in the loss

        def count(_module, _args, kwargs, widths=widths):
            if torch.is_grad_enabled():
                widths.append(kwargs["input_ids"].numel())

        hook = model.model.register_forward_pre_hook(count, with_kwargs=True)
        run, seen = _sgd_step(
            tiny_grpo,
            tmp_path / f"{shared}{micro}",
            model,
            tok,
            qids,
            {"gradient_checkpointing": False},
            micro_batch_size=micro,
            chunked_logprobs=shared,
            shared_prompt=shared,
        )
        hook.remove()
        runs.append((snapshot(model), [(t.prompt_ids, t.completion_ids) for t in seen], widths, run.trainer))
    (w_plain, eps, widths_plain, _), *shared_runs = runs
    prompts = {tuple(p) for p, _ in eps}
    assert len(prompts) == 2 and all(len(p) > 2 for p in prompts)
    assert sum(widths_plain) >= sum(len(p) + len(c) for p, c in eps)
    for (w, eps_shared, widths, trainer), micro in zip(shared_runs, (1, 3), strict=True):
        assert eps_shared == eps
        # Each prompt's pass once (all but its last token), then each loss pass from its last token on.
        assert trainer._prompt_plan is not None and trainer._prompt_pass is None
        assert [last for _, last in trainer._prompt_plan].count(True) == 2
        assert len(widths) == 2 + 6 // micro
        if micro == 1:
            assert sum(widths) == sum(len(p) - 1 for p in prompts) + sum(len(c) + 1 for _, c in eps)
        assert sum(widths) < sum(widths_plain) - 3 * min(len(p) for p in prompts)
        for a, b in zip(w_plain, w, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    start = snapshot(tiny_model(tok))
    assert max((a - b).abs().max().item() for a, b in zip(start, w_plain, strict=True)) > 1e-3


def test_bf16_grpo_step_is_trls_up_to_rounding_and_leaves_the_model_in_fp32(tmp_path: Path, tiny_grpo):
    # With bf16 autocast (TRL's bf16=True on a CPU: fp32 weights, bf16 matmuls), the loss passes
    # of one episode each with the prompt's pass shared run in bf16 as TRL's plain path does, and
    # give its update up to bf16 rounding: each update is the fp32 step's within 1% (here about
    # 0.25%), and the two bf16 updates are closer still (here 0.05%).
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    start = snapshot(tiny_model(tok))
    updates, dtypes = {}, {}
    for name, bf16, shared in (("fp32", False, False), ("plain", True, False), ("shared", True, True)):
        model = tiny_model(tok)
        seen_dtypes: dict[str, set] = {"loss": set(), "sampling": set(), "after": set()}
        trained = [False]

        def record(_module, _args, output, seen_dtypes=seen_dtypes, trained=trained):
            phase = "after" if trained[0] else "loss" if torch.is_grad_enabled() else "sampling"
            seen_dtypes[phase].add(output.dtype)

        hook = model.model.layers[0].mlp.register_forward_hook(record)
        trl = {"gradient_checkpointing": False, "bf16": bf16, **({"use_cpu": True} if bf16 else {})}
        _sgd_step(
            tiny_grpo,
            tmp_path / name,
            model,
            tok,
            qids,
            trl,
            micro_batch_size=1 if shared else None,
            chunked_logprobs=shared,
            shared_prompt=shared,
        )
        # After training the model runs in its own precision again (accelerate's wrapper is off).
        trained[0] = True
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3]]))
        hook.remove()
        dtypes[name] = seen_dtypes
        updates[name] = torch.cat([(b - a).flatten() for a, b in zip(start, snapshot(model), strict=True)])
    # Under bf16 the loss's passes and, as in TRL, the sampling run under autocast.
    bf16, fp32 = {torch.bfloat16}, {torch.float32}
    assert dtypes["fp32"] == {"loss": fp32, "sampling": fp32, "after": fp32}
    assert dtypes["plain"] == dtypes["shared"] == {"loss": bf16, "sampling": bf16, "after": fp32}
    ref = updates["fp32"]
    assert ref.norm() > 1e-2
    for name in ("plain", "shared"):
        assert not torch.equal(updates[name], ref), name  # bf16 rounding shows
        assert (updates[name] - ref).norm() < 0.01 * ref.norm(), name
    assert (updates["shared"] - updates["plain"]).norm() < 0.005 * ref.norm()


@pytest.mark.parametrize(
    ("fields", "trl"),
    [
        ({"chunked_logprobs": False}, {"gradient_checkpointing": False}),
        ({"micro_batch_size": 1}, {"gradient_checkpointing": True}),
        ({"micro_batch_size": 2}, {"gradient_checkpointing": False}),
    ],
)
def test_shared_prompt_refuses_settings_it_cannot_share_a_prompt_under(tmp_path: Path, fields, trl):
    from hopgym.agents.grpo import GRPORunConfig
    from hopgym.errors import InvalidOptionError

    config = GRPORunConfig(
        output_dir=str(tmp_path),
        questions_per_step=2,
        shared_prompt=True,
        trl={"num_generations": 3, **trl},
        **fields,
    )
    with pytest.raises(InvalidOptionError, match="shared_prompt needs"):
        config.trl_config()
