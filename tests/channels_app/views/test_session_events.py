"""Reading a session's events: the NDJSON dump and the live stream (SSE and NDJSON).

Bad input is in tests/channels_app/test_bad_*.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

import json
import threading
import time

from django.db import connection

from sessions.eventlog.events import append_event
from sessions.models import Event
from tests.channels_app.views.http import created, parse_ndjson, stream, transactional


# -- events and stream ------------------------------------------------------------

@transactional
def test_events_are_an_ndjson_dump_from_start_index(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]
    total = Event.objects.filter(session_id=session_id).count()

    response = local.get(f"/support/v1/session/{session_id}/events")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    events = parse_ndjson(response.content)
    assert [e["index"] for e in events] == list(range(total))
    first = events[0]
    assert set(first) == {"type", "index", "sessionId", "turnId", "at", "data"}
    assert first["type"] == "session.started"
    assert first["sessionId"] == session_id
    assert first["at"].endswith("Z")
    assert events[2]["turnId"].startswith("turn_")

    tail = parse_ndjson(local.get(f"/support/v1/session/{session_id}/events?startIndex=3").content)
    assert [e["index"] for e in tail] == list(range(3, total))
    assert local.get(f"/support/v1/session/{session_id}/events?startIndex={total}").content == b""


@transactional
def test_stream_replays_from_start_index_then_follows_until_the_client_leaves(alice, support_agent, sync_turns):
    session_id = created(alice, "hello")["sessionId"]

    status, content_type, raw = stream(f"/support/v1/session/{session_id}/stream?startIndex=2", until="session.waiting")

    assert status == 200
    assert content_type == "application/x-ndjson"
    events = parse_ndjson(raw)
    assert events[0]["index"] == 2
    assert [e["index"] for e in events] == list(range(2, 2 + len(events)))
    assert events[-1]["type"] == "session.waiting"
    assert [e["type"] for e in events] == [e["type"] for e in parse_ndjson(
        alice.get(f"/support/v1/session/{session_id}/events?startIndex=2").content)]


@transactional
def test_stream_of_an_ended_task_session_closes_by_itself(alice, support_agent, sync_turns):
    session_id = created(alice, "do it", mode="task")["sessionId"]

    # `until` names nothing the stream sends: only the server ending it stops the read.
    status, _, raw = stream(f"/support/v1/session/{session_id}/stream", until="never sent", timeout=5)

    assert status == 200
    events = parse_ndjson(raw)
    assert events[-1]["type"] == "session.completed"
    assert [e["index"] for e in events] == list(range(len(events)))


@transactional
def test_stream_of_an_ended_task_session_closes_when_resumed_past_its_end(alice, support_agent, sync_turns):
    session_id = created(alice, "do it", mode="task")["sessionId"]
    total = Event.objects.filter(session_id=session_id).count()

    status, _, raw = stream(f"/support/v1/session/{session_id}/stream?startIndex={total}", until="never sent", timeout=5)

    assert status == 200
    assert raw == b""


@transactional
def test_a_stream_resumed_on_an_idle_session_still_sees_events_a_worker_writes(alice, support_agent, sync_turns, settings):
    # A worker in another process cannot wake this reader, so only polling
    # finds its events; a reader resumed at the end must poll, not sleep long.
    settings.AGENTSITE_STREAM_POLL_RUNNING = 60
    settings.AGENTSITE_STREAM_POLL_IDLE = 0.02
    session_id = created(alice, "hello")["sessionId"]
    total = Event.objects.filter(session_id=session_id).count()

    def worker_writes() -> None:
        time.sleep(0.3)
        append_event(session_id, "message.received", {"source": "reminder", "text": "wake up"})
        connection.close()

    writer = threading.Thread(target=worker_writes)
    writer.start()
    try:
        status, _, raw = stream(f"/support/v1/session/{session_id}/stream?startIndex={total}",
                                until="message.received", timeout=5)
    finally:
        writer.join()

    assert status == 200
    [event] = parse_ndjson(raw)
    assert (event["index"], event["data"]["text"]) == (total, "wake up")


@transactional
def test_stream_speaks_sse_with_event_ids_and_honours_last_event_id(alice, support_agent, sync_turns):
    session_id = created(alice, "hello")["sessionId"]
    url = f"/support/v1/session/{session_id}/stream"

    status, content_type, raw = stream(url, until="event: session.waiting", headers={"Accept": "text/event-stream"})
    assert status == 200
    assert content_type == "text/event-stream"
    frames = [f for f in raw.decode().split("\n\n") if f.strip()]
    assert frames[0] == "retry: 1000"
    first = dict(line.split(": ", 1) for line in frames[1].splitlines())
    assert first["id"] == "0"
    assert first["event"] == "session.started"
    assert json.loads(first["data"])["index"] == 0

    _, _, resumed = stream(url, until="event: session.waiting",
                           headers={"Accept": "text/event-stream", "Last-Event-ID": "3"})
    ids = [line[4:] for line in resumed.decode().splitlines() if line.startswith("id: ")]
    assert ids[0] == "4"
    assert ids == [str(i) for i in range(4, 4 + len(ids))]
