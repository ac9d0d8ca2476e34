"""Which session and turn a server log line is about, and the JSON log format that says so.

`AGENTSITE_LOG_FORMAT=json` (agentsite.settings) writes each line as one JSON
object: time, level, logger, message, the exception if any, and the ids of
the work the line came from: `sessionId` and `turnId` while a worker runs a
turn (sessions.turn.engine), `sessionId` while a web process serves a request
about one (channels_app.request_log), `principalId` once a request is admitted
(channels_app.doors). A collector can then gather a turn's lines across
processes without parsing the messages. A line written for a pipeline (the
access line, the turn line) passes its fields as `extra={FIELDS: {...}}`.
"""
from __future__ import annotations

import json
import logging
import logging.config
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Iterator

# The `extra` key of a record's own fields, written into its JSON line.
FIELDS = "fields"

_ids: ContextVar[dict[str, str]] = ContextVar("agentsite_log_ids", default={})


@contextmanager
def about(**ids: str) -> Iterator[None]:
    """Lines logged inside carry `ids` (on top of the enclosing ones); they are gone on leaving."""
    token = _ids.set({**_ids.get(), **ids})
    try:
        yield
    finally:
        _ids.reset(token)


def note(**ids: str) -> None:
    """Add `ids` to the current scope (an `about` block, which takes them back on leaving)."""
    _ids.set({**_ids.get(), **ids})


def current() -> dict[str, str]:
    return dict(_ids.get())


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with the ids of the session and turn it is about."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_ids.get(),
            # The line's own fields win over the context's: a sweep may end another session's turn.
            **getattr(record, FIELDS, {}),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(config: dict) -> None:
    """Django's LOGGING_CONFIG: `config` applied, and under JSON lines Python's warnings (a library's
    deprecation) logged as `py.warnings` lines too, where they would be printed plain."""
    logging.config.dictConfig(config)
    formatters = {handler.get("formatter") for handler in config.get("handlers", {}).values()}
    logging.captureWarnings("json" in formatters)
