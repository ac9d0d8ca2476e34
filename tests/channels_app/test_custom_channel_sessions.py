"""Custom channels over HTTP: continuation keys, per-session state, the events map's deliveries,
approvals, background work and on_start / on_stop. Fixtures and the lab channel: test_custom_channels."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from channels_app import custom_channels
from sessions.eventlog.events import read_events
from sessions.models import Session
from tests.channels_app.test_custom_channels import (  # noqa: F401 (fixtures)
    LOCAL,
    calls,
    lab,
    gate,
    post,
    recorded,
    server_default,
    transactional,
)


# -- continuation keys and state ------------------------------------------------------------

@transactional
def test_the_same_continuation_key_reaches_the_same_session(server_default, lab, sync_turns):
    client = Client(**LOCAL)

    first = post(client, "/lab/v1/channels/lab/start", {"text": "one", "key": "pr:acme/app#12"}).json()
    second = post(client, "/lab/v1/channels/lab/start", {"text": "two", "key": "pr:acme/app#12"}).json()
    other = post(client, "/lab/v1/channels/lab/start", {"text": "three", "key": "pr:acme/app#13"}).json()
    unkeyed = post(client, "/lab/v1/channels/lab/start", {"text": "four"}).json()

    assert first["created"] is True and second["created"] is False
    assert second["sessionId"] == first["sessionId"]
    assert other["sessionId"] != first["sessionId"] and unkeyed["sessionId"] not in (first["sessionId"],
                                                                                       other["sessionId"])
    session = Session.objects.get(pk=first["sessionId"])
    assert session.channel == "lab"
    received = [e["data"] for e in read_events(session.id) if e["type"] == "message.received"]
    assert [(r["text"], r["source"], r["channelId"]) for r in received] == [("one", "channel", "lab"),
                                                                            ("two", "channel", "lab")]
    assert "pr:acme/app#12" not in session.channel_key_hash  # stored hashed


@transactional
def test_send_writes_workspace_files_into_the_sessions_workspace(server_default, lab, sync_turns):
    from sessions.workspaces.store import list_files

    sid = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "with a file"}).json()["sessionId"]

    assert "inbox/note.txt" in [f["path"] for f in list_files(sid)]
    received = next(e["data"] for e in read_events(sid) if e["type"] == "message.received")
    assert received["workspaceFiles"][0]["path"] == "inbox/note.txt"


@transactional
def test_continuation_helpers_report_the_keys_session(server_default, lab, sync_turns):
    client = Client(**LOCAL)
    before = client.get("/lab/v1/channels/lab/continuation/C123:1712345.678").json()
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hi", "key": "C123:1712345.678"}).json()
    after = client.get("/lab/v1/channels/lab/continuation/C123:1712345.678").json()

    assert before == {"has": False, "busy": False, "sessionId": None}
    assert after == {"has": True, "busy": False, "sessionId": started["sessionId"]}


@transactional
def test_routes_and_event_handlers_change_the_sessions_state(server_default, lab, sync_turns, calls):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hello there", "key": "k1"}).json()

    touched = client.patch(f"/lab/v1/channels/lab/state/{started['sessionId']}", "{}",
                           content_type="application/json").json()

    # The turn ran at commit (sync mode); its reply was handed to the events map afterwards.
    assert touched == {"from": "route", "replies": ["You said: hello there"], "touched": True}
    deliveries = [c for c in recorded(calls) if "event" in c]
    assert deliveries == [{"event": "message.completed", "session": started["sessionId"],
                           "index": next(e["index"] for e in read_events(started["sessionId"])
                                         if e["type"] == "message.completed")}]
    session = Session.objects.get(pk=started["sessionId"])
    assert session.status == "waiting"  # the failing "*" handler never touched the turn
    assert session.channel_cursor == session.next_event_index


@transactional
def test_events_are_delivered_once_and_only_after_commit(server_default, lab, sync_turns, calls):
    from sessions.custom_channels import deliver_channel_events

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "once", "key": "k2"}).json()

    assert deliver_channel_events(started["sessionId"]) == 0  # everything was handed over already
    assert len([c for c in recorded(calls) if "event" in c]) == 1


@transactional
def test_a_delivery_whose_worker_died_is_taken_up_by_the_recovery_sweep(server_default, lab, sync_turns, calls):
    from datetime import timedelta

    from django.utils import timezone

    from sessions.turn.recovery import sweep

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "again", "key": "k4"}).json()
    sid = started["sessionId"]
    completed = next(e["index"] for e in read_events(sid) if e["type"] == "message.completed")
    calls.unlink()
    # A worker died while handing over the reply: the cursor is still on it, its lease lapsed.
    Session.objects.filter(pk=sid).update(channel_cursor=completed,
                                          channel_lease_until=timezone.now() - timedelta(seconds=1))

    sweep()

    assert recorded(calls) == [{"event": "message.completed", "session": sid, "index": completed}]
    session = Session.objects.get(pk=sid)
    assert (session.channel_cursor, session.channel_lease_until) == (session.next_event_index, None)


@transactional
def test_a_delivery_never_enqueued_is_made_good_by_the_rescan(server_default, lab, gate, sync_turns, calls):
    from sessions.custom_channels import rescan_undelivered

    started = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "lost", "key": "k9"}).json()
    sid = started["sessionId"]
    completed = next(e["index"] for e in read_events(sid) if e["type"] == "message.completed")
    calls.unlink()
    # The process died between the commit and the enqueue: nothing holds the session, its cursor lags.
    Session.objects.filter(pk=sid).update(channel_cursor=completed)
    # A session of a channel whose events map wants none of its events only has its cursor moved.
    quiet_sid = post(Client(**LOCAL), "/gate/v1/channels/everyone/start").json()["sessionId"]
    assert Session.objects.get(pk=quiet_sid).channel_cursor == 0

    assert rescan_undelivered() == 1

    assert recorded(calls) == [{"event": "message.completed", "session": sid, "index": completed}]
    for row in Session.objects.filter(pk__in=[sid, quiet_sid]):
        assert row.channel_cursor == row.next_event_index
    assert rescan_undelivered() == 0


@transactional
def test_a_delivery_held_by_another_worker_is_left_to_it(server_default, lab, sync_turns, calls):
    from datetime import timedelta

    from django.utils import timezone

    from sessions.custom_channels import deliver_channel_events

    sid = post(Client(**LOCAL), "/lab/v1/channels/lab/start", {"text": "held", "key": "k5"}).json()["sessionId"]
    Session.objects.filter(pk=sid).update(channel_cursor=0, channel_lease_until=timezone.now() + timedelta(seconds=60))

    assert deliver_channel_events(sid) == 0
    assert Session.objects.get(pk=sid).channel_cursor == 0


@transactional
def test_emit_assistant_message_appends_a_reply_without_a_turn(server_default, lab, sync_turns, calls):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "first", "key": "k3"}).json()

    emitted = post(client, f"/lab/v1/channels/lab/emit/{started['sessionId']}").json()

    events = read_events(started["sessionId"])
    assert events[emitted["index"]]["data"] == {"text": "done by the host", "source": "channel"}
    session = Session.objects.get(pk=started["sessionId"])
    assert session.conversation[-1] == {"role": "assistant", "content": "done by the host"}
    assert session.channel_state["replies"] == ["You said: first", "done by the host"]


@transactional
def test_interrupt_continuation_stops_the_keys_turn_in_flight(server_default, lab):
    client = Client(**LOCAL)
    post(client, "/lab/v1/channels/lab/start", {"text": "long job", "key": "job-7"})  # no worker: it stays queued

    busy = client.get("/lab/v1/channels/lab/continuation/job-7").json()
    interrupted = post(client, "/lab/v1/channels/lab/interrupt/job-7").json()
    unknown = post(client, "/lab/v1/channels/lab/interrupt/job-8").json()

    assert busy["busy"] is True
    assert interrupted == {"interrupted": True} and unknown == {"interrupted": False}
    assert Session.objects.get(pk=busy["sessionId"]).turns.get().interrupt_requested


@transactional
def test_resolve_approval_unblocks_a_parked_call_without_the_approvals_route(server_default, lab, sync_turns):
    client = Client(**LOCAL)
    started = post(client, "/lab/v1/channels/lab/start", {"text": "hi", "key": "k9"}).json()
    parked = post(client, f"/lab/v1/channels/lab/gated/{started['sessionId']}").json()

    decided = post(client, f"/lab/v1/channels/lab/decide/{started['sessionId']}/{parked['callId']}").json()

    assert parked["status"] == "awaiting_approval"
    assert decided["callId"] == parked["callId"]
    resolved = [e["data"] for e in read_events(started["sessionId"]) if e["type"] == "action.approval_resolved"]
    assert resolved == [{"callId": parked["callId"], "toolName": "refund", "decision": "approve", "reason": "ok by chat",
                         "decidedBy": {"authenticator": "local", "principalId": "local", "principalType": "user",
                                       "attributes": {}}}]
    results = [e["data"] for e in read_events(started["sessionId"]) if e["type"] == "action.result"]
    assert results[-1]["output"] == {"refunded": "A1"}


@transactional
def test_wait_until_runs_the_work_as_a_task_after_the_response(server_default, lab, sync_turns, calls):
    response = post(Client(**LOCAL), "/lab/v1/channels/lab/defer")

    assert response.json() == {"deferred": True}
    assert {"later": "hello", "channel": "lab"} in recorded(calls)


def test_wait_until_refuses_what_a_worker_could_not_find(lab):
    from sessions.custom_channels import ChannelContext, ChannelError

    with pytest.raises(ChannelError, match="module-level function"):
        ChannelContext(agent=lab, channel_id="lab").wait_until(lambda ctx: None)


def test_on_start_runs_once_when_the_channel_mounts_and_on_stop_at_exit(server_default, lab, calls):
    client = Client(**LOCAL)
    client.get("/lab/v1/channels/lab/items?limit=1")
    client.get("/lab/v1/channels/lab/items?limit=2")
    custom_channels.unmount_all()

    assert [c for c in recorded(calls) if "on_start" in c or "on_stop" in c] == [{"on_start": "lab"},
                                                                                 {"on_stop": True}]
