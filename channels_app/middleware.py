"""Refuse URLs whose path ids or query parameters hold text the databases cannot store.

Views look ids up as they come (`ses_x%00` → a PostgreSQL DataError), so
the check runs once here, before any view. Percent-decoding turns invalid
UTF-8 into U+FFFD, so in practice NUL (`%00`) is what gets refused.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.decorators import sync_and_async_middleware
from pydantic.alias_generators import to_camel

from channels_app.errors import error_response
from sessions.eventlog.storable import BAD_CHARS, clean_text, text_problem


def bad_path_id(kwargs: dict[str, str]) -> tuple[str, str] | None:
    """(field, problem) for the first route argument that cannot be stored, or None."""
    for name, value in kwargs.items():
        if isinstance(value, str) and (problem := text_problem(value)):
            return to_camel(name), problem
    return None


def url_refusal(request: HttpRequest) -> JsonResponse | None:
    if BAD_CHARS.search(request.path_info):
        try:
            found = bad_path_id(resolve(request.path_info).kwargs)
        except Resolver404:
            found = None
        field, problem = found or ("path", text_problem(request.path_info))
        return error_response(400, "invalid_text", f"{field} in the URL path {problem}", {"field": field})
    query = request.META.get("QUERY_STRING", "")
    if "%00" in query or "\x00" in query:  # a cheap hint; the decoded parameters decide
        for name, values in request.GET.lists():
            for text in (name, *values):
                if problem := text_problem(text):
                    field = clean_text(name)
                    return error_response(400, "invalid_text", f"query parameter {field} {problem}",
                                          {"field": field})
    return None


@sync_and_async_middleware
def refuse_unstorable_urls(get_response):
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest):
            return url_refusal(request) or await get_response(request)
    else:
        def middleware(request: HttpRequest):
            return url_refusal(request) or get_response(request)
    return middleware
