"""Python client for gavel, a reward service for RL of LLM agents.

    from gavel_client import score_group
    result = score_group([traj_a, traj_b, traj_c, traj_d], rubric="default")
    result.rewards, result.advantages, result.explanations, result.usage

Adapters: :mod:`gavel_client.art` (ART ``TrajectoryGroup``), :mod:`gavel_client.trl` (TRL
reward functions).
"""

from .client import DEFAULT_URL, AsyncClient, Client, ascore_group, score_group
from .errors import (
    GavelConnectionError,
    GavelError,
    GavelRewardWarning,
    InternalError,
    InvalidRequest,
    JudgeError,
    JudgeInvalidOutput,
    JudgeTimeout,
    JudgeUnavailable,
    MethodNotAllowed,
    NoJudgeConfigured,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    Unauthorized,
)
from .types import (
    BatchResult,
    ScoreResult,
    TrajectoryScore,
    Usage,
    VersionInfo,
    group_request,
    trajectory_json,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "AsyncClient",
    "BatchResult",
    "Client",
    "GavelConnectionError",
    "GavelError",
    "GavelRewardWarning",
    "InternalError",
    "InvalidRequest",
    "JudgeError",
    "JudgeInvalidOutput",
    "JudgeTimeout",
    "JudgeUnavailable",
    "MethodNotAllowed",
    "NoJudgeConfigured",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "RequestTimeout",
    "ScoreResult",
    "TrajectoryScore",
    "Unauthorized",
    "Usage",
    "VersionInfo",
    "ascore_group",
    "group_request",
    "score_group",
    "trajectory_json",
]
