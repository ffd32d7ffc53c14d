"""TRL adapter: a reward function for ``GRPOTrainer`` that judges each prompt's completions as
one group through gavel.

    from gavel_client.trl import reward_func
    trainer = GRPOTrainer(model=..., reward_funcs=[reward_func(rubric="default")], ...)

TRL calls the function with ``prompts``, ``completions`` (strings, or lists of message dicts for
conversational datasets) and the dataset's other columns as keyword arguments. The function
groups the completions by prompt (GRPO samples ``num_generations`` per prompt), scores every
group in one ``POST /v1/score_groups`` call, and returns one reward per completion, in order.
A group whose judge failed gets ``None`` for each of its completions (TRL reads ``None`` as "no
reward"), never a made-up number; a daemon that cannot be reached or refuses the request
raises.

TRL calls reward functions on each process's share of the batch: with several processes a
prompt's completions may be split between them, and each part is judged as its own group.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .client import Client
from .errors import ERRORS_BY_TYPE, GavelError
from .types import group_request

__all__ = ["reward_func", "to_messages"]

#: Judge failures that mean "this group has no reward"; anything else is raised.
_NO_REWARD = ("judge_unavailable", "judge_invalid_output", "judge_timeout")


def to_messages(prompt: Any, completion: Any) -> List[Dict[str, Any]]:
    """One trajectory from a TRL prompt and completion (standard or conversational)."""
    if isinstance(prompt, str):
        messages: List[Dict[str, Any]] = [{"role": "user", "content": prompt}]
    else:
        messages = [dict(m) for m in prompt]
    if isinstance(completion, str):
        messages.append({"role": "assistant", "content": completion})
    else:
        messages.extend({"role": "assistant", **dict(m)} for m in completion)
    return messages


def reward_func(
    url: Optional[str] = None,
    *,
    rubric: Any = None,
    judge: Any = None,
    verifiers: Optional[Sequence[Mapping[str, Any]]] = None,
    policy: Optional[Mapping[str, Any]] = None,
    answer_column: Optional[str] = None,
    answer_kind: Optional[str] = None,
    permutations: Optional[int] = None,
    client: Optional[Client] = None,
    name: str = "gavel",
) -> Callable[..., List[Optional[float]]]:
    """A reward function with TRL's signature (``prompts, completions, **kwargs``).

    ``rubric``, ``judge``, ``verifiers``, ``policy``, ``permutations``: as for
    :meth:`Client.score_group`, the same for every group. ``answer_column``: a dataset column
    holding each prompt's expected answer; it becomes the ``expected`` of an ``answer_line``
    verifier (of ``answer_kind``, e.g. ``"integer"``; merged with the rubric's ``answer_line``
    when it has one). ``name`` is the function's ``__name__``, which TRL logs rewards under."""
    http = client or Client(url)

    def gavel_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any):
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        answers = None
        if answer_column is not None:
            if answer_column not in kwargs:
                raise KeyError(
                    f"answer_column {answer_column!r} is not among the dataset columns TRL "
                    f"passed ({', '.join(sorted(kwargs)) or 'none'})"
                )
            answers = list(kwargs[answer_column])
        groups: Dict[str, List[int]] = {}
        for i, p in enumerate(prompts):
            key = json.dumps([p, answers[i] if answers else None], sort_keys=True, default=str)
            groups.setdefault(key, []).append(i)
        bodies = []
        for members in groups.values():
            vs = [dict(v) for v in verifiers or []]
            if answers is not None:
                v: Dict[str, Any] = {"type": "answer_line", "expected": answers[members[0]]}
                if answer_kind:
                    v["kind"] = answer_kind
                vs.append(v)
            bodies.append(
                group_request(
                    [{"messages": to_messages(prompts[i], completions[i])} for i in members],
                    rubric=rubric,
                    judge=judge,
                    verifiers=vs or None,
                    policy=policy,
                    permutations=permutations,
                    on_judge_error="null",
                )
            )
        batch = http.score_groups(bodies)
        rewards: List[Optional[float]] = [None] * len(completions)
        for members, result in zip(groups.values(), batch.results):
            if result.error and result.error.get("type") not in _NO_REWARD:
                kind = result.error.get("type", "")
                raise ERRORS_BY_TYPE.get(kind, GavelError)(
                    result.error.get("message", ""), error_type=kind, body=result.raw
                )
            for i, r in zip(members, result.rewards):
                rewards[i] = r
        return rewards

    gavel_reward.__name__ = name
    gavel_reward.__qualname__ = name
    return gavel_reward
