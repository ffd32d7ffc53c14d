"""Typed errors mirroring the daemon's ``{"error": {"type", "message", "param"}}`` answers.

Each ``error.type`` the daemon returns has its own class; the judge failures share the base
:class:`JudgeError`, so a training loop can catch "the judge failed" in one place.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class GavelError(Exception):
    """An error answer from the daemon (or no answer at all: :class:`GavelConnectionError`)."""

    #: The daemon's ``error.type`` this class stands for.
    error_type: str = "error"

    def __init__(
        self,
        message: str,
        *,
        status: Optional[int] = None,
        error_type: Optional[str] = None,
        body: Any = None,
        retry_after: Optional[float] = None,
        param: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        #: The request field the error is about, as a path (``"rubric"``, ``"judge[1]"``,
        #: ``"trajectories[0].messages[2].role"``), or ``None``.
        self.param = param
        self.status = status
        if error_type is not None:
            self.error_type = error_type
        self.body = body
        #: Seconds the daemon asked the caller to wait (``Retry-After``), when it said.
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status} " if self.status is not None else ""
        return f"{where}{self.error_type}: {self.message}"


class InvalidRequest(GavelError):
    """400: bad JSON, bad shape, unknown field, unknown rubric or judge name."""

    error_type = "invalid_request"


class Unauthorized(GavelError):
    """401: the daemon wants a valid bearer token."""

    error_type = "unauthorized"


class NotFound(GavelError):
    """404: no such route (an old daemon, or a wrong base URL)."""

    error_type = "not_found"


class MethodNotAllowed(GavelError):
    error_type = "method_not_allowed"


class RequestTimeout(GavelError):
    """408: the request body did not arrive within the daemon's ``body_read_timeout_s``."""

    error_type = "request_timeout"


class PayloadTooLarge(GavelError):
    """413: the body is over the daemon's ``max_body_bytes``, a judge prompt over
    ``max_prompt_bytes``, or more samples than ``[openrlhf] max_samples``."""

    error_type = "payload_too_large"


class Overloaded(GavelError):
    """429: more scoring requests in flight than ``max_in_flight`` (raised once retries ran out)."""

    error_type = "overloaded"


class InternalError(GavelError):
    error_type = "internal"


class JudgeError(GavelError):
    """The judge failed after the daemon's own retries. Never a score."""

    error_type = "judge_error"


class JudgeUnavailable(JudgeError):
    """502: the judge answered errors (or could not be reached) through every retry."""

    error_type = "judge_unavailable"


class JudgeInvalidOutput(JudgeError):
    """502: the verdict was still unusable after one structural re-ask."""

    error_type = "judge_invalid_output"


class NoJudgeConfigured(JudgeError):
    """503: the daemon has no usable judge (no API key, no model); the message says what to set."""

    error_type = "no_judge_configured"


class JudgeTimeout(JudgeError):
    """504: every attempt timed out, or a deadline passed."""

    error_type = "judge_timeout"


class GavelConnectionError(GavelError):
    """The daemon could not be reached, or the connection broke before an answer."""

    error_type = "connection"


class GavelRewardWarning(UserWarning):
    """A reward function returned ``None`` ("no reward") for some samples instead of raising,
    e.g. :func:`gavel_client.trl.reward_func` when a group's judge failed. The message names the
    cause (the daemon's ``error.type`` and message). Issued once per cause and reward function,
    so a judge that stays down does not flood the log; ``warnings.simplefilter("error",
    GavelRewardWarning)`` turns it into a crash, for a run that should stop instead."""


ERRORS_BY_TYPE: Dict[str, Type[GavelError]] = {
    cls.error_type: cls
    for cls in (
        InvalidRequest,
        Unauthorized,
        NotFound,
        MethodNotAllowed,
        RequestTimeout,
        PayloadTooLarge,
        Overloaded,
        InternalError,
        JudgeUnavailable,
        JudgeInvalidOutput,
        NoJudgeConfigured,
        JudgeTimeout,
    )
}

_BY_STATUS: Dict[int, Type[GavelError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    404: NotFound,
    405: MethodNotAllowed,
    408: RequestTimeout,
    413: PayloadTooLarge,
    429: Overloaded,
    500: InternalError,
    502: JudgeUnavailable,
    504: JudgeTimeout,
}


def error_from_body(
    status: int, body: Any, text: str = "", retry_after: Optional[float] = None
) -> GavelError:
    """The typed error for an HTTP error answer: by ``error.type``, else by status."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("type"), str):
        kind = err["type"]
        message = str(err.get("message", ""))
        param = err.get("param")
        cls = ERRORS_BY_TYPE.get(kind, GavelError)
        return cls(
            message,
            status=status,
            error_type=kind,
            body=body,
            retry_after=retry_after,
            param=param if isinstance(param, str) else None,
        )
    cls = _BY_STATUS.get(status, GavelError)
    message = text.strip()[:500] or "no error body"
    return cls(message, status=status, body=body, retry_after=retry_after)
