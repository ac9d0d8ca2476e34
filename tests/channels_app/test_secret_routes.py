"""`/v1/agents/<slug>/secrets…`: an agent's secrets over REST, for operators and the loopback caller.

A value goes in with PUT and never comes out: every answer is the secret's metadata.
Members, tokens scoped to some agents and anonymous callers are refused on every route.
"""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from agents.models import Agent, Secret
from agents.secrets.lookup import credential
from agents.secrets.store import acting_for
from sessions.models import PersonalToken
from tests.channels_app.roles_support import Person, anonymous, people  # noqa: F401 (fixture)

BASE = "/v1/agents/support/secrets"
MARKER = "MARKER-rest-2b9c41f07e"


def put(person_or_client, name: str, value: str):
    client = getattr(person_or_client, "client", person_or_client)
    return client.put(f"{BASE}/{name}", json.dumps({"value": value}), content_type="application/json")


def every_route(name: str = "API_TOKEN") -> list[tuple[str, str, dict]]:
    body = {"data": json.dumps({"value": "v"}), "content_type": "application/json"}
    return [("get", BASE, {}), ("get", f"{BASE}/{name}", {}), ("put", f"{BASE}/{name}", body),
            ("delete", f"{BASE}/{name}", {})]


def test_an_operator_sets_replaces_reads_and_unsets_a_secret(people):
    for operator in people.operators:
        created = put(operator, "API_TOKEN", MARKER)
        assert created.status_code == 201, created.content
        body = created.json()
        assert set(body) == {"name", "setBy", "setAt", "expiresAt"}
        assert (body["name"], body["setBy"], body["expiresAt"]) == ("API_TOKEN", operator.user.username, None)

        replaced = put(operator, "API_TOKEN", MARKER + "-2")
        assert replaced.status_code == 200 and replaced.json()["name"] == "API_TOKEN"
        with acting_for("support"):
            assert credential("API_TOKEN") == MARKER + "-2"

        shown = operator.client.get(f"{BASE}/API_TOKEN")
        listed = operator.client.get(BASE)
        assert shown.status_code == 200 and shown.json() == replaced.json()
        assert listed.status_code == 200 and [s["name"] for s in listed.json()["secrets"]] == ["API_TOKEN"]
        for answer in (created, replaced, shown, listed):
            assert MARKER.encode() not in answer.content

        gone = operator.client.delete(f"{BASE}/API_TOKEN")
        assert gone.status_code == 204
        assert not Secret.objects.exists()


def test_the_list_is_by_name_and_pages(people):
    for name in ("ZETA", "ALPHA", "MID"):
        put(people.sam, name, "v")
    first = people.sam.client.get(BASE, {"limit": 2}).json()
    assert [s["name"] for s in first["secrets"]] == ["ALPHA", "MID"]
    rest = people.sam.client.get(BASE, {"limit": 2, "cursor": first["nextCursor"]}).json()
    assert [s["name"] for s in rest["secrets"]] == ["ZETA"] and "nextCursor" not in rest


def test_an_unset_secret_is_404_to_read_and_to_unset(people):
    for method in ("get", "delete"):
        answer = getattr(people.olga.client, method)(f"{BASE}/NEVER_SET")
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "secret_not_found")


def test_an_unknown_agent_is_404_on_every_route(people):
    for method, path, extra in every_route():
        answer = getattr(people.sam.client, method)(path.replace("/support/", "/nobody/"), **extra)
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "agent_not_found"), (method, path)


@pytest.mark.parametrize("name", ["1STARTS_WITH_DIGIT", "has-dash", "a.b", "X" * 129])
def test_a_bad_name_is_a_400_on_every_route_but_the_list(people, name):
    for method, path, extra in every_route(name)[1:]:
        answer = getattr(people.olga.client, method)(path, **extra)
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_secret_name"), method
    assert not Secret.objects.exists()


@pytest.mark.parametrize("body, field", [
    ({"value": ""}, "value"), ({}, "value"), ({"value": 42}, "value"), ({"value": "v", "extra": 1}, "extra"),
    ({"value": "a\u0000b"}, "value"), ({"value": "é" * 40_000}, "value"),
])
def test_a_bad_value_is_a_400_and_stores_nothing(people, body, field):
    answer = people.sam.client.put(f"{BASE}/API_TOKEN", json.dumps(body), content_type="application/json")

    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] in ("invalid_request", "invalid_text", "invalid_secret_value")
    assert not Secret.objects.exists()


@pytest.mark.parametrize("value", [" ", "   ", "\t\n", "\u00a0\u2003"])
def test_a_blank_value_is_a_400_invalid_secret_value_and_stores_nothing(people, value):
    answer = people.sam.client.put(f"{BASE}/API_TOKEN", json.dumps({"value": value}), content_type="application/json")

    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "invalid_secret_value"
    assert "blank" in answer.json()["error"]["message"]
    assert not Secret.objects.exists()


def test_members_are_refused_on_every_route_and_change_nothing(people):
    Secret.put(Agent.objects.get(slug="support"), "API_TOKEN", MARKER, by="olga")
    for member in (people.mia, people.max):
        for method, path, extra in every_route():
            answer = getattr(member.client, method)(path, **extra)
            assert (answer.status_code, answer.json()["error"]["code"]) == (403, "operators_only"), (method, path)
            assert MARKER.encode() not in answer.content
    assert Secret.objects.get().reveal() == MARKER


def test_a_token_scoped_to_some_agents_is_refused_even_an_operators(people):
    Agent.objects.create(slug="elsewhere", name="Elsewhere")
    for agents in (["support"], ["elsewhere"]):
        _, secret = PersonalToken.issue(people.sam.user, "scoped", agents=agents)
        scoped = Person(people.sam.user, secret).client
        for method, path, extra in every_route():
            assert getattr(scoped, method)(path, **extra).status_code == 403, (agents, method, path)
    assert not Secret.objects.exists()


def test_anonymous_callers_get_401_on_every_route(people, settings):
    for method, path, extra in every_route():
        assert getattr(anonymous(), method)(path, **extra).status_code == 401, (method, path)
    from channels_app.auth import allow_all

    settings.AGENTSITE_AUTH_POLICIES = [allow_all()]
    for method, path, extra in every_route():
        answer = getattr(anonymous(), method)(path, **extra)
        assert answer.status_code == 401 and answer["WWW-Authenticate"].startswith("Bearer"), (method, path)
    assert not Secret.objects.exists()


def test_an_inactive_operator_is_refused(people):
    User.objects.filter(pk=people.olga.user.pk).update(is_active=False)
    assert people.olga.client.get(BASE).status_code == 401


def test_the_loopback_caller_of_the_embedded_default_may_use_them(local, support_agent):
    assert put(local, "API_TOKEN", "v").status_code == 201
    assert local.get(BASE).json()["secrets"][0]["setBy"] == "local"
    assert local.delete(f"{BASE}/API_TOKEN").status_code == 204


def test_a_logged_in_operator_needs_the_csrf_token_to_change_a_secret(people):
    from django.test import Client

    browser = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="10.0.0.5", enforce_csrf_checks=True)
    browser.force_login(people.sam.user)
    assert browser.get(BASE).status_code == 200
    assert put(browser, "API_TOKEN", "v").status_code == 403
    assert not Secret.objects.exists()


def test_the_routes_are_in_the_openapi_document_with_no_value_example(local, support_agent):
    put(local, "API_TOKEN", MARKER)
    answer = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    document = answer.json()
    paths = document["paths"]
    assert set(paths["/v1/agents/{slug}/secrets"]) == {"get"}
    one = paths["/v1/agents/{slug}/secrets/{name}"]
    assert set(one) == {"get", "put", "delete"}
    assert {"200", "201", "400", "401", "403", "404"} <= set(one["put"]["responses"])
    assert {"204", "404"} <= set(one["delete"]["responses"])
    value = document["components"]["schemas"]["SecretValue"]["properties"]["value"]
    assert value["writeOnly"] is True and value["format"] == "password"
    assert "example" not in value and "examples" not in value
    assert set(document["components"]["schemas"]["SecretInfo"]["properties"]) == {
        "name", "setBy", "setAt", "expiresAt"}
    assert MARKER.encode() not in answer.content
