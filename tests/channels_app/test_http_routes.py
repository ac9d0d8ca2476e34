"""The built-in HTTP channel, route by route: what a caller sees on success
and on the refusals that belong to the conversation itself (409s). Bad input
is in test_bad_input.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.engine import run_turn
from sessions.events import append_event
from sessions.models import Event, Session, Turn
from tests.conftest import ALICE_TOKEN

transactional = pytest.mark.django_db(transaction=True)

LOOKUP_A100 = '/call lookup_order {"order_id": "A100"}'


def post_json(client, path: str, body) -> object:
    return client.post(path, json.dumps(body), content_type="application/json")


def create(client, message: str = "hello", **fields):
    return post_json(client, "/support/v1/session", {"message": message, **fields})


def created(client, message: str = "hello", **fields) -> dict:
    response = create(client, message, **fields)
    assert response.status_code == 201, response.content
    return response.json()


def event_types(session_id: str) -> list[str]:
    """The session's event types in order, with runs of text deltas folded into one."""
    types: list[str] = []
    for type_ in Event.objects.filter(session_id=session_id).order_by("index").values_list("type", flat=True):
        if type_.endswith(".appended") and types and types[-1] == type_:
            continue
        types.append(type_)
    return types


def events_of(session_id: str, type_: str) -> list[dict]:
    return list(Event.objects.filter(session_id=session_id, type=type_).order_by("index").values_list("data", flat=True))


def parse_ndjson(content: bytes) -> list[dict]:
    return [json.loads(line) for line in content.decode().splitlines() if line.strip()]


def write_agent(root: Path, instructions: str = "You help.") -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text(instructions)
    return root


def stream(path: str, *, until: str, token: str = ALICE_TOKEN, headers: dict | None = None, timeout: float = 10):
    """GET a streaming route in-process and read it until `until` appears, then leave.

    Returns (status, content type, raw bytes read).
    """

    async def read() -> tuple[int, str, bytes]:
        response = await AsyncClient().get(path, headers={"Authorization": f"Bearer {token}", **(headers or {})})
        if not response.streaming:
            return response.status_code, response["Content-Type"], response.content
        chunks = response.streaming_content
        received = b""
        try:
            async with asyncio.timeout(timeout):
                async for chunk in chunks:
                    received += chunk
                    if until.encode() in received:
                        break
        finally:
            await chunks.aclose()
        return response.status_code, response["Content-Type"], received

    return async_to_sync(read)()


# -- POST /<slug>/v1/session -------------------------------------------------

@transactional
def test_creating_a_session_answers_201_with_its_token_and_urls(local, support_agent, sync_turns):
    response = create(local, "hello")

    assert response.status_code == 201
    body = response.json()
    session_id = body["sessionId"]
    assert session_id.startswith("ses_")
    assert body["continuationToken"]
    assert body["mode"] == "chat"
    assert body["status"] == "waiting"
    assert body["streamUrl"] == f"http://127.0.0.1:8000/support/v1/session/{session_id}/stream"
    assert body["eventsUrl"] == f"http://127.0.0.1:8000/support/v1/session/{session_id}/events"
    assert body["playgroundUrl"] == f"http://127.0.0.1:8000/playground/support?sessionId={session_id}"
    assert events_of(session_id, "message.completed") == [{"text": "You said: hello"}]


@transactional
def test_a_chat_turn_writes_the_documented_events_with_contiguous_indexes(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    assert event_types(session_id) == [
        "session.started", "agent.bound", "message.received", "turn.started", "step.started",
        "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    indexes = list(Event.objects.filter(session_id=session_id).order_by("index").values_list("index", flat=True))
    assert indexes == list(range(len(indexes)))


@transactional
def test_the_first_line_of_the_message_becomes_the_default_title(local, support_agent, sync_turns):
    session_id = created(local, "Where is my teapot?\nIt was order A100.")["sessionId"]
    assert Session.objects.get(pk=session_id).title == "Where is my teapot?"

    titled = created(local, "hello", title="Teapot")["sessionId"]
    assert Session.objects.get(pk=titled).title == "Teapot"


@transactional
def test_dry_run_and_as_of_are_kept_in_the_session_options(local, support_agent, sync_turns):
    session_id = created(local, "hello", dryRun=True, asOf="2026-01-31T12:00:00Z")["sessionId"]

    detail = local.get(f"/support/v1/session/{session_id}").json()
    assert detail["options"] == {"dryRun": True, "asOf": "2026-01-31T12:00:00+00:00"}
    started = events_of(session_id, "session.started")[0]
    assert started["options"] == {"dryRun": True, "asOf": "2026-01-31T12:00:00+00:00"}


@pytest.mark.django_db
def test_an_agent_without_a_deployment_refuses_new_sessions_with_409(local):
    from agents.models import Agent

    Agent.objects.create(slug="draft")
    response = post_json(local, "/draft/v1/session", {"message": "hello"})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "agent_not_deployed"


# -- follow-ups and continuation tokens ---------------------------------------

@transactional
def test_a_follow_up_answers_202_and_runs_a_second_turn(local, support_agent, sync_turns):
    first = created(local, "hello")
    session_id = first["sessionId"]

    response = post_json(local, f"/support/v1/session/{session_id}/message",
                         {"message": "again", "continuationToken": first["continuationToken"]})

    assert response.status_code == 202
    body = response.json()
    assert body["sessionId"] == session_id
    assert body["admission"] == "preempt"
    assert body["turnId"].startswith("turn_")
    assert [e["text"] for e in events_of(session_id, "message.completed")] == ["You said: hello", "You said: again"]
    assert event_types(session_id).count("session.waiting") == 2


@transactional
def test_the_model_sees_the_earlier_turns_of_the_conversation(local, support_agent, sync_turns):
    first = created(local, "hello")
    post_json(local, f"/support/v1/session/{first['sessionId']}/message", {"message": "again"})

    conversation = Session.objects.get(pk=first["sessionId"]).conversation
    assert [(m["role"], m["content"]) for m in conversation] == [
        ("user", "hello"), ("assistant", "You said: hello"), ("user", "again"), ("assistant", "You said: again"),
    ]


@transactional
def test_continuation_token_rotates_on_each_follow_up_and_the_old_one_gets_409(local, support_agent, sync_turns):
    first = created(local, "hello")
    url = f"/support/v1/session/{first['sessionId']}/message"
    token1 = first["continuationToken"]

    token2 = post_json(local, url, {"message": "two", "continuationToken": token1}).json()["continuationToken"]
    assert token2 != token1

    stale = post_json(local, url, {"message": "three", "continuationToken": token1})
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_continuation_token"
    assert stale.json()["error"]["message"]

    token3 = post_json(local, url, {"message": "three", "continuationToken": token2})
    assert token3.status_code == 202
    assert token3.json()["continuationToken"] not in (token1, token2)
    # The refused follow-up started no turn.
    assert Turn.objects.filter(session_id=first["sessionId"]).count() == 3


@transactional
def test_a_stale_token_on_post_session_gets_409(local, support_agent, sync_turns):
    first = created(local, "hello")
    token1 = first["continuationToken"]
    followed = create(local, "two", continuationToken=token1)
    assert followed.status_code == 202
    assert followed.json()["sessionId"] == first["sessionId"]

    stale = create(local, "three", continuationToken=token1)

    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_continuation_token"


@transactional
def test_post_session_with_a_continuation_token_continues_that_session(local, support_agent, sync_turns):
    first = created(local, "hello")

    response = create(local, "again", continuationToken=first["continuationToken"])

    assert response.status_code == 202
    assert response.json()["sessionId"] == first["sessionId"]
    assert Session.objects.count() == 1
    assert [e["text"] for e in events_of(first["sessionId"], "message.completed")][-1] == "You said: again"


@pytest.mark.django_db
def test_a_continuation_token_of_no_session_gets_404(local, support_agent):
    for token in ("ct_ses_000000000000000000000000.abc", "not-a-token"):
        response = create(local, "hello", continuationToken=token)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "session_not_found"


@transactional
def test_a_token_of_another_session_is_stale_on_this_one(local, support_agent, sync_turns):
    one = created(local, "one")
    two = created(local, "two")

    response = post_json(local, f"/support/v1/session/{one['sessionId']}/message",
                         {"message": "hi", "continuationToken": two["continuationToken"]})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "stale_continuation_token"


@transactional
def test_the_continuation_token_is_stored_only_as_its_sha256(local, support_agent, sync_turns):
    first = created(local, "hello")
    reply = post_json(local, f"/support/v1/session/{first['sessionId']}/message",
                      {"message": "again", "continuationToken": first["continuationToken"]}).json()
    token = reply["continuationToken"]

    session = Session.objects.get(pk=first["sessionId"])
    assert session.continuation_token_hash == hashlib.sha256(token.encode()).hexdigest()
    stored = json.dumps([
        list(Session.objects.filter(pk=session.pk).values()),
        list(Turn.objects.filter(session=session).values()),
        list(Event.objects.filter(session=session).values()),
    ], default=str)
    for issued in (first["continuationToken"], token):
        assert issued not in stored
        # Not even the random part alone.
        assert issued.split(".", 1)[1] not in stored


# -- task mode -----------------------------------------------------------------

@transactional
def test_a_task_session_ends_in_session_completed_and_refuses_follow_ups(local, support_agent, sync_turns):
    first = created(local, "do it", mode="task")
    session_id = first["sessionId"]

    assert first["mode"] == "task"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.completed"]
    assert Session.objects.get(pk=session_id).status == "completed"

    follow_up = post_json(local, f"/support/v1/session/{session_id}/message",
                          {"message": "more", "continuationToken": first["continuationToken"]})
    assert follow_up.status_code == 409
    assert follow_up.json()["error"]["code"] == "task_session"

    via_token = create(local, "more", continuationToken=first["continuationToken"])
    assert via_token.status_code == 409
    assert via_token.json()["error"]["code"] == "task_session"
    assert Turn.objects.filter(session_id=session_id).count() == 1


@transactional
def test_a_task_session_whose_model_fails_ends_in_session_failed(local, support_agent, sync_turns):
    session_id = created(local, "/fail boom", mode="task")["sessionId"]

    assert event_types(session_id)[-2:] == ["turn.failed", "session.failed"]
    failed = events_of(session_id, "turn.failed")[0]
    assert failed["error"] == "boom"
    assert failed["code"] == "scripted_failure"
    assert events_of(session_id, "session.failed") == [{"error": "boom"}]
    assert local.get(f"/support/v1/session/{session_id}").json()["status"] == "failed"


@transactional
def test_a_chat_turn_whose_model_fails_leaves_the_session_usable(local, support_agent, sync_turns):
    first = created(local, "/fail boom")
    session_id = first["sessionId"]
    assert event_types(session_id)[-2:] == ["turn.failed", "session.waiting"]

    again = post_json(local, f"/support/v1/session/{session_id}/message",
                      {"message": "hello", "continuationToken": first["continuationToken"]})

    assert again.status_code == 202
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


# -- tool turns ------------------------------------------------------------------

@transactional
def test_a_tool_call_records_the_request_and_the_tool_output(local, support_agent, sync_turns):
    session_id = created(local, LOOKUP_A100)["sessionId"]

    types = event_types(session_id)
    assert types[types.index("turn.started"):] == [
        "turn.started", "step.started", "step.completed", "actions.requested", "action.result",
        "step.started", "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    [requested] = events_of(session_id, "actions.requested")
    [call] = requested["calls"]
    assert call["toolName"] == "lookup_order"
    assert call["input"] == {"order_id": "A100"}
    [result] = events_of(session_id, "action.result")
    assert result["callId"] == call["callId"]
    assert result["output"] == {"orderId": "A100", "status": "delivered", "items": ["teapot"], "total": 34.5}
    assert "error" not in result
    assert result["stubbed"] is False
    reply = events_of(session_id, "message.completed")[-1]["text"]
    assert reply.startswith("Tool results:\nlookup_order (ok):")
    assert '"status": "delivered"' in reply


@transactional
def test_invalid_tool_input_is_an_action_result_error_the_model_sees(local, support_agent, sync_turns):
    session_id = created(local, '/call lookup_order {"order_id": "not an id"}')["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert "output" not in result
    assert result["error"].startswith("invalid input: order_id:")
    reply = events_of(session_id, "message.completed")[-1]["text"]
    assert "lookup_order (error): invalid input: order_id:" in reply
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_a_tool_that_raises_is_an_action_result_error(local, support_agent, sync_turns):
    session_id = created(local, '/call lookup_order {"order_id": "Z999"}')["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert result["error"] == "LookupError: no order Z999"
    assert "lookup_order (error): LookupError: no order Z999" in events_of(session_id, "message.completed")[-1]["text"]
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_calling_a_tool_the_agent_lacks_is_an_action_result_error(local, support_agent, sync_turns):
    session_id = created(local, "/call delete_everything {}")["sessionId"]

    [result] = events_of(session_id, "action.result")
    assert result["error"] == "unknown tool 'delete_everything'; available tools: cancel_order, lookup_order, refund_order"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_parallel_tool_calls_each_get_a_result(local, support_agent, sync_turns):
    message = '/call lookup_order {"order_id": "A100"}\n/call lookup_order {"order_id": "A101"}'
    session_id = created(local, message)["sessionId"]

    [requested] = events_of(session_id, "actions.requested")
    results = events_of(session_id, "action.result")
    assert [c["input"]["order_id"] for c in requested["calls"]] == ["A100", "A101"]
    assert [r["callId"] for r in results] == [c["callId"] for c in requested["calls"]]
    assert [r["output"]["status"] for r in results] == ["delivered", "shipped"]


REFUND_A100 = '/call refund_order {"order_id": "A100", "reason": "arrived broken"}'


@transactional
def test_a_dry_run_session_stubs_write_tools_with_their_dry_run_result(local, support_agent, sync_turns):
    session_id = created(local, REFUND_A100 + "\n" + LOOKUP_A100, dryRun=True)["sessionId"]

    refund, lookup = events_of(session_id, "action.result")
    assert refund["toolName"] == "refund_order"
    assert refund["stubbed"] is True
    assert refund["output"] == {"refunded": False, "dryRun": True}
    # Read tools still run for real.
    assert lookup["stubbed"] is False
    assert lookup["output"]["status"] == "delivered"


@transactional
def test_without_dry_run_a_write_tool_runs_and_sees_the_as_of_instant(local, support_agent, sync_turns):
    session_id = created(local, REFUND_A100, asOf="2026-01-31T12:00:00Z")["sessionId"]

    [refund] = events_of(session_id, "action.result")
    assert refund["stubbed"] is False
    assert refund["output"] == {
        "orderId": "A100", "refunded": True, "reason": "arrived broken", "at": "2026-01-31T12:00:00+00:00",
    }


# -- stop -------------------------------------------------------------------------

@transactional
def test_stop_with_no_running_turn_gets_409(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    response = local.post(f"/support/v1/session/{session_id}/stop")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_running"


@transactional
def test_stop_interrupts_the_turn_which_ends_with_turn_interrupted(local, support_agent):
    # No sync_turns: the turn waits in django-q's queue, as it would for a busy worker.
    body = created(local, "hello")
    session_id = body["sessionId"]
    assert body["status"] == "running"

    response = local.post(f"/support/v1/session/{session_id}/stop")
    assert response.status_code == 202
    assert response.json() == {"sessionId": session_id, "stopping": True}

    run_turn(body["turnId"])  # what the worker does when it gets to the task

    assert event_types(session_id)[-2:] == ["turn.failed", "session.waiting"]
    assert events_of(session_id, "turn.failed")[0]["error"] == "turn interrupted"
    assert Turn.objects.get(pk=body["turnId"]).status == "interrupted"
    assert local.get(f"/support/v1/session/{session_id}").json()["status"] == "waiting"
    assert local.post(f"/support/v1/session/{session_id}/stop").status_code == 409


# -- GET /<slug>/v1/session/<id> and DELETE ---------------------------------------

@transactional
def test_session_detail_shows_status_mode_principal_usage_and_deployment(local, support_agent, sync_turns):
    session_id = created(local, "hello", title="Greeting")["sessionId"]

    response = local.get(f"/support/v1/session/{session_id}")

    assert response.status_code == 200
    detail = response.json()
    deployment = support_agent.active_deployment
    assert detail["sessionId"] == session_id
    assert detail["agent"] == "support"
    assert detail["status"] == "waiting"
    assert detail["mode"] == "chat"
    assert detail["title"] == "Greeting"
    assert detail["channel"] == "http"
    assert detail["principal"] == {"authenticator": "local", "principalId": "local", "principalType": "user"}
    assert detail["usage"]["inputTokens"] > 0
    assert detail["usage"]["outputTokens"] > 0
    assert detail["deployment"] == {"version": deployment.version, "contentHash": deployment.content_hash}
    assert "abVariants" not in detail
    assert detail["activeTurnId"] is None
    assert detail["lastEventIndex"] == Event.objects.filter(session_id=session_id).count() - 1
    assert detail["createdAt"].endswith("Z")


@transactional
def test_deleting_a_session_removes_it_with_its_events_and_turns(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    response = local.delete(f"/support/v1/session/{session_id}")

    assert response.status_code == 204
    assert not Session.objects.filter(pk=session_id).exists()
    assert not Event.objects.filter(session_id=session_id).exists()
    assert not Turn.objects.filter(session_id=session_id).exists()
    gone = local.get(f"/support/v1/session/{session_id}")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "session_not_found"
    assert local.delete(f"/support/v1/session/{session_id}").status_code == 404


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


# -- GET /<slug>/v1/sessions --------------------------------------------------------

@pytest.mark.django_db
def test_sessions_are_listed_newest_first_and_paginated_by_cursor(alice, support_agent):
    ids = [created(alice, f"message {i}")["sessionId"] for i in range(5)]
    newest_first = list(reversed(ids))

    first = alice.get("/support/v1/sessions?limit=2")
    assert first.status_code == 200
    page1 = first.json()
    assert [s["sessionId"] for s in page1["sessions"]] == newest_first[:2]
    assert page1["sessions"][0]["title"] == "message 4"

    page2 = alice.get("/support/v1/sessions", {"limit": 2, "cursor": page1["nextCursor"]}).json()
    assert [s["sessionId"] for s in page2["sessions"]] == newest_first[2:4]

    page3 = alice.get("/support/v1/sessions", {"limit": 2, "cursor": page2["nextCursor"]}).json()
    assert [s["sessionId"] for s in page3["sessions"]] == newest_first[4:]
    assert page3["nextCursor"] is None

    everything = alice.get("/support/v1/sessions").json()
    assert [s["sessionId"] for s in everything["sessions"]] == newest_first
    assert everything["nextCursor"] is None


@pytest.mark.django_db
def test_pagination_neither_skips_nor_repeats_sessions_created_in_the_same_instant(alice, support_agent):
    ids = {created(alice, f"message {i}")["sessionId"] for i in range(5)}
    Session.objects.update(created_at=timezone.now() - timedelta(minutes=1))

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = alice.get("/support/v1/sessions", params).json()
        seen += [s["sessionId"] for s in page["sessions"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break

    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))


@pytest.mark.django_db
def test_the_sessions_list_shows_only_sessions_of_that_agent(alice, support_agent, tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "other"))
    mine = created(alice, "for support")["sessionId"]
    post_json(alice, "/other/v1/session", {"message": "for other"})

    listed = alice.get("/support/v1/sessions").json()["sessions"]

    assert [s["sessionId"] for s in listed] == [mine]


# -- agents, info, health, OpenAPI ---------------------------------------------------------

@pytest.mark.django_db
def test_the_agents_list_shows_each_deployed_agent(local, support_agent):
    response = local.get("/v1/agents")

    assert response.status_code == 200
    [agent] = response.json()["agents"]
    assert agent["slug"] == "support"
    assert agent["name"] == "Shop support"
    assert agent["description"] == "Answers questions about orders and issues refunds."
    assert agent["model"] == "scripted:echo"
    assert agent["deployment"]["version"] == 1


@pytest.mark.django_db
def test_info_describes_the_agent_and_its_tools_with_json_schemas(local, support_agent):
    response = local.get("/support/v1/info")

    assert response.status_code == 200
    info = response.json()
    assert info["slug"] == "support"
    assert info["model"] == "scripted:echo"
    tools = {t["name"]: t for t in info["tools"]}
    assert set(tools) == {"cancel_order", "lookup_order", "refund_order"}
    assert tools["lookup_order"]["effect"] == "read"
    assert tools["refund_order"]["effect"] == "write"
    schema = tools["lookup_order"]["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["order_id"]
    assert schema["properties"]["order_id"]["pattern"] == r"^[A-Z]\d{3}$"
    assert info["deployment"]["version"] == 1
    assert info["deployment"]["status"] == "running"
    assert info["deployment"]["contentHash"] == support_agent.active_deployment.content_hash


@pytest.mark.django_db
def test_health_routes_answer_without_credentials(support_agent):
    from django.test import Client

    outsider = Client(HTTP_HOST="example.com", REMOTE_ADDR="203.0.113.9")

    assert outsider.get("/healthz").json() == {"status": "ok"}
    agent = outsider.get("/support/v1/health")
    assert agent.status_code == 200
    assert agent.json() == {"status": "ok", "agent": "support", "deployed": True}


@pytest.mark.django_db
def test_the_openapi_document_lists_the_session_routes(local):
    response = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for route, method in [
        ("/{slug}/v1/session", "post"),
        ("/{slug}/v1/sessions", "get"),
        ("/{slug}/v1/session/{session_id}", "get"),
        ("/{slug}/v1/session/{session_id}", "delete"),
        ("/{slug}/v1/session/{session_id}/message", "post"),
        ("/{slug}/v1/session/{session_id}/stop", "post"),
        ("/{slug}/v1/session/{session_id}/events", "get"),
        ("/{slug}/v1/session/{session_id}/stream", "get"),
        ("/{slug}/v1/info", "get"),
        ("/v1/agents", "get"),
    ]:
        assert method in paths.get(route, {}), f"{method.upper()} {route} is not in the OpenAPI document"
    create_body = paths["/{slug}/v1/session"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create_body  # the body model is documented, not left blank


@pytest.mark.django_db
def test_the_api_docs_page_answers_200(local):
    response = local.get("/api/docs/")

    assert response.status_code == 200
    assert b"swagger" in response.content.lower()
