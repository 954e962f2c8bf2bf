"""A callback connects to the very address that was checked, names the URL's host, and uses no
proxy from the environment: through the real callback code and real HTTP receivers on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.batch.callbacks import CallbackRules, send_due_callbacks
from nightshift.domain.batches import BatchRun, BatchRunStatus
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.ids import new_id
from nightshift.serving import free_port, running_server
from nightshift.store import batch_runs as batch_run_store
from nightshift.store.orgs import ensure_default_org

HOST = "hooks.example"


@dataclass
class Receiver:
    """An ASGI app that answers 200 to anything and records what it was sent: (Host header,
    request target, body)."""

    received: list[tuple[str, str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        host = dict(scope["headers"]).get(b"host", b"").decode()
        with self.lock:
            self.received.append((host, scope["path"], json.loads(body) if body else None))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


@dataclass(frozen=True)
class Receivers:
    """Two receivers on one port: 127.0.0.1 (``first``) and 127.0.0.2 (``second``)."""

    port: int
    first: Receiver
    second: Receiver


def _port_free_on_both() -> int:
    """A port free on 127.0.0.1 as well as on 127.0.0.2: one free on the second alone may be taken
    on the first (the servers and connections of the other tests are there)."""
    while True:
        port = free_port("127.0.0.2")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    port = _port_free_on_both()
    first, second = Receiver(), Receiver()
    with running_server(first, host="127.0.0.1", port=port), running_server(second, host="127.0.0.2", port=port):
        yield Receivers(port=port, first=first, second=second)


class Resolver:
    """A name server that answers each question with the next of its answers (the last again
    once they run out), and remembers the questions."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


async def _ended_run(engine: AsyncEngine, url: str) -> BatchRun:
    now = datetime.now(UTC)
    run = BatchRun(
        id=new_id("batch"),
        organization_id=DEFAULT_ORG_ID,
        status=BatchRunStatus.COMPLETED,
        max_steps=1,
        callback_url=url,
        completed_at=now,
        created_at=now,
        updated_at=now,
    )
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        await batch_run_store.insert_run(conn, run)
    return run


async def _stored(engine: AsyncEngine, run: BatchRun) -> BatchRun:
    async with engine.connect() as conn:
        stored = await batch_run_store.get_run(conn, DEFAULT_ORG_ID, run.id)
    assert stored is not None
    return stored


async def test_the_callback_goes_to_the_address_checked_not_to_a_later_answer(
    engine: AsyncEngine, receivers: Receivers
) -> None:
    # The name answers 127.0.0.1 when checked and 127.0.0.2 when asked again (DNS rebinding):
    # the connection must go to the address that was checked.
    resolver = Resolver(["127.0.0.1"], ["127.0.0.2"])
    run = await _ended_run(engine, f"http://{HOST}:{receivers.port}/hook")

    attempted = await send_due_callbacks(engine, CallbackRules(allow_private=True), resolve=resolver)

    assert attempted == 1
    stored = await _stored(engine, run)
    assert (stored.callback_status_code, stored.callback_error) == (200, None)
    assert [(host, path) for host, path, _ in receivers.first.received] == [(f"{HOST}:{receivers.port}", "/hook")]
    assert receivers.first.received[0][2]["job_id"] == run.id
    assert receivers.second.received == []
    assert resolver.asked == [(HOST, receivers.port)]  # resolved once, for the check and the connection


async def test_a_name_that_answers_an_address_carrying_a_private_one_is_not_called(
    engine: AsyncEngine, receivers: Receivers
) -> None:
    # A NAT64 address of the well-known prefix, carrying 127.0.0.1: a translator would deliver
    # the callback to the server's own loopback.
    resolver = Resolver(["64:ff9b::7f00:1"], ["127.0.0.1"])
    run = await _ended_run(engine, f"http://{HOST}:{receivers.port}/hook")

    await send_due_callbacks(engine, CallbackRules(allow_private=False), resolve=resolver)

    stored = await _stored(engine, run)
    assert stored.callback_sent_at is not None  # given up at once: a refusal does not change
    assert stored.callback_error == (
        f"callback not sent: callback_url's host '{HOST}' is 64:ff9b::7f00:1, which carries 127.0.0.1 (NAT64), "
        "a loopback, private or reserved address; the server does not call those "
        "(set NIGHTSHIFT_CALLBACK_ALLOW_PRIVATE=true to allow them)"
    )
    assert receivers.first.received == receivers.second.received == []
    assert resolver.asked == [(HOST, receivers.port)]


async def test_no_proxy_from_the_environment_is_used(
    engine: AsyncEngine, receivers: Receivers, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = Receiver()
    with running_server(proxy) as proxy_url:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        run = await _ended_run(engine, f"http://127.0.0.1:{receivers.port}/hook")

        await send_due_callbacks(engine, CallbackRules(allow_private=True))

    assert (await _stored(engine, run)).callback_status_code == 200
    assert [host for host, _, _ in receivers.first.received] == [f"127.0.0.1:{receivers.port}"]
    assert proxy.received == []


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A certificate authority and a certificate it signed for ``HOST`` only: (authority, cert, key)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test authority",
    )
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "host.key", "-out", "host.csr", "-subj", f"/CN={HOST}")
    (folder / "host.ext").write_text(f"subjectAltName=DNS:{HOST}\n")
    openssl(
        "x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "host.pem", "-days", "2", "-extfile", "host.ext",
    )  # fmt: skip
    return folder / "ca.pem", folder / "host.pem", folder / "host.key"


@contextmanager
def _tls_server(app: Receiver, cert: Path, key: Path) -> Iterator[int]:
    """``app`` served over TLS on 127.0.0.1 with that certificate; yields its port."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ssl_certfile=str(cert), ssl_keyfile=str(key)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the TLS receiver did not start"
        time.sleep(0.01)  # waits for the server's thread to listen, not for time to pass
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


async def test_over_tls_the_certificate_is_checked_for_the_urls_host(
    engine: AsyncEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The connection goes to 127.0.0.1, whose certificate names only HOST: it is accepted only if
    # the TLS server name (and so the name checked) is the URL's host, not the address.
    authority, cert, key = _certificates(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(authority))
    receiver = Receiver()
    with _tls_server(receiver, cert, key) as port:
        run = await _ended_run(engine, f"https://{HOST}:{port}/hook")
        await send_due_callbacks(engine, CallbackRules(allow_private=True), resolve=Resolver(["127.0.0.1"]))

    stored = await _stored(engine, run)
    assert (stored.callback_status_code, stored.callback_error) == (200, None)
    assert [(host, path) for host, path, _ in receiver.received] == [(f"{HOST}:{port}", "/hook")]
