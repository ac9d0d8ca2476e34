"""`GET /v1/models`: the models of the active releases and the server default, for operators and the
loopback caller: configured, reachable (a cached probe of each provider), sessions bound to each."""
from __future__ import annotations

import pytest

from agents.models import Agent
from sessions.turn.admission import start_session
from sessions.models import Session
from tests.channels_app.roles_support import anonymous, people  # noqa: F401 (fixture)
from tests.conftest import ALICE
from tests.providers.conftest import agent_on_model, anthropic_server, openai_server  # noqa: F401 (fixtures)


def by_id(body: dict) -> dict[str, dict]:
    return {m["id"]: m for m in body["models"]}


def test_operators_and_the_loopback_caller_read_it(people, local):
    for client in [p.client for p in people.operators] + [local]:
        answer = client.get("/v1/models")
        assert answer.status_code == 200, answer.content
        echo = by_id(answer.json())["scripted:echo"]
        assert (echo["provider"], echo["model"], echo["configured"], echo["reachable"]) == (
            "scripted", "echo", True, True)
        assert echo["agents"] == ["support"] and echo["default"] is True
        assert echo["checkedAt"] and "error" not in echo


def test_a_member_gets_403_and_an_anonymous_caller_401(people):
    refused = people.mia.client.get("/v1/models")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "operators_only"
    assert anonymous().get("/v1/models").status_code == 401


def test_sessions_are_counted_by_the_model_they_are_bound_to(local, agent_on_model):
    agent = agent_on_model("scripted:echo", slug="two")
    agent_on_model("scripted:parrot", slug="other")
    for model in ["scripted:echo", "scripted:echo", None]:
        start_session(agent, ALICE, "hi", **({"model": model} if model else {}))
    parrot = start_session(Agent.objects.get(slug="other"), ALICE, "hi").session
    old = start_session(Agent.objects.get(slug="other"), ALICE, "hi").session
    Session.objects.filter(pk=old.pk).update(model="")  # a session from before selections were stored

    models = by_id(local.get("/v1/models").json())

    assert (models["scripted:echo"]["sessions"], models["scripted:echo"]["agents"]) == (3, ["two"])
    assert (models["scripted:parrot"]["sessions"], models["scripted:parrot"]["agents"]) == (2, ["other"])
    assert Session.objects.get(pk=parrot.pk).model == "scripted:parrot"


@pytest.mark.django_db(transaction=True)
def test_a_provider_that_fails_its_probe_is_unreachable_and_the_answer_is_cached(
        local, agent_on_model, anthropic_server, openai_server):
    agent_on_model("anthropic:claude-test", fallback=["openai:gpt-test"])
    openai_server.model_list_status = 503

    first = by_id(local.get("/v1/models").json())
    again = by_id(local.get("/v1/models").json())

    claude, gpt = first["anthropic:claude-test"], first["openai:gpt-test"]
    assert (claude["configured"], claude["reachable"], claude["agents"]) == (True, True, ["remote"])
    assert (gpt["configured"], gpt["reachable"]) == (True, False)
    assert gpt["error"].startswith("overloaded") and "503" in gpt["error"]
    assert again == first  # the same answer, from the cache:
    assert (anthropic_server.model_list_requests, openai_server.model_list_requests) == (1, 1)
    assert anthropic_server.requests == openai_server.requests == []  # no model was run


@pytest.mark.django_db(transaction=True)
def test_a_provider_whose_server_is_down_is_unreachable(local, agent_on_model, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # the discard port: nothing listens
    agent_on_model("openai:gpt-down")

    down = by_id(local.get("/v1/models").json())["openai:gpt-down"]

    assert (down["configured"], down["reachable"]) == (True, False)
    assert down["error"].startswith("connection_error")


def test_a_model_without_a_credential_is_not_probed(local, agent_on_model, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    agent_on_model("anthropic:claude-unset")

    unset = by_id(local.get("/v1/models").json())["anthropic:claude-unset"]

    assert (unset["configured"], unset["reachable"], unset["checkedAt"]) == (False, None, None)
