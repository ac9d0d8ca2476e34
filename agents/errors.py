"""The API's error envelope, `{"error": {"code", "message", "details"}}`: in the lowest layer, so
channel handlers built here (webhook channels) and the views above answer in the same shape."""
from __future__ import annotations

from typing import Any

from django.http import JsonResponse


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def error_response(status_code: int, code: str, message: str, details: Any = None) -> JsonResponse:
    return JsonResponse(error_body(code, message, details), status=status_code)
