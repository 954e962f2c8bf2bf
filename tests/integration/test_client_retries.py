"""The client's retries and connection errors, against a tiny real HTTP server that answers as
scripted: 503 and 429 are tried again (after Retry-After when given), other errors never, a
refused connection and a server of the other scheme are named as such."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from nightshift.client import (
    AsyncClient,
    BadRequest,
    BatchRun,
    Client,
    ConnectionFailed,
    NightshiftClientError,
    RateLimited,
    ServerError,
    Timeout,
)

RUN_ID = "batch-scripted"


@dataclass
class Script:
    """The answers to give, in order (status, headers, body); the last one is given from then on."""

    answers: list[tuple[int, dict[str, str], object]] = field(default_factory=list)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def next(self) -> tuple[int, dict[str, str], object]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def script() -> Iterator[tuple[Script, str]]:
    scripted = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            scripted.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            status, headers, body = scripted.next()
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield scripted, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def a_run(status: str = "running") -> dict[str, object]:
    usage: dict[str, int] = {}
    return {
        "id": RUN_ID,
        "status": status,
        "job_type": "batch",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "completed_at": None,
        "metadata": {"name": "scripted"},
        "callback_url": None,
        "callback_sent_at": None,
        "callback_status_code": None,
        "callback_error": None,
        "agent_id": None,
        "some_later_field": "an older client ignores it",
        "progress": {
            "step": 0,
            "agents": {"running": 1, "finished": 0, "failed": 0, "cancelled": 0},
            "summaries": 0,
            "failures": [],
            "usage": usage,
            "cost_usd": 0.0,
            "cost_without_batch_usd": 0.0,
            "batch_savings_usd": 0.0,
            "cache_savings_usd": 0.0,
            "provider_batches": [],
        },
    }


def test_503_then_200_is_retried_after_its_retry_after(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(503, {"Retry-After": "0"}, {"detail": "starting"}), (200, {}, a_run())]

    with Client(url, "key", max_retries=2) as client:
        run = client.batches.retrieve(RUN_ID)

    assert run.id == RUN_ID and run.name == "scripted"
    assert run.progress.usage.total_tokens == 0
    assert [seen[:2] for seen in scripted.seen] == [("GET", f"/v1/messages/batches/{RUN_ID}")] * 2
    assert scripted.seen[0][2]["authorization"] == "Bearer key"


def test_429_is_retried_and_a_create_keeps_its_idempotency_key(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(429, {"Retry-After": "0"}, {"detail": "slow down"})] * 2 + [(200, {}, a_run("created"))]

    with Client(url, max_retries=3) as client:
        run = client.batches.create([{"agent_id": "agent-1", "input": "hi"}])

    assert run.status == "created"
    keys = {seen[2]["idempotency-key"] for seen in scripted.seen}
    assert len(scripted.seen) == 3 and len(keys) == 1


def test_retries_end_at_max_retries(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(429, {"Retry-After": "0"}, {"detail": "too many requests, try later"})]

    with Client(url, max_retries=2) as client, pytest.raises(RateLimited) as raised:
        client.batches.retrieve(RUN_ID)

    assert raised.value.message == "too many requests, try later"
    assert len(scripted.seen) == 3


def test_a_retry_after_past_the_cap_is_not_waited_for(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(503, {"Retry-After": "3600"}, {"detail": "down for maintenance"})]

    with Client(url, max_retries=3) as client, pytest.raises(ServerError) as raised:
        client.batches.retrieve(RUN_ID)

    assert raised.value.status_code == 503 and len(scripted.seen) == 1


@pytest.mark.parametrize("status", [400, 404, 409, 422, 500])
def test_other_errors_are_never_retried(script: tuple[Script, str], status: int) -> None:
    scripted, url = script
    scripted.answers = [(status, {}, {"detail": f"refused with {status}"})]

    with Client(url, max_retries=3) as client, pytest.raises(NightshiftClientError) as raised:
        client.batches.retrieve(RUN_ID)

    assert len(scripted.seen) == 1
    assert raised.value.message == f"refused with {status}"


def test_a_validation_error_of_fastapis_shape_names_the_field(script: tuple[Script, str]) -> None:
    scripted, url = script
    detail = [{"loc": ["body", "requests", 0, "messages", 0, "<message>", "role"], "msg": "Input should be 'user'"}]
    scripted.answers = [(400, {}, {"detail": detail})]

    with Client(url) as client, pytest.raises(BadRequest) as raised:
        client.batches.create([{"agent_id": "agent-1", "input": "hi"}])

    assert raised.value.message == "requests[0].messages[0].role: Input should be 'user'"
    assert raised.value.body == {"detail": detail}


def test_an_answer_that_is_not_json(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(200, {}, "<html>hello</html>")]

    with Client(url) as client, pytest.raises(NightshiftClientError) as raised:
        client.batches.retrieve(RUN_ID)

    assert "is it a nightshift server?" in raised.value.message


def test_a_slow_server_is_a_timeout_not_retried(script: tuple[Script, str]) -> None:
    _, url = script
    sent = []

    def slow_transport(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        raise httpx.ReadTimeout("timed out", request=request)

    with Client(url, timeout=0.5, max_retries=3, transport=httpx.MockTransport(slow_transport)) as client:
        with pytest.raises(Timeout) as raised:
            client.batches.retrieve(RUN_ID)

    assert raised.value.message == f"the nightshift server at {url} did not answer within 0.5 s"
    assert len(sent) == 1


def test_a_refused_connection_names_the_address(refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"

    with Client(url, max_retries=1) as client, pytest.raises(ConnectionFailed) as raised:
        client.batches.retrieve(RUN_ID)

    assert raised.value.message == f"cannot reach the nightshift server at {url}: connection refused"
    assert raised.value.unreachable


def test_https_to_a_plain_http_server_says_which_scheme(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(200, {}, a_run())]
    https = url.replace("http://", "https://")

    with Client(https, max_retries=0) as client, pytest.raises(ConnectionFailed) as raised:
        client.batches.retrieve(RUN_ID)

    assert raised.value.message == f"the server at {https} speaks plain HTTP: use {url}"


async def test_the_async_client_retries_the_same_way(script: tuple[Script, str]) -> None:
    scripted, url = script
    scripted.answers = [(503, {"Retry-After": "0"}, {"detail": "starting"}), (200, {}, a_run("completed"))]
    seen: list[BatchRun] = []

    async with AsyncClient(url, max_retries=1) as client:
        run = await client.batches.wait(RUN_ID, poll_interval=0, on_progress=seen.append)

    assert run.is_final and [r.status for r in seen] == ["completed"]
    assert len(scripted.seen) == 2


def test_a_bad_base_url_is_refused() -> None:
    with pytest.raises(ValueError) as raised:
        Client("localhost:8283")

    assert str(raised.value) == "base_url must be a URL such as http://127.0.0.1:8283, got 'localhost:8283'"


def test_the_server_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_SERVER", "http://10.1.2.3:9000/")
    monkeypatch.setenv("NIGHTSHIFT_API_KEY", "ns-from-env")

    with Client() as client, Client("http://other:1", "given") as other:
        assert (client.base_url, client.api_key) == ("http://10.1.2.3:9000", "ns-from-env")
        assert (other.base_url, other.api_key) == ("http://other:1", "given")
    monkeypatch.delenv("NIGHTSHIFT_SERVER")
    monkeypatch.delenv("NIGHTSHIFT_API_KEY")
    with Client() as client:
        assert (client.base_url, client.api_key) == ("http://127.0.0.1:8283", None)


def test_http_to_a_tls_server_says_which_scheme(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with Client(url, max_retries=0) as client, pytest.raises(ConnectionFailed) as raised:
            client.batches.retrieve(RUN_ID)
    finally:
        server.shutdown()
        server.server_close()

    assert raised.value.message == f"the server at {url} speaks HTTPS: use {url.replace('http://', 'https://')}"
