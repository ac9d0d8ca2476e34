"""An agent's params are declared for its default model: a session bound to a model of another
provider must not take that provider's server and key (`base_url`, `api_key_env`)."""
from __future__ import annotations

import json

import pytest

from agents.discovery import deploy_agent_folder
from sessions.models import Session
from tests.providers.loopback import Reply, an_text
from tests.sessions.test_schedules import write_agent

OPENAI = "openai:gpt-own"
ANTHROPIC = "anthropic:claude-test"


@pytest.mark.django_db(transaction=True)
def test_a_session_on_another_provider_keeps_its_own_server_and_key(local, anthropic_server, openai_server,
                                                                    sync_turns, tmp_path, monkeypatch):
    monkeypatch.setenv("OWN_OPENAI_KEY", "sk-own-openai")
    params = {"base_url": openai_server.url + "/v1", "api_key_env": "OWN_OPENAI_KEY", "max_retries": 0}
    deploy_agent_folder(write_agent(tmp_path / "pair", {}, model=OPENAI,
                                    extra=f", models=[{OPENAI!r}, {ANTHROPIC!r}], params={params!r}"), slug="pair")
    anthropic_server.replies.append(Reply(events=an_text("from anthropic")))

    response = local.post("/pair/v1/session", json.dumps({"message": "hi", "model": ANTHROPIC}),
                          content_type="application/json")

    assert response.status_code == 201, response.content
    session = Session.objects.get(pk=response.json()["sessionId"])
    assert session.status == "waiting" and session.conversation[-1]["content"] == "from anthropic"
    [asked] = anthropic_server.requests
    assert "sk-own-openai" not in json.dumps(asked["headers"]), "the OpenAI key named by params never leaves for Anthropic"
    assert openai_server.requests == []
