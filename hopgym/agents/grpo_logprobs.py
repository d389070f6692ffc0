"""GRPO's per-token log-probs scored only at the tokens the loss reads, in small tiles.

Function: :func:`chunked_grpo_trainer` (TRL's ``GRPOTrainer`` with that scoring). Constants:
:data:`TOKENS_PER_TILE`, :data:`VOCAB_PER_TILE`.

TRL 1.16 scores a batch's per-token log-probs through a fused LM head
(``trl.kernels.ChunkedLogProbFunction``: the ``[positions, vocabulary]`` logits are never held
whole; each tile is recomputed in the backward pass). Off CUDA it feeds that head *every*
position of the batch, prompt and padding included, in tiles of 4,096 positions x 32,768
vocabulary entries (512 MB in fp32, with several temporaries of that size per tile). In a
multi-turn episode most positions are the prompt and the env's observations, which the loss
masks out; on a CPU those tiles are most of a step's memory and their allocations most of its
page faults.

The trainer :func:`chunked_grpo_trainer` returns runs the model's backbone as TRL does and sends
the LM head only the positions whose log-prob the loss reads: completion tokens, and of those,
when the loss compares them with nothing computed outside it (no reference or old log-probs: ``beta
= 0``, one iteration, no vLLM importance sampling), only the model's own tokens (the env mask). The
head is TRL's own function, called on tiles of :data:`TOKENS_PER_TILE` positions x
:data:`VOCAB_PER_TILE` entries. Every read position gets the value TRL's path gives it (the same
function on the same hidden state); a position left out is 0, as TRL leaves prompt and padding,
and the loss multiplies it by a mask of 0. So the loss, the gradient and the logged metrics are
those of TRL's path (``tests/agents/test_grpo_logprobs.py`` compares them).

With a step in several loss passes (``GRPORunConfig.micro_batch_size``: TRL's gradient
accumulation, one optimizer step per generation batch), TRL's shuffled passes are re-cut by
length: each takes rows of similar length (prompt + completion tokens) and drops the columns that
are padding in all of them, so that fewer padding positions go through the backbone. The loss
terms of the passes still add up to the step's loss (DAPO's normaliser counts the whole batch's
tokens; only ``bnpo`` normalises each pass by its own tokens, which depend on the split, as they
do in TRL's shuffled passes), and a row's positions shift by the prompt padding dropped, which rotary position
embeddings do not see; so the update is the same up to float rounding.

With ``shared_prompt`` (``GRPORunConfig.shared_prompt``: loss passes no wider than a group,
without gradient checkpointing), the passes of one prompt (the ``num_generations`` episodes of a
question) come one after another, and the backbone runs over the prompt once for all of them:
its keys and values go to each pass as a cache of leaf tensors, each pass's backward adds its
gradient into them, and after the prompt's last pass one backward takes their sum through the
prompt's pass. In a SmolLM2 step of 2 questions x 8 episodes (a 282-token prompt, completions of
about 600 tokens) 7 of every 8 prompt passes go, about a quarter of the positions of the loss's
forward and backward. The gradient is the plain path's, summed in another order
(``tests/agents/test_grpo_logprobs.py`` compares the weights after a step).

A case this path does not cover runs TRL's own: a wrapped model (DDP, ``torch.compile``), image
inputs, an MoE auxiliary loss, logits scaled or soft-capped by the model's config.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

__all__ = ["TOKENS_PER_TILE", "VOCAB_PER_TILE", "chunked_grpo_trainer"]

#: Positions per LM-head call (each call saves only its hidden states for the backward pass).
TOKENS_PER_TILE = 1024
#: Vocabulary entries per tile: a 1,024 x 4,096 fp32 tile is 16 MB, under glibc's largest mmap
#: threshold (32 MB), so the tiles' buffers come back from the heap instead of fresh pages.
VOCAB_PER_TILE = 4096

#: Inputs of the loss it takes the exponential of a difference with (a left-out position's 0 minus a
#: stored value could overflow there, and 0 x inf is not 0). The sampling log-probs a rollout
#: returns are only subtracted and masked (TRL's off-policy mask).
_STORED_LOGPROBS = ("old_per_token_logps", "ref_per_token_logps")

#: The keys of a generation batch that :func:`_length_sorted` knows how to cut (prompt columns,
#: completion columns, one value per row, one per batch); a batch with any other one (images, vLLM
#: importance sampling) keeps TRL's shuffled micro-batches.
_MICRO_BATCH_KEYS = frozenset(
    {
        "prompt_ids",
        "prompt_mask",
        "completion_ids",
        "completion_mask",
        "tool_mask",
        "sampling_per_token_logps",
        "old_per_token_logps",
        "ref_per_token_logps",
        "advantages",
        "num_items_in_batch",
    }
)

_TRAINER: Any = None
_log = logging.getLogger(__name__)


def chunked_grpo_trainer() -> Any:
    """TRL's ``GRPOTrainer`` subclass whose log-prob passes score only the positions the loss reads.

    The class is built on first use (TRL is imported then).
    """
    global _TRAINER
    if _TRAINER is None:
        _TRAINER = _build()
    return _TRAINER


def _build() -> Any:
    import torch
    from accelerate.utils import is_peft_model
    from trl import GRPOTrainer
    from trl.extras.profiling import profiling_decorator
    from trl.kernels import ChunkedLogProbFunction

    from hopgym.agents.rollout import SCALED_LOGITS, _output_cache
    from hopgym.backends.transformers_backend import _cache_kwarg

    class ChunkedLogprobGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        """``GRPOTrainer`` whose per-token log-probs skip the positions the loss masks out."""

        _score_mask: Any = None
        #: Set by ``train_grpo`` (``GRPORunConfig.shared_prompt``).
        shared_prompt: bool = False
        #: Per loss pass of the buffered batch: its prompt's key and whether it is the prompt's
        #: last pass (None: the passes are TRL's, or do not share prompts).
        _prompt_plan: list[tuple[tuple[int, ...], bool]] | None = None
        _current_pass: tuple[tuple[int, ...], bool] | None = None
        _in_loss: bool = False
        _prompt_pass: _PromptPass | None = None

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            # TRL shuffles a fresh generation batch and splits it into its micro-batches; here
            # they are then re-cut by length, each with its all-padding columns dropped.
            buffered = self._buffered_inputs
            inputs = super()._prepare_inputs(generation_batch)
            fresh = self._buffered_inputs
            args: Any = self.args  # a GRPOConfig
            training = self.model is not None and self.model.training
            if (
                fresh is not buffered
                and training
                and len(fresh) > 1
                and args.steps_per_generation == args.gradient_accumulation_steps
                and all(v is None or k in _MICRO_BATCH_KEYS for k, v in fresh[0].items())
            ):
                self._buffered_inputs = _length_sorted(fresh, by_prompt=self.shared_prompt)
                inputs = self._buffered_inputs[self._step % args.steps_per_generation]
            if fresh is not buffered:
                self._prompt_plan = None
                if self.shared_prompt and training:
                    self._prompt_plan = _prompt_plan(self._buffered_inputs)
                    if self._prompt_plan is None:
                        _log.warning(
                            "shared_prompt: this step's loss passes do not each hold the episodes "
                            "of one prompt, so they run over every position (the prompt unshared)"
                        )
            plan = self._prompt_plan if training else None
            self._current_pass = plan[self._step % args.steps_per_generation] if plan else None
            return inputs

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:  # noqa: D102
            try:
                loss = super().training_step(model, inputs, num_items_in_batch)
            except BaseException:
                self._prompt_pass = None
                raise
            if self._prompt_pass is not None and (self._current_pass is None or self._current_pass[1]):
                self._prompt_backward()
            return loss

        def _prompt_backward(self) -> None:
            """The prompt's last pass is done: its passes' gradients, summed in the cache's
            leaves, go back through the prompt's own pass."""
            shared, self._prompt_pass = self._prompt_pass, None
            if shared is not None:
                shared.backward()

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            # The env mask is known here only; positions it drops are read by nothing else when
            # the loss has no stored log-probs to compare with.
            if "tool_mask" in inputs and not any(inputs.get(k) is not None for k in _STORED_LOGPROBS):
                self._score_mask = inputs["tool_mask"]
            self._in_loss = True
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._score_mask = None
                self._in_loss = False

        def _backbone(self, causal_lm: Any, ids: Any, attn: Any, logits_to_keep: int) -> Any:
            """The hidden states that predict the last ``logits_to_keep`` tokens of ``ids``
            (``[rows, logits_to_keep, hidden]``): through the prompt's shared pass when this
            loss pass is one of a prompt's (:class:`_PromptPass`), else over every position."""
            key = self._current_pass[0] if self._current_pass is not None else None
            start = ids.size(1) - logits_to_keep
            if (
                key is None
                or not self._in_loss
                or not torch.is_grad_enabled()
                or start < 2
                or not bool(attn[:, :start].all())
                or tuple(ids[0, :start].tolist()) != key
                or not bool((ids[:, :start] == ids[:1, :start]).all())
            ):
                out = causal_lm.base_model(input_ids=ids, attention_mask=attn, use_cache=False)
                return out.last_hidden_state[:, -logits_to_keep - 1 : -1]
            if self._prompt_pass is None or self._prompt_pass.key != key:
                self._prompt_backward()  # a prompt whose last pass was not marked
                self._prompt_pass = _PromptPass.run(causal_lm, ids[:1, : start - 1], key)
            cache = self._prompt_pass.cache(causal_lm.config, ids.size(0))
            # The prompt's last token is fed again: its hidden state predicts the first completion token.
            out = causal_lm.base_model(
                input_ids=ids[:, start - 1 :],
                attention_mask=attn,
                use_cache=True,
                **{_cache_kwarg(causal_lm): cache},
            )
            return out.last_hidden_state[:, :-1]

        @profiling_decorator
        def _get_per_token_logps_and_entropies(  # noqa: D102
            self,
            model: Any,
            input_ids: Any,
            attention_mask: Any,
            logits_to_keep: int,
            batch_size: int | None = None,
            compute_entropy: bool = False,
            compute_aux_loss: bool = False,
            **inputs: Any,
        ) -> Any:
            causal_lm = model.get_base_model() if is_peft_model(model) else model
            config = causal_lm.config.get_text_config()
            if (
                compute_aux_loss
                or any(v is not None for v in inputs.values())
                or self.accelerator.unwrap_model(model) is not model
                or any(getattr(config, k, None) is not None for k in SCALED_LOGITS)
            ):
                return super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    compute_entropy=compute_entropy,
                    compute_aux_loss=compute_aux_loss,
                    **inputs,
                )
            head = causal_lm.get_output_embeddings()
            outputs = ("log_probs", "entropy") if compute_entropy else ("log_probs",)
            rows = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), rows):
                ids = input_ids[start : start + rows]
                attn = attention_mask[start : start + rows]
                targets = ids[:, -logits_to_keep:]
                scored = attn[:, -logits_to_keep:].bool()
                if self._score_mask is not None:
                    scored = scored & self._score_mask[start : start + rows].bool()
                with self.accelerator.autocast():
                    # Position p predicts token p + 1: the completion's tokens are the last
                    # logits_to_keep, predicted by the logits_to_keep positions before the last.
                    hidden = self._backbone(causal_lm, ids, attn, logits_to_keep)
                    per_token = _score(
                        hidden[scored],
                        targets[scored],
                        head,
                        outputs,
                        self.temperature,
                        self.args.cast_lm_head_to_fp32,  # type: ignore[attr-defined]  # a GRPOConfig
                    )
                logps.append(hidden.new_zeros(scored.shape).masked_scatter(scored, per_token[0]))
                if compute_entropy:
                    entropies.append(hidden.new_zeros(scored.shape).masked_scatter(scored, per_token[1]))
            return (
                torch.cat(logps),
                torch.cat(entropies) if compute_entropy else None,
                None,
            )

    class _PromptPass:
        """The backbone's pass over one prompt (all but its last token), shared by the loss
        passes of its episodes: each gets the keys and values as a cache of leaf tensors, whose
        gradients add up over the passes; :meth:`backward` then takes them through the pass."""

        def __init__(self, key: tuple[int, ...], kv: list[tuple[Any, Any]]) -> None:
            self.key = key
            self.kv = kv
            self.leaves = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in kv]

        @classmethod
        def run(cls, causal_lm: Any, prompt: Any, key: tuple[int, ...]) -> _PromptPass:
            out = causal_lm.base_model(input_ids=prompt, use_cache=True)
            return cls(key, [(layer.keys, layer.values) for layer in _output_cache(out).layers])

        def cache(self, config: Any, rows: int) -> Any:
            from transformers import DynamicCache

            return DynamicCache(
                ddp_cache_data=[
                    (k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.leaves
                ],
                config=config,
            )

        def backward(self) -> None:
            pairs = [
                (tensor, leaf.grad)
                for kv, leaves in zip(self.kv, self.leaves, strict=True)
                for tensor, leaf in zip(kv, leaves, strict=True)
                if leaf.grad is not None
            ]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])

    def _prompt_key(part: dict[str, Any], row: int) -> tuple[int, ...]:
        return tuple(part["prompt_ids"][row][part["prompt_mask"][row].bool()].tolist())

    def _prompt_plan(passes: list[dict[str, Any]]) -> list[tuple[tuple[int, ...], bool]] | None:
        """Each pass's prompt and whether it is that prompt's last pass; None when a pass's rows
        do not share one prompt or a prompt's passes are not one after another."""
        keys = []
        for part in passes:
            rows = {_prompt_key(part, r) for r in range(part["prompt_ids"].size(0))}
            if len(rows) != 1:
                return None
            keys.append(rows.pop())
        if len(set(keys)) != sum(1 for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k):
            return None
        return [(k, i + 1 == len(keys) or keys[i + 1] != k) for i, k in enumerate(keys)]

    def _length_sorted(micro_batches: list[dict[str, Any]], by_prompt: bool = False) -> list[dict[str, Any]]:
        """The rows of ``micro_batches`` re-cut into as many micro-batches of as many rows, by
        length (prompt + completion tokens), each without the columns that are padding in all
        its rows (left of the prompts, right of the completions). ``by_prompt``: the rows of
        one prompt together (the prompts in the order they first come), by length within it."""
        first = micro_batches[0]
        whole = {
            k: torch.cat([m[k] for m in micro_batches]) if v is not None and v.ndim else v
            for k, v in first.items()
        }
        rows = first["prompt_ids"].size(0)
        length = whole["prompt_mask"].sum(1) + whole["completion_mask"].sum(1)
        if by_prompt:
            groups: dict[tuple[int, ...], int] = {}
            group = [groups.setdefault(_prompt_key(whole, r), len(groups)) for r in range(length.numel())]
            length = torch.tensor(group) * (int(length.max()) + 1) + length
        order = torch.argsort(length, stable=True)
        out = []
        for start in range(0, order.numel(), rows):
            take = order[start : start + rows]
            part: dict[str, Any] = {k: v[take] if v is not None and v.ndim else v for k, v in whole.items()}
            used = part["prompt_mask"].any(0).nonzero()
            left = int(used[0]) if used.numel() else part["prompt_mask"].size(1) - 1
            used = part["completion_mask"].any(0).nonzero()
            right = int(used[-1]) + 1 if used.numel() else 1
            for k in _MICRO_BATCH_KEYS:
                if part.get(k) is None or part[k].ndim < 2:
                    continue
                part[k] = part[k][:, left:] if k.startswith("prompt_") else part[k][:, :right]
            out.append(part)
        return out

    def _score(
        hidden: Any, targets: Any, head: Any, outputs: tuple[str, ...], temperature: float, fp32_head: bool
    ) -> tuple[Any, Any]:
        """Log-probs (and entropies) of ``targets`` [N] after ``hidden`` [N, H], in tiles; with
        ``fp32_head`` (TRL's ``cast_lm_head_to_fp32``) in fp32 outside autocast."""
        logps, entropies = [], []
        for start in range(0, hidden.size(0), TOKENS_PER_TILE):
            h = hidden[start : start + TOKENS_PER_TILE]
            with torch.autocast(h.device.type, enabled=False) if fp32_head else contextlib.nullcontext():
                lp, ent, *_ = ChunkedLogProbFunction.apply(
                    h.float() if fp32_head else h,
                    head.weight,
                    head.bias,
                    targets[start : start + TOKENS_PER_TILE],
                    temperature,
                    VOCAB_PER_TILE,
                    None,
                    1.0,
                    outputs,
                )
            logps.append(lp)
            entropies.append(ent)
        if not logps:  # nothing to score: a zero still connected to the graph
            zero = hidden.sum(-1) * 0.0
            return zero, zero
        return torch.cat(logps), (torch.cat(entropies) if entropies[0] is not None else None)

    return ChunkedLogprobGRPOTrainer
