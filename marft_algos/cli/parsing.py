"""Dataclass configs → command-line flags, through transformers' ``HfArgumentParser``.

One flag per dataclass field (``--max-new-tokens`` and ``--max_new_tokens`` both work), its help
the field's docstring. On top of ``HfArgumentParser`` this module adds what our configs need:

- ``none``/``null`` for fields that may be None, a JSON (or Python literal) mapping or name=value
  pairs for dict fields, one argument per inner list for list-of-lists fields, each with a parse
  error that names the flag, the value and the fix;
- which fields the user set explicitly (command line or ``--config`` file, read by
  :mod:`marft_algos.cli.config_files`), so presets fill in only the rest and
  options that do not apply to the chosen trainer are refused.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "UsageError",
    "build_parser",
    "did_you_mean",
    "field_docs",
    "parse_mapping",
    "parse_with",
    "pick",
]


class UsageError(ValueError):
    """A command line or config file the user must fix (the message says how)."""


def field_docs(config_class: type) -> dict[str, str]:
    """Each dataclass field's docstring (the string literal right after it), through the MRO."""
    docs: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, following in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def parse_mapping(text: str) -> dict[str, Any]:
    """A dict flag's value: JSON (``{"actor": 8}``), a Python literal (``{'actor': 8}``) or
    name=value pairs (``actor=8,writer=16``; each value read as JSON, else kept as text).

    Raises:
        argparse.ArgumentTypeError: Not a mapping; the message shows the expected form.
    """
    if text.strip().lower() in ("none", "null", ""):
        return None  # type: ignore[return-value]
    value: Any
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = _pairs(text)
    except RecursionError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}... is nested too deeply to read; a settings mapping needs a few levels "
            f'at most, e.g. \'{{"limits": {{"cpu_seconds": 5}}}}\''
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a mapping; write it as JSON with quoted keys, e.g. '{{\"actor\": 8}}' "
            f"(quote the whole value for the shell), or as name=value pairs, e.g. actor=8,writer=16"
        )
    return value


def _pairs(text: str) -> dict[str, Any] | None:
    """``actor=8,writer=16`` as a mapping (each value JSON, else text); None if not that form."""
    out: dict[str, Any] = {}
    for piece in text.split(","):
        name, sep, raw = piece.partition("=")
        if not sep or not name.strip():
            return None
        try:
            out[name.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[name.strip()] = raw.strip()
    return out


def parse_window(text: str) -> list[str]:
    """One window of a list-of-lists flag (``--agent-schedule router specialist,reviewer``):
    the comma-separated names of one argument."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} has an empty name; write each window as names joined by commas, e.g. "
            f"specialist,reviewer"
        )
    return names


def _flag_reader(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """A field's own parser as an argparse type: its ValueError message reaches the user."""

    def parse(text: str) -> Any:
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(read, "__name__", "value")
    return parse


def _optional(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else kind(text)

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def _allows_none(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _is_mapping(annotation: Any) -> bool:
    if _allows_none(annotation):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation is dict or typing.get_origin(annotation) is dict


def _is_windows(annotation: Any) -> bool:
    """Whether a field is a list of lists of names (``list[list[str]]``, optionally None)."""
    if _allows_none(annotation):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    return typing.get_origin(annotation) is list and typing.get_args(annotation) == (list[str],)


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` naming the choice ``word`` begins, else the closest one, else ``""``."""
    import difflib

    prefixed = sorted((c for c in choices if c.startswith(word)), key=len)
    best = prefixed[:1] or difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {best[0]!r}?)" if best else ""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show a default unless it is None/off or the help text already explains it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default in (None, False, argparse.SUPPRESS)
            or action.const is False  # a --no-X flag: its "default" is X's value, not its own
            or "(default" in text
            or "%(default)" in text
        ):
            return text
        return super()._get_help_string(action) or text


def build_parser(
    dataclass_types: Sequence[type],
    *,
    prog: str,
    description: str,
    defaults: Mapping[str, Any] | None = None,
) -> argparse.ArgumentParser:
    """An ``HfArgumentParser`` over ``dataclass_types`` with our help texts, types and defaults.

    Args:
        dataclass_types: The dataclasses whose fields become flags (names must not repeat).
        prog: Program name shown in usage lines, e.g. ``"marft train"``.
        description: First paragraph of ``--help``.
        defaults: Values that replace the dataclass defaults (a preset, a config file).
    """
    from transformers import HfArgumentParser

    class Parser(HfArgumentParser):
        def error(self, message: str) -> typing.NoReturn:
            # One line and the way to the help, instead of argparse's usage dump of every flag.
            self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    parser = Parser(
        list(dataclass_types),  # type: ignore[arg-type]  # each is a dataclass
        prog=prog,
        description=description,
        formatter_class=_HelpFormatter,
        # --iteration must not silently mean --iterations, and --episodes is no one's prefix.
        allow_abbrev=False,
    )
    docs: dict[str, str] = {}
    hints: dict[str, Any] = {}
    readers: dict[str, Callable[[str], Any]] = {}  # a field's own flag syntax (metadata "type")
    for klass in dataclass_types:
        docs.update(field_docs(klass))
        hints.update(typing.get_type_hints(klass))
        readers.update(
            {f.name: f.metadata["type"] for f in dataclasses.fields(klass) if "type" in f.metadata}
        )
    for action in parser._actions:
        if action.dest not in hints:
            continue
        negative = [o for o in action.option_strings if o.startswith("--no")]
        if negative and action.const is False:
            action.help = f"Turn off --{action.dest.replace('_', '-')}."
            continue
        action.help = docs.get(action.dest, action.help) or ""
        annotation = hints[action.dest]
        if action.dest in readers:
            action.type = _flag_reader(readers[action.dest])
            action.metavar = action.dest.upper()
        elif _is_mapping(annotation):
            action.type = parse_mapping
            action.metavar = "JSON"
        elif _is_windows(annotation):  # one argument per window: a b,c
            action.type = parse_window
            action.metavar = "A,B"
        elif _allows_none(annotation) and callable(action.type) and annotation is not bool:
            action.type = _optional(action.type)
        if action.help and "%" in action.help:
            action.help = action.help.replace("%", "%%")
    _add_negative_flags(parser, hints)
    if defaults:
        known = {a.dest for a in parser._actions}
        parser.set_defaults(**{k: v for k, v in defaults.items() if k in known})
    return parser


def _add_negative_flags(parser: argparse.ArgumentParser, hints: Mapping[str, Any]) -> None:
    """``--no-X`` for every on/off field (HfArgumentParser adds it only where the default is on,
    but a preset or a config file may turn a default-off field on)."""
    negated = {
        a.dest for a in parser._actions if any(o.startswith("--no") for o in a.option_strings)
    }
    for action in list(parser._actions):
        if hints.get(action.dest) is not bool or action.dest in negated:
            continue
        negated.add(action.dest)
        parser.add_argument(
            f"--no_{action.dest}",
            f"--no-{action.dest.replace('_', '-')}",
            action="store_false",
            dest=action.dest,
            help=f"Turn off --{action.dest.replace('_', '-')}.",
        )


def parse_with(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    *,
    unknown_hint: Callable[[str], str | None] | None = None,
) -> tuple[dict[str, Any], set[str]]:
    """Parse ``argv``; return every field's value and the fields set on the command line.

    Args:
        parser: From :func:`build_parser`.
        argv: The arguments.
        unknown_hint: Explains a flag this parser lacks (e.g. "a GRPO option"); None: argparse's error.

    Returns:
        ``(field values, explicitly given field names)``.
    """
    namespace, unknown = parser.parse_known_args(list(argv))
    if unknown:
        flags = [u for u in unknown if u.startswith("--")]
        found = [unknown_hint(f.split("=")[0]) for f in flags] if unknown_hint else []
        hints = [h for h in found if h]
        if hints:
            parser.error("; ".join(hints))
        # Suggest the dashed spelling of each flag (both spellings parse).
        known = sorted({_dashed(a) for a in parser._actions if a.option_strings} - {"--help"})
        detail = "; ".join(
            f"{flag}{did_you_mean(flag.split('=')[0], known)}" for flag in flags
        ) or " ".join(unknown)
        parser.error(f"unrecognized arguments: {detail}")
    return vars(namespace), _given_fields(parser, argv)


def _dashed(action: argparse.Action) -> str:
    """The flag's dashed spelling (``--max-new-tokens``) where it has one."""
    dashed = [o for o in action.option_strings if o.startswith("--") and "_" not in o]
    return (dashed or action.option_strings)[-1]


def pick(values: Mapping[str, Any], klass: type) -> dict[str, Any]:
    """The entries of ``values`` that are init fields of dataclass ``klass``."""
    names = {f.name for f in dataclasses.fields(klass) if f.init}
    return {k: v for k, v in values.items() if k in names}


def _given_fields(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """Dests whose flags occur in ``argv`` (``--x``, ``--x=1``, ``--no-x``)."""
    by_flag = {flag: action.dest for action in parser._actions for flag in action.option_strings}
    given = set()
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if flag in by_flag:
            given.add(by_flag[flag])
    return given


def parse_run_command(
    klass: type, argv: Sequence[str], *, prog: str, description: str
) -> tuple[Any, dict[str, Any]]:
    """Parse ``PROG RUN_OR_CHECKPOINT [flags]`` into an instance of the dataclass ``klass`` and
    the raw values (``values["run"]`` is the positional folder)."""
    parser = build_parser([klass], prog=prog, description=description)
    parser.add_argument(
        "run", help="A run folder (--output-dir of marft train) or a checkpoint-N folder."
    )
    values, _ = parse_with(parser, argv)
    return klass(**pick(values, klass)), values
