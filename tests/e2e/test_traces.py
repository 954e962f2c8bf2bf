"""Traces: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, ``nightshift serve`` sends a span per API request
and per batch stage to an OTLP/HTTP collector (here a real HTTP listener decoding the protobuf
bodies); without it, neither the OpenTelemetry SDK nor an exporter is even imported."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from support.processes import Servers, server_environment
from support.runs import ANTHROPIC_MODEL, Runs

PASSWORD = "correct-horse-battery-staple-0c1e"
MESSAGE = "my locker code is 4417-heron, keep it quiet"
AGENTS = 2


class Collector:
    """An OTLP/HTTP trace receiver on the loopback: keeps every span posted to ``/v1/traces``."""

    def __init__(self) -> None:
        spans: list[Span] = []
        self.spans = spans
        self.lock = threading.Lock()
        lock = self.lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                with lock:
                    for resource_spans in request.resource_spans:
                        for scope_spans in resource_spans.scope_spans:
                            spans.extend(scope_spans.spans)
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def received(self) -> list[Span]:
        with self.lock:
            return list(self.spans)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    collector = Collector()
    yield collector
    collector.close()


def _attributes(span: Span) -> dict[str, object]:
    values: dict[str, object] = {}
    for attribute in span.attributes:
        kind = attribute.value.WhichOneof("value")
        values[attribute.key] = getattr(attribute.value, kind) if kind else None
    return values


async def test_serve_sends_a_span_per_request_and_per_batch_stage(
    db_url: str, tmp_path: Path, emulator: str, collector: Collector
) -> None:
    env = server_environment(
        db_url,
        tmp_path / "home",
        NIGHTSHIFT_SERVER_PASSWORD=PASSWORD,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="nightshift-test",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    servers = Servers(env, tmp_path)
    try:
        server = await servers.start("traced")
        headers = {"Authorization": f"Bearer {PASSWORD}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as client:
            runs = Runs(client)
            agents = [await runs.agent(f"agent-{i}", model=ANTHROPIC_MODEL) for i in range(AGENTS)]
            run = await runs.start([{"agent_id": a["id"], "input": MESSAGE} for a in agents])
            assert (await runs.wait(run["id"]))["status"] == "completed"
            assert (await client.get("/v1/agents/", params={"name": MESSAGE})).status_code == 200
    finally:
        servers.stop_all()  # a graceful stop flushes the spans still buffered

    spans = collector.received()
    names = {span.name for span in spans}
    assert {"POST /v1/messages/batches", "GET /v1/agents/", "POST /v1/agents/"} <= names, names
    assert not any("/v1/health" in name or "/v1/ready" in name for name in names), names
    stages = {span.name: _attributes(span) for span in spans if _attributes(span).get("nightshift.run_id") == run["id"]}
    assert set(stages) == {"batch submit", "batch poll", "batch apply"}, stages
    for name, attributes in stages.items():
        assert attributes["nightshift.stage"] == name.removeprefix("batch ")
        assert attributes["nightshift.agents"] == AGENTS
        assert attributes["nightshift.provider"] == "anthropic"
        assert attributes["nightshift.provider_batch_id"]
    for span in spans:
        assert span.end_time_unix_nano >= span.start_time_unix_nano
        for value in _attributes(span).values():
            for secret in (PASSWORD, MESSAGE, "4417", "heron"):
                assert secret not in str(value), (span.name, value)


def test_without_an_endpoint_no_sdk_or_exporter_is_imported(tmp_path: Path) -> None:
    # FastAPI imports the OpenTelemetry API when it is installed (a no-op without an SDK); the SDK,
    # the exporter and the instrumentation are what would record and send anything.
    program = (
        "import sys\n"
        "from nightshift.api.app import create_app\n"
        "from nightshift.cli import app\n"
        "from nightshift.config import Settings\n"
        "from nightshift.tracing import configure_tracing\n"
        "assert configure_tracing() is False\n"
        "create_app(Settings())\n"
        "parts = ('opentelemetry.sdk', 'opentelemetry.exporter', 'opentelemetry.instrumentation')\n"
        "print(sorted(m for m in sys.modules if m.startswith(parts)))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "NIGHTSHIFT_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
