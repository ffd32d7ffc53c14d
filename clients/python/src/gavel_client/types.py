"""Typed results (dataclasses) and the conversion of trajectories into request JSON.

Results keep the daemon's whole answer in ``raw``, so fields a newer daemon adds are never lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence


@dataclass(frozen=True)
class VersionInfo:
    name: str
    version: str

    @classmethod
    def from_json(cls, v: Optional[Mapping[str, Any]]) -> Optional["VersionInfo"]:
        if not v:
            return None
        return cls(name=str(v.get("name", "")), version=str(v.get("version", "")))


@dataclass
class Usage:
    judge_calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Calls that gave no verdict used (a judge that failed), and their tokens: counted apart
    #: from ``judge_calls`` and the tokens above.
    failed_calls: int = 0
    failed_prompt_tokens: int = 0
    failed_completion_tokens: int = 0
    prompt_tokens_deduped: int = 0
    prompt_tokens_without_dedup: int = 0
    tokens_saved_by_dedup: int = 0
    distinct_trajectories: int = 0
    chunks: int = 0
    #: Scores the judge gave outside its scale, clamped to 0 or 1.
    clamped_scores: int = 0
    #: Judge retries by cause (``timeout``, ``http_429``, ``reask``, ...).
    retries: Dict[str, int] = field(default_factory=dict)
    #: Estimated cost, when the judge has prices configured.
    cost: Optional[float] = None

    @classmethod
    def from_json(cls, v: Optional[Mapping[str, Any]]) -> "Usage":
        v = v or {}
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v[k] for k in known if k in v and v[k] is not None})


@dataclass
class TrajectoryScore:
    #: 1-based position of the trajectory in the request.
    trajectory_id: str
    #: The reward (the same number as in ``ScoreResult.rewards``); ``None`` = no reward.
    score: Optional[float]
    explanation: str = ""
    #: Every component by name: ``judge``, each verifier, ``independent_reward``.
    components: Dict[str, Optional[float]] = field(default_factory=dict)
    reasons: Dict[str, str] = field(default_factory=dict)
    items: List[Dict[str, Any]] = field(default_factory=list)
    disagreement: Optional[float] = None
    judges: Dict[str, Optional[float]] = field(default_factory=dict)

    @property
    def judge_score(self) -> Optional[float]:
        """The judge's own score (before verifiers and policy), when a judge was asked."""
        return self.components.get("judge")

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> "TrajectoryScore":
        return cls(
            trajectory_id=str(v.get("trajectory_id", "")),
            score=v.get("score"),
            explanation=v.get("explanation") or "",
            components=dict(v.get("components") or {}),
            reasons=dict(v.get("reasons") or {}),
            items=list(v.get("items") or []),
            disagreement=v.get("disagreement"),
            judges=dict(v.get("judges") or {}),
        )


@dataclass
class ScoreResult:
    """One group's answer: rewards, GRPO advantages, per-trajectory scores, usage."""

    rewards: List[Optional[float]]
    advantages: List[float]
    scores: List[TrajectoryScore]
    usage: Usage
    rubric: Optional[VersionInfo] = None
    template: Optional[VersionInfo] = None
    judges: List[Dict[str, Any]] = field(default_factory=list)
    #: Set when the judge failed and the request asked for ``on_judge_error="null"``:
    #: ``{"type": ..., "message": ...}``; every reward is then ``None``.
    error: Optional[Dict[str, str]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def explanations(self) -> List[str]:
        return [s.explanation for s in self.scores]

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> "ScoreResult":
        return cls(
            rewards=list(v.get("rewards") or []),
            advantages=list(v.get("advantages") or []),
            scores=[TrajectoryScore.from_json(s) for s in v.get("scores") or []],
            usage=Usage.from_json(v.get("usage")),
            rubric=VersionInfo.from_json(v.get("rubric")),
            template=VersionInfo.from_json(v.get("template")),
            judges=list(v.get("judges") or []),
            error=v.get("error"),
            raw=dict(v),
        )


@dataclass
class BatchResult:
    """``POST /v1/score_groups``: one result per group, in order."""

    results: List[ScoreResult]
    scale_rewards: str
    usage: Usage
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, v: Mapping[str, Any]) -> "BatchResult":
        return cls(
            results=[ScoreResult.from_json(r) for r in v.get("results") or []],
            scale_rewards=str(v.get("scale_rewards", "")),
            usage=Usage.from_json(v.get("usage")),
            raw=dict(v),
        )


# ---- request JSON ----


def jsonable(obj: Any) -> Any:
    """Plain JSON data from dicts, lists, pydantic models (OpenAI's ``Choice``, ART's
    ``Trajectory``), dataclasses and objects with ``to_dict``."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(mode="json", exclude_none=True))
        except TypeError:
            return jsonable(dump())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    raise TypeError(f"cannot send a {type(obj).__name__} to gavel as JSON")


def trajectory_json(t: Any) -> Dict[str, Any]:
    """One trajectory as the daemon reads it. Accepts ``{"messages": [...]}`` dicts (with
    optional ``reward``, ``metrics``, ``metadata``), a bare list of messages, ART's serialised
    dicts (``messages_and_choices``), and ART-shaped objects (attributes
    ``messages_and_choices``, ``reward``, ``metrics``, ``metadata``)."""
    if isinstance(t, Mapping):
        if "messages" not in t and "messages_and_choices" not in t:
            raise TypeError('a trajectory dict needs "messages" (or "messages_and_choices")')
        return jsonable(t)
    if isinstance(t, (list, tuple)):
        return {"messages": jsonable(list(t))}
    mac = getattr(t, "messages_and_choices", None)
    if mac is not None:
        out: Dict[str, Any] = {"messages_and_choices": [jsonable(m) for m in mac]}
        reward = getattr(t, "reward", None)
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            out["reward"] = float(reward)
        for attr in ("metrics", "metadata"):
            value = getattr(t, attr, None)
            if value:
                out[attr] = jsonable(value)
        return out
    raise TypeError(
        f"cannot read a trajectory from a {type(t).__name__}: expected a dict with "
        '"messages", a list of messages, or an ART Trajectory'
    )


def group_request(
    trajectories: Sequence[Any],
    *,
    rubric: Any = None,
    judge: Any = None,
    verifiers: Optional[Sequence[Mapping[str, Any]]] = None,
    policy: Optional[Mapping[str, Any]] = None,
    tools: Optional[Sequence[Any]] = None,
    permutations: Optional[int] = None,
    aggregate: Optional[str] = None,
    scale_rewards: Optional[str] = None,
    on_judge_error: Optional[str] = None,
) -> Dict[str, Any]:
    """The body of ``POST /v1/score_group``; options left ``None`` take the daemon's defaults."""
    trajectories = list(trajectories)
    body: Dict[str, Any] = {"trajectories": [trajectory_json(t) for t in trajectories]}
    if tools is None:
        # ART keeps the agent's tool definitions on each trajectory.
        tools = next((getattr(t, "tools", None) for t in trajectories if getattr(t, "tools", None)), None)
    options = {
        "rubric": rubric,
        "judge": judge,
        "verifiers": verifiers,
        "policy": policy,
        "tools": tools,
        "permutations": permutations,
        "aggregate": aggregate,
        "scale_rewards": scale_rewards,
        "on_judge_error": on_judge_error,
    }
    body.update({k: jsonable(v) for k, v in options.items() if v is not None})
    return body
