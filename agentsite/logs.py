"""How the server's processes log, from the environment, when the settings load.

`AGENTSITE_LOG_FORMAT`: "text" (the default), or "json" for a collector: one object a
line, with the ids of the session and turn it is about (sessions.plumbing.logcontext).
`AGENTSITE_LOG_LEVEL`: the root logger's level (WARNING by default).
"""
from __future__ import annotations

from typing import Any, Mapping

from django.core.exceptions import ImproperlyConfigured

# Under json, at INFO whatever the level: a pipeline's lines (one per request, channels_app.access_log;
# one per settled turn, sessions.metrics.turnlog; serve's start) and uvicorn's (agentsite.webserver
# gives it no handler).
PIPELINE_LOGGERS = ("agentsite.access", "agentsite.turns", "agentsite.serve", "uvicorn.error")


def logging_settings(environ: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """(LOG_FORMAT, LOGGING) for `environ`; ImproperlyConfigured naming a format that is neither."""
    form = environ.get("AGENTSITE_LOG_FORMAT", "").strip().lower() or "text"
    if form not in ("text", "json"):
        raise ImproperlyConfigured(f"AGENTSITE_LOG_FORMAT={form!r}: use 'text' (the default) or 'json'")
    level = environ.get("AGENTSITE_LOG_LEVEL")
    return form, {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "sessions.plumbing.logcontext.JsonFormatter"}},
        # A client's mistakes that Django logs as errors with a traceback: one line at WARNING
        # (channels_app.request_log).
        "filters": {"client_mistakes": {"()": "channels_app.request_log.ClientMistakes"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["client_mistakes"],
                                 **({"formatter": "json"} if form == "json" else {})}},
        "root": {"handlers": ["console"], "level": level or "WARNING"},
        # Under serve --dev / --reload, "v5 deployed" is the line the author saving a file waits for.
        "loggers": {"agents.discovery.watching": {"level": level or "INFO"},
                    **{name: {"level": "INFO"} for name in PIPELINE_LOGGERS if form == "json"}},
    }
