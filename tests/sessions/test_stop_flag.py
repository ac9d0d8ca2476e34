"""A streaming turn learns that it was asked to stop from its own event appends.

Every batch of deltas a turn writes reads the turn's stop flag in the same
statement (sessions.sql.events), so the loop's `InterruptWatch` needs no poll
of its own while deltas flow. Rows are set up directly; the appends and
reads are the real ones, on the test database.
"""
from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions.models import EventType, Session, Turn
from sessions.turn.runner import Emitter, InterruptWatch

transactional = pytest.mark.django_db(transaction=True)


def running_turn(client) -> Turn:
    created = client.post("/support/v1/session", json.dumps({"message": "hello"}), content_type="application/json")
    assert created.status_code == 201, created.content
    session = Session.objects.get(pk=created.json()["sessionId"])
    turn = Turn.objects.create(session=session, status=Turn.Status.RUNNING, message="stream a long reply",
                               claimed_by="here:1", started_at=timezone.now())
    Session.objects.filter(pk=session.pk).update(active_turn=turn, status=Session.Status.RUNNING)
    return Turn.objects.get(pk=turn.pk)  # as the worker read it after its claim: not asked to stop


def polls(queries) -> list[str]:
    return [q["sql"] for q in queries if "NOT interrupt_requested" in q["sql"]]


@transactional
def test_a_stop_asked_mid_stream_is_seen_at_the_next_append_without_a_poll(alice, support_agent, sync_turns):
    turn = running_turn(alice)
    watch = InterruptWatch(turn, fresh=True)
    emitter = Emitter(turn.session_id, turn.pk, 0.0, stop_flag=watch.observe)  # every delta written at once

    with CaptureQueriesContext(connection) as before_stop:
        emitter.emit(EventType.MESSAGE_APPENDED, {"delta": "one "})
        assert not watch.should_stop()
    Turn.objects.filter(pk=turn.pk).update(interrupt_requested=True)  # POST …/stop, from another process
    with CaptureQueriesContext(connection) as after_stop:
        emitter.emit(EventType.MESSAGE_APPENDED, {"delta": "two "})
        assert watch.should_stop()

    assert polls(before_stop.captured_queries) == polls(after_stop.captured_queries) == []
    deltas = [e.data["delta"] for e in turn.session.events.filter(type=EventType.MESSAGE_APPENDED, turn_id=turn.pk)]
    assert deltas == ["one ", "two "], "both appends were stored"


@transactional
def test_without_appends_the_watch_still_polls_the_flag(alice, support_agent, sync_turns):
    turn = running_turn(alice)
    watch = InterruptWatch(turn)  # not fresh: the first look reads the row
    Turn.objects.filter(pk=turn.pk).update(interrupt_requested=True)
    with CaptureQueriesContext(connection) as looked:
        assert watch.should_stop()
    assert len(polls(looked.captured_queries)) == 1
