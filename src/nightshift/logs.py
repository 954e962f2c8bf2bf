"""The process's logging: configured once by ``nightshift serve`` and ``nightshift poll``.

Every record (ours, uvicorn's access and error logs, SQLAlchemy's, warnings) goes to standard
error through one handler, as a human-readable line or, with ``NIGHTSHIFT_LOG_FORMAT=json``, as
one JSON object per line: ``time``, ``level``, ``logger``, ``message``, any fields given through
``extra=`` and ``exception`` when there is one. Known secret values (the server password, the
providers' API keys) are replaced by ``[redacted]`` in whatever is written; the query strings of
access-log paths are left out (a search query is a user's text).
"""

from __future__ import annotations

import logging
import logging.config
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson

from nightshift.config import LogFormat, Settings

REDACTED = "[redacted]"
# A secret shorter than this is not redacted: replacing it would garble every line.
MIN_REDACTED_LENGTH = 4
# The attributes every LogRecord has: the rest of a record's attributes came through ``extra=``.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's coloured copy of the message
}
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class _Redacting(logging.Formatter):
    """A formatter that replaces known secret values in what it writes."""

    def __init__(self, fmt: str | None = None, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(fmt)
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_REDACTED_LENGTH}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


class TextFormatter(_Redacting):
    """``time level logger: message``, then the traceback if there is one."""

    def __init__(self, *, secrets: Iterable[str] = ()) -> None:
        super().__init__(TEXT_FORMAT, secrets=secrets)

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


class JsonFormatter(_Redacting):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(fields_of(record))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return self.redact_json(orjson.dumps(line, default=str).decode())

    def redact_json(self, text: str) -> str:
        """``text`` with each secret replaced, as written or as JSON escapes it (quotes, backslashes)."""
        for secret in self.secrets:
            escaped = orjson.dumps(secret).decode()[1:-1]
            for form in {secret, escaped}:
                if form in text:
                    text = text.replace(form, REDACTED)
        return text


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a record was given through ``extra=`` (and those of uvicorn's access lines)."""
    fields = {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRIBUTES and not k.startswith("_")}
    if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
        client, method, path, _, status = record.args
        fields.update(client=client, method=method, path=path, status=status)
    return fields


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes each record to ``sys.stderr`` as it is then, not as it was when logging was configured
    (a test runner swaps it, and closes the one it swapped in)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current sys.stderr


class DropQueryStrings(logging.Filter):
    """Access lines show a request's path without its query string (which may hold a user's text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, version, status = record.args
            record.args = (client, method, str(path).partition("?")[0], version, status)
        return True


def logging_config(settings: Settings, *, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of the process: one handler on standard error, for everyone."""
    formatter = JsonFormatter if settings.log_format is LogFormat.JSON else TextFormatter
    # uvicorn's loggers keep no handler of their own and pass everything up to the root's.
    uvicorn = {"handlers": [], "propagate": True}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": {"()": formatter, "secrets": list(secrets)}},
        "filters": {"no_query": {"()": DropQueryStrings}},
        "handlers": {
            "stderr": {
                "()": StderrHandler,
                "formatter": "default",
                "filters": ["no_query"],
            },
            # With NIGHTSHIFT_SQL_ECHO, SQLAlchemy adds a handler of its own (to standard output)
            # to an engine logger that has none: this one keeps the statements in our format.
            "none": {"class": "logging.NullHandler"},
        },
        "root": {"level": settings.log_level.value, "handlers": ["stderr"]},
        "loggers": {
            "uvicorn": uvicorn,
            "uvicorn.error": uvicorn,
            "uvicorn.access": uvicorn,
            "sqlalchemy.engine.Engine": {"handlers": ["none"], "propagate": True},
        },
    }


def configure_logging(settings: Settings, *, secrets: Iterable[str] = ()) -> None:
    """Configure the process's logging (once, at the start of a long-running command)."""
    logging.config.dictConfig(logging_config(settings, secrets=secrets))
    logging.captureWarnings(True)


def known_secrets(settings: Settings, environ: Mapping[str, str], key_variables: Iterable[str]) -> list[str]:
    """The secret values this process knows at start: the server password and the providers' API keys."""
    found = [environ[name] for name in key_variables if environ.get(name)]
    if settings.server_password is not None:
        found.append(settings.server_password.get_secret_value())
    return found
