"""LoRA adapters (PEFT) as an option of every trainer: SFT, GRPO and rejection sampling.

Classes: :class:`LoRAConfig` (the adapter's settings; ``r=0`` is full fine-tuning). Functions:
:func:`apply_lora` (wrap a model in a ``PeftModel``), :func:`trainable_parameters`,
:func:`save_policy` (save a trained policy loadable with ``AutoModelForCausalLM``).

:meth:`LoRAConfig.peft_config` is the one place a ``peft.LoraConfig`` is built. SFT and GRPO hand
it to TRL's trainer as ``peft_config`` (TRL wraps the model); rejection sampling wraps the model
itself with :func:`apply_lora` once, before its first round, because its one AdamW optimizer lives
across rounds and must hold the adapter's parameters from the start. Only the adapter trains:
the base weights stay as they were. On the command line the fields are ``--lora-r``,
``--lora-alpha``, ``--lora-dropout`` and ``--lora-target-modules`` of ``hopgym train sft|grpo|rft``
(TRL's ``ModelConfig`` spells them the same way).

Example:
    >>> LoRAConfig().enabled
    False
    >>> cfg = LoRAConfig(r=8)
    >>> cfg.enabled, cfg.scale
    (True, 2.0)
    >>> LoRAConfig(r=-1)
    Traceback (most recent call last):
    ...
    hopgym.errors.InvalidOptionError: r must be >= 0 (0: no LoRA, full fine-tuning), got -1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgym.errors import DependencyNotInstalled, InvalidOptionError

__all__ = ["LoRAConfig", "apply_lora", "is_peft_model", "save_policy", "trainable_parameters"]


@dataclass
class LoRAConfig:
    """Settings of a LoRA adapter; ``r=0`` (the default) trains every weight instead.

    Example:
        >>> LoRAConfig(r=4, alpha=4, target_modules=["q_proj", "v_proj"]).scale
        1.0
    """

    r: int = field(default=0, metadata={"help": "LoRA rank; 0: no adapter, full fine-tuning."})
    alpha: float | None = field(
        default=None, metadata={"help": "LoRA alpha (the update is scaled by alpha / r); default 2 x r."}
    )
    dropout: float = field(default=0.05, metadata={"help": "Dropout on the adapter's input."})
    target_modules: list[str] = field(
        default_factory=lambda: ["all-linear"],
        metadata={
            "help": "Module names that get an adapter (q_proj v_proj ...), or all-linear: every "
            "linear layer but the output head."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 0:
            raise InvalidOptionError(f"r must be >= 0 (0: no LoRA, full fine-tuning), got {self.r!r}")
        if self.alpha is not None and self.alpha <= 0:
            raise InvalidOptionError(f"alpha must be > 0, got {self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise InvalidOptionError(f"dropout must be in [0, 1), got {self.dropout}")
        if isinstance(self.target_modules, str):
            self.target_modules = [self.target_modules]
        if not self.target_modules:
            raise InvalidOptionError("target_modules is empty: name modules, or give all-linear")

    @property
    def enabled(self) -> bool:
        """Whether an adapter is trained (``r > 0``)."""
        return self.r > 0

    @property
    def scale(self) -> float:
        """``alpha / r``, the factor on the adapter's update."""
        return (self.alpha if self.alpha is not None else 2.0 * self.r) / max(self.r, 1)

    def peft_config(self) -> Any:
        """The ``peft.LoraConfig`` of these settings, or ``None`` when :attr:`enabled` is false.

        Raises:
            hopgym.errors.DependencyNotInstalled: peft is missing (``pip install hopgym[train]``).
        """
        if not self.enabled:
            return None
        try:
            from peft import LoraConfig
        except ImportError as exc:
            raise DependencyNotInstalled.for_extra("peft", "train") from exc
        targets: str | list[str] = list(self.target_modules)
        if targets == ["all-linear"]:
            targets = "all-linear"  # peft's own spelling; it leaves the output head out
        return LoraConfig(
            task_type="CAUSAL_LM",
            r=self.r,
            # peft declares an int but only divides by it (scaling = alpha / r); hopgym allows a float.
            lora_alpha=self.alpha if self.alpha is not None else 2 * self.r,  # type: ignore[arg-type]
            lora_dropout=self.dropout,
            target_modules=targets,
            bias="none",
        )


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a ``PeftModel`` (without importing peft when it is not)."""
    return callable(getattr(model, "get_base_model", None)) and hasattr(model, "peft_config")


def apply_lora(model: Any, lora: LoRAConfig | None) -> Any:
    """``model`` wrapped in a ``PeftModel`` with ``lora``'s adapter; ``model`` itself without one.

    The base model's linear layers are replaced in place by LoRA layers (their weights frozen), so
    ``model`` runs with the adapter too.
    """
    if lora is None or not lora.enabled:
        return model
    from peft import get_peft_model

    return get_peft_model(model, lora.peft_config())


def trainable_parameters(model: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts of ``model``."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def save_policy(model: Any, tokenizer: Any, out: str | Path) -> None:
    """Save a trained policy in ``out``, loadable with ``AutoModelForCausalLM.from_pretrained(out)``.

    A ``PeftModel`` is saved twice: its adapter alone in ``out/adapter`` (``PeftModel.from_pretrained``
    over the base model loads it), and the adapter merged into a copy of the base weights in
    ``out`` itself, so every hopgym command (``eval``, ``train grpo --model out``) loads it as a
    plain model. ``model`` is left as it was.
    """
    import copy

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if is_peft_model(model):
        model.save_pretrained(out / "adapter")
        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
