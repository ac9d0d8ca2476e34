"""`/v1/agents/<slug>/deployments…`: an agent's releases over REST, for operators and the loopback caller."""
from __future__ import annotations

import pytest
from django.test import Client

from agents.models import Agent
from sessions.models import Schedule
from tests.agents.release_support import three_releases
from tests.channels_app.roles_support import anonymous, people  # noqa: F401 (fixture)

BASE = "/v1/agents/helper/deployments"


@pytest.fixture
def releases(db, tmp_path):
    return three_releases(tmp_path)


def active_version() -> int:
    return Agent.objects.get(slug="helper").active_deployment.version


def test_an_operator_lists_the_releases_newest_first(people, releases):
    for operator in people.operators:
        answer = operator.client.get(BASE)
        assert answer.status_code == 200, answer.content
        listed = answer.json()["deployments"]
        assert [(d["version"], d["active"]) for d in listed] == [(3, True), (2, False), (1, False)]
        assert listed[2]["contentHash"] == releases[0].content_hash
        assert {"source", "sourceKind", "sourceRef", "sourceCommit", "sourcePath", "deployedBy", "allowedDomains",
                "createdAt", "activatedAt", "status"} <= set(listed[0])


def test_the_list_pages_by_version(people, releases):
    first = people.sam.client.get(BASE, {"limit": 2}).json()
    assert [d["version"] for d in first["deployments"]] == [3, 2]
    rest = people.sam.client.get(BASE, {"limit": 2, "cursor": first["nextCursor"]}).json()
    assert [d["version"] for d in rest["deployments"]] == [1]
    assert "nextCursor" not in rest


def test_one_release_shows_what_it_declares(people, releases):
    answer = people.olga.client.get(f"{BASE}/1")

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["version"], body["active"]) == (1, False)
    manifest = body["manifest"]
    assert manifest["instructions"] == "You help.\nBe brief."
    assert manifest["schedules"] == [{"id": "daily", "cron": "0 9 * * *"}]
    assert manifest["model"] == "scripted:echo" and manifest["tools"] == []
    assert body["validation"] == []


def test_an_operator_activates_an_older_release_and_its_schedules_follow(people, releases):
    answer = people.olga.client.post(f"{BASE}/1/activate")

    assert answer.status_code == 200, answer.content
    assert (answer.json()["version"], answer.json()["active"]) == (1, True)
    assert active_version() == 1
    assert Schedule.objects.get(schedule_id="daily").active
    listed = people.olga.client.get(BASE).json()["deployments"]
    assert [d["version"] for d in listed if d["active"]] == [1]


def test_activating_the_active_release_is_a_409(people, releases):
    answer = people.sam.client.post(f"{BASE}/3/activate")

    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "already_active"


@pytest.mark.parametrize("path, code", [
    ("/v1/agents/nobody/deployments", "agent_not_found"),
    (f"{BASE}/9", "deployment_not_found"),
    (f"{BASE}/0", "deployment_not_found"),
    (f"{BASE}/v1", "deployment_not_found"),
    (f"{BASE}/99999999999999999999999", "deployment_not_found"),
])
def test_unknown_agents_and_releases_are_404(people, releases, path, code):
    answer = people.sam.client.get(path)
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, code)


def test_activating_an_unknown_release_is_404_and_changes_nothing(people, releases):
    assert people.sam.client.post(f"{BASE}/9/activate").status_code == 404
    assert active_version() == 3


def test_a_member_gets_403_on_every_route_and_activates_nothing(people, releases):
    for method, path in (("get", BASE), ("get", f"{BASE}/1"), ("post", f"{BASE}/1/activate")):
        answer = getattr(people.mia.client, method)(path)
        assert answer.status_code == 403, path
        assert answer.json()["error"]["code"] == "operators_only"
    assert active_version() == 3


def test_anonymous_callers_get_401(people, releases, settings):
    for method, path in (("get", BASE), ("get", f"{BASE}/1"), ("post", f"{BASE}/1/activate")):
        assert getattr(anonymous(), method)(path).status_code == 401
    from channels_app.auth import allow_all

    settings.AGENTSITE_AUTH_POLICIES = [allow_all()]
    answer = anonymous().post(f"{BASE}/1/activate")
    assert answer.status_code == 401 and answer["WWW-Authenticate"].startswith("Bearer")
    assert active_version() == 3


def test_the_loopback_caller_of_the_embedded_default_may_use_them(local, releases):
    assert local.get(BASE).status_code == 200
    assert local.post(f"{BASE}/2/activate").status_code == 200
    assert active_version() == 2


def test_a_logged_in_operator_needs_the_csrf_token_to_activate(people, releases):
    browser = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="10.0.0.5", enforce_csrf_checks=True)
    browser.force_login(people.sam.user)
    assert browser.get(BASE).status_code == 200
    assert browser.post(f"{BASE}/1/activate").status_code == 403
    assert active_version() == 3


def test_the_routes_are_in_the_openapi_document(local, db):
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = document["paths"]
    assert set(paths["/v1/agents/{slug}/deployments"]) == {"get"}
    assert set(paths["/v1/agents/{slug}/deployments/{version}"]) == {"get"}
    activate = paths["/v1/agents/{slug}/deployments/{version}/activate"]["post"]
    assert {"200", "401", "403", "404", "409"} <= set(activate["responses"])
    assert "ReleaseDetail" in document["components"]["schemas"]
