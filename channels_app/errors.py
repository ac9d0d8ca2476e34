"""One error shape for every route: {"error": {"code", "message", "details"}}.

`APIError.response` is the one JSON answer of an error, a refusal included: DRF's
handler and the views outside DRF (streams, /metrics, channel routes) all send it.
"""
from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpResponse, JsonResponse
from rest_framework import exceptions, renderers
from rest_framework.response import Response

from agents.errors import error_body, error_response
from sessions.turn.admission import AdmissionError
from sessions.plumbing.redisdown import redis_unreachable
from sessions.plumbing.taskqueue import QueueUnavailable

log = logging.getLogger(__name__)

UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="agentsite"'}
NO_POLICY = "authentication required: no auth policy admitted this request"


class APIError(exceptions.APIException):
    def __init__(self, status_code: int, code: str, message: str, details: Any = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message, code)
        self.status_code = status_code
        self.error_code = code
        self.message = message
        self.details = details
        self.headers = headers or {}

    def response(self) -> HttpResponse:
        """The error as JSON, with its headers (WWW-Authenticate, Retry-After), rendered as DRF
        renders a body, so a refusal reads the same inside DRF and outside it."""
        body = renderers.JSONRenderer().render(error_body(self.error_code, self.message, self.details))
        return HttpResponse(body, status=self.status_code, content_type="application/json",
                            headers=self.headers)


def unauthorized(message: str = NO_POLICY) -> APIError:
    """The 401 of a caller no policy admitted (or an anonymous one where operators are asked)."""
    return APIError(401, "unauthorized", message, headers=UNAUTHORIZED_HEADERS)


def _flatten(detail: Any) -> str:
    if isinstance(detail, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in detail.items())
    if isinstance(detail, list):
        return "; ".join(_flatten(v) for v in detail)
    return str(detail)


def exception_handler(exc: Exception, context: dict) -> Response:
    if isinstance(exc, APIError):
        return exc.response()
    if isinstance(exc, AdmissionError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status, headers=exc.headers)
    if isinstance(exc, QueueUnavailable):
        return Response(error_body(exc.code, str(exc)), status=exc.status, headers={"Retry-After": "2"})
    if isinstance(exc, redis_unreachable()):
        # Redis restarting (the rate counters' cache, the channel layer): the client tries again shortly.
        log.warning("Redis is unreachable: %s", exc)
        return Response(error_body("service_unavailable", "Redis is unreachable; try again shortly"), status=503,
                        headers={"Retry-After": "2"})
    if isinstance(exc, Http404):
        return Response(error_body("not_found", str(exc) or "not found"), status=404)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("body_too_large", "the request body is too large"), status=413)
    if isinstance(exc, exceptions.ParseError):
        return Response(error_body("invalid_json", f"the body is not valid JSON: {exc.detail}"), status=400)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return Response(error_body("unsupported_media_type", "send the body as application/json"), status=415)
    if isinstance(exc, exceptions.ValidationError):
        return Response(error_body("invalid_request", _flatten(exc.detail), exc.detail), status=400)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return unauthorized().response()
    if isinstance(exc, exceptions.PermissionDenied):
        return Response(error_body("forbidden", str(exc.detail)), status=403)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response(error_body("method_not_allowed", str(exc.detail)), status=405)
    if isinstance(exc, exceptions.APIException):
        return Response(error_body(exc.default_code, _flatten(exc.detail)), status=exc.status_code)
    log.exception("unhandled error in %s", context.get("view"))
    return Response(error_body("internal_error", "internal server error"), status=500)


def handler404(request, exception=None) -> JsonResponse:
    return error_response(404, "not_found", f"no route for {request.path}")


def handler500(request) -> JsonResponse:
    return error_response(500, "internal_error", "internal server error")


def handler400(request, exception=None) -> JsonResponse:
    return error_response(400, "bad_request", str(exception) if exception else "bad request")
