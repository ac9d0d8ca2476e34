"""Bodies of the timer routes: a session's reminders, and a schedule fired by hand."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from channels_app.replies.base import Page, Reply
from sessions.models import Reminder as ReminderRow


class Reminder(Reply):
    reminder_id: str
    session_id: str | None
    title: str
    kind: str
    spec: str
    form: Literal["run", "prompt"]
    prompt: str
    until: str
    status: str
    reason: str
    fire_count: int
    next_fire_at: datetime | None
    last_fired_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, r: ReminderRow) -> Reminder:
        return cls(
            reminder_id=r.id,
            session_id=r.session_id,
            title=r.title,
            kind=r.kind,
            spec=r.spec,
            form="run" if r.is_run_form else "prompt",
            prompt=r.prompt,
            until=r.until,
            status=r.status,
            reason=r.reason,
            fire_count=r.fire_count,
            next_fire_at=r.next_fire_at,
            last_fired_at=r.last_fired_at,
            created_at=r.created_at,
        )


class ReminderList(Page):
    """One page of reminders; `nextCursor` only when another page follows."""

    reminders: list[Reminder]
    next_cursor: str | None = None


class ScheduleFired(Reply):
    schedule_id: str
    session_ids: list[str]
