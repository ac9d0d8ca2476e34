"""The session a request is about, on the web process's log lines (sessions.plumbing.logcontext),
and a client's mistakes logged as one line.

Read off the path (`/<slug>/v1/session/<id>/…`) rather than the resolved
route, which Django finds only later: a pattern costs a few microseconds,
a second resolve tens. Lines logged while the request is served, Django's
own "Internal Server Error" among them, then carry `sessionId` in the JSON
log format.
"""
from __future__ import annotations

import logging
import re

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.utils.decorators import sync_and_async_middleware

from sessions.plumbing.logcontext import about

SESSION_IN_PATH = re.compile(r"/v1/session/(ses_[0-9a-f]{1,64})(?:/|$)")


def ids_of(request: HttpRequest) -> dict[str, str]:
    found = SESSION_IN_PATH.search(request.path_info)
    return {"sessionId": found.group(1)} if found else {}


@sync_and_async_middleware
def name_the_session(get_response):
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest):
            with about(**ids_of(request)):
                return await get_response(request)
    else:
        def middleware(request: HttpRequest):
            with about(**ids_of(request)):
                return get_response(request)
    return middleware


class ClientMistakes(logging.Filter):
    """Django's `django.security.*` lines (a Host header not allowed, a suspicious path or body) at WARNING,
    without the traceback Django attaches: any caller can send one, and an error log full of them hides the
    server's own errors. A filter of the handler, since Django logs them to a logger per kind."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.security."):
            if record.levelno > logging.WARNING:
                record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            record.exc_info = record.exc_text = None
        return True
