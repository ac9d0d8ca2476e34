"""Custom channels over HTTP: auth policies, /info, the webhook example and the playground's try forms.
Fixtures and the channels: test_custom_channels."""
from __future__ import annotations

import json
import re

from django.test import Client

from agents.discovery import deploy_agent_folder
from sessions.models import Session
from tests.channels_app.test_custom_channels import (  # noqa: F401 (fixtures)
    LOCAL,
    REMOTE,
    ROOT,
    WEBHOOK,
    calls,
    gate,
    lab,
    post,
    recorded,
    server_default,
    transactional,
)


# -- auth policies -------------------------------------------------------------------------

def who(client: Client, channel: str, **extra):
    return client.get(f"/gate/v1/channels/{channel}/who", **extra)


def test_a_channel_without_auth_runs_the_servers_default_chain(server_default, gate):
    assert who(Client(**LOCAL), "default").json() == {"authenticator": "local", "principal": "local"}
    assert who(Client(**REMOTE), "default").status_code == 401


def test_local_dev_strict_refuses_a_remote_host_and_forwarded_requests(server_default, gate):
    assert who(Client(**LOCAL), "strict").status_code == 200
    assert who(Client(HTTP_HOST="evil.example", REMOTE_ADDR="127.0.0.1"), "strict").status_code == 401
    assert who(Client(**LOCAL), "strict", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 401
    assert who(Client(**REMOTE), "strict").status_code == 401


def test_local_dev_skips_the_host_check_but_not_forwarding_headers(server_default, gate):
    assert who(Client(HTTP_HOST="evil.example", REMOTE_ADDR="127.0.0.1"), "dev").status_code == 200
    assert who(Client(**LOCAL), "dev", HTTP_X_REAL_IP="203.0.113.9").status_code == 401


def test_loopback_only_ignores_forwarding_headers(server_default, gate):
    assert who(Client(**LOCAL), "loopback", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 200
    assert who(Client(**REMOTE), "loopback").status_code == 401


def test_bearer_auth_with_a_token_or_a_verifier(server_default, gate):
    remote = Client(**REMOTE)

    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer channel-token-123").json()["authenticator"] == "bearer"
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert who(remote, "token").status_code == 401
    assert who(remote, "verified", HTTP_AUTHORIZATION="Bearer ok-1234").json() == {
        "authenticator": "bearer", "principal": "svc-ok-1"}
    assert who(remote, "verified", HTTP_AUTHORIZATION="Bearer no").status_code == 401


def test_allow_all_and_public_endpoint_admit_anyone(server_default, gate):
    remote = Client(**REMOTE)

    assert who(remote, "everyone").json() == {"authenticator": "anonymous", "principal": "anonymous"}
    assert who(remote, "public").json() == {"authenticator": "public_endpoint", "principal": "public"}


def test_a_public_route_can_verify_a_signature_over_the_raw_body(server_default, gate):
    import hashlib
    import hmac

    raw = b'{"text":  "signed payload"}'
    good = hmac.new(b"webhook-secret", raw, hashlib.sha256).hexdigest()
    remote = Client(**REMOTE)

    ok = remote.post("/gate/v1/channels/signed/signed", raw, content_type="application/json", HTTP_X_SIGNATURE=good)
    forged = remote.post("/gate/v1/channels/signed/signed", raw, content_type="application/json",
                         HTTP_X_SIGNATURE="0" * 64)

    assert ok.json() == {"verified": True, "text": "signed payload"}
    assert forged.status_code == 401


def test_allow_anonymous_swaps_only_the_default_never_an_authored_chain(settings, gate):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "allow_all"  # serve --allow-anonymous
    remote = Client(**REMOTE)

    assert who(remote, "default").json()["authenticator"] == "anonymous"
    assert who(remote, "strict").status_code == 401
    assert who(remote, "token").status_code == 401


def test_bearer_token_swaps_only_the_default_never_an_authored_chain(settings, gate):
    from sessions.models import hash_token

    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "bearer"  # serve --bearer-token server-token-1
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("server-token-1")]
    remote = Client(**REMOTE)

    assert who(remote, "default", HTTP_AUTHORIZATION="Bearer server-token-1").status_code == 200
    assert who(remote, "default").status_code == 401
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer server-token-1").status_code == 401
    assert who(remote, "token", HTTP_AUTHORIZATION="Bearer channel-token-123").status_code == 200
    assert who(Client(**LOCAL), "strict").status_code == 200


@transactional
def test_public_endpoint_never_opens_the_session_api(settings, gate, sync_turns):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"
    remote = Client(**REMOTE)

    started = post(remote, "/gate/v1/channels/public/start")
    assert started.status_code == 200, started.content
    session_id = started.json()["sessionId"]

    assert remote.get(f"/gate/v1/session/{session_id}").status_code == 401
    assert post(remote, "/gate/v1/session", {"message": "hi"}).status_code == 401
    assert remote.get("/gate/v1/sessions").status_code == 401
    # Even a server that admits anonymous callers does not make them the public route's principal.
    settings.AGENTSITE_AUTH = "allow_all"
    assert remote.get(f"/gate/v1/session/{session_id}").status_code in (403, 404)
    assert remote.get("/gate/v1/sessions").json()["sessions"] == []


@transactional
def test_send_acts_as_the_caller_unless_told_otherwise(server_default, gate, sync_turns):
    client = Client(**LOCAL)

    mine = post(client, "/gate/v1/channels/default/start").json()["sessionId"]
    app = post(client, "/gate/v1/channels/default/start?as=app").json()["sessionId"]

    assert Session.objects.get(pk=mine).principal_id == "local"
    assert (Session.objects.get(pk=app).authenticator, Session.objects.get(pk=app).principal_id) == ("app", "bot")


# -- /info ---------------------------------------------------------------------------------

def test_info_lists_each_channel_with_its_routes_and_schemas_but_no_secret(server_default, gate, lab):
    info = Client(**LOCAL).get("/gate/v1/info")

    assert info.status_code == 200
    channels = {c["id"]: c for c in info.json()["channels"]}
    assert channels["http"]["kind"] == "http"
    assert channels["token"]["kind"] == "custom"
    assert channels["token"]["auth"] == [{"kind": "bearer_auth", "verifier": False}]
    assert channels["default"]["auth"] is None
    assert {(r["method"], r["url"]) for r in channels["token"]["routes"]} == {
        ("GET", "/gate/v1/channels/token/who"), ("POST", "/gate/v1/channels/token/start")}
    assert "channel-token-123" not in info.content.decode()

    lab_info = {c["id"]: c for c in Client(**LOCAL).get("/lab/v1/info").json()["channels"]}["lab"]
    items = next(r for r in lab_info["routes"] if r["path"] == "/items")
    assert items["querySchema"]["properties"]["limit"]["maximum"] == 50
    start = next(r for r in lab_info["routes"] if r["path"] == "/start")
    assert start["bodySchema"]["required"] == ["text"]
    assert lab_info["events"] == ["*", "message.completed"]


# -- the example ---------------------------------------------------------------------------

@transactional
def test_the_webhook_example_keeps_one_session_per_thread_and_stores_replies(server_default, sync_turns):
    deploy_agent_folder(WEBHOOK)
    client = Client(**LOCAL)

    first = post(client, "/webhook/v1/channels/inbox/messages", {"text": "where is my order?", "thread": "t-1"})
    second = post(client, "/webhook/v1/channels/inbox/messages", {"text": "and the invoice?", "thread": "t-1"})
    thread = client.get("/webhook/v1/channels/inbox/threads/t-1").json()

    assert first.status_code == 200, first.content
    assert first.json()["created"] is True and second.json()["created"] is False
    assert first.json()["playgroundUrl"].endswith(f"/playground/webhook?sessionId={first.json()['sessionId']}")
    assert thread["sessionId"] == first.json()["sessionId"]
    assert thread["replies"] == ["You said: where is my order?", "You said: and the invoice?"]
    missing = post(client, "/webhook/v1/channels/inbox/messages", {"thread": "t-1"})
    assert missing.status_code == 400 and missing.json()["error"]["details"][0]["field"] == "body.text"


@transactional
def test_the_webhook_examples_callback_is_posted_through_the_outbound_guard(server_default, sync_turns, settings,
                                                                             caplog):
    from tests.agents.integrations.fakeapi import Answer, FakeAPI

    deploy_agent_folder(WEBHOOK)
    client = Client(**LOCAL)
    with FakeAPI() as receiver:
        receiver.route("POST", "/replies", Answer(204))
        callback = f"{receiver.url}/replies"

        settings.AGENTSITE_OUTBOUND_ALLOW = []
        refused = post(client, "/webhook/v1/channels/inbox/messages",
                       {"text": "to loopback", "thread": "t-local", "callbackUrl": callback})
        assert refused.status_code == 200, refused.content
        assert receiver.requests == []
        assert f"refused to reach {callback}: 127.0.0.1 is a loopback address" in caplog.text
        thread = client.get("/webhook/v1/channels/inbox/threads/t-local").json()
        assert thread["replies"] == ["You said: to loopback"], "the reply is kept whether or not it could be posted"

        settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
        allowed = post(client, "/webhook/v1/channels/inbox/messages",
                       {"text": "to the allowed network", "thread": "t-allowed", "callbackUrl": callback})
        assert [r.json() for r in receiver.requests] == [
            {"thread": "t-allowed", "text": "You said: to the allowed network", "sessionId": allowed.json()["sessionId"]}]


# -- the playground --------------------------------------------------------------------------

def test_the_agent_page_has_a_try_form_for_each_channel_route(server_default, db):
    deploy_agent_folder(WEBHOOK)

    page = Client(**LOCAL).get("/playground/webhook")

    assert page.status_code == 200
    html = page.content.decode()
    forms = re.findall(r'<form class="channel-try" data-method="(\w+)" data-url="([^"]+)" data-takes="(\w*)">', html)
    assert forms == [("POST", "/webhook/v1/channels/inbox/messages", "body"),
                     ("GET", "/webhook/v1/channels/inbox/threads/:thread", "query")]
    # The body form starts from an example of the required fields; the path parameter gets an input.
    assert "{&quot;text&quot;: &quot;example&quot;, &quot;thread&quot;: &quot;example&quot;}" in html
    assert 'data-param="thread"' in html
    script = Client(**LOCAL).get("/static/playground/playground.js")
    assert b"setupChannelTries" in b"".join(script.streaming_content if script.streaming else [script.content])


def test_a_providers_webhook_route_gets_a_try_form_with_headers_and_a_raw_body(server_default, db):
    deploy_agent_folder(ROOT / "examples" / "reviewer")

    html = Client(**LOCAL).get("/playground/reviewer").content.decode()

    forms = re.findall(r'<form class="channel-try" data-method="(\w+)" data-url="([^"]+)" data-takes="(\w*)">', html)
    assert forms == [("POST", "/reviewer/v1/channels/github", "raw"),
                     ("POST", "/reviewer/v1/channels/slack/events", "raw"),
                     ("POST", "/reviewer/v1/channels/slack/interactivity", "raw")]
    assert "{&quot;X-GitHub-Event&quot;: &quot;ping&quot;, &quot;X-GitHub-Delivery&quot;: &quot;try-{now}&quot;}" in html
    assert "url_verification" in html


@transactional
def test_wait_until_hands_the_work_to_the_task_queue_not_the_request(server_default, lab, calls):
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    response = post(Client(**LOCAL), "/lab/v1/channels/lab/defer")

    assert response.json() == {"deferred": True}
    assert recorded(calls) == [{"on_start": "lab"}]  # not run yet: a worker will
    queued = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    assert [task["func"] for task in queued] == ["sessions.custom_channels.run_in_background"]
    assert queued[0]["args"][0]["args"] == ["hello"]
