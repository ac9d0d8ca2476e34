"""A personal token in use: it names its user on HTTP, the stream and the
websocket (the same principal as that user's login), and stops working when
revoked or expired; a scoped token reaches only its agents. A bad token is a
401 even from loopback, never the loopback principal."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent
from sessions.models import PersonalToken, Session
from sessions.principal import OPERATORS_GROUP
from tests.channels_app.test_websocket import close_code, count, receive_until, socket, ws_path
from tests.channels_app.views.http import stream

transactional = pytest.mark.django_db(transaction=True)
HOST, PEER = "agents.example.com", "10.0.0.5"
DJANGO_ALICE = {"authenticator": "django", "principalId": "alice", "principalType": "user"}


def with_token(secret: str, *, local: bool = False) -> Client:
    where = {"HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1"} if local else {"HTTP_HOST": HOST,
                                                                                       "REMOTE_ADDR": PEER}
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **where)


@pytest.fixture
def alice(db, support_agent) -> User:
    return User.objects.create_user("alice", password="pw")


def start(client: Client, slug: str = "support") -> str:
    created = client.post(f"/{slug}/v1/session", {"message": "hello"}, content_type="application/json")
    assert created.status_code == 201, created.content
    return created.json()["sessionId"]


@transactional
def test_a_token_made_over_the_api_starts_a_session_owned_by_its_user(alice, sync_turns):
    login = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER)
    login.force_login(alice)
    secret = login.post("/v1/tokens", {"name": "ci"}, content_type="application/json").json()["token"]

    session_id = start(with_token(secret))

    assert with_token(secret).get(f"/support/v1/session/{session_id}").json()["principal"] == DJANGO_ALICE
    # The same person through a login: the session is theirs either way.
    assert login.get(f"/support/v1/session/{session_id}").status_code == 200
    assert [s["sessionId"] for s in login.get("/support/v1/sessions").json()["sessions"]] == [session_id]
    assert PersonalToken.objects.get().last_used_at is not None


@transactional
def test_a_token_follows_the_stream_and_the_websocket(alice, sync_turns):
    _, secret = PersonalToken.issue(alice, "cli")
    session_id = start(with_token(secret))

    status, kind, body = stream(f"/support/v1/session/{session_id}/stream", until="session.waiting", token=secret)
    assert (status, kind) == (200, "application/x-ndjson") and b"turn.completed" in body

    async def scenario():
        communicator = socket(ws_path(session_id), token=secret, host=HOST, origin=None, peer=PEER)
        connected, _ = await communicator.connect(timeout=15)
        assert connected
        frames = await receive_until(communicator, count(1))
        await communicator.disconnect()
        return frames

    assert async_to_sync(scenario)()[0]["type"] == "session.started"


@transactional
def test_a_revoked_token_is_refused_everywhere_even_from_loopback(alice, sync_turns):
    token, secret = PersonalToken.issue(alice, "cli")
    session_id = start(with_token(secret))

    assert token.revoke() and not token.revoke()

    refused = with_token(secret).get("/v1/agents")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert with_token(secret, local=True).get("/v1/agents").status_code == 401  # not the loopback principal
    assert stream(f"/support/v1/session/{session_id}/stream", until="x", token=secret)[0] == 401
    assert async_to_sync(close_code)(socket(ws_path(session_id), token=secret)) == 4401


@transactional
def test_an_expired_or_unknown_token_is_refused(alice):
    token, secret = PersonalToken.issue(alice, "cli", expires_days=1)
    assert with_token(secret).get("/v1/agents").status_code == 200
    PersonalToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert with_token(secret).get("/v1/agents").status_code == 401
    assert with_token(secret, local=True).get("/v1/agents").status_code == 401
    assert with_token(secret[:-2] + "xx", local=True).get("/v1/agents").status_code == 401
    assert with_token("ast_not-a-token", local=True).get("/v1/agents").status_code == 401


@transactional
def test_a_scoped_token_reaches_only_its_agents(alice, sync_turns):
    Agent.objects.create(slug="other")
    _, secret = PersonalToken.issue(alice, "bot", agents=["support"])
    session_id = start(with_token(secret))
    Session.objects.filter(pk=session_id).update(agent=Agent.objects.get(slug="other"))

    refused = with_token(secret).get("/other/v1/sessions")
    assert refused.status_code == 403 and "scoped" in refused.json()["error"]["message"]
    assert with_token(secret).get("/support/v1/sessions").status_code == 200
    assert stream(f"/other/v1/session/{session_id}/stream", until="x", token=secret)[0] == 403
    assert async_to_sync(close_code)(
        socket(ws_path(session_id, slug="other"), token=secret, host=HOST, origin=None, peer=PEER)) == 4403


@transactional
def test_last_use_is_written_at_most_once_a_minute(alice):
    token, secret = PersonalToken.issue(alice, "cli")
    with_token(secret).get("/v1/agents")
    first = PersonalToken.objects.get().last_used_at

    with CaptureQueriesContext(connection) as queries:
        with_token(secret).get("/v1/agents")
    assert PersonalToken.objects.get().last_used_at == first
    assert not [q for q in queries if q["sql"].startswith("UPDATE") and PersonalToken._meta.db_table in q["sql"]]
    assert token.touch(first + timedelta(minutes=2))
    assert PersonalToken.objects.get().last_used_at == first + timedelta(minutes=2)


@transactional
def test_a_login_on_loopback_is_its_user_not_the_loopback_principal(alice, sync_turns):
    browser = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    browser.force_login(alice)

    session_id = start(browser)

    assert browser.get(f"/support/v1/session/{session_id}").json()["principal"] == DJANGO_ALICE


@transactional
def test_a_token_of_the_operators_group_is_an_operator_read_in_the_tokens_one_query(alice):
    _, secret = PersonalToken.issue(alice, "cli")
    assert with_token(secret).get("/v1/models").status_code == 403

    alice.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    with CaptureQueriesContext(connection) as queries:
        assert with_token(secret).get("/v1/models").status_code == 200
    assert not [q for q in queries if Group._meta.db_table in q["sql"] and PersonalToken._meta.db_table not in q["sql"]]
