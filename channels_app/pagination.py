"""Cursor pagination of every list: DRF's CursorPagination with this API's names.

DRF pages by the position of the first ordering field (`created_at`) plus an
offset past rows that share it, so sessions created in the same instant are
neither skipped nor repeated, and a page is one query whatever its depth.
What changes here is only what the client sees:

- `?limit=` (1..100, default 20 for sessions, 100 elsewhere) is strict: anything
  else is a 400 `invalid_limit` instead of DRF's silent fallback to the default;
- the cursor is an opaque token, not a URL: base64url of `[position, offset]`,
  and one this server did not issue is a 400 `invalid_cursor` (DRF: 404); an
  empty one is none (the first page);
- the body is the list's own key, as before pagination, plus `nextCursor`:
  `{"sessions": [...], "nextCursor": <token or null>}`.

Lists other than sessions were whole before they were paged: their default
page is the largest, so a client that ignores `nextCursor` misses nothing
below 100 items.
"""
from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal

from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.response import Response

from channels_app.replies.secrets import SecretList
from channels_app.errors import APIError
from channels_app.parsers import load_json, parse_count
from channels_app.replies.releases import ReleaseList
from channels_app.replies.agents import AgentList
from channels_app.replies.artifacts import ArtifactList
from channels_app.replies.base import Reply
from channels_app.replies.sessions import SessionPage
from channels_app.replies.timers import ReminderList
from channels_app.replies.tokens import TokenList
from channels_app.replies.tools import ApprovalList


class CursorPages(CursorPagination):
    """Pages of one list: `key` names it in the body, `reply` is the body's model, and the first
    field of `ordering` is the position a cursor holds (`position` says of what kind)."""

    key: ClassVar[str]
    reply: ClassVar[type[Reply]]
    position: ClassVar[Literal["instant", "text", "integer"]] = "instant"
    page_size = 100
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
        if not raw:  # absent or empty: the first page
            return None
        try:
            position, offset = load_json(base64.urlsafe_b64decode(raw.encode() + b"==").decode(), "cursor")
            if type(offset) is not int or not 0 <= offset <= self.offset_cutoff:
                raise ValueError("offset out of range")
            if position is not None:
                position = self.read_position(position)
        except (ValueError, TypeError, OverflowError):  # JSONRefused, UnicodeError and binascii.Error are ValueErrors
            raise APIError(400, "invalid_cursor", "cursor is not one this server issued") from None
        return Cursor(offset=offset, reverse=False, position=position)

    def read_position(self, position: Any) -> str:
        """A position from a cursor, checked as this list writes them (ValueError or TypeError if not)."""
        if self.position == "integer":
            if not (isinstance(position, str) and position.isascii() and position.isdigit() and len(position) < 19):
                raise ValueError("not a row id")
            return position
        if self.position == "text":
            if not isinstance(position, str):
                raise ValueError("not text")
            return position
        instant = datetime.fromisoformat(position)
        if instant.tzinfo is None:
            raise ValueError("a naive instant")
        # Near year 1 or 9999 an offset pushes the instant out of range once it is made UTC.
        return instant.astimezone(timezone.utc).isoformat()

    def encode_cursor(self, cursor: Cursor) -> str:
        raw = json.dumps([cursor.position, cursor.offset]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _get_position_from_instance(self, instance, ordering) -> str:
        value = getattr(instance, ordering[0].lstrip("-"))
        return value.isoformat() if self.position == "instant" else str(value)

    def get_paginated_response(self, data: list[Any]) -> Response:
        following = self.get_next_link()
        # A `Page` leaves nextCursor out on the last page; SessionPage always has it.
        more = {"next_cursor": following} if following is not None or self.reply is SessionPage else {}
        return Response(self.reply(**{self.key: data}, **more))


class SessionCursorPagination(CursorPages):
    ordering = ("-created_at", "-id")
    page_size = 20
    key, reply = "sessions", SessionPage


class AgentPages(CursorPages):
    ordering = ("slug",)
    key, reply, position = "agents", AgentList, "text"


class ApprovalPages(CursorPages):
    ordering = ("id",)  # the order calls were stored in
    key, reply, position = "approvals", ApprovalList, "integer"


class ArtifactPages(CursorPages):
    ordering = ("created_at", "name")
    key, reply = "artifacts", ArtifactList


class ReminderPages(CursorPages):
    ordering = ("-created_at", "-id")
    key, reply = "reminders", ReminderList


class ArmedReminderPages(CursorPages):
    ordering = ("next_fire_at", "created_at", "id")  # an armed reminder always has its next firing
    key, reply = "reminders", ReminderList


class ReleasePages(CursorPages):
    ordering = ("-version",)
    key, reply, position = "deployments", ReleaseList, "integer"


class SecretPages(CursorPages):
    ordering = ("name",)  # unique within an agent
    key, reply, position = "secrets", SecretList, "text"


class TokenPages(CursorPages):
    ordering = ("-created_at", "-id")
    key, reply = "tokens", TokenList


def paginate(pages: type[CursorPages], rows, request, view, render) -> Response:
    """One page of `rows` (a queryset), each written with `render`, as `pages` says."""
    paginator = pages()
    page = paginator.paginate_queryset(rows, request, view=view)
    return paginator.get_paginated_response([render(row) for row in page])
