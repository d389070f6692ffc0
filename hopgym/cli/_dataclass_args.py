"""Command-line options generated from config dataclasses, as TRL's ``TrlParser`` and
transformers' ``HfArgumentParser`` do, so that a flag cannot drift from the field it sets.

Functions: :func:`add_config_arguments` (a config's fields to options), :func:`config_from_args`
(parsed options back to a config), :func:`config_values` and :func:`given_values` (the values
before a config checks them; only those given), :func:`changed` (options off their default),
:func:`config_specs` (which configs a parser was built from), :func:`plain` (help text without
reST markup). Classes: :class:`ConfigSpec`,
:class:`ArgumentParser`, :class:`ConfigError`.

How a field becomes an option:

- Name: ``max_steps`` gives ``--max-steps``; ``--max_steps`` is accepted too (the parser rewrites
  underscores in option names before parsing). With a prefix, ``early_answer`` of a spec with
  ``prefix="teacher"`` gives ``--teacher-early-answer``. Further spellings come from the field's
  ``metadata["aliases"]`` or the spec's ``aliases`` (``--steps`` for ``max_steps``).
- Help: ``metadata["cli_help"]``, else ``metadata["help"]``, as plain text (reST roles and
  backticks removed), followed by the default. ``cli_help`` is for a field whose Python help
  speaks of values a command line cannot give (``None``, an instance): it says what to type
  instead (``none``, or leaving the option out). Every generated option has help; a field
  without it is an error.
- Type, from the annotation: ``int``, ``float`` and ``str`` as they are (``Any`` is read as
  ``str``: a command line holds text); ``X | None`` is ``X`` with
  the word ``none`` for ``None`` (not for ``str``, where "none" may mean something), and a union
  with ``str`` (``str | Protocol``) is ``str``, as in ``HfArgumentParser``; ``bool`` is
  ``--x`` / ``--no-x`` (``BooleanOptionalAction``), and ``bool | None`` the same with ``None``
  when neither is given; ``Literal[...]`` or ``metadata["choices"]`` give choices;
  ``tuple[X, ...]`` and ``list[X]`` take one or more values, space- or comma-separated
  (``--seeds 0 1 2`` or ``--seeds 0,1,2``; ``metadata["commas"] = False`` for values that may
  hold commas, such as file names); ``dict[str, ...]`` takes ``KEY=VALUE`` items whose
  values are read as Python literals. Repeating a list or dict option adds to it
  (``--kw a=1 --kw b=2`` keeps both); the first use replaces the default.
- Default: the field's default (or ``default_factory()``); no default makes the option required.
- A spec's ``metadata`` adds to a field's metadata for one command (``choices`` narrower than the
  field's type allows there, e.g. the retriever kinds an index can hold).
- ``metadata["required"]`` makes an option required even though the field has a default (a
  config that Python callers may leave unset, such as ``ServeConfig.index``).
- ``metadata["positional"]`` makes a positional argument; ``metadata["metavar"]``,
  ``["nargs"]`` and ``["const"]`` pass through to argparse (``--json`` with an optional value).
- A spec with ``given_only`` leaves the options that are not on the command line out of the
  namespace (:func:`given_values` reads the others): for options whose values are also set
  elsewhere (an env id's registered options), so that only what the user typed overrides them.
- A ``dict`` field's ``metadata["shortcuts"]`` (``{"--steps": "max_steps"}``) adds options that
  set one key of it each (``--steps 2`` is ``--trl max_steps=2``, the value read as a Python
  literal); a key given by a shortcut and again (``--steps 2 --trl max_steps=3``) is refused.
- A spec's ``kv_flag`` (``--tiny``) adds one ``KEY=VALUE`` option that sets any of the config's
  fields by name, for configs passed through to a library (``--tiny layers=2 hidden=64``).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from hopgym._kwargs import KwargsError, parse_kwarg
from hopgym.errors import HopgymError, InvalidOptionTypeError

__all__ = [
    "ArgumentParser",
    "ConfigError",
    "ConfigSpec",
    "add_config_arguments",
    "changed",
    "config_from_args",
    "config_specs",
    "config_values",
    "given_values",
    "plain",
]

_SPECS = "_hopgym_config_specs"
_N = TypeVar("_N")


class ConfigError(HopgymError, ValueError):
    """Options that do not make a valid config (its ``__post_init__`` refused them)."""


@dataclasses.dataclass(frozen=True)
class ConfigSpec:
    """How one config dataclass appears on one parser.

    Attributes:
        cls: the dataclass.
        prefix: prepended to every option and destination (``teacher`` → ``--teacher-think``).
        aliases: extra option strings per field name (``{"max_steps": ("--steps",)}``).
        exclude: fields that get no option (the command sets them itself).
        kv_flag: an extra ``KEY=VALUE`` option that sets fields by name (``--tiny``).
        title: the heading of the option group in ``--help``.
        metadata: per field name, entries added to the field's metadata for this parser.
        description: the text under the heading.
        given_only: leave options that are not on the command line out of the namespace (read
            them with :func:`given_values`).
    """

    cls: type
    prefix: str = ""
    aliases: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    exclude: frozenset[str] = frozenset()
    kv_flag: str | None = None
    title: str | None = None
    metadata: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    description: str | None = None
    given_only: bool = False

    def dest(self, name: str) -> str:
        """The argparse destination of field ``name``."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def option(self, name: str) -> str:
        """The main option string of field ``name``."""
        return "--" + self.dest(name).replace("_", "-")

    @property
    def kv_dest(self) -> str | None:
        """The destination of :attr:`kv_flag`."""
        return self.kv_flag.lstrip("-").replace("-", "_") if self.kv_flag else None

    def fields(self) -> list[dataclasses.Field]:
        """The fields that get an option."""
        return [f for f in dataclasses.fields(self.cls) if f.name not in self.exclude]


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that also accepts ``--field_name`` for ``--field-name``."""

    # The overloads are argparse's own (typeshed), so this stays a drop-in override.
    @typing.overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @typing.overload
    def parse_known_args(self, args: Iterable[str] | None, namespace: _N) -> tuple[_N, list[str]]: ...
    @typing.overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        import sys

        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(_hyphenate(argv), namespace)


def _hyphenate(argv: list[str]) -> list[str]:
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            return out + argv[i:]
        if token.startswith("--") and "_" in token.partition("=")[0]:
            name, sep, value = token.partition("=")
            token = name.replace("_", "-") + sep + value
        out.append(token)
    return out


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain(text: str) -> str:
    """Help text without reST markup: roles and backticks go, the words stay.

    Example:
        >>> plain("a :class:`~hopgym.Foo` with ``x=1`` and `y`")
        'a hopgym.Foo with x=1 and y'
    """
    text = _ROLE.sub(r"\1", text)
    return text.replace("``", "").replace("`", "")


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` → ``(X, True)``; a union with ``str`` → ``(str, ...)``; else ``(tp, False)``."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) != 1 and str in args:
            return str, optional  # ``str | Protocol``: the command line gives the name
        if len(args) != 1:
            raise InvalidOptionTypeError(
                f"only X | None unions (or unions with str) can become options, got {tp}"
            )
        return args[0], optional
    return tp, False


def _scalar(tp: Any, optional: bool) -> Callable[[str], Any]:
    """A converter for one command-line word of type ``tp``."""
    if tp not in (int, float, str):
        raise InvalidOptionTypeError(f"cannot make an option of type {tp}")

    def convert(text: str) -> Any:
        if optional and tp is not str and text.lower() in ("none", "null"):
            return None
        try:
            return tp(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if tp is int else 'a number'}, got {text!r}"
            ) from None

    convert.__name__ = tp.__name__  # argparse names the type in its messages
    return convert


def _split_list(item: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A converter for one word of a list option: ``a,b`` is two values, ``''`` none."""

    def convert(text: str) -> list[Any]:
        return [item(t.strip()) for t in text.split(",") if t.strip()]

    convert.__name__ = getattr(item, "__name__", "value")
    return convert


def _kv(flag: str) -> Callable[[str], tuple[str, Any]]:
    def convert(text: str) -> tuple[str, Any]:
        try:
            return parse_kwarg(text, flag)
        except KwargsError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = "KEY=VALUE"
    return convert


class _Extend(argparse.Action):
    """Adds each use's values to the list; the first use replaces the default."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is self.default or current is None else list(current)
        for value in values:
            if isinstance(value, list):  # a comma-separated word
                items.extend(value)
            else:
                items.append(value)
        setattr(namespace, self.dest, items)


class _Shortcut(argparse.Action):
    """One key of a dict option (``--steps 2`` for ``--trl max_steps=2``), remembered so that a
    second setting of the key is refused."""

    def __init__(self, *args: Any, key: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key = key

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        try:
            item = parse_kwarg(f"{self.key}={values}", option_string or self.dest)
        except KwargsError as exc:
            parser.error(str(exc))
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or isinstance(current, dict) else list(current)
        setattr(namespace, self.dest, [*items, item])
        shortcuts = getattr(namespace, _SHORTCUTS, {})
        setattr(namespace, _SHORTCUTS, {**shortcuts, (self.dest, self.key): option_string})


_SHORTCUTS = "_hopgym_shortcuts"


def _dict_value(args: argparse.Namespace, dest: str, flag: str, items: list[tuple[str, Any]]) -> dict:
    """``items`` as a dict; a key set by a shortcut and again is refused."""
    shortcuts = getattr(args, _SHORTCUTS, {})
    keys = [k for k, _ in items]
    for key in keys:
        option = shortcuts.get((dest, key))
        if option and keys.count(key) > 1:
            raise ConfigError(f"{option} and {flag} {key}=... both set {key}: give it once")
    return dict(items)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return " ".join(f"{k}={v!r}" for k, v in value.items())
    return str(value)


def _metavar(name: str, tp: Any) -> str:
    if tp is int:
        return "N"
    if tp is float:
        return "X"
    return name.rsplit("_", 1)[-1].upper()


def add_config_arguments(parser: argparse.ArgumentParser, spec: ConfigSpec | type) -> None:
    """Add an option for every field of ``spec.cls`` to ``parser`` (see the module's rules).

    Raises:
        hopgym.errors.InvalidOptionTypeError: a field's type has no command-line form, or a field has no help.
    """
    if not isinstance(spec, ConfigSpec):
        spec = ConfigSpec(spec)
    group: Any = (
        parser.add_argument_group(spec.title, plain(spec.description or "") or None) if spec.title else parser
    )
    hints = typing.get_type_hints(spec.cls)
    for f in spec.fields():
        _add_field(group, spec, f, hints[f.name])
    if spec.kv_flag:
        names = ", ".join(f.name for f in dataclasses.fields(spec.cls))
        group.add_argument(
            spec.kv_flag,
            dest=spec.kv_dest,
            nargs="+",
            action=_Extend,
            type=_kv(spec.kv_flag),
            default={},
            metavar="KEY=VALUE",
            help=f"{spec.cls.__name__} fields as KEY=VALUE, values read as "
            f"Python literals; repeat to add more (keys: {names}).",
        )
    parser.set_defaults(**{_SPECS: [*config_specs(parser), spec]})


def _add_field(group: Any, spec: ConfigSpec, f: dataclasses.Field, hint: Any) -> None:
    meta = {**f.metadata, **spec.metadata.get(f.name, {})}
    help_text = meta.get("cli_help") or meta.get("help")
    if not help_text:
        raise InvalidOptionTypeError(f"{spec.cls.__name__}.{f.name} has no metadata['help']")
    help_text = plain(help_text).rstrip()
    notes: list[str] = []  # shown in parentheses after the help: choices, default
    default = _default(f)
    dest = spec.dest(f.name)
    tp, optional = _unwrap_optional(hint)
    if tp is Any:
        tp = str
    kwargs: dict[str, Any] = {}
    origin = typing.get_origin(tp)
    if tp is bool:
        kwargs.update(action=argparse.BooleanOptionalAction)
    elif origin in (tuple, list):
        item = typing.get_args(tp)[0]
        choices = typing.get_args(item) if typing.get_origin(item) is Literal else None
        conv = _scalar(type(choices[0]) if choices else item, False)
        if choices or "choices" in meta:
            allowed = tuple(choices or meta["choices"])
            notes.append(f"from: {', '.join(map(str, allowed))}")
            conv = _choice(conv, allowed)
        kwargs.update(
            nargs="+",
            action=_Extend,
            type=_split_list(conv) if meta.get("commas", True) else conv,
            metavar=meta.get("metavar", _metavar(f.name, item)),
        )
    elif origin is dict:
        flag = spec.option(f.name)
        kwargs.update(nargs="+", action=_Extend, type=_kv(flag), metavar=meta.get("metavar", "KEY=VALUE"))
        for option, key in meta.get("shortcuts", {}).items():
            group.add_argument(
                option,
                dest=dest,
                action=_Shortcut,
                key=key,
                default=argparse.SUPPRESS,
                metavar=key.rsplit("_", 1)[-1].upper(),
                help=f"Short for {flag} {key}=VALUE.",
            )
    elif origin is Literal:
        choices = typing.get_args(tp)
        kwargs.update(type=_scalar(type(choices[0]), optional), choices=choices)
    else:
        kwargs.update(type=_scalar(tp, optional), metavar=meta.get("metavar", _metavar(f.name, tp)))
        if "choices" in meta:
            kwargs["choices"] = tuple(meta["choices"])
            kwargs.pop("metavar")
    for key in ("nargs", "const"):
        if key in meta:
            kwargs[key] = meta[key]
    if default is dataclasses.MISSING or meta.get("required"):
        kwargs["required"] = True
    else:
        kwargs["default"] = argparse.SUPPRESS if spec.given_only else default
        if default not in (None, "", (), [], {}) and "default" not in help_text.lower():
            notes.append(f"default: {_show(default)}")
    if notes:
        period = help_text.endswith(".") and not help_text.endswith("..")
        help_text = help_text[:-1] if period else help_text
        help_text += f" ({'; '.join(notes)})" + "." * period
    if meta.get("positional"):
        kwargs.pop("required", None)
        if default is not dataclasses.MISSING:
            kwargs["nargs"] = "?"
        action = group.add_argument(dest, **kwargs)
    else:
        aliases = [*meta.get("aliases", ()), *spec.aliases.get(f.name, ())]
        action = group.add_argument(spec.option(f.name), *aliases, dest=dest, **kwargs)
    # Set after construction: some Python versions' BooleanOptionalAction append a default.
    action.help = help_text.replace("%", "%%")


def _choice(conv: Callable[[str], Any], allowed: tuple[Any, ...]) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        value = conv(text)
        if value not in allowed:
            raise argparse.ArgumentTypeError(
                f"invalid choice {text!r} (choose from {', '.join(map(str, allowed))})"
            )
        return value

    convert.__name__ = getattr(conv, "__name__", "value")
    return convert


def config_specs(parser: argparse.ArgumentParser) -> list[ConfigSpec]:
    """The specs :func:`add_config_arguments` added to ``parser``, in order."""
    return list(parser.get_default(_SPECS) or [])


def given_values(args: argparse.Namespace, spec: ConfigSpec) -> dict[str, Any]:
    """The values of ``spec``'s options that were given on the command line, by field name."""
    hints = typing.get_type_hints(spec.cls)
    out = {}
    for f in spec.fields():
        if hasattr(args, spec.dest(f.name)):
            value = getattr(args, spec.dest(f.name))
            tp, _ = _unwrap_optional(hints[f.name])
            if typing.get_origin(tp) is dict and isinstance(value, list):
                value = dict(value)
            elif typing.get_origin(tp) is tuple and isinstance(value, list):
                value = tuple(value)
            out[f.name] = value
    return out


def config_values(args: argparse.Namespace, spec: ConfigSpec | type) -> dict[str, Any]:
    """The parsed values of ``spec``'s fields (before the config checks them), by field name.

    Raises:
        ConfigError: ``kv_flag`` names a key that is not a field.
    """
    if not isinstance(spec, ConfigSpec):
        spec = ConfigSpec(spec)
    hints = typing.get_type_hints(spec.cls)
    values: dict[str, Any] = {}
    for f in spec.fields():
        value = getattr(args, spec.dest(f.name), _default(f))  # absent: given_only
        tp, _ = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(tp)
        if origin is dict and isinstance(value, list):
            value = _dict_value(args, spec.dest(f.name), spec.option(f.name), value)
        elif origin is tuple and isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    if spec.kv_dest:
        extra = getattr(args, spec.kv_dest) or {}
        extra = dict(extra) if isinstance(extra, list) else dict(extra)
        names = {f.name for f in dataclasses.fields(spec.cls)}
        unknown = sorted(set(extra) - names)
        if unknown:
            raise ConfigError(
                f"{spec.kv_flag}: unknown key(s) {', '.join(unknown)}; "
                f"{spec.cls.__name__} has {', '.join(sorted(names))}"
            )
        values.update(extra)
    return values


def config_from_args(args: argparse.Namespace, spec: ConfigSpec | type, **overrides: Any) -> Any:
    """Build ``spec.cls`` from parsed options (plus ``overrides``, e.g. for excluded fields).

    Raises:
        ConfigError: the config refused the values (its ``__post_init__`` message).
    """
    if not isinstance(spec, ConfigSpec):
        spec = ConfigSpec(spec)
    values = {**config_values(args, spec), **overrides}
    try:
        return spec.cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def changed(args: argparse.Namespace, spec: ConfigSpec) -> list[str]:
    """The options of ``spec`` whose value differs from the field default."""
    out = []
    for f in spec.fields():
        default = _default(f)
        value = getattr(args, spec.dest(f.name), default)
        if isinstance(value, list) and isinstance(default, tuple):
            value = tuple(value)
        if value != default:
            out.append(spec.option(f.name))
    if spec.kv_dest and getattr(args, spec.kv_dest):
        out.append(spec.kv_flag or "")
    return out
