"""`GET/POST /v1/tokens` and `DELETE /v1/tokens/<id>`: each user's own personal
tokens, as their owner, another member, an operator (staff) and an anonymous
caller; principals without a user account cannot manage tokens."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions.models import PersonalToken, hash_token

HOST, PEER = "agents.example.com", "10.0.0.5"


def browser(user: User | None = None) -> Client:
    client = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER)
    if user is not None:
        client.force_login(user)
    return client


def with_token(secret: str, **extra) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST=HOST, REMOTE_ADDR=PEER, **extra)


@pytest.fixture
def members(db, support_agent):
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    ops = User.objects.create_user("ops", password="pw", is_staff=True)
    return alice, bob, ops


def test_a_member_creates_lists_and_revokes_their_own_tokens(members):
    alice, _, _ = members
    client = browser(alice)

    created = client.post("/v1/tokens", {"name": "laptop", "expiresDays": 30}, content_type="application/json")

    assert created.status_code == 201
    body = created.json()
    assert body["token"].startswith(body["prefix"] + "_") and body["prefix"].startswith("ast_")
    assert body["status"] == "active" and body["agents"] is None and body["expiresAt"]
    row = PersonalToken.objects.get(pk=body["tokenId"])
    assert row.user == alice and row.token_hash == hash_token(body["token"])
    listed = client.get("/v1/tokens").json()
    assert [t["tokenId"] for t in listed["tokens"]] == [body["tokenId"]]
    assert "token" not in listed["tokens"][0] and body["token"] not in str(listed)
    assert "tokenHash" not in listed["tokens"][0]

    assert client.delete(f"/v1/tokens/{body['tokenId']}").status_code == 204
    assert client.get("/v1/tokens").json()["tokens"][0]["status"] == "revoked"
    assert client.delete(f"/v1/tokens/{body['tokenId']}").status_code == 204  # revoking again changes nothing


def test_another_member_neither_sees_nor_revokes_a_token(members):
    alice, bob, _ = members
    token, _ = PersonalToken.issue(alice, "laptop")

    assert browser(bob).get("/v1/tokens").json()["tokens"] == []
    refused = browser(bob).delete(f"/v1/tokens/{token.pk}")

    assert refused.status_code == 404 and refused.json()["error"]["code"] == "token_not_found"
    token.refresh_from_db()
    assert token.status() == "active"


def test_an_operator_manages_only_their_own_tokens(members):
    alice, _, ops = members
    theirs, _ = PersonalToken.issue(alice, "laptop")
    client = browser(ops)

    created = client.post("/v1/tokens", {"name": "ops"}, content_type="application/json")

    assert created.status_code == 201
    assert [t["name"] for t in client.get("/v1/tokens").json()["tokens"]] == ["ops"]
    assert client.delete(f"/v1/tokens/{theirs.pk}").status_code == 404
    assert client.delete(f"/v1/tokens/{created.json()['tokenId']}").status_code == 204


@pytest.mark.parametrize("method,path", [("get", "/v1/tokens"), ("post", "/v1/tokens"),
                                         ("delete", "/v1/tokens/tok_000000000000")])
def test_an_anonymous_caller_is_refused(members, settings, method, path):
    nobody = getattr(browser(), method)(path, {"name": "x"} if method == "post" else None,
                                        content_type="application/json")
    assert nobody.status_code == 401 and nobody.json()["error"]["code"] == "unauthorized"

    settings.AGENTSITE_AUTH = "allow_all"
    anonymous = getattr(browser(), method)(path, {"name": "x"} if method == "post" else None,
                                           content_type="application/json")
    assert anonymous.status_code == 403 and anonymous.json()["error"]["code"] == "user_required"


def test_the_loopback_and_serve_bearer_principals_have_no_tokens_to_manage(members, settings):
    local = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    refused = local.post("/v1/tokens", {"name": "x"}, content_type="application/json")
    assert refused.status_code == 403 and "user accounts" in refused.json()["error"]["message"]

    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hash_token("serve-token-0123456789")]
    assert with_token("serve-token-0123456789").get("/v1/agents").status_code == 200
    assert with_token("serve-token-0123456789").get("/v1/tokens").status_code == 403


def test_a_personal_token_manages_tokens_unless_scoped(members):
    alice, _, _ = members
    _, secret = PersonalToken.issue(alice, "cli")
    _, scoped = PersonalToken.issue(alice, "bot", agents=["support"])

    assert with_token(secret).post("/v1/tokens", {"name": "more"}, content_type="application/json").status_code == 201
    assert len(with_token(secret).get("/v1/tokens").json()["tokens"]) == 3
    refused = with_token(scoped).get("/v1/tokens")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "scoped_token"


@pytest.mark.parametrize("body,says", [
    ({"name": "x", "agents": ["nope"]}, "no agent named 'nope'"),
    ({"name": "x", "agents": []}, "agents"),
    ({"name": "x", "expiresDays": 0}, "expiresDays"),
    ({"name": "x", "expiresDays": 2.5}, "expiresDays"),
    ({"name": "x", "expiresDays": True}, "expiresDays"),
    ({"name": " "}, "name"),
    ({"name": "x", "secret": "mine"}, "secret"),
])
def test_a_bad_token_request_is_a_400_naming_the_problem(members, body, says):
    refused = browser(members[0]).post("/v1/tokens", body, content_type="application/json")

    assert refused.status_code == 400 and says in refused.json()["error"]["message"]
    assert not PersonalToken.objects.exists()


def test_a_whole_number_written_with_a_fraction_is_an_integer_as_json_schema_says(members):
    created = browser(members[0]).post("/v1/tokens", {"name": "x", "expiresDays": 30.0}, content_type="application/json")

    assert created.status_code == 201, created.content
    assert (PersonalToken.objects.get().expires_at - PersonalToken.objects.get().created_at).days == 30


def test_the_token_list_is_cursor_paged(members):
    alice, _, _ = members
    for name in ("one", "two", "three"):
        PersonalToken.issue(alice, name)
    client = browser(alice)

    first = client.get("/v1/tokens", {"limit": 2}).json()
    rest = client.get("/v1/tokens", {"limit": 2, "cursor": first["nextCursor"]}).json()

    assert [t["name"] for t in first["tokens"] + rest["tokens"]] == ["three", "two", "one"]
    assert "nextCursor" not in rest


def test_the_document_names_the_agents_a_token_may_be_scoped_to(members):
    document = browser(members[0]).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    scope = document["components"]["schemas"]["CreateToken"]["properties"]["agents"]["anyOf"][0]

    assert scope["items"]["enum"] == ["support"]  # what the scope takes, not any slug-shaped name
