"""Who may call what: the policy chain (401) and session ownership (403)."""
from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client, RequestFactory

from channels_app.auth import (
    ANONYMOUS,
    LOCAL_PRINCIPAL,
    Principal,
    RequestInfo,
    allow_all,
    bearer_auth,
    local_dev,
    local_dev_strict,
    loopback_only,
)
from sessions.models import Session
from tests.conftest import ALICE_TOKEN

SESSION = "ses_000000000000000000000000"

EVERY_ROUTE = [
    ("get", "/v1/agents"),
    ("post", "/support/v1/session"),
    ("get", "/support/v1/sessions"),
    ("get", f"/support/v1/session/{SESSION}"),
    ("delete", f"/support/v1/session/{SESSION}"),
    ("post", f"/support/v1/session/{SESSION}/message"),
    ("post", f"/support/v1/session/{SESSION}/stop"),
    ("get", f"/support/v1/session/{SESSION}/events"),
    ("get", f"/support/v1/session/{SESSION}/stream"),
    ("get", f"/support/v1/session/{SESSION}/artifacts"),
    ("get", f"/support/v1/session/{SESSION}/artifacts/report.md"),
    ("get", "/support/v1/info"),
]


@pytest.fixture
def default_chain(settings):
    """The chain `serve` uses with no auth flags: local_dev_strict()."""
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"


def call(client: Client, method: str, path: str, **extra):
    if method == "post":
        return client.post(path, json.dumps({"message": "hi"}), content_type="application/json", **extra)
    return getattr(client, method)(path, **extra)


def assert_unauthorized(response) -> None:
    assert response.status_code == 401, response.content
    assert response.json()["error"] == {
        "code": "unauthorized", "message": "authentication required: no auth policy admitted this request", "details": None,
    }
    assert response["WWW-Authenticate"] == 'Bearer realm="agentsite"'


def info(peer: str = "127.0.0.1", host: str = "127.0.0.1:8000", **headers: str) -> RequestInfo:
    return RequestInfo(peer=peer, host=host, headers={k.replace("_", "-").lower(): v for k, v in headers.items()})


# -- local_dev_strict() over HTTP ---------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost", "localhost:8000", "[::1]:8000", "127.0.0.1"])
def test_local_dev_strict_admits_a_loopback_caller_with_a_loopback_host(default_chain, support_agent, host):
    response = Client(HTTP_HOST=host, REMOTE_ADDR="127.0.0.1").get("/v1/agents")

    assert response.status_code == 200
    assert response.json()["agents"][0]["slug"] == "support"


@pytest.mark.django_db
def test_local_dev_strict_admits_an_ipv6_loopback_peer_as_the_local_principal(default_chain, support_agent):
    response = call(Client(HTTP_HOST="[::1]:8000", REMOTE_ADDR="::1"), "post", "/support/v1/session")

    assert response.status_code == 201, response.content
    session = Session.objects.get(pk=response.json()["sessionId"])
    assert (session.authenticator, session.principal_id, session.principal_type) == ("local", "local", "user")


@pytest.mark.django_db
@pytest.mark.parametrize("header", ["HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED", "HTTP_X_FORWARDED_HOST"])
def test_local_dev_strict_refuses_a_forwarded_request(default_chain, support_agent, local, header):
    value = "for=203.0.113.9" if header == "HTTP_FORWARDED" else "203.0.113.9"

    assert_unauthorized(local.get("/v1/agents", **{header: value}))


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io:8000", "localhost.evil.example"])
def test_local_dev_strict_refuses_a_non_loopback_host_which_blocks_dns_rebinding(default_chain, support_agent, host):
    response = Client(HTTP_HOST=host, REMOTE_ADDR="127.0.0.1").get("/v1/agents")

    assert_unauthorized(response)


@pytest.mark.django_db
@pytest.mark.parametrize("peer", ["192.0.2.10", "10.0.0.1", "2001:db8::1"])
def test_local_dev_strict_refuses_a_non_loopback_peer(default_chain, support_agent, peer):
    response = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR=peer).get("/v1/agents")

    assert_unauthorized(response)


@pytest.mark.django_db
@pytest.mark.parametrize("method,path", EVERY_ROUTE)
def test_every_route_answers_401_when_no_policy_admits(default_chain, support_agent, method, path):
    outsider = Client(HTTP_HOST="agents.example", REMOTE_ADDR="203.0.113.9")

    assert_unauthorized(call(outsider, method, path))


@pytest.mark.django_db
def test_the_stream_refuses_a_forwarded_request_too(default_chain, support_agent, local):
    session_id = Session.objects.create(
        agent=support_agent, deployment_id=support_agent.active_deployment_id,
        principal_id="local", authenticator="local",
    ).pk

    response = local.get(f"/support/v1/session/{session_id}/stream", HTTP_X_FORWARDED_FOR="203.0.113.9")

    assert_unauthorized(response)


@pytest.mark.django_db
def test_a_refused_caller_creates_no_session(default_chain, support_agent):
    outsider = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="203.0.113.9")

    assert_unauthorized(call(outsider, "post", "/support/v1/session"))
    assert Session.objects.count() == 0


# -- bearer_auth() and allow_all() over HTTP -------------------------------------------

@pytest.mark.django_db
def test_bearer_auth_admits_the_right_token_as_its_principal(alice, support_agent):
    response = call(alice, "post", "/support/v1/session")

    assert response.status_code == 201
    session = Session.objects.get(pk=response.json()["sessionId"])
    assert (session.authenticator, session.principal_id) == ("bearer", "alice")


@pytest.mark.django_db
@pytest.mark.parametrize("authorization", [
    None, "Bearer wrong-token", "Bearer ", "Bearer", f"Basic {ALICE_TOKEN}", f"Token {ALICE_TOKEN}",
    f"Bearer {ALICE_TOKEN}x", f"Bearer {ALICE_TOKEN[:-1]}",
])
def test_bearer_auth_refuses_a_wrong_or_missing_token(two_principals, support_agent, authorization):
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    client = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1", **extra)

    assert_unauthorized(client.get("/v1/agents"))


@pytest.mark.django_db
def test_the_bearer_setting_accepts_only_tokens_whose_hash_is_configured(settings, support_agent):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hashlib.sha256(b"s3cret-token").hexdigest()]
    remote = {"HTTP_HOST": "agents.example", "REMOTE_ADDR": "203.0.113.9"}

    assert Client(HTTP_AUTHORIZATION="Bearer s3cret-token", **remote).get("/v1/agents").status_code == 200
    assert_unauthorized(Client(HTTP_AUTHORIZATION="Bearer other", **remote).get("/v1/agents"))
    # Under the bearer chain a loopback caller needs the token too.
    assert_unauthorized(Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1").get("/v1/agents"))


@pytest.mark.django_db
def test_allow_all_admits_anyone_as_the_anonymous_principal(anonymous, support_agent):
    response = call(anonymous, "post", "/support/v1/session")

    assert response.status_code == 201
    session = Session.objects.get(pk=response.json()["sessionId"])
    assert (session.authenticator, session.principal_id, session.principal_type) == ("anonymous", "anonymous", "anonymous")


@pytest.mark.django_db
def test_the_allow_all_setting_admits_a_remote_caller(settings, support_agent):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "allow_all"

    response = Client(HTTP_HOST="agents.example", REMOTE_ADDR="203.0.113.9").get("/v1/agents")

    assert response.status_code == 200


@pytest.mark.django_db
def test_the_first_policy_that_admits_names_the_principal(settings, support_agent):
    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth({ALICE_TOKEN: "alice"}), allow_all()]
    remote = {"HTTP_HOST": "agents.example", "REMOTE_ADDR": "203.0.113.9"}

    with_token = call(Client(HTTP_AUTHORIZATION=f"Bearer {ALICE_TOKEN}", **remote), "post", "/support/v1/session")
    without = call(Client(**remote), "post", "/support/v1/session")

    assert Session.objects.get(pk=with_token.json()["sessionId"]).principal_id == "alice"
    assert Session.objects.get(pk=without.json()["sessionId"]).principal_id == "anonymous"


# -- ownership: bob on alice's session ------------------------------------------------------

@pytest.fixture
def alices_session(alice, support_agent) -> dict:
    response = call(alice, "post", "/support/v1/session")
    assert response.status_code == 201
    return response.json()


def assert_forbidden(response) -> None:
    assert response.status_code == 403, response.content
    assert response.json()["error"]["code"] == "forbidden"


# transaction=True: the stream reads through channels' database_sync_to_async,
# which closes the connection a non-transactional test would be holding.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", [
    ("get", ""), ("post", "/message"), ("post", "/stop"), ("get", "/events"), ("get", "/stream"), ("delete", ""),
])
def test_bob_gets_403_on_alices_session(alices_session, bob, method, suffix):
    response = call(bob, method, f"/support/v1/session/{alices_session['sessionId']}{suffix}")

    assert_forbidden(response)


@pytest.mark.django_db
def test_bob_cannot_follow_up_with_alices_continuation_token(alices_session, bob):
    response = bob.post("/support/v1/session", json.dumps({
        "message": "hi", "continuationToken": alices_session["continuationToken"],
    }), content_type="application/json")

    assert_forbidden(response)


@pytest.mark.django_db
def test_bobs_refusals_leave_alices_session_untouched(alices_session, alice, bob):
    session_id = alices_session["sessionId"]
    call(bob, "delete", f"/support/v1/session/{session_id}")
    call(bob, "post", f"/support/v1/session/{session_id}/message")

    assert Session.objects.filter(pk=session_id).exists()
    assert alice.get(f"/support/v1/session/{session_id}").status_code == 200
    assert Session.objects.get(pk=session_id).turns.count() == 1


@pytest.mark.django_db
def test_bobs_list_does_not_show_alices_sessions(alices_session, alice, bob):
    bobs = call(bob, "post", "/support/v1/session").json()["sessionId"]

    assert [s["sessionId"] for s in bob.get("/support/v1/sessions").json()["sessions"]] == [bobs]
    assert [s["sessionId"] for s in alice.get("/support/v1/sessions").json()["sessions"]] == [alices_session["sessionId"]]


@pytest.mark.django_db
def test_the_same_principal_id_from_another_authenticator_is_someone_else(alices_session, settings):
    # A verifier that names its principal "alice" is not the bearer-token alice.
    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth(verifier=lambda t: Principal("sso", "alice") if t == "sso" else None)]
    impostor = Client(HTTP_AUTHORIZATION="Bearer sso", HTTP_HOST="127.0.0.1:8000")

    assert_forbidden(impostor.get(f"/support/v1/session/{alices_session['sessionId']}"))
    assert impostor.get("/support/v1/sessions").json()["sessions"] == []


# -- the policies as functions --------------------------------------------------------------

@pytest.mark.parametrize("peer,host", [
    ("127.0.0.1", "127.0.0.1:8000"), ("127.0.0.1", "localhost"), ("127.0.0.1", "LOCALHOST:8000"),
    ("::1", "[::1]:8000"), ("::1", "[::1]"), ("127.0.0.2", "127.0.0.1"),
])
def test_local_dev_strict_function_admits_loopback_peer_and_host(peer, host):
    assert local_dev_strict()(info(peer, host)) == LOCAL_PRINCIPAL


@pytest.mark.parametrize("peer,host,headers", [
    ("127.0.0.1", "127.0.0.1:8000", {"x-forwarded-for": "203.0.113.9"}),
    ("127.0.0.1", "127.0.0.1:8000", {"x-real-ip": "203.0.113.9"}),
    ("127.0.0.1", "127.0.0.1:8000", {"forwarded": "for=203.0.113.9"}),
    ("127.0.0.1", "127.0.0.1:8000", {"x-forwarded-host": "evil.example"}),
    ("127.0.0.1", "evil.example", {}),
    ("127.0.0.1", "", {}),
    ("127.0.0.1", "127.0.0.1.evil.example", {}),
    ("203.0.113.9", "127.0.0.1:8000", {}),
    ("", "127.0.0.1:8000", {}),
    ("not-an-ip", "127.0.0.1:8000", {}),
])
def test_local_dev_strict_function_refuses(peer, host, headers):
    assert local_dev_strict()(RequestInfo(peer=peer, host=host, headers=headers)) is None


def test_local_dev_skips_the_host_check_but_not_the_forwarding_check():
    policy = local_dev()

    assert policy(info(host="evil.example")) == LOCAL_PRINCIPAL
    assert policy(info(host="evil.example", x_forwarded_for="203.0.113.9")) is None
    assert policy(info(peer="203.0.113.9")) is None


def test_loopback_only_ignores_forwarding_headers():
    policy = loopback_only()

    assert policy(info(x_forwarded_for="203.0.113.9", host="evil.example")) == LOCAL_PRINCIPAL
    assert policy(info(peer="203.0.113.9")) is None


def test_bearer_auth_function_with_tokens_hashes_and_a_verifier(db):  # wrong ones count (channels_app.lockout)
    by_token = bearer_auth({"t1": "alice"})
    assert by_token(info(authorization="Bearer t1")) == Principal("bearer", "alice")
    assert by_token(info(authorization="bearer t1")) == Principal("bearer", "alice")
    assert by_token(info(authorization="Bearer t2")) is None
    assert by_token(info()) is None

    by_hash = bearer_auth(hashes={hashlib.sha256(b"t1").hexdigest(): "alice"})
    assert by_hash(info(authorization="Bearer t1")) == Principal("bearer", "alice")
    assert by_hash(info(authorization=f"Bearer {hashlib.sha256(b't1').hexdigest()}")) is None

    unnamed = bearer_auth(["t1"])(info(authorization="Bearer t1"))
    assert unnamed is not None and unnamed.principal_id.startswith("token:")
    assert "t1" not in unnamed.principal_id

    verified = bearer_auth(verifier=lambda t: Principal("sso", t.upper()) if t.startswith("ok") else None)
    assert verified(info(authorization="Bearer ok-1")) == Principal("sso", "OK-1")
    assert verified(info(authorization="Bearer no")) is None


def test_bearer_auth_with_no_tokens_admits_nobody(db):
    assert bearer_auth()(info(authorization="Bearer anything")) is None
    assert bearer_auth([])(info(authorization="Bearer ")) is None


def test_allow_all_function_admits_anyone_as_anonymous():
    assert allow_all()(RequestInfo(peer="203.0.113.9", host="agents.example", headers={})) == ANONYMOUS


def test_request_info_reads_peer_host_and_headers_from_a_django_request():
    request = RequestFactory().get(
        "/", REMOTE_ADDR="::1", HTTP_HOST="[::1]:8000", HTTP_X_FORWARDED_FOR="203.0.113.9", HTTP_AUTHORIZATION="Bearer t",
    )

    got = RequestInfo.from_django(request)

    assert got.peer == "::1"
    assert got.host == "[::1]:8000"
    assert got.headers["x-forwarded-for"] == "203.0.113.9"
    assert got.headers["authorization"] == "Bearer t"
    assert local_dev_strict()(got) is None


def test_request_info_reads_peer_host_and_headers_from_an_asgi_scope():
    scope = {"client": ("127.0.0.1", 51234), "headers": [(b"Host", b"localhost:8000"), (b"X-Real-IP", b"203.0.113.9")]}

    got = RequestInfo.from_scope(scope)

    assert got.peer == "127.0.0.1"
    assert got.host == "localhost:8000"
    assert got.headers["x-real-ip"] == "203.0.113.9"
    assert local_dev_strict()(got) is None
    assert local_dev_strict()(RequestInfo.from_scope({"client": None, "headers": [(b"host", b"localhost")]})) is None
