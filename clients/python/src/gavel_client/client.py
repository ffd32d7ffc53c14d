"""HTTP clients for the gavel daemon: :class:`Client` (sync) and :class:`AsyncClient`.

Both retry ``429 overloaded`` and ``503`` answers, waiting as long as ``Retry-After`` says (else
an exponential backoff), up to ``max_retries`` times. ``503 no_judge_configured`` is not retried:
it is a configuration problem that waiting does not fix. Every other error answer raises its
typed error from :mod:`gavel_client.errors` at once.

A daemon that cannot be reached (connection refused, connect timeout: a restart, a rolling
update) is retried with an exponential backoff for up to ``connect_retry_s`` seconds (default
``GAVEL_CONNECT_RETRY_S``, else 60) before :class:`~gavel_client.errors.GavelConnectionError` is
raised. Only failures to connect are retried: the request never reached the daemon, so sending it
again cannot judge anything twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import time
import weakref
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence

import httpx

from .errors import GavelConnectionError, GavelError, error_from_body
from .types import BatchResult, ScoreResult, group_request, jsonable

#: Used when neither the ``url`` argument nor ``GAVEL_URL`` names the daemon.
DEFAULT_URL = "http://127.0.0.1:8080"

RETRY_STATUSES = (429, 503)

#: Used when neither the ``connect_retry_s`` argument nor ``GAVEL_CONNECT_RETRY_S`` says how long
#: to keep trying an unreachable daemon: long enough for a restart or a rolling update.
DEFAULT_CONNECT_RETRY_S = 60.0

#: One connection attempt gives up after this long (or ``timeout``, if less). ``timeout`` is
#: sized for judging (minutes); a daemon that takes this long just to accept a connection is
#: unreachable, and the attempt is better retried within ``connect_retry_s``.
CONNECT_TIMEOUT_S = 10.0

#: The shortest first wait between connection attempts, so ``backoff=0`` (fine for ``429``s,
#: which carry their own ``Retry-After``) does not spin on a refused port.
MIN_CONNECT_BACKOFF_S = 0.05

#: Failures where the request never reached the daemon, so retrying cannot judge anything twice.
#: A connection that breaks after the request was sent is not retried.
CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)


def default_url() -> str:
    return os.environ.get("GAVEL_URL") or DEFAULT_URL


def default_connect_retry_s() -> float:
    value = os.environ.get("GAVEL_CONNECT_RETRY_S")
    if not value:
        return DEFAULT_CONNECT_RETRY_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0.0:
        raise ValueError(f"GAVEL_CONNECT_RETRY_S must be a number of seconds >= 0, got {value!r}")
    return seconds


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
        timeout: Optional[float] = 900.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_wait: float = 60.0,
        connect_retry_s: Optional[float] = None,
    ) -> None:
        """``url``: the daemon (default ``GAVEL_URL``, else ``http://127.0.0.1:8080``).
        ``timeout``: seconds for one HTTP request (a group's judging can take a while).
        ``max_retries``: extra attempts after a 429/503. ``backoff``: first wait when the
        daemon gives no ``Retry-After`` (doubling each time). ``max_wait``: cap on one wait.
        ``connect_retry_s``: how long to keep retrying a daemon that cannot be reached (waits
        from ``backoff``, doubling, capped at ``max_wait``) before raising
        :class:`GavelConnectionError`; default ``GAVEL_CONNECT_RETRY_S``, else 60; 0 = never."""
        self.url = (url or default_url()).rstrip("/")
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_wait = max_wait
        if connect_retry_s is None:
            connect_retry_s = default_connect_retry_s()
        if not connect_retry_s >= 0:
            raise ValueError(f"connect_retry_s must be >= 0 seconds, got {connect_retry_s!r}")
        self.connect_retry_s = float(connect_retry_s)
        connect = CONNECT_TIMEOUT_S if timeout is None else min(timeout, CONNECT_TIMEOUT_S)
        self._timeout = httpx.Timeout(timeout, connect=connect)
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

    def _connect_wait(self, outage: "_Outage") -> Optional[float]:
        """How long to wait before trying an unreachable daemon again, or ``None`` when
        ``connect_retry_s`` has run out. Never waits past the deadline."""
        left = outage.since + self.connect_retry_s - time.monotonic()
        if left <= 0:
            return None
        wait = max(self.backoff, MIN_CONNECT_BACKOFF_S) * (2**outage.tries)
        outage.tries += 1
        return min(wait, self.max_wait, left)

    def _unreachable(self, path: str, e: Exception, outage: "_Outage") -> GavelConnectionError:
        if self.connect_retry_s == 0:
            why = "not retried: connect_retry_s is 0"
        else:
            why = (
                f"still unreachable after {outage.tries + 1} attempts in "
                f"{time.monotonic() - outage.since:.1f} s; connect_retry_s="
                f"{self.connect_retry_s:g} (or GAVEL_CONNECT_RETRY_S) sets how long to retry"
            )
        return GavelConnectionError(f"{self.url}{path}: {e} ({why})")

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


class _Outage:
    """One request's run of failed connection attempts, timed from the start of the first (a
    connect timeout spends its whole timeout before it fails)."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.tries = 0


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
    """A synchronous client; use as a context manager or call :meth:`close`. A client that is
    never closed still closes its connections when it is garbage-collected or the interpreter
    exits, so a forgotten one does not end a run with ``ResourceWarning: unclosed socket``."""

    def __init__(self, url: Optional[str] = None, **options: Any) -> None:
        super().__init__(url, **options)
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout, headers=self._headers)
        # Holds the httpx client, not `self`, so it does not keep this client alive; runs at
        # most once (close, collection, or exit, whichever comes first).
        self._closer = weakref.finalize(self, self._http.close)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection pool; calling it again does nothing."""
        self._closer()

    def _request(self, method: str, path: str, body: Any = None) -> Dict[str, Any]:
        attempt = 0
        outage: Optional[_Outage] = None
        while True:
            started = time.monotonic()
            try:
                resp = self._http.request(method, path, json=body)
            except CONNECT_ERRORS as e:
                outage = outage or _Outage(started)
                wait = self._connect_wait(outage)
                if wait is None:
                    raise self._unreachable(path, e, outage) from e
                time.sleep(wait)
                continue
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
        outage: Optional[_Outage] = None
        while True:
            started = time.monotonic()
            try:
                resp = await self._http.request(method, path, json=body)
            except CONNECT_ERRORS as e:
                outage = outage or _Outage(started)
                wait = self._connect_wait(outage)
                if wait is None:
                    raise self._unreachable(path, e, outage) from e
                await asyncio.sleep(wait)
                continue
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
