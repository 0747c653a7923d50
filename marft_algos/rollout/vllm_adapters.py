"""The policy's LoRA adapters as the vLLM engine serves them, and the probe that checks them.

- **Syncing** (:class:`EngineAdapters`): after update ``v`` each trainable adapter is saved in
  peft format and loaded as ``f"{adapter}@v{v}"`` with a fresh integer id, and the previous
  version is unloaded. vLLM keys loaded weights by that id, so a new version can never be served
  from the old one's weights. Frozen adapters are loaded once; agents sharing an adapter share one
  engine adapter; agents without an adapter are served by the base model.
- **The probe** (:func:`probe_differences`, :func:`check_probe`): after each sync a few fixed
  prompts per synced adapter are sampled on the engine and their log-probs recomputed with
  :meth:`MultiAgentPolicy.token_log_probs <marft_algos.policy.MultiAgentPolicy.token_log_probs>`;
  a maximum absolute difference above the tolerance raises :class:`AdapterSyncError` naming the
  agent.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from marft_algos.policy.multi_agent import Generation
from marft_algos.protocols import GenerationSettings

__all__ = [
    "PROBE_MESSAGES",
    "AdapterSyncError",
    "EngineAdapters",
    "LoadedAdapter",
    "check_probe",
    "probe_differences",
]

#: Observations the post-sync probe samples (rendered with each agent's chat template).
PROBE_MESSAGES: tuple[tuple[dict[str, str], ...], ...] = (
    ({"role": "user", "content": "What is 17 + 25? Explain briefly."},),
    ({"role": "user", "content": "Name three prime numbers and say why they are prime."},),
)


class AdapterSyncError(RuntimeError):
    """After a sync the engine's log-probs disagree with the policy's for some agent."""


@dataclass
class LoadedAdapter:
    """One adapter version the engine holds: its request, its saved files, its version."""

    request: Any  # vllm.lora.request.LoRARequest
    folder: Path
    version: int


class EngineAdapters:
    """The engine's adapters: which one each agent acts with, and the version loaded of each.

    Args:
        adapter_of: Each agent's adapter name (None: the agent acts with the base model).
    """

    def __init__(self, adapter_of: Mapping[str, str | None]) -> None:
        self.adapter_of = dict(adapter_of)
        self.loaded: dict[str, LoadedAdapter] = {}
        self.next_id = 1
        #: Where the saved adapter versions live until they are unloaded.
        self.folder = Path(tempfile.mkdtemp(prefix="marft-vllm-adapters-"))

    def sync(self, engine: Any, policy: Any, version: int) -> list[str]:
        """Load the policy's current adapters into ``engine`` (the engine's ``llm_engine``) as
        version ``version``; frozen adapters only the first time.

        Returns:
            One agent of each adapter loaded now (the agents the probe checks).
        """
        synced: list[str] = []
        for (base, adapter), agents in policy.adapter_groups().items():
            if adapter in self.loaded and not policy.is_trainable(agents[0]):
                continue  # frozen: its weights never change
            from vllm.lora.request import LoRARequest

            from marft_algos.policy.adapters import save_one_adapter

            folder = self.folder / f"{adapter}@v{version}-{self.next_id}"
            save_one_adapter(policy.backbones[base], adapter, folder)
            old = self.loaded.pop(adapter, None)
            if old is not None:
                engine.remove_lora(old.request.lora_int_id)
                shutil.rmtree(old.folder, ignore_errors=True)
            request = LoRARequest(f"{adapter}@v{version}", self.next_id, str(folder))
            self.next_id += 1
            engine.add_lora(request)
            self.loaded[adapter] = LoadedAdapter(request, folder, version)
            synced.append(agents[0])
        return synced

    def request(self, agent: str) -> Any:
        """The engine adapter an agent acts with now (None: the base model)."""
        adapter = self.adapter_of.get(agent, KeyError)
        if adapter is KeyError:
            raise KeyError(
                f"Unknown agent {agent!r}; the backend's agents are {list(self.adapter_of)}."
            )
        return None if adapter is None else self.loaded[str(adapter)].request

    def close(self) -> None:
        """Delete the saved adapter files and forget what was loaded."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.loaded.clear()


def probe_differences(
    policy: Any,
    agents: Sequence[str],
    generate_mixed: Callable[[list[str], list[list[int]], GenerationSettings], list[Generation]],
    tokens: int,
) -> dict[str, float]:
    """Sample :data:`PROBE_MESSAGES` for each agent with ``generate_mixed`` (the engine, ``tokens``
    tokens each) and recompute their log-probs with the policy.

    Returns:
        The largest absolute per-token log-prob difference of each agent.
    """
    prompts = [policy.render(a, m) for a in agents for m in PROBE_MESSAGES]
    owners = [a for a in agents for _ in PROBE_MESSAGES]
    probe = GenerationSettings(max_new_tokens=tokens, temperature=1.0, seed=1234)
    generations = generate_mixed(owners, prompts, probe)
    differences: dict[str, float] = {}
    for agent in agents:
        mine = [g for g in generations if g.agent == agent]
        with torch.no_grad():
            lp = policy.token_log_probs(
                agent,
                [g.prompt_ids for g in mine],
                [g.action_ids for g in mine],
                temperature=1.0,
            )
        worst = 0.0
        for i, g in enumerate(mine):
            ref = lp.log_probs[i, lp.mask[i]].double().cpu()
            got = torch.tensor(g.log_probs, dtype=torch.float64)
            worst = max(worst, float((ref - got).abs().max()) if len(got) else 0.0)
        differences[agent] = worst
    return differences


def check_probe(
    differences: Mapping[str, float],
    *,
    tolerance: float,
    version: int,
    adapter_of: Mapping[str, str | None],
) -> None:
    """Raise :class:`AdapterSyncError` for the agent whose difference is the largest above
    ``tolerance`` (a NaN difference counts as above it)."""
    bad = {a: d for a, d in differences.items() if not d <= tolerance}
    if bad:
        agent, diff = max(bad.items(), key=lambda kv: kv[1])
        adapter = adapter_of[agent]
        raise AdapterSyncError(
            f"After the adapter sync of version {version}, the vLLM engine's log-probs for "
            f"agent {agent!r} (adapter {adapter}@v{version}) differ from the policy's by "
            f"{diff:.3g}, above the tolerance {tolerance:g}: the engine does not "
            f"serve the weights being trained (stale or misloaded adapter, or a base model "
            f"that differs from the policy's). Check that the engine loads the policy's base "
            f"model in the policy's dtype; raise VLLMSettings.probe_tolerance (--vllm-probe-"
            f"tolerance) only for a known precision gap."
        )
