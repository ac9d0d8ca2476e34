"""The session a request is about, on the web process's log lines (sessions.logcontext).

Read off the path (`/<slug>/v1/session/<id>/…`) rather than the resolved
route, which Django finds only later: a pattern costs a few microseconds,
a second resolve tens. Lines logged while the request is served, Django's
own "Internal Server Error" among them, then carry `sessionId` in the JSON
log format.
"""
from __future__ import annotations

import re

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.utils.decorators import sync_and_async_middleware

from sessions.logcontext import about

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
