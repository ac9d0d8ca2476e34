"""The playground's pages and a session's model: the agent page offers the agent's models when a
conversation starts, the session page says which model the session runs on and, to its principal,
offers to switch to another (the review and the handoff run in the page: tests/browser/)."""
from __future__ import annotations

import json

import pytest

from agents.discovery import deploy_agent_folder
from agents.models import Agent
from sessions.turn.admission import start_session
from sessions.principal import Principal
from tests.channels_app.roles_support import anonymous, people, start_as  # noqa: F401
from tests.sessions.test_schedules import write_agent

transactional = pytest.mark.django_db(transaction=True)
MODELS = ["scripted:echo", "scripted:other"]


@pytest.fixture
def switcher(db, tmp_path) -> Agent:
    """An agent that may run on two models, the first its default."""
    folder = write_agent(tmp_path / "switcher", {}, extra=f", models={MODELS!r}")
    return deploy_agent_folder(folder).agent


def html(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def head(page: str) -> str:
    return page.split('class="session-head"')[1].split("</div>")[0]


@transactional
def test_the_agent_page_offers_the_agents_models_for_a_new_conversation(alice, switcher, support_agent):
    page = html(alice, "/playground/switcher")

    composer = page.split('id="new-session"')[1].split("</form>")[0]
    assert ('<select name="model" id="new-model"><option value="scripted:echo">scripted:echo (default)</option>'
            '<option value="scripted:other">scripted:other</option></select>') in composer
    panel = page.split('class="side-col card info-panel"')[1]
    assert "<dt>models</dt>" in panel
    assert '<code>scripted:echo</code> <span class="muted">(default)</span>, <code>scripted:other</code>' in panel

    single = html(alice, "/playground/support")
    assert 'name="model"' not in single, "one model: nothing to choose"
    assert "<dt>model</dt>" in single.split('class="side-col card info-panel"')[1]


@transactional
def test_the_session_page_shows_the_model_the_session_is_bound_to(alice, switcher, sync_turns):
    alices = Principal(authenticator="bearer", principal_id="alice")
    default = start_session(switcher, alices, "hello").session.id
    other = start_session(switcher, alices, "hello", model="scripted:other").session.id

    page = html(alice, f"/playground/switcher/session/{default}")
    assert 'data-model="scripted:echo"' in page
    assert 'on <code id="model">scripted:echo</code>' in head(page)
    assert 'id="switch-open"' in head(page) and 'id="handoff"' in page
    assert '<script id="session-models" type="application/json">["scripted:echo", "scripted:other"]</script>' in page
    assert "playground/handoff.js" in page

    page = html(alice, f"/playground/switcher/session/{other}")
    assert 'on <code id="model">scripted:other</code>' in head(page)
    assert 'id="switch-open"' in head(page), "back to the default is a switch too"


@transactional
def test_a_session_of_a_one_model_agent_shows_its_model_and_no_switch(alice, support_agent, sync_turns):
    created = alice.post("/support/v1/session", json.dumps({"message": "hi"}), content_type="application/json")
    page = html(alice, f"/playground/support/session/{created.json()['sessionId']}")

    assert 'on <code id="model">scripted:echo</code>' in head(page)
    assert 'id="switch-open"' not in page and 'id="handoff"' not in page and "handoff.js" not in page


@transactional
def test_a_task_session_offers_no_switch(alice, switcher, sync_turns):
    created = alice.post("/switcher/v1/session", json.dumps({"message": "hi", "mode": "task"}),
                         content_type="application/json")
    page = html(alice, f"/playground/switcher/session/{created.json()['sessionId']}")

    assert 'on <code id="model">scripted:echo</code>' in head(page)
    assert 'id="switch-open"' not in page, "a task session takes no next turn to run on another model"


@pytest.mark.django_db(transaction=True)
def test_the_switch_is_offered_to_the_sessions_principal_and_to_operators_following_it(people, switcher):
    session_id = start_as(people.mia.client, slug="switcher")
    path = f"/playground/switcher/session/{session_id}"

    page = html(people.mia.client, path)
    assert 'on <code id="model">scripted:echo</code>' in head(page) and 'id="switch-open"' in head(page)
    for operator in people.operators:  # as the handoff route admits them
        page = html(operator.client, path)
        assert 'id="following"' in page and "switch its model" in page
        assert 'on <code id="model">scripted:echo</code>' in head(page)
        assert 'id="switch-open"' in head(page) and 'id="handoff"' in page
    refused = people.max.client.get(path)
    assert refused.status_code == 403 and "scripted:echo" not in refused.content.decode()
    response = anonymous().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")
