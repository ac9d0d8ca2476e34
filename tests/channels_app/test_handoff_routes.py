"""GET/POST /<slug>/v1/session/<id>/handoff: the review and the handoff, as each principal sees them.

Members reach their own sessions only; operators (by group and by staff) any; an anonymous
caller is refused by the auth chain. The agent runs on two scripted models, so a handoff
needs no network; the provider paths are in tests/sessions/test_handoff.py."""
from __future__ import annotations

import pytest

from sessions.models import Event, Handoff, Session
from tests.channels_app.roles_support import People, anonymous, people, start_as  # noqa: F401
from tests.providers.conftest import loopback_provider
from tests.providers.loopback import Reply
from tests.sessions.handoff_support import OPENAI, deploy_on_models

transactional = pytest.mark.django_db(transaction=True)
ECHO, OTHER = "scripted:echo", "scripted:other"


@pytest.fixture
def duo(people, sync_turns, tmp_path):
    deploy_on_models(tmp_path, [ECHO, OTHER])


def path(session_id: str) -> str:
    return f"/duo/v1/session/{session_id}/handoff"


def hand_over(client, session_id: str, to: str):
    reviewed = client.get(f"{path(session_id)}?to={to}")
    assert reviewed.status_code == 200, reviewed.content
    return client.post(path(session_id), {"to": to, "reviewId": reviewed.json()["reviewId"]},
                       content_type="application/json")


@transactional
def test_the_review_by_each_principal(people: People, duo):
    session_id = start_as(people.mia.client, "duo")
    own = people.mia.client.get(f"{path(session_id)}?to={OTHER}")
    assert own.status_code == 200
    body = own.json()
    assert (body["sessionId"], body["from"], body["to"], body["refusal"]) == (session_id, ECHO, OTHER, None)
    assert body["carriesOver"]["messages"] == 2 and body["lost"] == [] and body["transformed"] == []
    refused = people.max.client.get(f"{path(session_id)}?to={OTHER}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous().get(f"{path(session_id)}?to={OTHER}").status_code == 401
    for operator in people.operators:
        assert operator.client.get(f"{path(session_id)}?to={OTHER}").json()["reviewId"] == body["reviewId"]
    assert Handoff.objects.count() == 0


@transactional
def test_the_review_needs_to_and_a_known_session(people: People, duo):
    session_id = start_as(people.mia.client, "duo")
    missing = people.mia.client.get(path(session_id))
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "missing_to"
    assert people.mia.client.get(f"{path('ses_nope')}?to={OTHER}").status_code == 404
    refused = people.mia.client.get(f"{path(session_id)}?to=openai:gpt-unknown").json()["refusal"]
    assert refused["code"] == "model_not_allowed" and refused["alternatives"] == [OTHER]


@transactional
def test_the_handoff_by_each_principal(people: People, duo):
    session_id = start_as(people.mia.client, "duo")
    review_id = people.mia.client.get(f"{path(session_id)}?to={OTHER}").json()["reviewId"]
    sent = {"to": OTHER, "reviewId": review_id}
    refused = people.max.client.post(path(session_id), sent, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous().post(path(session_id), sent, content_type="application/json").status_code == 401
    assert Handoff.objects.count() == 0

    done = hand_over(people.mia.client, session_id, OTHER)
    assert done.status_code == 200, done.content
    body = done.json()
    assert {k: body["handoff"][k] for k in ("from", "to", "status")} == {"from": ECHO, "to": OTHER,
                                                                          "status": "completed"}
    assert body["handoff"]["endedAt"] is not None and body["session"]["sessionId"] == session_id
    assert body["session"]["lastTurn"]["id"] == Handoff.objects.get(pk=body["handoff"]["id"]).turn_id
    # Operators may move anyone's session, back and forth.
    for operator, to in zip(people.operators, (ECHO, OTHER)):
        moved = hand_over(operator.client, session_id, to)
        assert moved.status_code == 200 and moved.json()["handoff"]["to"] == to
    assert Session.objects.get(pk=session_id).model == OTHER
    handoffs = Event.objects.filter(session_id=session_id, type="session.handoff").order_by("index")
    acted = Event.objects.filter(session_id=session_id, type="operator.acted").order_by("index")
    assert [(e.data["action"], e.data["handoffId"]) for e in acted] == [
        ("handoff", e.data["handoffId"]) for e in handoffs[1:]]  # the operators' moves, not the owner's
    owner = Session.objects.get(pk=session_id).principal_id
    by = [e.data["requestedBy"]["principalId"] for e in handoffs]
    assert by[0] == owner and len(set(by)) == 3  # the owner, then each operator


@transactional
def test_refusals_over_http(people: People, duo):
    session_id = start_as(people.mia.client, "duo")
    client = people.mia.client
    stale = client.get(f"{path(session_id)}?to={OTHER}").json()["reviewId"]
    moved = client.post(f"/duo/v1/session/{session_id}/message", {"message": "more"}, content_type="application/json")
    assert moved.status_code == 202
    answers = {
        "stale": client.post(path(session_id), {"to": OTHER, "reviewId": stale}, content_type="application/json"),
        "same": client.post(path(session_id), {"to": ECHO, "reviewId": stale}, content_type="application/json"),
        "bad body": client.post(path(session_id), {"to": OTHER}, content_type="application/json"),
    }
    assert {k: (r.status_code, r.json()["error"]["code"]) for k, r in answers.items()} == {
        "stale": (409, "review_stale"), "same": (409, "same_model"), "bad body": (400, "invalid_request")}


@transactional
def test_a_target_that_fails_is_a_502_and_the_session_stays(people: People, sync_turns, tmp_path, monkeypatch):
    openai = loopback_provider(monkeypatch, "openai")
    server = next(openai)
    try:
        deploy_on_models(tmp_path, [ECHO, OPENAI])
        session_id = start_as(people.mia.client, "duo")
        server.replies.append(Reply(500))
        failed = hand_over(people.mia.client, session_id, OPENAI)
        assert failed.status_code == 502 and len(server.requests) == 1
        error = failed.json()["error"]
        assert error["code"] == "handoff_failed" and error["details"]["cause"] == "server_error"
        detail = people.mia.client.get(f"/duo/v1/session/{session_id}").json()
        assert detail["activeTurnId"] is None and Session.objects.get(pk=session_id).model == ECHO
    finally:
        next(openai, None)


@transactional
def test_the_openapi_document_offers_each_agent_only_the_models_it_may_move_to(local, duo, support_agent,
                                                                                monkeypatch, tmp_path):
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    deploy_on_models(tmp_path / "keyless", [ECHO, "openai:gpt-4.1-mini"], slug="keyless")
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = document["paths"]

    assert "/{slug}/v1/session/{session_id}/handoff" not in paths
    duo = paths["/duo/v1/session/{session_id}/handoff"]
    assert set(duo) == {"get", "post"}
    assert {"200", "409", "424", "502"} <= set(duo["post"]["responses"])
    assert [p["name"] for p in duo["post"]["parameters"] if p["in"] == "path"] == ["session_id"]
    # The review answers any model (its body says why a handoff would be refused).
    [to] = [p for p in duo["get"]["parameters"] if p["name"] == "to"]
    assert "enum" not in to["schema"]

    def offered(slug: str) -> list[str]:
        schema = paths[f"/{slug}/v1/session/{{session_id}}/handoff"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]
        return schema["properties"]["to"]["enum"]

    assert offered("duo") == [ECHO, OTHER]
    assert offered("support") == [ECHO]
    assert offered("keyless") == [ECHO]  # openai has no key here: a handoff to it would be a 424

    # What the document offers, the server takes: a handoff to OTHER is done.
    session_id = start_as(local, "duo")
    assert hand_over(local, session_id, OTHER).status_code == 200


@transactional
def test_a_handoff_spends_the_callers_message_budget(people: People, duo, settings):
    from agentsite.limits import Rate

    session_id = start_as(people.mia.client, "duo")
    settings.AGENTSITE_RATE_MESSAGES = Rate(1, 60, "1/min")
    assert hand_over(people.mia.client, session_id, OTHER).status_code == 200
    refused = hand_over(people.mia.client, session_id, ECHO)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert "Retry-After" in refused
    assert Session.objects.get(pk=session_id).model == OTHER  # the refused one changed nothing
