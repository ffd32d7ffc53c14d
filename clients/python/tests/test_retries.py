"""Retries on 429/503 honouring Retry-After, and on a daemon that cannot be reached yet, against
a tiny stub server (the daemon's own 429 needs max_in_flight requests held open, and its restart
a second daemon; the client's behaviour is what is tested here)."""

import asyncio
import json
import socket
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gavel_client import AsyncClient, Client, GavelConnectionError, NoJudgeConfigured, Overloaded
from gavel_client.client import parse_retry_after

OK = {"rewards": [0.5], "advantages": [0.0], "scores": [{"trajectory_id": "1", "score": 0.5, "explanation": "", "components": {"judge": 0.5}}], "usage": {"judge_calls": 1}, "rubric": {"name": "default", "version": "sha256:x"}, "judges": []}
GROUP = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]


class Stub:
    """Answers each POST with the next (status, headers, body) in `script`, then 200 `ok`."""

    def __init__(self, script, port=0, ok=OK):
        self.script = list(script)
        self.ok = ok
        self.arrivals = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                stub.arrivals.append(time.monotonic())
                status, headers, body = stub.script.pop(0) if stub.script else (200, {}, stub.ok)
                data = json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port():
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Later:
    """A stub that starts listening on `port` after `delay` seconds: a daemon restarting."""

    def __init__(self, port, delay, **stub):
        self.stub = None
        self.started = time.monotonic()
        self._timer = threading.Timer(delay, self._start, args=(port,), kwargs=stub)
        self._timer.start()

    def _start(self, port, **stub):
        self.stub = Stub([], port=port, **stub)

    def close(self):
        self._timer.cancel()
        self._timer.join()
        if self.stub:
            self.stub.close()


def overloaded(retry_after):
    return (429, {"retry-after": retry_after}, {"error": {"type": "overloaded", "message": "busy"}})


@pytest.fixture
def stub(request):
    s = Stub(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("stub", [[overloaded("1")]], indirect=True)
def test_sync_waits_as_retry_after_says_then_succeeds(stub):
    r = Client(stub.url, backoff=0.0).score_group(GROUP)
    assert r.rewards == [0.5]
    assert len(stub.arrivals) == 2
    assert stub.arrivals[1] - stub.arrivals[0] >= 0.95, "retried before Retry-After"


@pytest.mark.parametrize(
    "stub", [[(503, {"retry-after": "1"}, {"error": {"type": "judge_unavailable", "message": "restarting"}})]], indirect=True
)
def test_async_retries_503_after_retry_after(stub):
    async def run():
        async with AsyncClient(stub.url, backoff=0.0) as c:
            return await c.score_group(GROUP)

    assert asyncio.run(run()).rewards == [0.5]
    assert len(stub.arrivals) == 2
    assert stub.arrivals[1] - stub.arrivals[0] >= 0.95


@pytest.mark.parametrize("stub", [[overloaded("0")] * 3], indirect=True)
def test_gives_up_after_max_retries_with_a_typed_error(stub):
    with pytest.raises(Overloaded) as e:
        Client(stub.url, max_retries=2).score_group(GROUP)
    assert len(stub.arrivals) == 3
    assert e.value.status == 429 and e.value.retry_after == 0.0


@pytest.mark.parametrize(
    "stub", [[(503, {}, {"error": {"type": "no_judge_configured", "message": "set OPENAI_API_KEY"}})]], indirect=True
)
def test_no_judge_configured_is_not_retried(stub):
    with pytest.raises(NoJudgeConfigured, match="OPENAI_API_KEY"):
        Client(stub.url).score_group(GROUP)
    assert len(stub.arrivals) == 1


def test_retry_after_forms():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    later = parse_retry_after(formatdate(time.time() + 30, usegmt=True))
    assert 25 <= later <= 31
    assert parse_retry_after(formatdate(time.time() - 30, usegmt=True)) == 0.0


def test_waits_for_a_daemon_that_is_not_up_yet(monkeypatch):
    monkeypatch.delenv("GAVEL_CONNECT_RETRY_S", raising=False)
    port = closed_port()
    later = Later(port, 0.5)
    try:
        # The default connect_retry_s (60 s) covers a restart.
        with Client(f"http://127.0.0.1:{port}", backoff=0.05) as c:
            r = c.score_group(GROUP)
        assert r.rewards == [0.5]
        assert len(later.stub.arrivals) == 1
        assert later.stub.arrivals[0] - later.started >= 0.45
    finally:
        later.close()


def test_async_twin_waits_for_the_daemon_too():
    port = closed_port()
    later = Later(port, 0.5)

    async def run():
        async with AsyncClient(f"http://127.0.0.1:{port}", backoff=0.05, connect_retry_s=10) as c:
            return await c.score_group(GROUP)

    try:
        assert asyncio.run(run()).rewards == [0.5]
        assert len(later.stub.arrivals) == 1
    finally:
        later.close()


def test_gives_up_once_connect_retry_s_has_passed():
    url = f"http://127.0.0.1:{closed_port()}"
    started = time.monotonic()
    with pytest.raises(GavelConnectionError) as e, Client(url, backoff=0.05, connect_retry_s=0.4) as c:
        c.health()
    took = time.monotonic() - started
    assert 0.4 <= took < 1.5, took
    assert url in str(e.value) and "connect_retry_s=0.4" in str(e.value)
    assert "attempts" in str(e.value)


def test_connect_retry_s_zero_raises_at_once():
    started = time.monotonic()
    with pytest.raises(GavelConnectionError, match="connect_retry_s is 0"):
        with Client(f"http://127.0.0.1:{closed_port()}", connect_retry_s=0) as c:
            c.health()
    assert time.monotonic() - started < 0.5


def test_connect_retry_s_defaults_to_the_environment_then_60(monkeypatch):
    monkeypatch.delenv("GAVEL_CONNECT_RETRY_S", raising=False)
    with Client("http://127.0.0.1:9") as c:
        assert c.connect_retry_s == 60.0
    monkeypatch.setenv("GAVEL_CONNECT_RETRY_S", "2.5")
    with Client("http://127.0.0.1:9") as c:
        assert c.connect_retry_s == 2.5
    with Client("http://127.0.0.1:9", connect_retry_s=0) as c:
        assert c.connect_retry_s == 0.0
    monkeypatch.setenv("GAVEL_CONNECT_RETRY_S", "soon")
    with pytest.raises(ValueError, match="GAVEL_CONNECT_RETRY_S"):
        Client("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="connect_retry_s"):
        Client("http://127.0.0.1:9", connect_retry_s=-1)
