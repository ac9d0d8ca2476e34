"""Cursor pagination of session lists: DRF's CursorPagination with this API's names.

DRF pages by the position of the first ordering field (`created_at`) plus an
offset past rows that share it, so sessions created in the same instant are
neither skipped nor repeated, and a page is one query whatever its depth.
What changes here is only what the client sees:

- `?limit=` (1..100, default 20) is strict: anything else is a 400
  `invalid_limit` instead of DRF's silent fallback to the default;
- the cursor is an opaque token, not a URL: base64url of `[position, offset]`,
  and one this server did not issue is a 400 `invalid_cursor` (DRF: 404);
- the body is `{"sessions": [...], "nextCursor": <token or null>}`.
"""
from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.response import Response

from channels_app.errors import APIError
from channels_app.parsers import load_json, parse_count
from channels_app.responses import SessionDetail, SessionPage


class SessionCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 20
    max_page_size = 100
    page_size_query_param = "limit"
    cursor_query_param = "cursor"
    template = None

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        limit = parse_count(raw) or 0
        if not 1 <= limit <= self.max_page_size:
            raise APIError(400, "invalid_limit", f"limit must be an integer from 1 to {self.max_page_size}")
        return limit

    def decode_cursor(self, request) -> Cursor | None:
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return None
        try:
            position, offset = load_json(base64.urlsafe_b64decode(raw.encode() + b"==").decode(), "cursor")
            if type(offset) is not int or not 0 <= offset <= self.offset_cutoff:
                raise ValueError("offset out of range")
            if position is not None:
                instant = datetime.fromisoformat(position)
                if instant.tzinfo is None:
                    raise ValueError("a naive instant")
                # Near year 1 or 9999 an offset pushes the instant out of range once it is made UTC.
                position = instant.astimezone(timezone.utc).isoformat()
        except (ValueError, TypeError, OverflowError):  # JSONRefused, UnicodeError and binascii.Error are ValueErrors
            raise APIError(400, "invalid_cursor", "cursor is not one this server issued") from None
        return Cursor(offset=offset, reverse=False, position=position)

    def encode_cursor(self, cursor: Cursor) -> str:
        raw = json.dumps([cursor.position, cursor.offset]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _get_position_from_instance(self, instance, ordering) -> str:
        return instance.created_at.isoformat()

    def get_paginated_response(self, data: list[SessionDetail]) -> Response:
        return Response(SessionPage(sessions=data, next_cursor=self.get_next_link()))
