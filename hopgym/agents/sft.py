"""SFT cold start on teacher trajectories, with TRL's ``SFTTrainer``.

Functions: :func:`teacher_examples` (run a scripted teacher in an env and turn each episode into a
tokenised SFT example with a loss mask), :func:`train_sft` (train with TRL). Classes:
:class:`SFTRunConfig`, :class:`TimeLimitCallback`, :class:`EntityRenamer` (re-draws the facts of
examples so that a small model learns to copy rather than memorise).

An example has the layout of a rollout (:mod:`hopgym.agents.rollout`): the chat-templated first
observation, then the teacher's turns with the env's observations between them, all in one
assistant message (Search-R1's layout), and ``completion_mask`` = 1 only on the teacher's tokens.
The env's tokens (prompt, retrieved documents, notices, the closing EOS) carry no loss. Examples
also keep the episode as chat ``messages`` (user / assistant / user ...) for other trainers.

TRL 1.16's ``SFTTrainer`` takes such a pre-tokenised dataset (``input_ids`` + ``completion_mask``)
and, with ``completion_only_loss=True``, sets the label of every masked token to -100. We use that
rather than ``assistant_only_loss``, which masks by chat roles and so cannot leave out observations
spliced *inside* an assistant turn.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym.agents.lora import LoRAConfig
from hopgym.agents.progress import drop_log_printer
from hopgym.agents.rollout import encode_prompt
from hopgym.envs.multihop_qa import qa_env
from hopgym.errors import DependencyNotInstalled, InvalidOptionError
from hopgym.rewards.scoring import exact_match

__all__ = [
    "SFT_DEFAULTS",
    "SFTRunConfig",
    "teacher_examples",
    "train_sft",
    "TimeLimitCallback",
    "CLOCKS",
    "EntityRenamer",
    "checkpoint_to_resume",
    "train_from",
]

#: What :func:`teacher_examples` does with a ``tools`` example whose ids differ from the template's.
MISMATCH_ACTIONS = ("warn", "drop", "raise")

_log = logging.getLogger(__name__)

#: Clocks a time limit can be measured with.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "process": time.process_time}


def check_time_limit(seconds: float | None, clock: str) -> None:
    """Raise ``ValueError`` for a time limit that is not ``None`` or > 0, or an unknown clock
    (the check of every training config that takes ``time_limit_s`` and ``time_limit_clock``)."""
    if seconds is not None and seconds <= 0:
        raise InvalidOptionError(f"time_limit_s must be > 0 or None, got {seconds}")
    if clock not in CLOCKS:
        raise InvalidOptionError(f"time_limit_clock must be one of {sorted(CLOCKS)}, got {clock!r}")


def teacher_examples(
    env_fn: Callable[[], gym.Env],
    agent_fn: Callable[[gym.Env], Any],
    question_ids: Sequence[str],
    tokenizer: Any,
    *,
    seed: int = 0,
    chat_template: bool = True,
    eos_after_turn: bool | None = None,
    on_mismatch: str = "warn",
) -> list[dict[str, Any]]:
    """Run the teacher once per question id and return tokenised SFT examples.

    Under the ``tools`` protocol an example is built through the chat template, turn by turn
    (:class:`~hopgym.agents.chat_tokens.ChatTokens`): the prompt is the template's rendering of
    the question with the env's tools, each teacher turn is the template's rendering of the env's
    assistant message (its ``tool_calls`` in the template's own call format; a template without
    tool support gets the default tools block and hermes ``<tool_call>`` text) up to and including
    the end-of-turn token (trained), and the tool results between turns are the template's text
    (not trained). The ids are checked against the template's rendering of the whole episode.

    Args:
        env_fn: builds the env (any reward preset; rewards are recorded, not used).
        agent_fn: builds the teacher for an env (``lambda env: OracleAgent(env)``); it may act with
            structured actions, rendered by the env's protocol.
        question_ids: one episode each (repeat ids for several samples of a stochastic teacher).
        tokenizer: the student's tokenizer.
        seed: seeds ``env.reset`` of episode ``i`` with ``seed + i``.
        chat_template: as in :class:`~hopgym.agents.rollout.RolloutConfig`.
        eos_after_turn: end every teacher turn with EOS (trained). Default: only when some
            protocol stop string is not a single token (``r3``), so the student learns where a
            turn ends; under ``tags`` the closing tag ends the turn. (``tools``: always, as the
            template ends a turn.)
        on_mismatch: ``tools`` only: ``"warn"`` (log it and keep the example, with its
            ``token_mismatch``), ``"drop"`` (log it and leave the example out) or ``"raise"``
            (:class:`~hopgym.agents.chat_tokens.TokenMismatchError`) when the ids built turn by
            turn differ from the template's rendering of the whole episode.

    Returns:
        Dicts with ``input_ids``, ``completion_mask`` (1 = teacher token, trained),
        ``messages`` (the episode as chat messages), ``question_id``, ``em``, ``reward``
        (``tools``: also ``token_mismatch``, ``None`` or the first difference).
    """
    if on_mismatch not in MISMATCH_ACTIONS:
        raise InvalidOptionError(
            f"on_mismatch must be one of {', '.join(MISMATCH_ACTIONS)}, got {on_mismatch!r}"
        )
    from hopgym.agents.rollout import stop_token_ids

    env = env_fn()
    agent = agent_fn(env)
    proto = qa_env(env).protocol
    if eos_after_turn is None:
        _, multi = stop_token_ids(tokenizer, getattr(proto, "stop", ()))
        eos_after_turn = bool(multi)
    eos = tokenizer.eos_token_id
    out: list[dict[str, Any]] = []
    for i, qid in enumerate(question_ids):
        agent.reset()
        obs, info = env.reset(seed=seed + i, options={"question_id": qid})
        if getattr(proto, "chat_tools", False):
            example = _tool_example(env, agent, obs, info, tokenizer, str(qid), on_mismatch)
            if example["token_mismatch"] is None or on_mismatch == "warn":
                out.append(example)
            continue
        ids = encode_prompt(tokenizer, obs, chat_template)
        mask = [0] * len(ids)
        messages = [{"role": "user", "content": obs}]
        done, answer, ret = False, None, 0.0
        while not done:
            action = agent.act(obs, info)
            text = action if isinstance(action, str) else proto.render(action)
            turn = tokenizer.encode(text, add_special_tokens=False)
            if eos_after_turn and eos is not None:
                turn = [*turn, eos]
            ids += turn
            mask += [1] * len(turn)
            messages.append({"role": "assistant", "content": text})
            obs, reward, terminated, truncated, info = env.step(text)
            ret += float(reward)
            done = terminated or truncated
            if info.get("answer") is not None:
                answer = info["answer"]
            if obs and not done:
                obs_ids = tokenizer.encode(obs, add_special_tokens=False)
                ids += obs_ids
                mask += [0] * len(obs_ids)
                messages.append({"role": "user", "content": obs})
        if eos is not None and ids[-1] != eos:
            ids.append(eos)
            mask.append(0)
        golds = list(qa_env(env).current_sample.answers)
        out.append(
            {
                "input_ids": ids,
                "completion_mask": mask,
                "messages": messages,
                "question_id": str(qid),
                "reward": ret,
                "em": exact_match(answer, golds) if answer is not None else 0.0,
            }
        )
    return out


def _tool_example(
    env: gym.Env, agent: Any, obs: str, info: dict[str, Any], tokenizer: Any, qid: str, on_mismatch: str
) -> dict[str, Any]:
    """One teacher episode under the ``tools`` protocol, tokenised through the chat template."""
    from hopgym.agents.chat_tokens import ChatTokens, TokenMismatchError

    base = qa_env(env)
    chat = ChatTokens(tokenizer, base.tool_specs, obs)
    done, answer, ret = False, None, 0.0
    while not done:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        ret += float(reward)
        done = terminated or truncated
        answer = info.get("answer") if info.get("answer") is not None else answer
        env_messages = list(info.get("tool_messages") or [])
        turn = dict(base.transcript[-1 - len(env_messages)])
        turn["content"] = (turn.get("content") or "").strip()
        chat.model_turn(turn)
        if not done:
            chat.env_turn(env_messages)
    mismatch = chat.check()
    if mismatch is not None:
        if on_mismatch == "raise":
            raise TokenMismatchError(f"question {qid}: {mismatch}")
        _log.warning("SFT example of question %s: %s", qid, mismatch)
    mask = [0] * len(chat.ids)
    for kind, start, end, _ in chat.spans:
        if kind == "model":
            mask[start:end] = [1] * (end - start)
    golds = list(base.current_sample.answers)
    return {
        "input_ids": list(chat.ids),
        "completion_mask": mask,
        "messages": chat.conversation.messages,
        "question_id": qid,
        "reward": ret,
        "em": exact_match(answer, golds) if answer is not None else 0.0,
        "token_mismatch": mismatch,
    }


_WORD = re.compile(r"[A-Za-z0-9]+")


class EntityRenamer:
    """Re-draws the facts of SFT examples: a fresh random renaming of entity names per example.

    A small model trained from scratch on a fixed world memorises its facts (it writes a
    remembered surname instead of copying the one in the question) unless the training facts are
    re-drawn at random every step (``../shared/PERF.md``). This does that at the token level:
    each example gets its own random permutation of the *name words* (the words of the task's
    document titles that its fixed text, the question templates and the passages with the names
    taken out, never uses), applied to every occurrence in the example (question, queries,
    documents, answer). The episode stays consistent (the same entity has the same new name
    throughout, so the teacher's answer is still right) but its facts are new, so the only way to
    predict the next query or the answer is to copy it from the context.

    Only word tokens with the leading-space marker are renamed (names always follow a space or a
    tag in the word-level vocabulary of :mod:`hopgym.agents.tiny_lm`). With ``examples``, only
    among the name words that occur in them. Without, among every name word of ``task``: then the
    words of held-out entities get trained embeddings too (in random roles; their facts never
    appear), which a model trained from scratch needs to copy a name it was never trained to
    write (its embedding would still be the random initialisation, tied to the output layer).

    Args:
        tokenizer: the word-level tokenizer (:func:`hopgym.agents.tiny_lm.build_tokenizer`).
        task: the task whose documents and questions define names and fixed text.
        examples: restrict the renaming to name words that occur in these examples.
    """

    def __init__(self, tokenizer: Any, task: Any, examples: Sequence[dict[str, Any]] | None = None) -> None:
        import numpy as np

        docs = [d for d in (getattr(task, "documents", None) or {}).values() if d is not None]
        if not docs:
            raise InvalidOptionError(
                "EntityRenamer needs a task with documents (their titles are the entity names)"
            )
        titles = sorted({d.title for d in docs}, key=len, reverse=True)
        names = re.compile("|".join(re.escape(t) for t in titles))
        fixed: set[str] = set()
        for text in [d.text for d in docs] + [s.question for s in task.samples]:
            fixed.update(_WORD.findall(names.sub(" ", text)))
        words = {w for t in titles for w in _WORD.findall(t)} - fixed
        vocab = tokenizer.get_vocab()
        ids = {vocab["▁" + w] for w in words if "▁" + w in vocab}
        if examples is not None:
            present: set[int] = set()
            for e in examples:
                present.update(e["input_ids"])
            ids &= present
        if len(ids) < 2:
            raise InvalidOptionError(
                f"only {len(ids)} name tokens to rename: is this a word-level "
                f"tokenizer built from the task's texts?"
            )
        self.pool = np.array(sorted(ids), dtype=np.int64)
        self.vocab_size = max(len(tokenizer), int(self.pool.max()) + 1)

    def __call__(self, example: dict[str, Any], rng: Any) -> dict[str, Any]:
        """``example`` with its name tokens renamed by a permutation drawn from ``rng``."""
        import numpy as np

        lut = np.arange(self.vocab_size, dtype=np.int64)
        lut[self.pool] = self.pool[rng.permutation(len(self.pool))]
        ids = lut[np.asarray(example["input_ids"], dtype=np.int64)]
        return {**example, "input_ids": [int(i) for i in ids]}

    def apply(self, examples: Sequence[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
        """Every example renamed with its own permutation (seeded)."""
        import numpy as np

        rng = np.random.default_rng(seed)
        return [self(e, rng) for e in examples]


#: hopgym's defaults for TRL ``SFTConfig`` fields whose TRL default does not suit a small model
#: trained from teacher episodes (``SFTRunConfig.trl`` goes over them; bf16 follows
#: :func:`~hopgym.agents.trl_config.default_bf16`). ``warmup_steps`` below 1 is a share of the run.
SFT_DEFAULTS: dict[str, Any] = {
    "max_steps": 300,
    "per_device_train_batch_size": 16,
    "learning_rate": 1e-3,
    "warmup_steps": 0.03,
    "lr_scheduler_type": "constant_with_warmup",
    "save_strategy": "no",
    "seed": 0,
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


@dataclass
class SFTRunConfig:
    """Settings of an SFT run: hopgym's own, and TRL's ``SFTConfig`` fields in :attr:`trl`.

    Every ``SFTConfig`` field (``max_steps``, ``per_device_train_batch_size``, ``learning_rate``,
    ``max_length``, ``warmup_steps``, ``bf16``, ...) goes in :attr:`trl`, over :data:`SFT_DEFAULTS`;
    TRL checks them. hopgym sets ``completion_only_loss`` (the env's tokens carry no loss).

    Example:
        >>> SFTRunConfig(trl={"max_steps": 2}).trl
        {'max_steps': 2}
    """

    output_dir: str = field(default="runs/sft", metadata={"help": "Run folder (TRL's output_dir)."})
    time_limit_s: float | None = field(
        default=None,
        metadata={"help": "Stop after this many seconds of training (same-wall-clock baselines)."},
    )
    time_limit_clock: str = field(
        default="wall",
        metadata={
            "help": "'wall' (time.perf_counter) or 'process' (CPU time of this process: the fair "
            "budget on a machine shared with other jobs).",
            "choices": tuple(CLOCKS),
        },
    )
    trl: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Any field of TRL's SFTConfig, e.g. --trl learning_rate=1e-4 max_steps=50 "
            "per_device_train_batch_size=8; values read as Python literals; repeat to add more. "
            "Over hopgym's defaults: " + ", ".join(f"{k}={v}" for k, v in SFT_DEFAULTS.items()),
            "metavar": "FIELD=VALUE",
            "shortcuts": {
                "--steps": "max_steps",
                "--lr": "learning_rate",
                "--seed": "seed",
                "--batch-size": "per_device_train_batch_size",
                "--max-length": "max_length",
                "--logging-steps": "logging_steps",
            },
        },
    )

    def __post_init__(self) -> None:
        check_time_limit(self.time_limit_s, self.time_limit_clock)

    def trl_config(self) -> Any:
        """TRL's ``SFTConfig`` of this run: :data:`SFT_DEFAULTS`, then :attr:`trl`, then
        ``output_dir`` and ``completion_only_loss=True``.

        Raises:
            hopgym.errors.InvalidOptionError: an unknown field, one hopgym sets, or a value TRL refuses.
        """
        from hopgym.agents.trl_config import trl_config

        return trl_config(
            "SFTConfig",
            SFT_DEFAULTS,
            self.trl,
            {
                "output_dir": (self.output_dir, "give it as output_dir (--out)"),
                "completion_only_loss": (True, "the env's tokens never carry loss"),
            },
        )


def _transformers_callback_base() -> Any:
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("transformers", "train") from exc
    return TrainerCallback


class TimeLimitCallback:
    """A ``TrainerCallback`` that stops training after ``seconds`` of wall-clock time.

    Built lazily (``TimeLimitCallback.make(seconds, clock)``) so that importing this module does
    not import transformers. ``clock`` is a key of :data:`CLOCKS`.
    """

    @staticmethod
    def make(seconds: float, clock: str = "wall") -> Any:
        base = _transformers_callback_base()
        now = CLOCKS[clock]

        class _TimeLimit(base):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                self.seconds = seconds
                self.start: float | None = None
                self.steps = 0

            def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001, D102
                self.start = now()

            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, D102
                self.steps += 1
                if self.start is not None and now() - self.start >= self.seconds:
                    control.should_training_stop = True
                return control

        return _TimeLimit()


def train_sft(
    model: Any,
    tokenizer: Any,
    examples: Sequence[dict[str, Any]],
    config: SFTRunConfig,
    callbacks: Sequence[Any] = (),
    optimizers: tuple[Any, Any] | None = None,
    lora: LoRAConfig | None = None,
) -> Any:
    """Train ``model`` on ``examples`` with TRL's ``SFTTrainer``; env tokens carry no loss.

    Args:
        model: a causal LM (trained in place).
        tokenizer: its tokenizer.
        examples: from :func:`teacher_examples` (``input_ids`` + ``completion_mask``).
        config: the run's settings.
        callbacks: extra ``TrainerCallback`` objects.
        optimizers: ``(optimizer, lr_scheduler)`` to train with instead of new ones (a loop of
            short SFT rounds keeps its Adam state this way, as :mod:`hopgym.agents.rft` does).
        lora: train a LoRA adapter instead of every weight (TRL's ``peft_config``); the trained
            policy is then ``trainer.model``, a ``PeftModel`` over ``model``.

    Returns:
        The ``SFTTrainer`` after training (``trainer.state.log_history`` has the losses).
    """
    args = config.trl_config()  # refuses bad options before anything is built
    try:
        from datasets import Dataset
        from trl import SFTTrainer
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("trl/datasets", "train") from exc
    if not examples:
        raise InvalidOptionError("no SFT examples: give at least one question id")
    rows = [{"input_ids": e["input_ids"], "completion_mask": e["completion_mask"]} for e in examples]
    dataset = Dataset.from_list(rows)
    cbs = list(callbacks)
    if config.time_limit_s is not None:
        cbs.append(TimeLimitCallback.make(config.time_limit_s, config.time_limit_clock))
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=cbs,
        optimizers=optimizers or (None, None),
        peft_config=lora.peft_config() if lora is not None else None,
    )
    drop_log_printer(trainer, cbs)
    train_from(trainer, checkpoint_to_resume(args.resume_from_checkpoint, Path(args.output_dir)))
    return trainer


def train_from(trainer: Any, resume: Path | None) -> None:
    """``trainer.train()``, from ``resume`` (:func:`checkpoint_to_resume`'s) when given.

    A checkpoint of the run's last step (``max_steps`` reached: a run stopped after its training
    and before what came next) is loaded, weights and state, and not trained from: transformers'
    loop checks ``max_steps`` only after a step, so it would train one step more, and under
    ``save_total_limit=1`` that step's checkpoint would replace the finished run's.

    The model comes back as it went in: accelerate's mixed-precision wrapper, which runs every
    forward of the trained model under autocast (with ``bf16``, GRPO's sampling too, as in TRL),
    is taken off after training, so that what follows (an evaluation, the next phase's trainer)
    runs the model in its own precision.

    Raises:
        hopgym.errors.InvalidOptionError: the checkpoint is of a step past ``max_steps``.
    """
    if resume is not None:
        from transformers.trainer_callback import TrainerState

        state = TrainerState.load_from_json(str(resume / "trainer_state.json"))
        if 0 < trainer.args.max_steps < state.global_step:
            raise InvalidOptionError(
                f"resume_from_checkpoint: {resume} is of step {state.global_step}, past this "
                f"run's max_steps ({trainer.args.max_steps})"
            )
        if 0 < trainer.args.max_steps == state.global_step:
            trainer._load_from_checkpoint(str(resume))
            trainer.state = state
            _log.info(
                "%s is the run's last step (%d): loaded, nothing left to train", resume, state.global_step
            )
            return
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    finally:
        trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


def checkpoint_to_resume(value: str | None, out: Path) -> Path | None:
    """The checkpoint folder that TRL's ``resume_from_checkpoint`` names, or ``None``.

    ``value``: a ``checkpoint-N`` folder, or ``"last"``, the newest complete one under ``out``
    (the run's ``output_dir``; none there: ``None``, a fresh start). :func:`train_sft` and
    :func:`~hopgym.agents.grpo.train_grpo` resume from it (TRL's ``TrainingArguments`` has the
    field but leaves acting on it to the script): a stopped run saved with
    ``save_strategy="steps"`` goes on with its weights, optimizer, scheduler, step and RNG states.

    Raises:
        hopgym.errors.InvalidOptionError: ``value`` names a folder without ``trainer_state.json``.
    """
    if value is None:
        return None
    if value == "last":
        # A folder without trainer_state.json (written last) is a save that was cut short.
        found = sorted(
            (
                p
                for p in out.glob("checkpoint-*")
                if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()
            ),
            key=lambda p: int(p.name.split("-")[-1]),
        )
        return found[-1] if found else None
    path = Path(value)
    if not (path / "trainer_state.json").is_file():
        raise InvalidOptionError(
            f"resume_from_checkpoint: {path} is not a TRL checkpoint (no trainer_state.json)"
        )
    return path
