"""No request freezes the API: a real ``nightshift serve`` keeps answering ``/v1/health`` while it
refuses heavy requests, and it bounds slow and idle connections and their number.

A thread probes ``/v1/health`` every few milliseconds, on a connection of its own, while the test
sends one heavy request; every probe that overlapped it must be answered within
``HEALTH_BOUND_SECONDS``. The issue asks for 100 ms; the bound here is five times that because
the suite runs on a 2-core machine shared with other test runs, where a process may wait for a
core for tens of milliseconds, and every request of a probe crosses two processes. Each of these
requests held the event loop for whole seconds before, far past the bound.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support.processes import Server, Servers, server_environment

pytestmark = pytest.mark.parametrize("module_db_url", ["sqlite"], indirect=True)

HEALTH_BOUND_SECONDS = 0.5
PASSWORD = "frozen-loop-password"
AUTH = {"authorization": f"Bearer {PASSWORD}", "content-type": "application/json"}
MODEL = "anthropic/claude-3-5-haiku-20241022"
# Reading a tool gets this long in these servers, so that the slow source's refusal comes soon.
READ_SECONDS = 3
HEAD_TIMEOUT_SECONDS = 1.0
BODY_TIMEOUT_SECONDS = 2.0


@dataclass(slots=True)
class Prober:
    """Probes ``/v1/health`` from a thread of its own until stopped; records when each probe
    started and how long it took."""

    base_url: str
    probes: list[tuple[float, float]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="health-prober", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=60) as http:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    status = http.get("/v1/health").status_code
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.probes.append((started, time.monotonic() - started))
                if status != 200:
                    self.failures.append(f"status {status}")
                self._stop.wait(0.01)

    def probes_after(self, moment: float) -> int:
        return sum(1 for started, _ in self.probes if started >= moment)

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=120)

    def slowest_between(self, start: float, end: float) -> float:
        """The longest probe that was in flight at some point between ``start`` and ``end``."""
        overlapping = [took for began, took in self.probes if began <= end and began + took >= start]
        assert overlapping, "no probe overlapped the request"
        return max(overlapping)


@pytest.fixture(scope="module")
def environment(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the module's servers."""
    return server_environment(
        module_db_url,
        tmp_path_factory.mktemp("home"),
        NIGHTSHIFT_SERVER_PASSWORD=PASSWORD,
        NIGHTSHIFT_POLLER="false",
        NIGHTSHIFT_TOOL_READ_SECONDS=str(READ_SECONDS),
        NIGHTSHIFT_HEAD_TIMEOUT_SECONDS=str(HEAD_TIMEOUT_SECONDS),
        NIGHTSHIFT_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT_SECONDS),
    )


@pytest.fixture(scope="module")
def server(environment: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the module's tests: each refuses what it sends, or only holds connections,
    and checks that the server still answers afterwards; none leaves anything behind."""
    group = Servers(environment, tmp_path_factory.mktemp("logs"))
    try:
        yield asyncio.run(group.start("frozen"))
    finally:
        group.stop_all()


# --- the heavy requests -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Heavy:
    """One heavy request, and the refusal it gets now."""

    path: str
    body: Callable[[], bytes]
    headers: dict[str, str]
    status: int
    says: str


def _stranger_batch() -> bytes:
    # Three million tiny requests, 105 MB: seconds of decoding, hundreds of MB once decoded.
    one = b'{"agent_id": "agent-x", "input": "hi"}'
    count = 105 * 1024 * 1024 // (len(one) + 1)
    return b'{"requests": [' + b",".join([one] * count) + b"]}"


def _zeros() -> bytes:
    # 31 MB of zeros in an agent's metadata: fifteen million values.
    return b'{"model": "%s", "metadata": {"zeros": [%s]}}' % (MODEL.encode(), b",".join([b"0"] * 15_500_000))


def _fstring_tool() -> bytes:
    # 0.3 MB of f-string fields in one f-string: its parse takes time quadratic in their number.
    source = (
        "def shout(t: str) -> str:\n"
        '    """Say it loud.\n\n    Args:\n        t: What to say.\n    """\n'
        '    return f"' + "{t}" * 100_000 + '"\n'
    )
    return json.dumps({"source_code": source}).encode()


def _huge_json_schema() -> bytes:
    # A client's json_schema of 1 MB: twenty thousand properties to check against the metaschema.
    source = (
        "def lookup(term: str) -> str:\n"
        '    """Look a term up.\n\n    Args:\n        term: The term.\n    """\n'
        "    return term\n"
    )
    properties = {f"p{i}": {"type": "string", "description": "x"} for i in range(20_000)}
    schema = {"name": "lookup", "parameters": {"type": "object", "properties": properties}}
    return json.dumps({"source_code": source, "json_schema": schema}).encode()


def _unstorable_at_the_end() -> bytes:
    # Nearly a million values (under the limit), the last one not JSON: the whole body is walked.
    return b'{"model": "%s", "metadata": {"zeros": [%s, NaN]}}' % (MODEL.encode(), b",".join([b"0"] * 950_000))


HEAVY = {
    "a stranger's 105 MB batch body": Heavy(
        path="/v1/messages/batches",
        body=_stranger_batch,
        headers={"content-type": "application/json"},
        status=401,
        says="Bearer",
    ),
    "31 MB of zeros": Heavy(path="/v1/agents/", body=_zeros, headers=AUTH, status=413, says="JSON values"),
    "a tool source of 100,000 f-string fields": Heavy(
        path="/v1/tools/", body=_fstring_tool, headers=AUTH, status=422, says=f"longer than {READ_SECONDS} s"
    ),
    "a 1 MB client json_schema": Heavy(
        path="/v1/tools/", body=_huge_json_schema, headers=AUTH, status=422, says="10,000 values"
    ),
    "a NaN after 950,000 zeros": Heavy(
        path="/v1/agents/", body=_unstorable_at_the_end, headers=AUTH, status=422, says="not a finite number"
    ),
}


@pytest.mark.parametrize("heavy", list(HEAVY.values()), ids=list(HEAVY))
async def test_health_answers_while_a_heavy_request_is_refused(server: Server, heavy: Heavy) -> None:
    body = heavy.body()
    prober = Prober(server.base_url)
    prober.start()
    try:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as http:
            while prober.probes_after(0) < 3:  # the prober is under way
                await _pause()
            start = time.monotonic()
            response = await http.post(heavy.path, content=body, headers=heavy.headers)
            end = time.monotonic()
            while prober.probes_after(end) < 2:  # a probe that started after the answer, too
                await _pause()
    finally:
        prober.stop()
    assert not prober.failures, prober.failures
    slowest = prober.slowest_between(start, end)
    print(f"slowest /v1/health: {slowest:.3f} s during the request ({end - start:.3f} s)")
    assert slowest < HEALTH_BOUND_SECONDS, (
        f"/v1/health took {slowest:.3f} s during the request ({end - start:.3f} s)\n{server.log_tail()}"
    )
    assert response.status_code == heavy.status, response.text[:500]
    assert heavy.says in response.json()["detail"], response.text[:500]
    # The server is still whole: it answers an ordinary request.
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
        agents = await http.get("/v1/agents/", headers=AUTH)
        assert agents.status_code == 200, agents.text


async def _pause() -> None:
    await asyncio.sleep(0.01)


# --- slow and idle connections ---------------------------------------------------------------------


def _connect(server: Server) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)))
    connection.settimeout(HEAD_TIMEOUT_SECONDS + 10)
    return connection


def _closed_within(connection: socket.socket) -> float:
    """How long until the server closes ``connection`` (which sends nothing more)."""
    start = time.monotonic()
    try:
        assert connection.recv(1024) == b""
    except ConnectionResetError:
        pass
    return time.monotonic() - start


async def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout(server: Server) -> None:
    # A client that keeps its connection busy keeps it: the deadline starts again after each answer.
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        for _ in range(3):
            assert http.get("/v1/health").status_code == 200
            time.sleep(HEAD_TIMEOUT_SECONDS / 2)  # idle between two requests, as a client is
        assert http.get("/v1/health").status_code == 200
        assert http.get("/v1/health").extensions["http_version"] == b"HTTP/1.1"
    with _connect(server) as idle:
        assert _closed_within(idle) < HEAD_TIMEOUT_SECONDS + 5


async def test_a_head_sent_a_byte_at_a_time_is_cut_off(server: Server) -> None:
    with _connect(server) as slow:
        slow.sendall(b"GET /v1/health HTTP/1.1\r\nHost: nightshift\r\n")
        start = time.monotonic()
        closed = False
        # Less than a byte each tenth of the head timeout: each byte would restart an idle timer.
        while not closed and time.monotonic() - start < HEAD_TIMEOUT_SECONDS + 5:
            try:
                slow.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            slow.settimeout(HEAD_TIMEOUT_SECONDS / 10)
            try:
                closed = slow.recv(1024) == b""
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = True
        assert closed, "the server still waits for the head"
        assert time.monotonic() - start < HEAD_TIMEOUT_SECONDS + 5


async def test_a_body_refused_from_its_headers_may_take_longer_than_a_head_to_arrive(server: Server) -> None:
    """A 401 goes before the body is read; the rest of the body is read and dropped while it keeps
    coming, however long it takes, and the connection then serves the next request."""
    part = b"x" * 1000
    parts = 8
    head = f"POST /v1/agents/ HTTP/1.1\r\nHost: nightshift\r\nContent-Length: {len(part) * parts}\r\n\r\n"
    with _connect(server) as uploading:
        uploading.sendall(head.encode() + part)
        assert _response(uploading).startswith(b"HTTP/1.1 401 ")
        for _ in range(parts - 1):  # the rest over four head timeouts: still read, never cut off
            time.sleep(HEAD_TIMEOUT_SECONDS / 2)
            uploading.sendall(part)
        uploading.sendall(b"GET /v1/health HTTP/1.1\r\nHost: nightshift\r\n\r\n")
        assert _response(uploading).startswith(b"HTTP/1.1 200 ")


def _response(connection: socket.socket) -> bytes:
    """One whole HTTP response read from ``connection`` (its head, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = connection.recv(4096)
        assert chunk, f"closed in the middle of a response: {data!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


_FILE_PART = b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.af"\r\n\r\n{"agents": ['


@pytest.mark.parametrize(
    ("path", "content_type", "start"),
    [
        ("/v1/agents/", "application/json", b'{"model": "'),
        ("/v1/agents/import", "multipart/form-data; boundary=xyz", _FILE_PART),
    ],
    ids=["json", "multipart"],
)
async def test_a_body_that_stalls_is_a_408_once_its_time_is_up(
    server: Server, path: str, content_type: str, start: bytes
) -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: nightshift\r\nAuthorization: Bearer {PASSWORD}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: 1000\r\n\r\n"
    )
    with _connect(server) as stalled:
        stalled.sendall(head.encode() + start)  # and nothing more
        began = time.monotonic()
        answer = _response(stalled)
        took = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"NIGHTSHIFT_BODY_TIMEOUT_SECONDS" in answer, answer
    assert took < BODY_TIMEOUT_SECONDS + 5


@pytest.fixture
async def limited_server(environment: dict[str, str], tmp_path: Path) -> AsyncIterator[Server]:
    group = Servers(environment, tmp_path)
    try:
        # The head timeout is long here, so that the idle connections below stay open throughout.
        yield await group.start("limited", NIGHTSHIFT_MAX_CONNECTIONS="4", NIGHTSHIFT_HEAD_TIMEOUT_SECONDS="60")
    finally:
        group.stop_all()


async def test_connections_past_the_limit_are_answered_503(limited_server: Server) -> None:
    idle = [_connect(limited_server) for _ in range(4)]
    try:
        with httpx.Client(base_url=limited_server.base_url, timeout=10) as http:
            refused = http.get("/v1/health")
        assert refused.status_code == 503, refused.text
    finally:
        for connection in idle:
            connection.close()
    deadline = time.monotonic() + 10
    while True:  # the server notices the closed connections, and answers again
        with httpx.Client(base_url=limited_server.base_url, timeout=10) as http:
            status = http.get("/v1/health").status_code
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 200
