"""One log line per settled turn (logger `agentsite.turns`), as a turn's observer.

Written by the process that settled the turn, once the settle committed (a
settle rolled back, or lost to the recovery sweep, writes none), so each
turn has exactly one. Under AGENTSITE_LOG_FORMAT=json it is on at INFO
(agentsite.settings) and carries ids, outcome, duration, tokens and cost:
never the turn's message, a tool's input or output, nor its error text,
which may quote any of them.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from django.db import transaction
from django.utils import timezone

from sessions.metrics.families import agent_of
from sessions.models import EventType
from sessions.plumbing.logcontext import FIELDS
from sessions.turn import extensions
from sessions.turn.usage import USAGE_KEYS

log = logging.getLogger("agentsite.turns")

ENDINGS = (EventType.TURN_COMPLETED, EventType.TURN_FAILED)


def fields_of(session, turn, status: str, usage: dict[str, Any] | None, timings: dict[str, Any] | None,
              events: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The turn line's fields. `code`: the one its `turn.failed` says (null without one: a handoff or a
    direct call ends without); `durationMs`: creation to settle, as the turns' duration metric has it."""
    ending = next((data for kind, data in reversed(events) if kind in ENDINGS), {})
    total = (timings or {}).get("totalMs")
    if total is None:
        total = round((timezone.now() - turn.created_at).total_seconds() * 1000, 1)
    return {
        "sessionId": session.pk,
        "turnId": turn.pk,
        "agent": agent_of(session),
        "model": session.bound_model,
        "status": status,
        "code": ending.get("code"),
        "durationMs": total,
        "tokens": {key: usage.get(key) for key in USAGE_KEYS} if usage else None,
        "costUsd": usage.get("costUsd") if usage else None,
        **({"traceId": turn.trace_id} if turn.trace_id else {}),
    }


class Logged(extensions.TurnObserver):
    def turn_settled(self, session, turn, status, usage, timings, events) -> None:
        if not log.isEnabledFor(logging.INFO):
            return  # text logs at the default level: nothing to read or write
        fields = fields_of(session, turn, status, usage, timings, events)  # read now: the objects move on
        transaction.on_commit(lambda: log.info("turn %s of %s %s in %s ms", turn.pk, session.pk, status,
                                               fields["durationMs"], extra={FIELDS: fields}))


def register() -> None:
    """A line for each settled turn (sessions.apps)."""
    extensions.add_observer(Logged())
