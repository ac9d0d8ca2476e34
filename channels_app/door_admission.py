"""Admission for the protocol doors that sit in front of Django (MCP, A2A): who is calling, as every
route admits callers (`channels_app.doors.admit`), and the JSON refusal of every route when not.

The doors are ASGI apps of the protocols' SDKs, not Django views, so the refusal is written to the
ASGI `send` here; what it says (401 with `WWW-Authenticate`, 403, 404, 429, 503) is the same.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from channels_app.auth import RequestInfo
from channels_app.doors import AGENT, LISTING, admit
from channels_app.errors import APIError
from channels_app.origin import foreign_origin_message, foreign_source
from channels_app.ownership import get_agent
from sessions.plumbing.redisdown import redis_unreachable
from sessions.plumbing.taskqueue import QueueUnavailable
from sessions.principal import Principal
from sessions.turn.admission import AdmissionError

# What a door's work may raise as a refusal of the caller's request (see `refusal`).
REFUSALS = (APIError, AdmissionError, QueueUnavailable)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Caller:
    principal: Principal
    slug: str | None  # the agent in the path; None on a door that serves every agent (`/mcp`)
    origin: str  # the server's public URL, or the request's own scheme and host: for the links it returns


def admit_caller(scope: dict[str, Any], slug: str | None) -> Caller:
    """The caller of a door of agent `slug` (None: of every agent), else the APIError saying why not.

    A write from a foreign `Origin` is refused as on every route (403 `foreign_origin`), and an agent
    in the path must exist (404 `agent_not_found`) before any exchange of the protocol begins.
    """
    info = RequestInfo.from_scope(scope)
    principal = admit(info, AGENT if slug else LISTING, slug)
    scheme = scope.get("scheme", "http")
    if scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
        source = foreign_source(scheme, info.host, info.headers)
        if source is not None:
            raise APIError(403, "foreign_origin", foreign_origin_message(source), {"origin": source})
    if slug is not None:
        get_agent(slug)
    origin = settings.AGENTSITE_PUBLIC_URL.rstrip("/") or f"{scheme}://{info.host}"
    return Caller(principal, slug, origin)


def refusal(exc: Exception) -> APIError:
    """A refusal raised inside a door (one of REFUSALS) as the APIError the HTTP routes answer with."""
    if isinstance(exc, APIError):
        return exc
    return APIError(getattr(exc, "status", 500), getattr(exc, "code", "error"), getattr(exc, "message", "") or str(exc),
                    getattr(exc, "details", None), headers=getattr(exc, "headers", None))


def redis_down(exc: Exception) -> APIError:
    """The 503 of a request that met Redis restarting (the lockout and rate counters' cache)."""
    log.warning("Redis is unreachable: %s", exc)
    return APIError(503, "service_unavailable", "Redis is unreachable; try again shortly", headers={"Retry-After": "2"})


async def send_refusal(exc: APIError, send) -> None:
    await send_response(exc.response(), send)


async def send_response(response, send) -> None:
    """Write a Django HttpResponse (not a streaming one) to an ASGI `send`."""
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


async def admitted(scope: dict[str, Any], slug: str | None, send) -> Caller | None:
    """The caller, or None once the refusal has been sent."""
    try:
        return await database_sync_to_async(admit_caller)(scope, slug)
    except APIError as exc:
        await send_refusal(exc, send)
    except redis_unreachable() as exc:
        await send_refusal(redis_down(exc), send)
    return None
