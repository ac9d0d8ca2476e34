"""How an agent's params and the environment configure each provider's client: key, base URL."""
from __future__ import annotations

import pytest

from agents.models import Secret
from sessions.models import Event
from tests.providers.conftest import CLIENT_ENV, start
from tests.providers.loopback import Reply, an_text, oa_text

PROVIDERS = {  # protocol: (model, the reply's events)
    "anthropic": ("anthropic:claude-test", an_text("Hello there.")),
    "openai": ("openai:gpt-test", oa_text("Hello there.")),
}


def sent_key(headers: dict[str, str]) -> str:
    """The key a request carried (the SDKs send it as x-api-key or as a bearer token)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


@pytest.fixture(params=sorted(PROVIDERS))
def protocol(request) -> str:
    return request.param


@pytest.fixture
def server(request, protocol):
    return request.getfixturevalue(f"{protocol}_server")


@pytest.mark.django_db(transaction=True)
def test_params_name_the_key_variable_and_the_base_url(local, agent_on_model, server, protocol, monkeypatch, sync_turns):
    model, events = PROVIDERS[protocol]
    base_url_env, path, key_env, _ = CLIENT_ENV[protocol]
    monkeypatch.delenv(base_url_env)
    monkeypatch.setenv("TEAM_MODEL_KEY", "key-of-the-team")
    agent_on_model(model, params={"api_key_env": "TEAM_MODEL_KEY", "base_url": server.url + path})
    server.replies.append(Reply(events=events))

    session_id = start(local, "remote", "hi")

    assert Event.objects.get(session_id=session_id, type="message.completed").data["text"] == "Hello there."
    assert sent_key(server.requests[0]["headers"]) == "key-of-the-team"


@pytest.mark.django_db(transaction=True)
def test_a_server_that_needs_no_key_is_reached_with_none_set(local, agent_on_model, server, protocol, monkeypatch,
                                                              sync_turns):
    model, events = PROVIDERS[protocol]
    monkeypatch.delenv(CLIENT_ENV[protocol][2])
    agent_on_model(model)
    server.replies.append(Reply(events=events))

    session_id = start(local, "remote", "hi")

    assert Event.objects.get(session_id=session_id, type="turn.completed")
    assert len(server.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_the_agents_secret_is_the_key_before_the_environment_and_a_change_counts_from_the_next_turn(
        local, agent_on_model, server, protocol, sync_turns):
    model, events = PROVIDERS[protocol]
    key_env = CLIENT_ENV[protocol][2]  # set in the environment too, by the server fixture
    agent = agent_on_model(model)
    Secret.put(agent, key_env, "key-of-this-agent")
    other = agent_on_model(model, slug="other")  # its own key comes from the environment
    server.replies.extend([Reply(events=events) for _ in range(3)])

    start(local, "remote", "hi")
    start(local, "other", "hi")
    Secret.put(agent, key_env, "key-rotated")
    start(local, "remote", "hi again")

    assert [sent_key(r["headers"]) for r in server.requests] == [
        "key-of-this-agent", CLIENT_ENV[protocol][3], "key-rotated"]
    assert other.secrets.count() == 0
