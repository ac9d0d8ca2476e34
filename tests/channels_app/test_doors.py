"""The doors as a hostile caller tries them beyond the matrix: a bearer no policy verifies, the
Host a websocket names, a token scoped away from its owner's own session, the API document
and the docs pages of a server whose agents a caller may not know."""
from __future__ import annotations

import hashlib
import shutil

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.channels import AuthPolicy
from agents.discovery import deploy_agent_folder
from agentsite.asgi import application
from channels_app.auth import (
    LOCAL_PRINCIPAL, PUBLIC, RequestInfo, authenticate, bearer_auth, channel_chain, local_dev_strict)
from sessions.models import PersonalToken
from sessions.principal import OPERATORS_GROUP
from tests.conftest import ROOT

LOOPBACK = {"HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1"}
REMOTE = {"HTTP_HOST": "agents.example.com", "REMOTE_ADDR": "10.0.0.5"}
# Not a personal token's shape: the metrics token, a token of another server, a guess.
FOREIGN_BEARERS = ["scraper-secret-0123456789", "ghp_0123456789abcdef", "x"]


@pytest.fixture
def default_chain(settings):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password="pw")


async def socket_close(path: str, headers: list[tuple[bytes, bytes]], peer: str) -> tuple[bool, int | None]:
    """Whether the handshake was accepted, and the close code if the socket was then closed at once."""
    communicator = WebsocketCommunicator(application, path, headers=headers)
    communicator.scope["client"] = (peer, 50123)
    connected, code = await communicator.connect(timeout=15)
    if not connected:
        return False, code
    message = await communicator.receive_output(timeout=15)
    await communicator.disconnect(code=message.get("code", 1000), timeout=15)
    return True, message.get("code") if message["type"] == "websocket.close" else None


def session_of(client: Client, message: str = "hello") -> str:
    created = client.post("/support/v1/session", {"message": message}, content_type="application/json")
    assert created.status_code == 201, created.content
    return created.json()["sessionId"]


# -- a bearer no policy verifies ----------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("bearer", FOREIGN_BEARERS)
def test_a_bearer_no_policy_verifies_is_401_from_loopback_not_the_local_principal(default_chain, support_agent,
                                                                                   bearer):
    assert Client(**LOOPBACK).get("/v1/agents").status_code == 200  # the local principal, as before
    forged = Client(HTTP_AUTHORIZATION=f"Bearer {bearer}", **LOOPBACK)

    refused = forged.get("/v1/agents")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert forged.get("/v1/models").status_code == 401
    assert forged.get("/support/v1/info").status_code == 401
    assert forged.post("/support/v1/session", {"message": "hi"}, content_type="application/json").status_code == 401
    page = forged.get("/playground/support")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


@pytest.mark.django_db(transaction=True)
def test_a_bearer_no_policy_verifies_closes_the_loopback_websocket_with_4401(default_chain, support_agent):
    session_id = session_of(Client(**LOOPBACK))
    path = f"/support/v1/session/{session_id}/ws?startIndex=0"
    host = [(b"host", b"127.0.0.1:8000")]

    assert async_to_sync(socket_close)(path, host, "127.0.0.1") == (True, None)
    forged = host + [(b"authorization", b"Bearer not-a-token-of-this-server")]
    assert async_to_sync(socket_close)(path, forged, "127.0.0.1") == (True, 4401)


@pytest.mark.django_db
def test_a_bearer_the_next_policy_verifies_passes_an_ambient_policy_before_it(settings, support_agent):
    settings.AGENTSITE_AUTH_POLICIES = [local_dev_strict(), bearer_auth({"service-token-5521": "deploy-bot"})]
    service = Client(HTTP_AUTHORIZATION="Bearer service-token-5521", **LOOPBACK)

    created = service.post("/support/v1/session", {"message": "hi"}, content_type="application/json")
    assert created.status_code == 201, created.content
    assert authenticate(RequestInfo(peer="127.0.0.1", host="127.0.0.1:8000",
                                    headers={"authorization": "Bearer service-token-5521"})).principal_id == "deploy-bot"
    assert Client(HTTP_AUTHORIZATION="Bearer service-token-5520", **LOOPBACK).get("/v1/agents").status_code == 401
    assert Client(**LOOPBACK).get("/v1/agents").status_code == 200  # no bearer: the loopback caller, as before


@pytest.mark.django_db
def test_the_loopback_caller_who_passes_the_operators_doors_lists_every_principals_sessions(default_chain,
                                                                                           support_agent, carol):
    theirs = session_of(Client(HTTP_AUTHORIZATION=f"Bearer {PersonalToken.issue(carol, 'cli')[1]}", **REMOTE))
    local = Client(**LOOPBACK)
    assert local.get("/metrics").status_code == 200  # an operators' door

    listed = local.get("/support/v1/sessions?all=1")
    assert listed.status_code == 200, listed.content
    assert theirs in listed.content.decode()
    page = local.get("/playground/support?all=1")
    assert page.status_code == 200 and theirs in page.content.decode()
    assert local.get(f"/support/v1/session/{theirs}").status_code == 200


@pytest.mark.django_db
def test_a_bearer_no_policy_verifies_is_not_served_as_the_browsers_login(default_chain, support_agent, carol):
    browser = Client(HTTP_AUTHORIZATION="Bearer stolen-elsewhere", **REMOTE)
    browser.force_login(carol)

    assert browser.get("/v1/agents").status_code == 401
    browser.defaults.pop("HTTP_AUTHORIZATION")
    assert browser.get("/v1/agents").status_code == 200


@pytest.mark.django_db
def test_under_serve_bearer_token_the_configured_token_and_a_personal_token_still_pass(settings, support_agent,
                                                                                      carol):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = [hashlib.sha256(b"s3cret-token").hexdigest()]
    _, personal = PersonalToken.issue(carol, "cli")

    for bearer, status in (("s3cret-token", 200), (personal, 200), ("s3cret-tokem", 401)):
        assert Client(HTTP_AUTHORIZATION=f"Bearer {bearer}", **LOOPBACK).get("/v1/agents").status_code == status


@pytest.mark.django_db
def test_a_custom_channels_authored_chain_keeps_its_meaning():
    loopback = {"peer": "127.0.0.1", "host": "127.0.0.1:8000"}
    with_bearer = RequestInfo(headers={"authorization": "Bearer hook-secret"}, **loopback)
    other_bearer = RequestInfo(headers={"authorization": "Bearer guess"}, **loopback)
    bare = RequestInfo(headers={}, **loopback)

    # A verifier of its own, then the loopback: its token passes, a wrong one is not the local principal.
    chain = channel_chain([AuthPolicy(kind="bearer_auth", tokens={"hook-secret": "hooks"}),
                           AuthPolicy(kind="local_dev_strict")])
    assert authenticate(with_bearer, chain).principal_id == "hooks"
    assert authenticate(bare, chain) == LOCAL_PRINCIPAL
    assert authenticate(other_bearer, chain) is None
    # An authored function reads whatever it likes: its answer stands.
    assert authenticate(other_bearer, channel_chain([lambda info: "signed-webhook"])).principal_id == "signed-webhook"
    # A public endpoint is public whatever the request carries.
    assert authenticate(other_bearer, channel_chain([AuthPolicy(kind="public_endpoint")])) == PUBLIC
    assert authenticate(with_bearer, [bearer_auth({"hook-secret": "hooks"})]).principal_id == "hooks"


# -- the Host a websocket names -----------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_in_production_a_websocket_naming_another_host_is_refused_as_http_is(settings, support_agent, carol):
    settings.ALLOWED_HOSTS = ["agents.example.com"]
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"
    _, secret = PersonalToken.issue(carol, "cli")
    session_id = session_of(Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **REMOTE))
    path = f"/support/v1/session/{session_id}/ws?startIndex=0"
    token = [(b"authorization", f"Bearer {secret}".encode())]

    assert async_to_sync(socket_close)(path, [(b"host", b"agents.example.com"), *token], "10.0.0.5") == (True, None)
    for host, peer, extra in (("evil.example", "10.0.0.5", token), ("127.0.0.1", "127.0.0.1", []),
                              ("localhost:8000", "127.0.0.1", [])):
        # Over HTTP the same Host is a 400; the socket's handshake is denied before any policy runs.
        assert Client(HTTP_HOST=host, REMOTE_ADDR=peer).get("/v1/agents").status_code == 400
        accepted, _ = async_to_sync(socket_close)(path, [(b"host", host.encode()), *extra], peer)
        assert not accepted, host  # a server answers the handshake 403


# -- a token scoped away from its owner's own session -------------------------------

@pytest.mark.django_db(transaction=True)
def test_the_owners_own_token_scoped_elsewhere_reaches_none_of_her_sessions_doors(support_agent, carol):
    deploy_agent_folder(ROOT / "examples" / "notes")
    _, unscoped = PersonalToken.issue(carol, "cli")
    _, elsewhere = PersonalToken.issue(carol, "bot", agents=["notes"])
    session_id = session_of(Client(HTTP_AUTHORIZATION=f"Bearer {unscoped}", **REMOTE), "my-quiet-word-8731")
    scoped = Client(HTTP_AUTHORIZATION=f"Bearer {elsewhere}", **REMOTE)
    base = f"/support/v1/session/{session_id}"
    owner = Client(HTTP_AUTHORIZATION=f"Bearer {unscoped}", **REMOTE)
    for path in (f"{base}/events", f"/playground/support/session/{session_id}/eval-case"):
        assert "my-quiet-word-8731" in owner.get(path).content.decode(), path

    for path in (base, f"{base}/events", f"{base}/stream", f"{base}/artifacts", "/support/v1/sessions",
                 f"/playground/support/session/{session_id}", f"/playground/support/session/{session_id}/trace",
                 f"/playground/support/session/{session_id}/eval-case", f"/playground/support?sessionId={session_id}",
                 "/playground/support", "/playground/support/abs/brief-replies", "/support/v1/abs/brief-replies"):
        answer = scoped.get(path)
        assert answer.status_code == 403, path
        assert "my-quiet-word-8731" not in answer.content.decode(), path
    assert scoped.post(f"{base}/message", {"message": "hi"}, content_type="application/json").status_code == 403
    headers = [(b"host", b"agents.example.com"), (b"authorization", f"Bearer {elsewhere}".encode())]
    assert async_to_sync(socket_close)(f"{base}/ws?startIndex=0", headers, "10.0.0.5") == (True, 4403)
    assert scoped.get("/playground/notes").status_code == 200


# -- what the API document and the docs say about the server's agents ---------------

@pytest.mark.django_db
def test_the_api_document_of_a_scoped_token_names_only_its_agents(support_agent, carol):
    deploy_agent_folder(ROOT / "examples" / "notes")
    _, secret = PersonalToken.issue(carol, "bot", agents=["notes"])

    document = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **REMOTE).get("/api/schema/?format=json").json()
    every = Client(HTTP_AUTHORIZATION=f"Bearer {PersonalToken.issue(carol, 'cli')[1]}", **REMOTE).get(
        "/api/schema/?format=json").json()

    assert any(p.startswith("/support/") for p in every["paths"])
    assert [p for p in document["paths"] if not p.startswith(("/{slug}/", "/v1/", "/notes/", "/healthz"))] == []
    assert any(p.startswith("/notes/") for p in document["paths"]) or "notes" not in str(every["paths"])
    support_tools = {t["name"] for t in support_agent.active_deployment.manifest.get("tools", [])}
    tool_names = str(document["paths"]["/{slug}/v1/tools/{tool_name}/call"])
    assert not any(f"'{name}'" in tool_names for name in support_tools - {"ls"})

    # Anywhere in the document, in either form served: no enum, example or text names `support`.
    scoped = Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **REMOTE)
    for form in ("json", "yaml"):
        text = scoped.get(f"/api/schema/?format={form}").content.decode()
        assert "notes" in text, form
        assert "support" not in text, form


@pytest.mark.django_db
def test_the_model_enum_of_a_scoped_tokens_document_is_its_agents_models(tmp_path, support_agent, carol):
    folder = tmp_path / "ledger"
    shutil.copytree(ROOT / "examples" / "notes", folder)
    script = folder / "agent" / "agent.py"
    script.write_text(script.read_text().replace(
        "agent = Agent(\n", "agent = Agent(\n    models=['scripted:echo', 'openai:gpt-4.1-mini'],\n"))
    deploy_agent_folder(folder)
    _, secret = PersonalToken.issue(carol, "bot", agents=["ledger"])

    def model_enums(client: Client) -> set[tuple[str, ...]]:
        schemas = client.get("/api/schema/?format=json").json()["components"]["schemas"]
        return {tuple(option.get("enum", ())) for name in ("CreateSession", "FollowUp")
                for option in schemas[name]["properties"]["model"]["anyOf"] if option.get("type") == "string"}

    unscoped = Client(HTTP_AUTHORIZATION=f"Bearer {PersonalToken.issue(carol, 'cli')[1]}", **REMOTE)
    assert model_enums(unscoped) == {("scripted:echo",)}  # what every agent may run on
    assert model_enums(Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **REMOTE)) == {
        ("openai:gpt-4.1-mini", "scripted:echo")}


@pytest.mark.django_db
def test_the_docs_pages_name_no_deployed_agent(tmp_path, support_agent):
    folder = tmp_path / "zebra-ledger-7"
    shutil.copytree(ROOT / "examples" / "notes", folder)
    deploy_agent_folder(folder)
    anyone = Client(**REMOTE)

    for path in ("/docs/", "/docs/running-for-a-team", "/docs/llms.txt", "/docs/llms-full.txt"):
        answer = anyone.get(path)
        assert answer.status_code == 200 and "zebra-ledger-7" not in answer.content.decode(), path
    assert anyone.get("/v1/agents").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/v1/models", "/v1/agents/support/deployments", "/v1/agents/support/secrets"])
def test_a_method_an_operators_route_lacks_is_405_for_a_member_and_401_for_no_one(support_agent, carol, path):
    member = Client(HTTP_AUTHORIZATION=f"Bearer {PersonalToken.issue(carol, 'cli')[1]}", **REMOTE)

    assert member.generic("TRACE", path).status_code == 405
    assert member.get(path).status_code == 403
    assert Client(**REMOTE).generic("TRACE", path).status_code == 401


@pytest.mark.django_db
def test_authorizing_an_agents_mcp_server_is_for_unscoped_operators(support_agent, carol):
    olga = User.objects.create_user("olga", password="pw")
    olga.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    path = "/playground/support/mcp-oauth/callback?state=guess&code=guess"

    def as_(secret: str | None):
        return Client(**REMOTE, **({"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {})).get(path)

    assert as_(None).status_code == 302
    assert as_(PersonalToken.issue(carol, "cli")[1]).status_code == 403
    scoped = as_(PersonalToken.issue(olga, "here", agents=["support"])[1])
    assert scoped.status_code == 403 and "scope" in scoped.content.decode()
    past_the_door = as_(PersonalToken.issue(olga, "cli")[1])
    assert past_the_door.status_code == 400 and "Unknown authorization" in past_the_door.content.decode()
