"""`GET /v1/agents` lists what the caller may reach: a personal token scoped to some
agents sees only those (and the others' info is 403 to it); an unscoped token, a
login and an anonymous caller the server admits see every deployed agent."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from agents.discovery import deploy_agent_folder
from sessions.models import PersonalToken
from tests.conftest import ROOT

transactional = pytest.mark.django_db(transaction=True)
REMOTE = {"HTTP_HOST": "agents.example.com", "REMOTE_ADDR": "10.0.0.5"}


@pytest.fixture
def two_agents(support_agent) -> list[str]:
    deploy_agent_folder(ROOT / "examples" / "notes")
    return ["notes", "support"]


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password="first-secret-1")


def listed(client: Client) -> list[str]:
    response = client.get("/v1/agents")
    assert response.status_code == 200, response.content
    return sorted(a["slug"] for a in response.json()["agents"])


def bearer(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", **REMOTE)


@transactional
def test_a_scoped_token_lists_only_its_agents_and_is_refused_the_others_info(two_agents, carol):
    _, secret = PersonalToken.issue(carol, "bot", agents=["support"])

    assert listed(bearer(secret)) == ["support"]
    assert bearer(secret).get("/support/v1/info").status_code == 200
    refused = bearer(secret).get("/notes/v1/info")
    assert refused.status_code == 403 and "scoped" in refused.json()["error"]["message"]


@transactional
def test_a_token_scoped_to_several_agents_lists_each(two_agents, carol):
    _, secret = PersonalToken.issue(carol, "bot", agents=["notes", "support"])

    assert listed(bearer(secret)) == two_agents


@transactional
def test_an_unscoped_token_lists_every_agent(two_agents, carol):
    _, secret = PersonalToken.issue(carol, "cli")

    assert listed(bearer(secret)) == two_agents
    assert bearer(secret).get("/notes/v1/info").status_code == 200


@transactional
def test_a_login_lists_every_agent(two_agents, carol):
    browser = Client(**REMOTE)
    browser.force_login(carol)

    assert listed(browser) == two_agents


@transactional
def test_an_anonymous_caller_lists_every_agent_where_the_server_admits_one(two_agents, anonymous):
    assert listed(anonymous) == two_agents


@transactional
def test_a_caller_no_policy_admits_is_refused_the_list(two_agents):
    assert Client(**REMOTE).get("/v1/agents").status_code == 401
