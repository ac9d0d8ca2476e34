"""`GET /metrics`: the server's Prometheus metrics (sessions.metrics.families), and the count of HTTP requests.

Readable by operators (staff and the operators group, logged in or with a
personal token), by the loopback caller of the embedded default, and by a
scraper holding `AGENTSITE_METRICS_TOKEN` (`Authorization: Bearer …`), whose
digest is compared in constant time after the client's lockout is checked (a miss counts as
a failed bearer, surface `metrics`). Anyone else: 401 when no one was named, 403 for a
principal who is not an operator, 429 while the client is locked out.

Each scrape sums the files of every process of the server (`sessions.metrics.families.SummedFiles`,
prometheus_client's `MultiProcessCollector`) and reads the two database gauges, in a
registry made for the scrape, as multiprocess mode requires; first it drops the live
gauges of processes that are gone and folds their counters into the archive
(`sessions.metrics.families.fold_dead_processes`), so a scrape reads a bounded number of files.
"""
from __future__ import annotations

import hmac

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.decorators import sync_and_async_middleware
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from channels_app import lockout
from channels_app.auth import RequestInfo, counts_bearers, policy_chain, presented_bearer
from channels_app.doors import admit, server_door
from channels_app.errors import APIError, error_response, unauthorized
from sessions.metrics import families as metrics
from sessions.models import hash_token
from sessions.models.token import TOKEN_PREFIX


def holds_metrics_token(info: RequestInfo) -> bool:
    """Whether the bearer is the metrics token; a guess (a bearer no personal token's shape) is
    checked against the lockout first, so a locked-out client is refused even the right one."""
    expected = settings.AGENTSITE_METRICS_TOKEN_HASH
    presented = presented_bearer(info)
    if not expected or not presented or presented.startswith(TOKEN_PREFIX):
        return False
    lockout.check(info.peer, lockout.bearer_account(presented), "metrics")
    return hmac.compare_digest(hash_token(presented), expected)


# Every agent's figures: operators only, and no token scoped to some agents.
METRICS = server_door("the server's metrics")


def refusal(info: RequestInfo) -> HttpResponse | None:
    """None if the caller may read the metrics, else the 401, 403 or 429 that says why not."""
    try:
        if holds_metrics_token(info):
            return None
        admit(info, METRICS)
    except APIError as exc:
        if exc.status_code == 401:
            presented = presented_bearer(info)
            # A miss counts once: a personal token's was counted by its policy, and so was any
            # bearer when the chain has a policy that counts them (`serve --bearer-token`).
            if presented and not presented.startswith(TOKEN_PREFIX) and not counts_bearers(policy_chain()):
                lockout.failed(info.peer, lockout.bearer_account(presented), "metrics")
            exc = unauthorized("authentication required: log in as an operator, or send the metrics token as "
                               "`Authorization: Bearer <AGENTSITE_METRICS_TOKEN>`")
        return exc.response()
    return None


def scrape() -> bytes:
    metrics.drop_dead_live_gauges()
    metrics.fold_dead_processes()
    registry = CollectorRegistry()
    metrics.SummedFiles(registry, path=str(metrics.metrics_dir()))
    registry.register(metrics.DatabaseGauges())
    return generate_latest(registry)


@csrf_exempt  # GET only: any other method gets the JSON 405 below, not Django's CSRF page
def metrics_view(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        response = error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use GET")
        response["Allow"] = "GET, HEAD"
        return response
    refused = refusal(RequestInfo.from_django(request))
    if refused is not None:
        return refused
    response = HttpResponse(scrape(), content_type=CONTENT_TYPE_LATEST)
    response["Cache-Control"] = "no-store"
    return response


def route_of(request: HttpRequest, status: int) -> str | None:
    """The URL pattern the request matched (`<slug:slug>/v1/session/<str:session_id>`), None if none did.

    A request a middleware answered before Django resolved it (a cross-site write, a NUL in
    the path) is looked up here, so it counts under its route; a 404 without a match had none.
    """
    match = request.resolver_match
    if match is None and status != 404:
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
    return match.route if match is not None else None


@sync_and_async_middleware
def count_requests(get_response):
    """`agentsite_http_requests_total{route,status}`: by the matched pattern, never the raw path,
    so a path made of ids adds no series."""
    if iscoroutinefunction(get_response):
        async def middleware(request: HttpRequest):
            response = await get_response(request)
            metrics.request_answered(route_of(request, response.status_code), response.status_code)
            return response
    else:
        def middleware(request: HttpRequest):
            response = get_response(request)
            metrics.request_answered(route_of(request, response.status_code), response.status_code)
            return response
    return middleware
