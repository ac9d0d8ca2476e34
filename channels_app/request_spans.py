"""A traced request's span named by its route, and its trace id on the request's log lines.

The ASGI instrumentation (agentsite.asgi) opens the span before Django
routes the request, so it can name it only by method; here, once the view
is found, it becomes `POST /{slug}/v1/session` with `http.route`, as
OpenTelemetry's Django instrumentation names it. Free when tracing is off.
"""
from __future__ import annotations

import re

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.utils.decorators import sync_and_async_middleware
from opentelemetry import trace
from opentelemetry.semconv.attributes import http_attributes

from channels_app.metrics import route_of
from sessions import tracing
from sessions.plumbing import logcontext

# Django's converters, `<slug:slug>`, as OpenTelemetry writes a route's parameters: `{slug}`.
CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


def _note_trace() -> None:
    if found := tracing.trace_id():
        logcontext.note(traceId=found)


def _name(request: HttpRequest, status: int) -> None:
    span = trace.get_current_span()
    if not span.is_recording():
        return
    route = route_of(request, status)  # the pattern the requests counter is labelled with
    if route:
        route = "/" + CONVERTER.sub(r"{\1}", route).lstrip("^").rstrip("$")
        span.update_name(f"{request.method} {route}")
        span.set_attribute(http_attributes.HTTP_ROUTE, route)


@sync_and_async_middleware
def name_the_span(get_response):
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest):
            if not tracing.tracing():
                return await get_response(request)
            _note_trace()
            response = await get_response(request)
            _name(request, response.status_code)
            return response
    else:
        def middleware(request: HttpRequest):
            if not tracing.tracing():
                return get_response(request)
            _note_trace()
            response = get_response(request)
            _name(request, response.status_code)
            return response
    return middleware
