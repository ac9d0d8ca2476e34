"""Cross-site requests: a page on another site cannot change anything through
the visitor's browser, on any route and under any auth chain.

A state-changing request whose Origin (or Referer, without an Origin) is not
the server's own scheme, host and port is refused with 403 `foreign_origin`
before anything acts on it. Requests naming no origin (curl, integrations)
go on as before. Bodies are JSON only: other types are 415.
"""
from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client

from sessions.models import Event, Reminder, Session, ToolCall, Turn
from tests.channels_app.test_websocket import close_code, socket, started, ws_path
from tests.conftest import ALICE, ALICE_TOKEN

transactional = pytest.mark.django_db(transaction=True)

OWN = "http://127.0.0.1:8000"
EVIL = "http://evil.example"


def post_json(client, path: str, body: dict, **extra):
    return client.post(path, json.dumps(body), content_type="application/json", **extra)


def assert_foreign(response) -> None:
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "foreign_origin"
    assert "cross-site request refused" in error["message"]


@pytest.fixture
def busy(local, support_agent, settings) -> dict:
    """A loopback caller's session with a turn in flight (no worker runs it) and an armed reminder."""
    settings.AGENTSITE_DEV = True
    response = post_json(local, "/support/v1/session", {"message": "hello"})
    assert response.status_code == 201, response.content
    body = response.json()
    reminder = post_json(local, f"/support/v1/session/{body['sessionId']}/reminders", {"delay": "1h", "prompt": "ping"})
    assert reminder.status_code == 201, reminder.content
    return {**body, "reminderId": reminder.json()["reminderId"]}


def state() -> tuple:
    """Everything a write could change."""
    return (
        list(Session.objects.values_list("id", "status", "continuation_token_hash").order_by("id")),
        list(Turn.objects.values_list("id", "status", "interrupt_requested").order_by("id")),
        Event.objects.count(), ToolCall.objects.count(),
        list(Reminder.objects.values_list("id", "status", "fire_count").order_by("id")),
    )


def writes(s: dict) -> list[tuple[str, str, dict | None]]:
    sid, rid = s["sessionId"], s["reminderId"]
    return [
        ("post", "/support/v1/session", {"message": "hi"}),
        ("post", f"/support/v1/session/{sid}/message", {"message": "hi"}),
        ("post", f"/support/v1/session/{sid}/stop", None),
        ("delete", f"/support/v1/session/{sid}", None),
        ("post", f"/support/v1/session/{sid}/approvals/call_1", {"decision": "approve"}),
        ("post", f"/support/v1/session/{sid}/reminders", {"delay": "5m", "prompt": "p"}),
        ("delete", f"/support/v1/reminders/{rid}", None),
        ("post", "/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100"}}),
        ("post", f"/support/v1/dev/reminders/{rid}", None),
    ]


def send(client: Client, method: str, path: str, body: dict | None, **headers):
    if body is None:  # what a cross-site form sends to a route that takes no body
        return getattr(client, method)(path, "x=1", content_type="text/plain", **headers)
    return getattr(client, method)(path, json.dumps(body), content_type="application/json", **headers)


# -- the loopback default --------------------------------------------------------------------

@transactional
def test_a_foreign_page_cannot_stop_a_local_session(local, busy):
    before = state()

    response = local.post(f"/support/v1/session/{busy['sessionId']}/stop", "", content_type="text/plain",
                          HTTP_ORIGIN=EVIL)

    assert_foreign(response)
    assert response.json()["error"]["details"] == {"origin": EVIL}
    assert state() == before
    assert not Turn.objects.get(pk=busy["turnId"]).interrupt_requested


@transactional
@pytest.mark.parametrize("index", range(9), ids=[
    "session", "message", "stop", "delete", "approval", "reminder", "delete-reminder", "tool-call", "dev-fire"])
@pytest.mark.parametrize("header,value", [
    ("HTTP_ORIGIN", EVIL),
    ("HTTP_ORIGIN", "null"),
    ("HTTP_ORIGIN", "http://127.0.0.1:3000"),   # another port is another site
    ("HTTP_ORIGIN", "https://127.0.0.1:8000"),  # and so is another scheme
    ("HTTP_ORIGIN", "http://localhost:8000"),   # and another name for the same address
    ("HTTP_REFERER", f"{EVIL}/page.html"),
])
def test_every_write_route_refuses_a_foreign_origin_and_changes_nothing(local, busy, index, header, value):
    method, path, body = writes(busy)[index]
    before = state()

    assert_foreign(send(local, method, path, body, **{header: value}))
    assert state() == before


@transactional
def test_an_origin_wins_over_a_referer(local, busy):
    path = f"/support/v1/session/{busy['sessionId']}/stop"

    assert_foreign(local.post(path, HTTP_ORIGIN=EVIL, HTTP_REFERER=f"{OWN}/playground/support"))
    assert local.post(path, HTTP_ORIGIN=OWN, HTTP_REFERER=f"{EVIL}/").status_code == 202


@transactional
@pytest.mark.parametrize("headers", [
    {},
    {"HTTP_ORIGIN": OWN},
    {"HTTP_ORIGIN": "HTTP://127.0.0.1:8000"},
    {"HTTP_REFERER": f"{OWN}/playground/support?sessionId=x"},
], ids=["no-origin", "same-origin", "same-origin-upper-case", "same-origin-referer"])
def test_same_origin_and_origin_less_writes_still_work(local, busy, headers):
    sid = busy["sessionId"]

    assert post_json(local, f"/support/v1/session/{sid}/message", {"message": "again"}, **headers).status_code == 202
    assert local.post(f"/support/v1/session/{sid}/stop", **headers).status_code == 202
    assert post_json(local, "/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100"}},
                     **headers).status_code == 200
    assert local.delete(f"/support/v1/reminders/{busy['reminderId']}", **headers).status_code == 204
    assert local.delete(f"/support/v1/session/{sid}", **headers).status_code == 204


@transactional
def test_reads_are_not_refused_for_their_origin(local, busy):
    # A foreign page may send a GET, but the browser does not let it read the answer.
    assert local.get(f"/support/v1/session/{busy['sessionId']}", HTTP_ORIGIN=EVIL).status_code == 200
    assert local.get("/playground/support", HTTP_ORIGIN=EVIL).status_code == 200


@transactional
def test_the_admin_is_covered_too(local, support_agent):
    assert_foreign(local.post("/admin/login/", {"username": "a", "password": "b"}, HTTP_ORIGIN=EVIL))


# -- other chains ----------------------------------------------------------------------------

@transactional
def test_a_valid_bearer_token_does_not_let_a_foreign_page_through(alice, support_agent):
    response = post_json(alice, "/support/v1/session", {"message": "hi"}, HTTP_ORIGIN=EVIL)

    assert_foreign(response)
    assert not Session.objects.exists()


@transactional
def test_allow_all_refuses_foreign_pages_too(anonymous, support_agent):
    assert_foreign(post_json(anonymous, "/support/v1/session", {"message": "hi"}, HTTP_ORIGIN=EVIL))
    assert post_json(anonymous, "/support/v1/session", {"message": "hi"},
                     HTTP_ORIGIN="http://example.com").status_code == 201


@transactional
def test_trusted_origins_are_admitted_with_django_semantics(alice, support_agent, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com", "https://*.corp.example"]

    def create(origin: str) -> int:
        return post_json(alice, "/support/v1/session", {"message": "hi"}, HTTP_ORIGIN=origin).status_code

    assert create("https://agents.example.com") == 201
    assert create("https://agents.example.com:443") == 201
    assert create("https://tools.corp.example") == 201
    assert create("https://corp.example") == 201
    assert create("http://agents.example.com") == 403, "the scheme is part of the origin"
    assert create("https://agents.example.com:8443") == 403
    assert create("https://evilcorp.example") == 403


# -- an admin login behind a reverse proxy ------------------------------------------------------

@pytest.fixture
def proxied_browser(settings, support_agent):
    """A browser logged in to the admin, reaching the server through a proxy that keeps the Host."""
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = []
    browser = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="10.0.0.5", enforce_csrf_checks=True)
    browser.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    assert browser.get("/playground/support").status_code == 200
    return browser


@transactional
def test_the_playground_behind_a_proxy_keeps_working(proxied_browser, settings, sync_turns):
    token = proxied_browser.cookies["csrftoken"].value

    plain = post_json(proxied_browser, "/support/v1/session", {"message": "hi"}, HTTP_X_CSRFTOKEN=token,
                      HTTP_ORIGIN="http://agents.example.com")
    assert plain.status_code == 201, plain.content

    # TLS ends at the proxy: the page's https origin must be listed (AGENTSITE_TRUSTED_ORIGINS).
    tls = {"HTTP_X_CSRFTOKEN": token, "HTTP_ORIGIN": "https://agents.example.com"}
    assert_foreign(post_json(proxied_browser, "/support/v1/session", {"message": "hi"}, **tls))
    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com"]
    assert post_json(proxied_browser, "/support/v1/session", {"message": "hi"}, **tls).status_code == 201


@transactional
def test_a_foreign_page_cannot_ride_an_admin_login(proxied_browser):
    token = proxied_browser.cookies["csrftoken"].value

    assert_foreign(post_json(proxied_browser, "/support/v1/session", {"message": "hi"}, HTTP_X_CSRFTOKEN=token,
                             HTTP_ORIGIN=EVIL))
    assert not Session.objects.exists()


# -- JSON bodies only ------------------------------------------------------------------------------

@transactional
@pytest.mark.parametrize("index", [0, 1, 4, 5, 7], ids=["session", "message", "approval", "reminder", "tool-call"])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_a_body_that_is_not_json_is_415(local, busy, index, content_type):
    method, path, body = writes(busy)[index]
    before = state()

    response = local.post(path, json.dumps(body), content_type=content_type)

    assert response.status_code == 415, response.content
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert state() == before


@transactional
def test_a_route_that_takes_no_body_ignores_one_from_a_non_browser(local, busy):
    """Stop reads no body, so none is refused; a cross-site form posting one is refused by its Origin."""
    path = f"/support/v1/session/{busy['sessionId']}/stop"

    assert_foreign(local.post(path, "stop", content_type="text/plain", HTTP_ORIGIN=EVIL))
    assert local.post(path, "stop", content_type="text/plain").status_code == 202


# -- websockets --------------------------------------------------------------------------------------

@transactional
@pytest.mark.parametrize("origin", [EVIL, "http://127.0.0.1:3000", "https://127.0.0.1:8000", "null"])
def test_a_websocket_from_another_origin_is_closed_with_4403(support_agent, two_principals, sync_turns, origin):
    session_id = started(ALICE)

    assert async_to_sync(close_code)(socket(ws_path(session_id), origin=origin, token=ALICE_TOKEN)) == 4403


@transactional
def test_a_websocket_from_a_trusted_origin_is_admitted(support_agent, two_principals, sync_turns, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://agents.example.com"]
    session_id = started(ALICE)

    async def first_frame() -> dict:
        communicator = socket(ws_path(session_id), origin="https://agents.example.com", token=ALICE_TOKEN)
        connected, _ = await communicator.connect(timeout=15)
        assert connected
        try:
            return await communicator.receive_json_from(timeout=15)
        finally:
            await communicator.disconnect()

    assert async_to_sync(first_frame)()["type"] == "session.started"
