"""ART adapter: score an ART ``TrajectoryGroup`` through gavel, the way ART's own
``ruler_score_group`` does, so a training loop swaps one import:

    # from art.rewards import ruler_score_group
    from gavel_client.art import ruler_score_group

    groups = await art.gather_trajectory_groups(
        ..., after_each=lambda g: ruler_score_group(g, swallow_exceptions=True))

Duck-typed: anything with ``.trajectories``, each with ``messages_and_choices``, ``reward``,
``metrics`` (a dict) and optionally ``metadata``, ``tools``, ``logs``/``log()`` works; ART itself
is not imported. The group returned is a new one; the trajectories passed in are not changed.
Each new trajectory gets:

- ``reward``: gavel's reward (the judge's relative score, merged with any verifiers under the
  rubric's policy);
- ``metrics["independent_reward"]``: the reward it had before;
- ``metrics["judge_score"]``: the judge's own score; ``metrics["gavel_<name>"]``: each other
  component (verifiers) that applies;
- a log line with the judge's explanation.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from .client import AsyncClient, Client
from .errors import GavelError
from .types import ScoreResult

__all__ = ["score_group", "score_group_sync", "ruler_score_group", "apply_result"]


async def score_group(
    group: Any,
    judge: Any = None,
    *,
    rubric: Any = None,
    verifiers: Any = None,
    swallow_exceptions: bool = False,
    client: Optional[AsyncClient] = None,
    url: Optional[str] = None,
    **options: Any,
) -> Any:
    """Scores ``group`` and returns a new group with rewards set (see the module doc).

    ``judge`` names a judge configured in gavel (or a panel, a list of names); ``rubric`` a
    rubric name or ``{"text": ...}``; ``options`` as for :meth:`Client.score_group`. With
    ``swallow_exceptions=True`` a failure (judge or daemon) returns ``None`` instead of raising,
    as ART's ``ruler_score_group`` does — ``gather_trajectory_groups`` then drops the group."""
    try:
        if client is not None:
            result = await client.score_group(
                _trajectories(group), judge=judge, rubric=rubric, verifiers=verifiers, **options
            )
        else:
            async with AsyncClient(url) as c:
                result = await c.score_group(
                    _trajectories(group), judge=judge, rubric=rubric, verifiers=verifiers, **options
                )
        return apply_result(group, result)
    except GavelError:
        if swallow_exceptions:
            return None
        raise


def score_group_sync(
    group: Any,
    judge: Any = None,
    *,
    rubric: Any = None,
    verifiers: Any = None,
    swallow_exceptions: bool = False,
    client: Optional[Client] = None,
    url: Optional[str] = None,
    **options: Any,
) -> Any:
    """The synchronous twin of :func:`score_group`."""
    try:
        if client is not None:
            result = client.score_group(
                _trajectories(group), judge=judge, rubric=rubric, verifiers=verifiers, **options
            )
        else:
            with Client(url) as c:
                result = c.score_group(
                    _trajectories(group), judge=judge, rubric=rubric, verifiers=verifiers, **options
                )
        return apply_result(group, result)
    except GavelError:
        if swallow_exceptions:
            return None
        raise


#: The name ART users import (``from art.rewards import ruler_score_group``).
ruler_score_group = score_group


def _trajectories(group: Any) -> list:
    trajectories = list(getattr(group, "trajectories", None) or [])
    if not trajectories:
        raise ValueError("the group has no trajectories to score")
    return trajectories


def apply_result(group: Any, result: ScoreResult) -> Any:
    """A copy of ``group`` whose trajectories carry ``result`` (see the module doc)."""
    originals = _trajectories(group)
    if len(result.scores) != len(originals):
        raise GavelError(
            f"gavel answered {len(result.scores)} scores for {len(originals)} trajectories"
        )
    if any(s.score is None for s in result.scores):
        why = (result.error or {}).get("message", "no component applied")
        raise GavelError(f"gavel gave no reward: {why}", error_type="no_reward")
    scored = []
    for original, s in zip(originals, result.scores):
        t = _copy(original)
        metrics = dict(getattr(original, "metrics", None) or {})
        metrics["independent_reward"] = getattr(original, "reward", None)
        if s.judge_score is not None:
            metrics["judge_score"] = s.judge_score
        for name, value in s.components.items():
            if name not in ("judge", "independent_reward") and value is not None:
                metrics[f"gavel_{name}"] = value
        t.metrics = metrics
        t.reward = s.score
        if s.explanation:
            _log(t, f"gavel explanation: {s.explanation}")
        scored.append(t)
    return _regroup(group, scored)


def _copy(t: Any) -> Any:
    model_copy = getattr(t, "model_copy", None)
    c = model_copy() if callable(model_copy) else copy.copy(t)
    if isinstance(getattr(t, "logs", None), list):
        c.logs = list(t.logs)
    return c


def _log(t: Any, line: str) -> None:
    log = getattr(t, "log", None)
    if callable(log):
        log(line)
    elif isinstance(getattr(t, "logs", None), list):
        t.logs.append(line)


def _regroup(group: Any, trajectories: list) -> Any:
    """A group like ``group`` holding ``trajectories``. ART's ``TrajectoryGroup`` has a
    constructor taking the trajectories (and cannot be copied field by field); other shapes
    are copied shallowly."""
    try:
        new = type(group)(trajectories)
    except TypeError:
        new = copy.copy(group)
    for attr in ("metadata", "exceptions"):
        if hasattr(group, attr):
            setattr(new, attr, copy.copy(getattr(group, attr)))
    new.trajectories = trajectories
    return new
