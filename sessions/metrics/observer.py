"""The Prometheus families that count sessions, turns, model and tool calls, as the turn's observer."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from django.db import transaction

from sessions.metrics import families
from sessions.turn import extensions


class Counted(extensions.TurnObserver):
    @contextmanager
    def model_call(self, call: extensions.ModelCall) -> Iterator[None]:
        yield  # a call that failed is not counted: its usage is unknown
        families.model_called(call.session, call.model_id,
                              None if call.first_output is None else call.first_output - call.started, call.usage)

    def tool_calls_ended(self, session, rows: list, started: float, durations: dict[int, float]) -> None:
        for row in rows:
            families.tool_call_ended(session, row)

    def session_started(self, session) -> None:
        families.session_started(session)  # never raises

    def turn_settled(self, session, turn, status, usage, timings, events) -> None:
        transaction.on_commit(lambda: families.turn_ended(session, status, timings))  # never raises


def register() -> None:
    """Count every turn's model calls, tokens and tool calls (sessions.apps)."""
    extensions.add_observer(Counted())
