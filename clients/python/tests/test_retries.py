"""Retries on 429/503 honouring Retry-After, against a tiny stub server (the daemon's own 429
needs max_in_flight requests held open; the client's behaviour is what is tested here)."""

import asyncio
import json
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gavel_client import AsyncClient, Client, NoJudgeConfigured, Overloaded
from gavel_client.client import parse_retry_after

OK = {"rewards": [0.5], "advantages": [0.0], "scores": [{"trajectory_id": "1", "score": 0.5, "explanation": "", "components": {"judge": 0.5}}], "usage": {"judge_calls": 1}, "rubric": {"name": "default", "version": "sha256:x"}, "judges": []}
GROUP = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]


class Stub:
    """Answers each POST with the next (status, headers, body) in `script`, then 200 OK."""

    def __init__(self, script):
        self.script = list(script)
        self.arrivals = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                stub.arrivals.append(time.monotonic())
                status, headers, body = stub.script.pop(0) if stub.script else (200, {}, OK)
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

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


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
