"""Operators follow any session's stream and websocket and decide its parked calls; a
member gets 403 (4403 on the socket), anonymous 401 (4401). Deciding on someone else's
session is recorded once as `operator.acted` with the call id; one's own, never."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from sessions.turn.approvals import pending_approvals
from sessions.models import Session
from tests.channels_app.roles_support import (
    HOST, PEER, SCHEDULE, People, acted, anonymous, people, start_as, start_for,  # noqa: F401
)
from tests.channels_app.test_websocket import close_code, count, receive_until, socket, ws_path
from tests.channels_app.views.http import stream
from tests.sessions.test_approvals import PAY_5, gated  # noqa: F401

transactional = pytest.mark.django_db(transaction=True)


@transactional
def test_operators_follow_the_stream_of_any_session_and_members_do_not(people):
    for session_id in (start_as(people.mia.client), start_for(SCHEDULE)):
        path = f"/support/v1/session/{session_id}/stream"
        for operator in people.operators:
            status, kind, body = stream(path, until="session.started", token=operator.secret)
            assert (status, kind) == (200, "application/x-ndjson") and b"session.started" in body
        status, kind, _ = stream(path, until="session.started", token=people.sam.secret,
                                 headers={"Accept": "text/event-stream"})
        assert (status, kind) == (200, "text/event-stream")
        assert stream(path, until="x", token=people.max.secret)[0] == 403
        assert stream(path, until="x", token="ast_unknown")[0] == 401
        assert acted(session_id) == []


@transactional
def test_an_operator_follows_and_stops_a_schedules_session_over_the_websocket(people):
    session_id = start_for(SCHEDULE)

    async def scenario():
        follower = socket(ws_path(session_id), token=people.olga.secret, host=HOST, origin=None, peer=PEER)
        assert (await follower.connect(timeout=15))[0]
        frames = await receive_until(follower, count(1))
        await follower.send_json_to({"type": "message", "message": "hi"})
        refused = await receive_until(follower, lambda f: f and f[-1].get("type") == "error")
        await follower.send_json_to({"type": "stop"})
        ack = await receive_until(follower, lambda f: f and f[-1].get("type") == "ack")
        await follower.disconnect()
        member = await close_code(socket(ws_path(session_id), token=people.max.secret, host=HOST, origin=None,
                                         peer=PEER))
        nobody = await close_code(socket(ws_path(session_id), host=HOST, origin=None, peer=PEER))
        return frames, refused[-1], ack[-1], member, nobody

    frames, refused, ack, member, nobody = async_to_sync(scenario)()
    assert frames[0]["type"] == "session.started"
    assert refused["error"]["code"] == "forbidden"
    assert ack == {"type": "ack", "stopping": True}
    assert (member, nobody) == (4403, 4401)
    assert acted(session_id) == [{"operator": "olga", "action": "stop"}]


def parked_call(session_id: str) -> str:
    [row] = pending_approvals(Session.objects.get(pk=session_id))
    return row.call_id


def decide(client, session_id: str, call_id: str, decision: str):
    return client.post(f"/gated/v1/session/{session_id}/approvals/{call_id}", {"decision": decision},
                       content_type="application/json")


@transactional
@pytest.mark.parametrize("who,decision", [("olga", "approve"), ("sam", "deny")])
def test_an_operator_decides_a_members_parked_call_and_it_is_recorded_once(people, gated, sync_turns, who,
                                                                           decision):
    session_id = start_as(people.mia.client, "gated", PAY_5)
    call_id = parked_call(session_id)
    assert decide(people.max.client, session_id, call_id, decision).status_code == 403
    assert decide(anonymous(), session_id, call_id, decision).status_code == 401
    operator = getattr(people, who)
    assert operator.client.get(f"/gated/v1/session/{session_id}/approvals").json()["approvals"][0]["callId"] == call_id

    assert decide(operator.client, session_id, call_id, decision).status_code == 200
    assert acted(session_id) == [{"operator": who, "action": decision, "callId": call_id}]
    assert decide(operator.client, session_id, call_id, decision).status_code == 409  # decided: no second record
    assert len(acted(session_id)) == 1


@transactional
def test_an_operator_decides_a_schedules_parked_call(people, gated, sync_turns):
    session_id = start_for(SCHEDULE, "gated", PAY_5)
    call_id = parked_call(session_id)
    assert decide(people.sam.client, session_id, call_id, "approve").status_code == 200
    assert acted(session_id) == [{"operator": "sam", "action": "approve", "callId": call_id}]


@transactional
def test_deciding_on_ones_own_session_records_nothing(people, gated, sync_turns):
    olgas, mias = start_as(people.olga.client, "gated", PAY_5), start_as(people.mia.client, "gated", PAY_5)
    assert decide(people.olga.client, olgas, parked_call(olgas), "approve").status_code == 200
    assert decide(people.mia.client, mias, parked_call(mias), "deny").status_code == 200
    assert acted(olgas) == [] and acted(mias) == []
