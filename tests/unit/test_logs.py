"""The log formatters: JSON lines with the record's fields, text lines, and secrets redacted."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from nightshift.config import LogFormat, LogLevel, Settings
from nightshift.logs import REDACTED, DropQueryStrings, JsonFormatter, TextFormatter, known_secrets

SECRET = 'pa"ss\\word-123'


@pytest.fixture
def written() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own (nothing propagates to the test run's) and what its handler writes."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(DropQueryStrings())
    logger = logging.getLogger(f"nightshift.test_logs.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield logger, stream
    logger.removeHandler(handler)


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_has_time_level_logger_message_and_the_extra_fields(
    written: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = written
    logger.handlers[0].setFormatter(JsonFormatter())
    logger.info("run %s: %d agents\nsecond line", "r1", 3, extra={"run_id": "r1", "agents": 3, "step": 1})

    [line] = _lines(stream)
    assert line["level"] == "INFO"
    assert line["logger"] == logger.name
    assert line["message"] == "run r1: 3 agents\nsecond line"
    assert (line["run_id"], line["agents"], line["step"]) == ("r1", 3, 1)
    assert line["time"].endswith("+00:00")
    assert "args" not in line and "msg" not in line


def test_an_exception_stays_on_its_line(written: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = written
    logger.handlers[0].setFormatter(JsonFormatter())
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("it failed")

    [line] = _lines(stream)
    assert line["level"] == "ERROR"
    assert "Traceback" in line["exception"] and "ValueError: boom" in line["exception"]


def test_a_value_json_cannot_write_is_written_as_text(written: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = written
    logger.handlers[0].setFormatter(JsonFormatter())
    logger.warning("odd", extra={"odd": object()})
    assert _lines(stream)[0]["odd"].startswith("<object object")


@pytest.mark.parametrize("formatter", [JsonFormatter(secrets=[SECRET]), TextFormatter(secrets=[SECRET])])
def test_known_secrets_are_redacted_wherever_they_appear(
    written: tuple[logging.Logger, io.StringIO], formatter: logging.Formatter
) -> None:
    logger, stream = written
    logger.handlers[0].setFormatter(formatter)
    try:
        raise RuntimeError(f"login with {SECRET} refused")
    except RuntimeError:
        logger.exception("password %s", SECRET, extra={"password": SECRET})

    text = stream.getvalue()
    assert SECRET not in text
    assert json.dumps(SECRET)[1:-1] not in text
    assert REDACTED in text


def test_a_text_line_reads_time_level_logger_message(written: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = written
    logger.handlers[0].setFormatter(TextFormatter())
    logger.warning("run %s failed", "r1", extra={"run_id": "r1"})
    line = stream.getvalue().rstrip("\n")
    assert line.endswith(f"WARNING {logger.name}: run r1 failed")


def test_access_lines_have_the_request_fields_and_no_query_string(
    written: tuple[logging.Logger, io.StringIO],
) -> None:
    _, stream = written
    access = logging.getLogger("uvicorn.access")
    record = access.makeRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/v1/agents/?name=my+secret+words", "1.1", 200),
        None,
    )
    handler = logging.StreamHandler(stream)
    handler.addFilter(DropQueryStrings())
    handler.setFormatter(JsonFormatter())
    handler.handle(record)

    [line] = _lines(stream)
    assert line["message"] == '127.0.0.1:5000 - "GET /v1/agents/ HTTP/1.1" 200'
    assert (line["method"], line["path"], line["status"]) == ("GET", "/v1/agents/", 200)
    assert "secret" not in stream.getvalue()


def test_the_settings_take_a_format_and_a_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_LOG_FORMAT", "json")
    monkeypatch.setenv("NIGHTSHIFT_LOG_LEVEL", "debug")
    settings = Settings()
    assert (settings.log_format, settings.log_level) == (LogFormat.JSON, LogLevel.DEBUG)
    monkeypatch.setenv("NIGHTSHIFT_LOG_FORMAT", "xml")
    with pytest.raises(ValidationError, match="log_format"):
        Settings()


def test_the_defaults_are_text_at_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NIGHTSHIFT_LOG_FORMAT", raising=False)
    monkeypatch.delenv("NIGHTSHIFT_LOG_LEVEL", raising=False)
    settings = Settings()
    assert (settings.log_format, settings.log_level) == (LogFormat.TEXT, LogLevel.INFO)


def test_the_known_secrets_are_the_password_and_the_set_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIGHTSHIFT_SERVER_PASSWORD", "hunter22")
    environ = {"ANTHROPIC_API_KEY": "sk-ant-1", "OPENAI_API_KEY": ""}
    found = known_secrets(Settings(), environ, ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"])
    assert sorted(found) == ["hunter22", "sk-ant-1"]
