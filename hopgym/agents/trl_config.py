"""TRL's own trainer configs, with hopgym's defaults under the user's values.

Functions: :func:`trl_config` (build a TRL config class from defaults, the user's fields and the
fields hopgym derives), :func:`trl_fields` (the field names of a TRL config), :func:`default_bf16`.

hopgym does not restate TRL's options. A run config (:class:`~hopgym.agents.grpo.GRPORunConfig`,
:class:`~hopgym.agents.sft.SFTRunConfig`) keeps only what the TRL config has no field for, and a
``trl`` mapping: any fields of TRL's ``GRPOConfig`` / ``SFTConfig``, on top of hopgym's defaults
for that trainer (``GRPO_DEFAULTS`` beside the run config). TRL checks its own values; a value it
refuses, an unknown name (with the closest one suggested) or a field hopgym sets itself is an
:class:`~hopgym.errors.InvalidOptionError`. TRL is imported only when a config is built, so these
run configs (and ``hopgym --help``) stay light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hopgym._kwargs import unknown_name_error
from hopgym.errors import DependencyNotInstalled, InvalidOptionError

__all__ = ["default_bf16", "trl_config", "trl_fields"]


def _trl_class(name: str) -> type:
    try:
        import trl
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("trl", "train") from exc
    return getattr(trl, name)


def trl_fields(name: str) -> tuple[str, ...]:
    """The field names of TRL's config class ``name`` (``"GRPOConfig"``, ``"SFTConfig"``)."""
    return tuple(f.name for f in dataclasses.fields(_trl_class(name)))


def default_bf16() -> bool:
    """bf16 where CUDA supports it, else fp32: hopgym's default for TRL's ``bf16``.

    TRL's own default turns bf16 on whenever fp16 is off, CPU included; hopgym's tiny models train
    in fp32 on CPU.
    """
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def trl_config(
    name: str,
    defaults: Mapping[str, Any],
    user: Mapping[str, Any],
    derived: Mapping[str, tuple[Any, str]] = {},  # noqa: B006 - read only
) -> Any:
    """TRL's config class ``name`` built from ``defaults``, then ``user``, then ``derived``.

    Args:
        name: ``"GRPOConfig"`` or ``"SFTConfig"`` (an attribute of ``trl``).
        defaults: hopgym's defaults for fields whose TRL default does not suit it.
        user: the user's fields (a run config's ``trl``); they win over ``defaults``.
        derived: fields hopgym sets itself, as ``{field: (value, where the user sets it)}``; the
            user may not give them. A callable value is called with the other values (TRL's
            defaults under ``defaults`` under ``user``).

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown field (the closest one is suggested).
        hopgym.errors.InvalidOptionError: a derived field in ``user``, or TRL refused a value.
    """
    cls = _trl_class(name)
    names = trl_fields(name)
    for key in user:
        if key not in names:
            raise unknown_name_error(key, names, what=f"{name} field")
        if key in derived:
            raise InvalidOptionError(f"{name}.{key} is set by hopgym: {derived[key][1]}")
    values = {**defaults, **user}
    seen = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    seen.update(values)
    values.update({k: v(seen) if callable(v) else v for k, (v, _) in derived.items()})
    if "bf16" not in values and not values.get("fp16"):
        values["bf16"] = default_bf16()
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise InvalidOptionError(f"TRL {name} refused the options: {exc}") from None
