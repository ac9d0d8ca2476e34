"""Readers get each event serialized from the stored text of its payload
(sessions.eventlog.events.read_lines); what they parse must be exactly the envelope."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from sessions.eventlog.events import append_events, read_events, read_lines
from sessions.models import Event, EventType, Session

TRICKY = [
    {"text": "héllo — 日本語 \U0001F600", "quote": 'a "b" \\ c', "newline": "x\ny\tz"},
    {"nested": {"list": [1, 2.5, None, True, {"deep": []}]}, "empty": {}},
    {"delta": ""},
    {"big": 12345678901234567, "neg": -1, "float": 1e-7},
]


@pytest.mark.django_db(transaction=True)
def test_lines_parse_to_the_envelopes(support_agent):
    session = Session.objects.create(agent=support_agent, deployment=support_agent.active_deployment,
                                     principal_id="alice", authenticator="bearer")
    append_events(session.id, [(EventType.MESSAGE_APPENDED, data) for data in TRICKY], turn_id="turn_1")
    append_events(session.id, [(EventType.SESSION_WAITING, {})])  # no turn: turnId is null
    # Instants with no fraction and with trailing zeros in it are written as iso_z writes them.
    Event.objects.filter(session=session, index=0).update(at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    Event.objects.filter(session=session, index=1).update(at=datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=timezone.utc))

    lines = read_lines(session.id)
    envelopes = read_events(session.id)
    assert [json.loads(line.json) for line in lines] == envelopes
    assert [(line.index, line.type) for line in lines] == [(e["index"], e["type"]) for e in envelopes]
    assert envelopes[-1]["turnId"] is None and envelopes[0]["turnId"] == "turn_1"
    assert [e["at"] for e in envelopes[:2]] == ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05.120000Z"]
    assert [e["data"] for e in envelopes[:4]] == TRICKY

    later = read_lines(session.id, start_index=2, limit=2)
    assert [line.index for line in later] == [2, 3]
