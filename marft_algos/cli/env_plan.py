"""The env of a ``marft train`` run: which env, which data for training and for evaluation, which
agents (:func:`plan_env`), decided before any model loads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marft_algos.cli.data import DATA_FLAGS, family_of, load_part, plan_data, split_kwargs
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.profiles import PROFILE_KEYS

__all__ = ["EnvPlan", "builds_messages", "plan_env", "program_settings_help"]


def program_settings_help() -> str:
    """What ``--env-kwargs`` also carries: an agent program's settings, each with its default
    (read from :class:`~marft_envs.programs.ProgramSettings`, so the list never goes stale)."""
    import dataclasses

    from marft_envs.programs.settings import ProgramSettings

    listed = ", ".join(
        name if default is dataclasses.MISSING else f"{name}={default!r}"
        for name, default in ProgramSettings.keywords().items()
        if name != "limits"  # given by its fields, listed after it
    )
    return (
        f" For an agent program (register_program), the program settings go here too, overriding "
        f'the registered ones, e.g. \'{{"on_error": "drop", "episode_timeout": 30}}\': '
        f"{listed} (docs/programs.md)."
    )


@dataclass
class EnvPlan:
    """The env a run trains and evaluates on, with the recorded description of both."""

    env_id: str
    env_kwargs: dict[str, Any]
    data: dict[str, Any] | None
    agents: list[str]

    def factories(self):
        import marft_envs

        train_kwargs = split_kwargs(self.env_id, self.env_kwargs, "train")
        eval_kwargs = split_kwargs(self.env_id, self.env_kwargs, "eval")
        if self.data is not None:
            family = family_of(self.env_id)
            train_kwargs["dataset"] = load_part(family, self.data["train"])
            eval_kwargs["dataset"] = load_part(family, self.data["eval"])
        return (lambda: marft_envs.make(self.env_id, **train_kwargs)), (
            lambda: marft_envs.make(self.env_id, **eval_kwargs)
        )


def plan_env(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    *,
    dataset: str | None = None,
    eval_dataset: str | None = None,
    levels: str | None = None,
    subjects: str | None = None,
    given: set[str] = frozenset(),  # type: ignore[assignment]
) -> EnvPlan:
    """Resolve the env (importing its module for ``module:id``), decide its data and read its team.

    Data flags reach only envs whose constructor takes ``dataset``, through the env's data family
    (:mod:`marft_envs.core.data`); an env without one is evaluated on held-out reset seeds.
    """
    kwargs = dict(env_kwargs or {})
    family = family_of(env_id)
    if family is not None and "dataset" in kwargs:
        # --env-kwargs '{"dataset": ...}' names the same thing as --dataset: one plan, held-out
        # problems carved out as for --dataset.
        if dataset is not None or not isinstance(kwargs["dataset"], str):
            raise UsageError(
                f"--env-kwargs sets dataset={kwargs['dataset']!r}"
                + (f" and --dataset {dataset!r} too" if dataset is not None else "")
                + "; pass the training problems once, as --dataset PATH_OR_NAME."
            )
        dataset = kwargs.pop("dataset")
    filters = {"levels": levels, "subjects": subjects}
    data = plan_data(family, dataset, eval_dataset, filters) if family is not None else None
    if family is None:
        flags = [o for o in DATA_FLAGS if o in given]
        if flags:
            shown = ", ".join("--" + f.replace("_", "-") for f in flags)
            raise UsageError(
                f"{env_id} takes no dataset argument, so {shown} cannot reach it; drop {shown} (it is "
                f"evaluated on held-out reset seeds), or pass its own arguments with --env-kwargs."
            )
    plan = EnvPlan(env_id, kwargs, data, [])
    env_fn, _ = plan.factories()
    prompted = sorted(set(kwargs) & set(PROFILE_KEYS))
    try:
        probe = env_fn()
    except TypeError as exc:
        if prompted and any(k in str(exc) for k in prompted):
            raise UsageError(_own_messages(env_id, prompted)) from None
        raise
    if prompted and not builds_messages(probe):
        raise UsageError(_own_messages(env_id, prompted))
    plan.agents = list(probe.possible_agents)
    probe.close()
    return plan


def builds_messages(env: Any) -> bool:
    """Whether the env's agents' messages come from their profiles (FlexPOMDPEnv's layout)."""
    from marft_envs.core.env import FlexPOMDPEnv

    base = env.unwrapped
    return isinstance(base, FlexPOMDPEnv) and (
        type(base).rollout_messages is FlexPOMDPEnv.rollout_messages
    )


def _own_messages(env_id: str, keys: list[str]) -> str:
    return (
        f"{env_id} writes its agents' messages itself (e.g. an agent program), so {keys} cannot "
        f"reach them; change the prompts where it builds its messages."
    )
