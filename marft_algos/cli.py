"""Command-line plumbing shared by the example scripts and benchmarks.

The library's classes take explicit objects; this module is the one place that turns ``argv`` into
them: an algorithm name → config class and trainer class, a flat set of ``--flags`` generated from
the config dataclass fields (each flag's help is the field's docstring), and a policy + critic
built from a model name.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pettingzoo import AECEnv

from marft_algos.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.grpo import GRPOConfig, GRPOTrainer
from marft_algos.ppo import PPOConfig, PPOTrainer
from marft_algos.token_marft import TokenMARFTConfig, TokenMARFTTrainer
from marft_algos.trainer import Trainer, TrainerConfig

__all__ = ["ALGORITHMS", "add_config_arguments", "build_trainer", "config_from_args", "field_docs"]

#: Algorithm name → (config class, trainer class).
ALGORITHMS: dict[str, tuple[type[TrainerConfig], type[Trainer]]] = {
    "action-marft": (ActionMARFTConfig, ActionMARFTTrainer),
    "token-marft": (TokenMARFTConfig, TokenMARFTTrainer),
    "ppo": (PPOConfig, PPOTrainer),
    "grpo": (GRPOConfig, GRPOTrainer),
}


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


def _parser_type(annotation: Any) -> Callable[[str], Any] | None:
    """An argparse ``type`` for a field annotation (None for bools, handled as flags)."""
    if annotation is bool:
        return None
    text = str(annotation)
    if "dict" in text:
        return lambda s: dict(ast.literal_eval(s))
    if "int" in text and "float" not in text:
        return lambda s: None if s.lower() == "none" else int(s)
    if "float" in text:
        return lambda s: None if s.lower() == "none" else float(s)
    return lambda s: None if s.lower() == "none" else s


def add_config_arguments(
    parser: argparse.ArgumentParser,
    config_classes: Sequence[type],
    *,
    skip: Sequence[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add one ``--flag`` per field of the given config dataclasses (the union).

    A flag left unset keeps the script's default (``defaults``) or else the config's; the help line
    shows that value and names the algorithms the flag applies to.
    """
    owners: dict[str, list[str]] = {}
    annotations: dict[str, Any] = {}
    field_defaults: dict[str, Any] = {}
    docs: dict[str, str] = {}
    for klass in config_classes:
        hints = typing.get_type_hints(klass)
        klass_docs = field_docs(klass)
        for f in dataclasses.fields(klass):
            if f.name in skip:
                continue
            owners.setdefault(f.name, []).append(klass.__name__.removesuffix("Config"))
            annotations.setdefault(f.name, hints[f.name])
            docs.setdefault(f.name, klass_docs.get(f.name, ""))
            if f.default is not dataclasses.MISSING:
                field_defaults.setdefault(f.name, f.default)
    for name, used_by in owners.items():
        annotation = annotations[name]
        flag = "--" + name.replace("_", "-")
        scope = "" if len(used_by) == len(config_classes) else f" [{', '.join(used_by)}]"
        shown = (defaults or {}).get(name, field_defaults.get(name))
        text = f"{docs[name]}{scope} (default: {shown})"
        kind = _parser_type(annotation)
        if kind is None:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            parser.add_argument(flag, dest=name, type=kind, default=None, metavar=name.upper(), help=text)


def config_from_args(config_class: type[TrainerConfig], args: argparse.Namespace, defaults: Mapping[str, Any]) -> TrainerConfig:
    """The config: ``defaults`` (script defaults) updated by every flag the user set."""
    names = {f.name for f in dataclasses.fields(config_class)}
    values = {k: v for k, v in defaults.items() if k in names}
    values.update({k: v for k, v in vars(args).items() if k in names and v is not None})
    return config_class(**values)


def build_trainer(
    algorithm: str,
    policy: Any,
    env_fn: Callable[[], AECEnv],
    config: TrainerConfig,
    *,
    eval_env_fn: Callable[[], AECEnv] | None = None,
    critic_seed: int = 0,
) -> Trainer:
    """Instantiate the trainer for ``algorithm``, with a critic on the policy's base when it needs one."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}.")
    _, trainer_class = ALGORITHMS[algorithm]
    if trainer_class is GRPOTrainer:
        return trainer_class(policy, env_fn, config, eval_env_fn=eval_env_fn)
    from marft_algos.policy.critic import Critic

    critic = Critic(policy, seed=critic_seed)
    return trainer_class(policy, env_fn, config, critic=critic, eval_env_fn=eval_env_fn)
