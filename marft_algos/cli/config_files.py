"""``--config run.yaml`` (TRL's convention): a file of ``field: value`` lines, read without
duplicate keys and checked against the fields' types as the flags would be
(:func:`check_config_values`); its values replace the defaults, and the flags given on the
command line replace them."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from marft_algos.cli.parsing import UsageError, _allows_none, _is_mapping, _is_windows, parse_window

__all__ = ["check_config_values", "load_config_file"]


def load_config_file(path: str) -> dict[str, Any]:
    """Field values from a YAML (or JSON) file, as ``--config`` takes it."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(
            f"--config {path!r}: no such file; pass the path of a YAML file of field: value lines."
        )
    try:
        import yaml

        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_unique_keys_loader())
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--config {path!r} is not UTF-8 text ({exc.reason}); re-save it as UTF-8."
        ) from None
    except _DuplicateKey as exc:
        raise UsageError(
            f"--config {path!r} sets {exc.key!r} twice (lines {exc.first} and {exc.second}); keep one "
            f"line per field."
        ) from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--config {path!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"--config {path!r} must hold a mapping of field: value lines, got {type(data).__name__}."
        )
    return {str(k).replace("-", "_"): v for k, v in data.items()}


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


def _unique_keys_loader() -> type:
    """A safe YAML loader that refuses a mapping with the same key twice (PyYAML keeps the last)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise _DuplicateKey(str(key), seen[key], line)
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _describe(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def check_config_values(
    values: Mapping[str, Any], dataclass_types: Sequence[type], path: str | None
) -> dict[str, Any]:
    """The ``--config`` file's values checked against the fields' types, as flags would be.

    YAML gives typed values that argparse never converts: ``iterations: 1.7`` or ``iterations:
    true`` would otherwise reach the config as a float or a bool. Strings convert as flags do
    (``learning_rate: 1e-3`` is a string in YAML); numbers are accepted for text fields.

    Raises:
        UsageError: A value of the wrong type, naming the field, the value and an example.
    """
    hints: dict[str, Any] = {}
    readers: dict[str, Any] = {}  # a field's own syntax (metadata "type"), e.g. branch: router=3x4
    for klass in dataclass_types:
        hints.update(typing.get_type_hints(klass))
        readers.update({f.name: f.metadata["type"] for f in fields(klass) if "type" in f.metadata})
    out = dict(values)
    for name, value in values.items():
        if name not in hints:
            continue
        try:
            if name in readers and isinstance(value, str):
                out[name] = readers[name](value)
                continue
            out[name] = _convert(hints[name], value)
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"--config {path!r}: {name}: {_describe(value)} is not valid; {name} takes {exc}."
            ) from None
    return out


def _convert(annotation: Any, value: Any) -> Any:
    """``value`` as a field of ``annotation`` takes it; TypeError/ValueError says what it takes."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if _allows_none(annotation) or annotation is type(None):
            return None
        raise TypeError("a value (not null)")
    if _allows_none(annotation):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is typing.Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ValueError("one of " + ", ".join(map(str, choices)))
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise TypeError("true or false")
        return value
    if annotation is int:
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("a whole number, e.g. 2")
        return value
    if annotation is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise TypeError("a number, e.g. 0.001 or 1e-3") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError("a number, e.g. 0.001 or 1e-3")
        return float(value)
    if annotation is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise TypeError("text")
        return str(value)
    if _is_mapping(annotation):
        if not isinstance(value, dict):
            raise TypeError('a mapping, e.g. {"actor": 8}')
        kinds = typing.get_args(annotation)  # YAML reads 1e-5 as text: convert as a flag would
        return {k: _convert(kinds[1], v) for k, v in value.items()} if kinds else value
    if _is_windows(annotation):
        if not isinstance(value, list) or not all(isinstance(w, list | str) for w in value):
            raise TypeError('a list of lists of names, e.g. [["router"], ["actor", "critic"]]')
        return [parse_window(w) if isinstance(w, str) else w for w in value]
    return value
