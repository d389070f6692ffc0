"""The protocols by name: :data:`PROTOCOLS`, :func:`register_protocol`, :func:`get_protocol`.

A protocol of your own is one file: a :class:`~hopgym.turns.base.Protocol` subclass and one
``register_protocol(MyProtocol)`` call (see ``docs/extending.md``); ``gym.make(...,
protocol="mine")``, the reward functions and the adapters then read its turns.
"""

from __future__ import annotations

from hopgym.errors import InvalidOptionError
from hopgym.turns.base import Protocol
from hopgym.turns.r3 import R3Protocol
from hopgym.turns.tags import TagsProtocol
from hopgym.turns.tools import ToolProtocol

__all__ = ["PROTOCOLS", "register_protocol", "get_protocol"]

#: The protocols by name: ``tags``, ``r3``, ``tools`` and those registered.
PROTOCOLS: dict[str, type[Protocol]] = {"tags": TagsProtocol, "r3": R3Protocol, "tools": ToolProtocol}


def register_protocol(cls: type[Protocol], *, replace: bool = False) -> type[Protocol]:
    """Make ``cls`` available by its ``name`` to ``gym.make(..., protocol=name)``, the reward
    functions and every reader of turns; returns ``cls`` (so it can decorate the class).

    Raises:
        hopgym.errors.InvalidOptionError: ``cls`` is not a :class:`Protocol` subclass, has no
            ``name``, or its name is taken (and ``replace`` is false).

    Example:
        >>> class Mine(TagsProtocol):
        ...     name = "mine"
        >>> register_protocol(Mine) is Mine, get_protocol("mine").name
        (True, 'mine')
        >>> del PROTOCOLS["mine"]
    """
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise InvalidOptionError(f"a protocol is a subclass of hopgym.turns.Protocol, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidOptionError(f"{cls.__name__}.name must be a name such as 'mine', got {name!r}")
    if name in PROTOCOLS and PROTOCOLS[name] is not cls and not replace:
        raise InvalidOptionError(
            f"protocol {name!r} is already registered ({PROTOCOLS[name].__name__}): pass replace=True"
        )
    PROTOCOLS[name] = cls
    return cls


def get_protocol(name: str | Protocol, parse: str | None = None) -> Protocol:
    """A protocol instance by name (``tags``, ``r3``, ``tools`` or one registered), or the
    instance given.

    Args:
        name: a name of :data:`PROTOCOLS`, or a :class:`Protocol` (returned as is when ``parse``
            is ``None`` or its own mode).
        parse: the parse mode (:data:`~hopgym.turns.base.PARSE_MODES`); ``None`` keeps the
            default (``lenient``) or the instance's mode.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown name or parse mode, or an instance of
            another parse mode.

    Example:
        >>> get_protocol("r3", parse="strict")
        R3Protocol(parse='strict')
    """
    if isinstance(name, Protocol):
        if parse is not None and parse != name.parse_mode:
            raise InvalidOptionError(
                f"protocol {name!r} parses {name.parse_mode!r}, but parse={parse!r} "
                "was asked for: pass the protocol's name instead of an instance"
            )
        return name
    if not isinstance(name, str) or name not in PROTOCOLS:  # a name is a string (register_protocol)
        raise InvalidOptionError(f"unknown protocol {name!r}; choose one of {sorted(PROTOCOLS)}")
    return PROTOCOLS[name]() if parse is None else PROTOCOLS[name](parse=parse)
