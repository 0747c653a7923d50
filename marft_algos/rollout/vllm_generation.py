"""One vLLM engine call, from the policy's sampling settings to :class:`Generation` records.

The engine samples with the policy's conventions: its *processed* log-probs are those of the
distribution after temperature, top-k and top-p
(:func:`~marft_algos.policy.forward.sampling_logits`), and generation stops at the policy's
end-of-turn ids. Greedy decoding's log-probs are recomputed by the policy at its temperature
(:func:`rescored`), as the engine reports them at temperature 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from marft_algos.policy.multi_agent import Generation
from marft_algos.policy.prefix_cache import PrefillCounter
from marft_algos.rollout.vllm_engine import threads_kept

__all__ = ["engine_outputs", "generations", "rescored", "sampling_params"]


def sampling_params(
    caps: Sequence[int],
    *,
    do_sample: bool,
    temperature: float,
    top_p: float,
    top_k: int,
    eos: list[int],
    seed: int | None,
) -> list[Any]:
    """One ``vllm.SamplingParams`` per request: request ``i`` draws up to ``caps[i]`` tokens and,
    with ``seed``, is seeded with ``seed + i``."""
    from vllm import SamplingParams

    common: dict[str, Any] = {"logprobs": 0, "stop_token_ids": eos}
    if do_sample:
        common.update(temperature=temperature, top_p=top_p, top_k=top_k)
    else:
        common.update(temperature=0.0)
    return [
        SamplingParams(
            **common, max_tokens=caps[i], seed=None if seed is None else (seed + i) % 2**63
        )
        for i in range(len(caps))
    ]


def engine_outputs(
    engine: Callable[[], Any],
    prompts: Sequence[list[int]],
    params: Sequence[Any],
    loras: Sequence[Any],
) -> list[Any]:
    """The engine's output for each prompt under its adapter (``loras[i]``; None: the base).

    ``engine`` returns the engine, woken first if it sleeps; it is called once per engine call.
    """
    from vllm.inputs import TokensPrompt

    # vLLM's CPU build (0.32) applies some adapter to plain-base rows of a batch that also
    # has adapter rows (measured: log-probs off by 2-8 nats), so the base model's rows go in a
    # call of their own.
    outputs: list[Any] = [None] * len(prompts)
    for on_base in (False, True):
        rows = [i for i, lora in enumerate(loras) if (lora is None) == on_base]
        if not rows:
            continue
        with threads_kept():
            done = engine().generate(
                [TokensPrompt(prompt_token_ids=prompts[i]) for i in rows],
                [params[i] for i in rows],
                lora_request=None if on_base else [loras[i] for i in rows],
                use_tqdm=False,
            )
        for i, out in zip(rows, done, strict=True):
            outputs[i] = out
    return outputs


def generations(
    agents: Sequence[str],
    prompts: Sequence[list[int]],
    outputs: Sequence[Any],
    *,
    tokenizer: Any,
    eos: list[int],
    prefill: PrefillCounter,
    temperature: float,
    top_k: int,
    top_p: float,
) -> list[Generation]:
    """The engine's outputs as :class:`Generation` records sampled at ``temperature``, ``top_k``
    and ``top_p``; the prompt tokens prefilled and taken from the prefix cache go to ``prefill``."""
    results = []
    for agent, prompt, out in zip(agents, prompts, outputs, strict=True):
        cached = int(getattr(out, "num_cached_tokens", None) or 0)  # prefix-cache hits
        prefill.add(len(prompt) - cached, cached)
        completion = out.outputs[0]
        ids = [int(t) for t in completion.token_ids]
        logps = [float(step[t].logprob) for step, t in zip(completion.logprobs, ids, strict=True)]
        results.append(
            Generation(
                prompt_ids=prompt,
                action_ids=ids,
                log_probs=logps,
                text=tokenizer.decode(ids, skip_special_tokens=True),
                finished=bool(ids) and ids[-1] in eos,
                agent=agent,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
            )
        )
    return results


def rescored(policy: Any, generations: list[Generation]) -> list[Generation]:
    """Greedy generations' log-probs at the policy temperature (the engine reports T=1)."""
    out = list(generations)
    for agent in dict.fromkeys(g.agent for g in generations):
        rows = [i for i, g in enumerate(generations) if g.agent == agent]
        with torch.no_grad():
            lp = policy.token_log_probs(
                agent,
                [generations[i].prompt_ids for i in rows],
                [generations[i].action_ids for i in rows],
            )
        for j, i in enumerate(rows):
            out[i] = generations[i]._replace(log_probs=lp.log_probs[j, lp.mask[j]].tolist())
    return out
