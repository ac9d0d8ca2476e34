"""`update_todos` and `read_todos`: a plan the model keeps for its session.

The plan lives in the session's event log: each update appends `todos.updated`
with the whole list, and reading it is reading the newest such event. So it
needs no storage of its own, survives restarts and handoffs with the session,
shows live wherever the log is followed (the playground draws it beside the
conversation), and its history is the log's.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from sessions.eventlog.events import append_events
from sessions.models import Event, EventType

MAX_ITEMS = 50


class TodoItem(BaseModel):
    content: str = Field(min_length=1, max_length=500, description="What is to be done, in a sentence")
    status: Literal["pending", "in_progress", "done"] = Field(default="pending",
                                                              description="pending, in_progress or done")


class UpdateTodosInput(BaseModel):
    items: list[TodoItem] = Field(max_length=MAX_ITEMS,
                                  description=f"The whole plan, in order (at most {MAX_ITEMS} items): it replaces "
                                              "the last one")


class ReadTodosInput(BaseModel):
    """read_todos takes nothing."""


def update_todos(input: UpdateTodosInput, ctx) -> dict[str, Any]:
    session = _session(ctx)
    items = [item.model_dump() for item in input.items]
    updated: dict[str, Any] = {"items": items}
    if ctx.host.call_id:
        updated["callId"] = ctx.host.call_id
    append_events(session.pk, [(EventType.TODOS_UPDATED, updated)], turn_id=ctx.host.turn_id, hooks=session.hooks())
    return plan(items)


def read_todos(input: ReadTodosInput, ctx) -> dict[str, Any]:
    return plan(current(_session(ctx).pk))


def current(session_id: str) -> list[dict[str, Any]]:
    """The session's plan: the items of its newest `todos.updated` (none: empty)."""
    newest = (Event.objects.filter(session_id=session_id, type=EventType.TODOS_UPDATED)
              .order_by("-index").values_list("data", flat=True).first())
    return list((newest or {}).get("items", []))


def plan(items: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {status: sum(item["status"] == status for item in items) for status in ("pending", "in_progress", "done")}
    return {"items": items, "pending": counts["pending"], "inProgress": counts["in_progress"], "done": counts["done"]}


def _session(ctx):
    session = ctx.host.session if ctx.host is not None else None
    if session is None:
        raise LookupError("a plan belongs to a session: there is none here")
    return session
