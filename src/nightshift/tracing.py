"""OpenTelemetry traces, only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

``serve`` and ``poll`` call ``configure_tracing`` once at start, like the logging. With the variable
set, spans go over OTLP/HTTP (protobuf) to that endpoint: one per API request (FastAPI's
instrumentation, without query strings or headers) and one per batch stage (``stage_span``, from
``batch/stages.py``, with the same fields as the stage's log line). The exporter reads the standard
``OTEL_*`` variables (``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_HEADERS``, ...). Without it,
nothing of OpenTelemetry is imported and every function here returns at once.

The SDK is the optional extra ``nightshift[otel]``; asking for traces without it is a clear error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nightshift.errors import InvalidInput

if TYPE_CHECKING:
    from fastapi import FastAPI
    from opentelemetry.sdk.trace import TracerProvider

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME = "nightshift"

# The process's tracer provider once configured: tracing, like logging, is the process's.
_provider: TracerProvider | None = None


def configure_tracing(environ: Mapping[str, str] = os.environ) -> bool:
    """Export spans when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; say whether tracing is on."""
    global _provider
    if _provider is not None:
        return True
    if not environ.get(ENDPOINT_VARIABLE):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise InvalidInput(
            f"{ENDPOINT_VARIABLE} is set but OpenTelemetry is not installed: pip install 'nightshift[otel]'"
        ) from exc
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", SERVICE_NAME)})
    provider = TracerProvider(resource=resource)  # flushes its spans at exit
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider = provider
    return True


def instrument_app(app: FastAPI) -> None:
    """A span per API request of ``app`` when tracing is on (liveness and readiness probes left out)."""
    if _provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=_provider,
        excluded_urls="/v1/health,/v1/ready",
        exclude_spans=["receive", "send"],
        server_request_hook=_without_query,
    )


def _without_query(span: Any, scope: dict[str, Any]) -> None:
    # A query string may hold a user's text (a name searched for): the span keeps the path only,
    # as the access log does.
    url = (getattr(span, "attributes", None) or {}).get("http.url")
    if isinstance(url, str):
        span.set_attribute("http.url", url.split("?", 1)[0])


def stage_span(name: str, *, duration_s: float, attributes: Mapping[str, str | int]) -> None:
    """Record a span for a batch stage that just ended, ``duration_s`` long."""
    if _provider is None:
        return
    end = time.time_ns()
    span = _provider.get_tracer("nightshift.batch").start_span(
        name, start_time=end - int(duration_s * 1e9), attributes=dict(attributes)
    )
    span.end(end_time=end)


def shutdown_tracing() -> None:
    """Send the spans still buffered and stop (a no-op when tracing is off)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None
