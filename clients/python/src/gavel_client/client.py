"""HTTP clients for the gavel daemon: :class:`Client` (sync) and :class:`AsyncClient`.

Both retry ``429 overloaded`` and ``503`` answers, waiting as long as ``Retry-After`` says (else
an exponential backoff), up to ``max_retries`` times. ``503 no_judge_configured`` is not retried:
it is a configuration problem that waiting does not fix. Every other error answer raises its
typed error from :mod:`gavel_client.errors` at once.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import time
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence

import httpx

from .errors import GavelConnectionError, GavelError, error_from_body
from .types import BatchResult, ScoreResult, group_request, jsonable

#: Used when neither the ``url`` argument nor ``GAVEL_URL`` names the daemon.
DEFAULT_URL = "http://127.0.0.1:8080"

RETRY_STATUSES = (429, 503)


def default_url() -> str:
    return os.environ.get("GAVEL_URL") or DEFAULT_URL


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class _Base:
    def __init__(
        self,
        url: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        timeout: float = 900.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_wait: float = 60.0,
    ) -> None:
        """``url``: the daemon (default ``GAVEL_URL``, else ``http://127.0.0.1:8080``).
        ``timeout``: seconds for one HTTP request (a group's judging can take a while).
        ``max_retries``: extra attempts after a 429/503. ``backoff``: first wait when the
        daemon gives no ``Retry-After`` (doubling each time). ``max_wait``: cap on one wait."""
        self.url = (url or default_url()).rstrip("/")
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_wait = max_wait
        self._timeout = timeout
        self._headers = {"user-agent": "gavel-client-python"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"

    def _retry_wait(self, resp: httpx.Response, attempt: int) -> Optional[float]:
        """How long to wait before retrying `resp`, or ``None`` when it is not retried."""
        if resp.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        if resp.status_code == 503 and _error_type(resp) == "no_judge_configured":
            return None
        after = parse_retry_after(resp.headers.get("retry-after"))
        wait = after if after is not None else self.backoff * (2**attempt)
        return min(wait, self.max_wait)

    @staticmethod
    def _answer(resp: httpx.Response) -> Dict[str, Any]:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 400:
            raise error_from_body(
                resp.status_code,
                body,
                resp.text,
                parse_retry_after(resp.headers.get("retry-after")),
            )
        if not isinstance(body, dict):
            raise GavelError(
                f"expected a JSON object, got {resp.text[:200]!r}", status=resp.status_code
            )
        return body


def _error_type(resp: httpx.Response) -> Optional[str]:
    try:
        return resp.json()["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


def _batch_body(groups: Sequence[Any], scale_rewards: Optional[str]) -> Dict[str, Any]:
    out: List[Any] = []
    for g in groups:
        if isinstance(g, Mapping) and "trajectories" in g:
            out.append(jsonable(g))
        else:
            out.append(group_request(g))
    body: Dict[str, Any] = {"groups": out}
    if scale_rewards is not None:
        body["scale_rewards"] = scale_rewards
    return body


def _reward_body(queries: Sequence[str], prompts: Sequence[str], labels: Optional[Sequence[Any]]):
    body: Dict[str, Any] = {"query": list(queries), "prompts": list(prompts)}
    if labels is not None:
        body["labels"] = list(labels)
    return body


class Client(_Base):
    """A synchronous client; use as a context manager or call :meth:`close`."""

    def __init__(self, url: Optional[str] = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout, headers=self._headers)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, body: Any = None) -> Dict[str, Any]:
        attempt = 0
        while True:
            try:
                resp = self._http.request(method, path, json=body)
            except httpx.TransportError as e:
                raise GavelConnectionError(f"{self.url}{path}: {e}") from e
            wait = self._retry_wait(resp, attempt)
            if wait is None:
                return self._answer(resp)
            attempt += 1
            time.sleep(wait)

    def score_group(self, trajectories: Sequence[Any], **options: Any) -> ScoreResult:
        """Scores one group. ``options``: ``rubric`` (a name or ``{"text": ...}``), ``judge``
        (a name or a list of names), ``verifiers``, ``policy``, ``tools``, ``permutations``,
        ``aggregate``, ``scale_rewards``, ``on_judge_error`` (``"fail"`` or ``"null"``)."""
        return ScoreResult.from_json(
            self._request("POST", "/v1/score_group", group_request(trajectories, **options))
        )

    def score_groups(
        self, groups: Sequence[Any], *, scale_rewards: Optional[str] = None
    ) -> BatchResult:
        """Scores many groups in one call; each group is a request dict (as built by
        :func:`gavel_client.group_request`) or a list of trajectories."""
        return BatchResult.from_json(
            self._request("POST", "/v1/score_groups", _batch_body(groups, scale_rewards))
        )

    def get_reward(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Optional[Sequence[Any]] = None
    ) -> Dict[str, Any]:
        """``POST /get_reward`` exactly as OpenRLHF sends it."""
        return self._request("POST", "/get_reward", _reward_body(queries, prompts, labels))

    def rubrics(self) -> List[Dict[str, Any]]:
        return self._request("GET", "/v1/rubrics")["rubrics"]

    def health(self) -> Dict[str, Any]:
        return self._request("GET", "/healthz")


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`; use ``async with`` or ``await aclose()``."""

    def __init__(self, url: Optional[str] = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._http = httpx.AsyncClient(
            base_url=self.url, timeout=self._timeout, headers=self._headers
        )

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, body: Any = None) -> Dict[str, Any]:
        attempt = 0
        while True:
            try:
                resp = await self._http.request(method, path, json=body)
            except httpx.TransportError as e:
                raise GavelConnectionError(f"{self.url}{path}: {e}") from e
            wait = self._retry_wait(resp, attempt)
            if wait is None:
                return self._answer(resp)
            attempt += 1
            await asyncio.sleep(wait)

    async def score_group(self, trajectories: Sequence[Any], **options: Any) -> ScoreResult:
        """As :meth:`Client.score_group`."""
        return ScoreResult.from_json(
            await self._request("POST", "/v1/score_group", group_request(trajectories, **options))
        )

    async def score_groups(
        self, groups: Sequence[Any], *, scale_rewards: Optional[str] = None
    ) -> BatchResult:
        return BatchResult.from_json(
            await self._request("POST", "/v1/score_groups", _batch_body(groups, scale_rewards))
        )

    async def get_reward(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Optional[Sequence[Any]] = None
    ) -> Dict[str, Any]:
        return await self._request("POST", "/get_reward", _reward_body(queries, prompts, labels))

    async def rubrics(self) -> List[Dict[str, Any]]:
        return (await self._request("GET", "/v1/rubrics"))["rubrics"]

    async def health(self) -> Dict[str, Any]:
        return await self._request("GET", "/healthz")


def score_group(
    trajectories: Sequence[Any],
    *,
    rubric: Any = None,
    judge: Any = None,
    verifiers: Optional[Sequence[Mapping[str, Any]]] = None,
    url: Optional[str] = None,
    **options: Any,
) -> ScoreResult:
    """Scores one group on the daemon at ``url`` (default ``GAVEL_URL``). Returns rewards,
    advantages, explanations and usage; raises a :class:`~gavel_client.errors.GavelError`
    subclass on an error answer."""
    with Client(url) as c:
        return c.score_group(
            trajectories, rubric=rubric, judge=judge, verifiers=verifiers, **options
        )


async def ascore_group(
    trajectories: Sequence[Any],
    *,
    rubric: Any = None,
    judge: Any = None,
    verifiers: Optional[Sequence[Mapping[str, Any]]] = None,
    url: Optional[str] = None,
    **options: Any,
) -> ScoreResult:
    """The async twin of :func:`score_group`."""
    async with AsyncClient(url) as c:
        return await c.score_group(
            trajectories, rubric=rubric, judge=judge, verifiers=verifiers, **options
        )
