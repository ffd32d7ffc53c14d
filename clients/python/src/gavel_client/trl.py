"""TRL adapter: a reward function for ``GRPOTrainer`` that judges each prompt's completions as
one group through gavel.

    from gavel_client.trl import reward_func
    trainer = GRPOTrainer(model=..., reward_funcs=[reward_func(rubric="default")], ...)

TRL calls the function with ``prompts``, ``completions`` (strings, or lists of message dicts for
conversational datasets) and the dataset's other columns as keyword arguments. The function
groups the completions by prompt (GRPO samples ``num_generations`` per prompt), scores every
group in one ``POST /v1/score_groups`` call, and returns one reward per completion, in order.
A group whose judge failed gets ``None`` for each of its completions (TRL reads ``None`` as "no
reward"), never a made-up number, and a :class:`~gavel_client.errors.GavelRewardWarning` names
the cause (once per error type and function, so a judge that stays down does not flood the log).
A daemon that refuses the request raises; one that cannot be reached is retried for the client's
``connect_retry_s`` (default 60 s), then raises.

When TRL passes ``log_metric`` and ``log_extra`` (TRL 1.x's ``GRPOTrainer`` and ``RLOOTrainer``
do), every call reports through them, under the function's ``name`` (default ``gavel``):
``log_metric`` gets ``gavel/judge_calls``, ``gavel/cache_hits``, ``gavel/prompt_tokens``,
``gavel/completion_tokens``, ``gavel/failed_groups`` (groups whose judge failed) and
``gavel/no_reward`` (completions returned ``None``); ``log_extra`` gets the completions-table
columns ``gavel/explanation`` (the judge's explanation, or why there is no reward) and
``gavel/error`` (the error type, ``""`` when scored). The same keys are sent on every call, even
when nothing failed: TRL gathers them across processes and needs every process to log the same
ones.

The function holds one :class:`~gavel_client.client.Client` (a connection pool) for its
lifetime; ``f.close()`` closes it, and it closes by itself when the function is collected or the
interpreter exits. A client passed as ``client=`` is the caller's to close.

TRL calls reward functions on each process's share of the batch: with several processes a
prompt's completions may be split between them, and each part is judged as its own group.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

from .client import Client
from .errors import ERRORS_BY_TYPE, GavelError, GavelRewardWarning
from .types import BatchResult, group_request

__all__ = ["reward_func", "to_messages"]

#: Judge failures that mean "this group has no reward"; anything else is raised.
_NO_REWARD = ("judge_unavailable", "judge_invalid_output", "judge_timeout")

#: The cause named for a ``None`` reward without a judge failure: no component of the reward
#: applied (as :func:`gavel_client.art.apply_result` calls it).
_NO_COMPONENT = "no_reward"


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
    when it has one). ``name`` is the function's ``__name__``, which TRL logs rewards under, and
    the prefix of what it reports through ``log_metric`` and ``log_extra``. ``client``: a client
    to use (and for the caller to close); by default the function makes one for ``url``, closed
    by ``f.close()`` or at exit."""
    owned = client is None
    http = client or Client(url)
    # The causes already warned about: a judge that stays down warns once, not every step.
    warned: Set[str] = set()

    def gavel_reward(
        prompts: Sequence[Any],
        completions: Sequence[Any],
        *,
        log_metric: Optional[Callable[[str, float], Any]] = None,
        log_extra: Optional[Callable[[str, list], Any]] = None,
        **kwargs: Any,
    ):
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
        scored = _Scored(len(completions))
        if len(batch.results) != len(groups):
            raise GavelError(f"gavel answered {len(batch.results)} results for {len(groups)} groups")
        for members, result in zip(groups.values(), batch.results):
            if result.error and result.error.get("type") not in _NO_REWARD:
                kind = result.error.get("type", "")
                raise ERRORS_BY_TYPE.get(kind, GavelError)(
                    result.error.get("message", ""), error_type=kind, body=result.raw
                )
            if len(result.rewards) != len(members):
                raise GavelError(
                    f"gavel answered {len(result.rewards)} rewards for a group of {len(members)}"
                )
            scored.add(members, result)
        if callable(log_metric):
            for key, value in scored.metrics(batch):
                log_metric(f"{name}/{key}", value)
        if callable(log_extra):
            log_extra(f"{name}/explanation", scored.explanations)
            log_extra(f"{name}/error", scored.errors)
        for kind, (message, samples, n_groups) in scored.causes.items():
            if kind in warned:
                continue
            warned.add(kind)
            warnings.warn(
                f"{name}: no reward (None) for {samples} of {len(completions)} completions in "
                f"{n_groups} group(s): {kind}: {message} (warned once per cause for this "
                "reward function)",
                GavelRewardWarning,
                stacklevel=2,
            )
        return scored.rewards

    def close() -> None:
        """Closes the client this function made; one passed as ``client=`` is left open."""
        if owned:
            http.close()

    gavel_reward.__name__ = name
    gavel_reward.__qualname__ = name
    gavel_reward.close = close  # type: ignore[attr-defined]
    gavel_reward.client = http  # type: ignore[attr-defined]
    return gavel_reward


class _Scored:
    """One call's rewards in TRL's order, with what is reported about them."""

    def __init__(self, n: int) -> None:
        self.rewards: List[Optional[float]] = [None] * n
        self.explanations: List[str] = [""] * n
        self.errors: List[str] = [""] * n
        #: error type -> [message, completions, groups], in the order first seen.
        self.causes: Dict[str, List[Any]] = {}
        self.failed_groups = 0

    def add(self, members: List[int], result: Any) -> None:
        error = result.error or {}
        if error:
            self.failed_groups += 1
        seen: Set[str] = set()
        for k, (i, reward) in enumerate(zip(members, result.rewards)):
            self.rewards[i] = reward
            explanation = result.scores[k].explanation if k < len(result.scores) else ""
            if reward is not None:
                self.explanations[i] = explanation
                continue
            if error:
                kind = str(error.get("type", ""))
                message = str(error.get("message", "")) or "no message"
            else:
                kind = _NO_COMPONENT
                message = explanation or "no component of the reward applied"
            self.errors[i] = kind
            self.explanations[i] = explanation or message
            cause = self.causes.setdefault(kind, [message, 0, 0])
            cause[1] += 1
            if kind not in seen:
                seen.add(kind)
                cause[2] += 1

    def metrics(self, batch: BatchResult) -> List[Any]:
        u = batch.usage
        return [
            ("judge_calls", float(u.judge_calls)),
            ("cache_hits", float(u.cache_hits)),
            ("prompt_tokens", float(u.prompt_tokens)),
            ("completion_tokens", float(u.completion_tokens)),
            ("failed_calls", float(u.failed_calls)),
            ("failed_groups", float(self.failed_groups)),
            ("no_reward", float(sum(r is None for r in self.rewards))),
        ]
