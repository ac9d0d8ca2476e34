"""A turn in one request: POST /session and POST .../message with `Accept: application/x-ndjson`
or `text/event-stream` answer 200 with the new turn's events, from its first to its end, and
the headers X-Session-Id and X-Continuation-Token. Refusals stay the JSON errors they were.

Who may do what is asked as the owner, another member, an operator and an anonymous caller.
A client leaving mid-turn is in tests/sessions/test_live_turn_in_one_request.py (real processes).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from tests.channels_app.roles_support import People, anonymous, people, start_as  # noqa: F401
from tests.channels_app.views.http import created, parse_ndjson, post_json, transactional
from tests.sessions.test_approvals import PAY_5, gated  # noqa: F401

NDJSON, SSE = "application/x-ndjson", "text/event-stream"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def events(self) -> list[dict]:
        """The events of an NDJSON or SSE body (each SSE event's `data`, checked against its id and type)."""
        if self.headers["Content-Type"].startswith(SSE):
            out = []
            for block in self.body.decode().split("\n\n"):
                fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
                if "data" in fields:
                    event = json.loads(fields["data"])
                    assert (fields["id"], fields["event"]) == (str(event["index"]), event["type"])
                    out.append(event)
            return out
        return parse_ndjson(self.body)

    def json(self) -> dict:
        return json.loads(self.body)


def post(path: str, body: dict, *, accept: str = NDJSON, token: str | None = None, timeout: float = 20) -> Answer:
    """POST in-process and read the whole answer: a streamed one must end by itself (else the timeout fails)."""
    headers = {"Accept": accept, **({"Authorization": f"Bearer {token}"} if token else {})}

    async def read() -> Answer:
        response = await AsyncClient().post(path, json.dumps(body), content_type="application/json", headers=headers)
        if not response.streaming:
            return Answer(response.status_code, dict(response.headers), response.content)
        received = b""
        async with asyncio.timeout(timeout):
            async for chunk in response.streaming_content:
                received += chunk
        return Answer(response.status_code, dict(response.headers), received)

    return async_to_sync(read)()


def types(events: list[dict]) -> list[str]:
    out: list[str] = []
    for event in events:
        if not (out and event["type"] == out[-1] and event["type"].endswith(".appended")):
            out.append(event["type"])
    return out


FIRST_TURN = ["session.started", "agent.bound", "message.received", "turn.started", "step.started",
              "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting"]
NEXT_TURN = FIRST_TURN[2:]


# -- create ----------------------------------------------------------------------------------

@transactional
@pytest.mark.parametrize("accept", [NDJSON, SSE])
def test_a_create_streams_the_first_turn_from_index_0_to_its_end(people, sync_turns, accept):
    answer = post("/support/v1/session", {"message": "hello"}, accept=accept, token=people.mia.secret)

    assert answer.status == 200
    assert answer.headers["Content-Type"] == accept
    session_id = answer.headers["X-Session-Id"]
    events = answer.events
    assert types(events) == FIRST_TURN
    assert [e["index"] for e in events] == list(range(len(events)))
    assert events == read_events(session_id)  # the whole log, as the events route gives it
    session = Session.objects.get(pk=session_id)
    assert session.principal_id == "mia" and session.token_matches(answer.headers["X-Continuation-Token"])
    assert {e["turnId"] for e in events[2:]} == {Turn.objects.get(session=session).id}


@transactional
def test_every_member_and_operator_creates_their_own_streamed_session_and_anonymous_gets_401(people, sync_turns):
    for person in (people.mia, people.max, people.olga, people.sam):
        answer = post("/support/v1/session", {"message": "hi"}, token=person.secret)
        assert answer.status == 200, (person.user.username, answer.body)
        assert types(answer.events)[-1] == "session.waiting"
        assert Session.objects.get(pk=answer.headers["X-Session-Id"]).principal_id == person.user.username

    refused = post("/support/v1/session", {"message": "hi"}, token="ast_unknown")
    assert refused.status == 401 and refused.headers["Content-Type"] == "application/json"
    assert refused.json()["error"]["code"] == "unauthorized"
    assert Session.objects.count() == 4


@transactional
def test_without_a_streaming_accept_a_create_answers_the_json_it_always_did(people, sync_turns):
    for accept in ("application/json", "*/*"):
        answer = post("/support/v1/session", {"message": "hi"}, accept=accept, token=people.mia.secret)
        assert answer.status == 201 and answer.headers["Content-Type"] == "application/json"
        assert {"sessionId", "continuationToken", "streamUrl"} <= set(answer.json())
        assert "X-Session-Id" not in answer.headers


@transactional
@pytest.mark.parametrize("accept", [NDJSON, SSE])
def test_refusals_before_the_stream_stay_json_errors(people, sync_turns, accept):
    missing = post("/support/v1/session", {}, accept=accept, token=people.mia.secret)
    assert missing.status == 400 and missing.headers["Content-Type"] == "application/json"
    assert missing.json()["error"]["code"]
    unknown = post("/nobody/v1/session", {"message": "hi"}, accept=accept, token=people.mia.secret)
    assert unknown.status == 404 and unknown.json()["error"]["code"]
    assert Session.objects.count() == 0


# -- follow-ups ------------------------------------------------------------------------------

@transactional
@pytest.mark.parametrize("accept", [NDJSON, SSE])
def test_a_follow_up_streams_its_own_turn_and_the_next_one_continues_with_the_new_token(people, sync_turns,
                                                                                        accept):
    first = post("/support/v1/session", {"message": "one"}, token=people.mia.secret)
    session_id, token1 = first.headers["X-Session-Id"], first.headers["X-Continuation-Token"]
    url = f"/support/v1/session/{session_id}/message"

    second = post(url, {"message": "two", "continuationToken": token1}, accept=accept, token=people.mia.secret)

    assert second.status == 200 and second.headers["Content-Type"] == accept
    assert second.headers["X-Session-Id"] == session_id
    token2 = second.headers["X-Continuation-Token"]
    assert token2 != token1
    events = second.events
    assert types(events) == NEXT_TURN
    assert events[0]["index"] == len(first.events)  # from the first event the follow-up's turn appended
    assert [e["index"] for e in events] == list(range(events[0]["index"], events[0]["index"] + len(events)))
    assert events[0]["data"]["text"] == "two"
    assert next(e for e in events if e["type"] == "message.completed")["data"]["text"] == "You said: two"

    # The same through POST /session with the token; the stale one gets the same 409 as ever.
    third = post("/support/v1/session", {"message": "three", "continuationToken": token2}, accept=accept,
                 token=people.mia.secret)
    assert third.status == 200 and third.events[0]["data"]["text"] == "three"
    assert third.events[0]["index"] == events[-1]["index"] + 1
    for path in (url, "/support/v1/session"):
        stale = post(path, {"message": "four", "continuationToken": token2}, accept=accept, token=people.mia.secret)
        assert stale.status == 409 and stale.headers["Content-Type"] == "application/json"
        assert stale.json()["error"]["code"] == "stale_continuation_token"
    fresh = post(url, {"message": "four", "continuationToken": third.headers["X-Continuation-Token"]},
                 accept=accept, token=people.mia.secret)
    assert fresh.status == 200 and types(fresh.events) == NEXT_TURN
    assert Turn.objects.filter(session_id=session_id).count() == 4


@transactional
def test_only_the_owner_streams_a_follow_up_others_get_the_json_refusals(people, sync_turns):
    session_id = start_as(people.mia.client)
    url = f"/support/v1/session/{session_id}/message"
    for person in (people.max, people.olga, people.sam):
        refused = post(url, {"message": "mine now"}, token=person.secret)
        assert refused.status == 403 and refused.headers["Content-Type"] == "application/json", person
        assert refused.json()["error"]["code"]
    nobody = post(url, {"message": "mine now"})
    assert nobody.status == 401 and nobody.json()["error"]["code"] == "unauthorized"
    assert Turn.objects.filter(session_id=session_id).count() == 1

    owner = post(url, {"message": "again"}, token=people.mia.secret)
    assert owner.status == 200 and types(owner.events) == NEXT_TURN


@transactional
def test_a_task_session_refuses_a_streamed_follow_up_with_the_usual_409(people, sync_turns):
    first = post("/support/v1/session", {"message": "do it", "mode": "task"}, token=people.mia.secret)
    assert types(first.events)[-1] == "session.completed"

    again = post(f"/support/v1/session/{first.headers['X-Session-Id']}/message", {"message": "more"},
                 token=people.mia.secret)
    assert again.status == 409 and again.json()["error"]["code"] == "task_session"


@transactional
def test_the_stream_ends_when_the_turn_parks_for_approval(people, gated, sync_turns):
    answer = post("/gated/v1/session", {"message": PAY_5}, accept=SSE, token=people.mia.secret)

    assert answer.status == 200
    events = answer.events
    assert events[-1]["type"] == "action.approval_requested"
    assert "session.waiting" not in types(events)
    session_id = answer.headers["X-Session-Id"]
    assert Session.objects.get(pk=session_id).status == Session.Status.AWAITING_APPROVAL
    assert events == read_events(session_id)


@transactional
def test_the_json_follow_up_is_unchanged(local, support_agent, sync_turns):
    first = created(local, "hello")
    response = post_json(local, f"/support/v1/session/{first['sessionId']}/message",
                         {"message": "again", "continuationToken": first["continuationToken"]})
    assert response.status_code == 202 and response.json()["continuationToken"]


@pytest.mark.django_db
def test_the_openapi_document_describes_both_streamed_answers_and_their_headers(local):
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path in ("/{slug}/v1/session", "/{slug}/v1/session/{session_id}/message"):
        responses = document["paths"][path]["post"]["responses"]
        streamed = responses["200"]
        assert set(streamed["content"]) == {NDJSON, SSE}
        assert set(streamed["headers"]) == {"X-Session-Id", "X-Continuation-Token"}
        assert {"400", "401", "403", "404", "409"} <= set(responses)
        assert responses["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
