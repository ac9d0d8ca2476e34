"""Every door as each caller tries it: the matrix of `access_matrix.py`, in process.

Each family's every request is asked as every caller; a filtered answer (the
agent list, the API document, the playground's agents page) names `support`
for the operator and never for a token scoped elsewhere. The docs' access
table is the matrix's own rendering. The session websocket is asked through
the ASGI application, its refusals read as close codes (4000 + the status).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User
from django.test import Client

from agents.discovery import deploy_agent_folder
from agentsite.asgi import application
from sessions.models import PersonalToken, hash_token
from sessions.principal import OPERATORS_GROUP
from tests.channels_app.access_matrix import CALLERS, FAMILIES, SESSION, Family, docs_table
from tests.conftest import ROOT

HOST, PEER = "agents.example.com", "10.0.0.5"
METRICS_TOKEN = "scraper-secret-0123456789"
DOCS = ROOT / "docs" / "running-for-a-team.md"


@dataclass
class Cast:
    secrets: dict[str, str | None]  # caller → its bearer token (None: no credentials)
    session: str

    def client(self, caller: str) -> Client:
        secret = self.secrets[caller]
        auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"} if secret else {}
        return Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER, **auth)


def user(name: str, *, operator: bool = False) -> User:
    made = User.objects.create_user(name, password="pw")
    if operator:
        made.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    return made


@pytest.fixture
def cast(db, support_agent, settings) -> Cast:
    deploy_agent_folder(ROOT / "examples" / "notes")
    settings.AGENTSITE_METRICS_TOKEN_HASH = hash_token(METRICS_TOKEN)
    mia, max_, olga = user("mia"), user("max"), user("olga", operator=True)
    secrets = {
        "anonymous": None, "owner": PersonalToken.issue(mia, "t")[1], "member": PersonalToken.issue(max_, "t")[1],
        "operator": PersonalToken.issue(olga, "t")[1],
        "scoped_here": PersonalToken.issue(olga, "here", agents=["support"])[1],
        "scoped_elsewhere": PersonalToken.issue(olga, "elsewhere", agents=["notes"])[1],
        "metrics": METRICS_TOKEN,
    }
    created = Cast(secrets, "").client("owner").post("/support/v1/session", {"message": "hello"},
                                                     content_type="application/json")
    assert created.status_code == 201, created.content
    return Cast(secrets, created.json()["sessionId"])


def ask(cast: Cast, caller: str, request: str):
    method, path = request.split(" ", 1)
    client = cast.client(caller)
    return getattr(client, method.lower())(path.replace(SESSION, cast.session))


HTTP_FAMILIES = [f for f in FAMILIES if not f.socket]


@pytest.mark.parametrize("family", HTTP_FAMILIES, ids=[f.name for f in HTTP_FAMILIES])
def test_each_caller_gets_the_matrix_answer_at_every_request_of_the_family(cast, family: Family):
    seen = {}
    for request in family.requests:
        for caller in CALLERS:
            answer = ask(cast, caller, request)
            seen[(request, caller)] = answer.status_code
            if answer.status_code == 302:
                assert answer["Location"].startswith("/accounts/login/?next="), (request, caller)
    wanted = {(r, c): family.expected(r, c) for r in family.requests for c in CALLERS}
    assert seen == wanted


FILTERED = [f for f in FAMILIES if f.names_support]


@pytest.mark.parametrize("family", FILTERED, ids=[f.name for f in FILTERED])
def test_a_filtered_answer_names_no_agent_outside_the_tokens_scope(cast, family: Family):
    request = family.requests[0]
    assert family.names_support in ask(cast, "operator", request).content.decode()
    assert family.names_support in ask(cast, "scoped_here", request).content.decode()
    elsewhere = ask(cast, "scoped_elsewhere", request).content.decode()
    assert family.names_support not in elsewhere and "notes" in elsewhere


SOCKETS = [f for f in FAMILIES if f.socket]


async def socket_answer(path: str, secret: str | None) -> int:
    """200 when the socket opens and replays, else the HTTP status its close code carries."""
    headers = [(b"host", HOST.encode())] + ([(b"authorization", f"Bearer {secret}".encode())] if secret else [])
    communicator = WebsocketCommunicator(application, path + "?startIndex=0", headers=headers)
    communicator.scope["client"] = (PEER, 50123)
    connected, _ = await communicator.connect(timeout=15)
    assert connected
    message = await communicator.receive_output(timeout=15)
    await communicator.disconnect(code=message.get("code", 1000), timeout=15)
    if message["type"] == "websocket.close":
        return message["code"] - 4000
    assert message["type"] == "websocket.send", message
    return 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("family", SOCKETS, ids=[f.name for f in SOCKETS])
def test_each_caller_gets_the_matrix_answer_on_the_websocket(cast, family: Family):
    path = family.requests[0].split(" ", 1)[1].replace(SESSION, cast.session)
    seen = {caller: async_to_sync(socket_answer)(path, cast.secrets[caller]) for caller in CALLERS}
    assert seen == family.expect


def test_the_access_table_in_the_docs_is_the_matrix():
    assert docs_table() in DOCS.read_text(), f"paste this table into {Path(DOCS).name}:\n{docs_table()}"
