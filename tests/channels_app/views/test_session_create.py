"""POST /<slug>/v1/session: what a new session answers, in chat and task mode.

Bad input is in tests/channels_app/test_bad_*.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

import pytest

from sessions.models import Event, Session, Turn
from tests.channels_app.views.http import create, created, event_types, events_of, post_json, transactional


# -- POST /<slug>/v1/session -------------------------------------------------

@transactional
def test_creating_a_session_answers_201_with_its_token_and_urls(local, support_agent, sync_turns):
    response = create(local, "hello")

    assert response.status_code == 201
    body = response.json()
    session_id = body["sessionId"]
    assert session_id.startswith("ses_")
    assert body["continuationToken"]
    assert body["mode"] == "chat"
    assert body["status"] == "waiting"
    assert body["streamUrl"] == f"http://127.0.0.1:8000/support/v1/session/{session_id}/stream"
    assert body["eventsUrl"] == f"http://127.0.0.1:8000/support/v1/session/{session_id}/events"
    assert body["playgroundUrl"] == f"http://127.0.0.1:8000/playground/support?sessionId={session_id}"
    assert events_of(session_id, "message.completed") == [{"text": "You said: hello"}]


@transactional
def test_a_chat_turn_writes_the_documented_events_with_contiguous_indexes(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    assert event_types(session_id) == [
        "session.started", "agent.bound", "message.received", "turn.started", "step.started",
        "message.appended", "message.completed", "step.completed", "turn.completed", "session.waiting",
    ]
    indexes = list(Event.objects.filter(session_id=session_id).order_by("index").values_list("index", flat=True))
    assert indexes == list(range(len(indexes)))


@transactional
def test_the_first_line_of_the_message_becomes_the_default_title(local, support_agent, sync_turns):
    session_id = created(local, "Where is my teapot?\nIt was order A100.")["sessionId"]
    assert Session.objects.get(pk=session_id).title == "Where is my teapot?"

    titled = created(local, "hello", title="Teapot")["sessionId"]
    assert Session.objects.get(pk=titled).title == "Teapot"


@transactional
def test_dry_run_and_as_of_are_kept_in_the_session_options(local, support_agent, sync_turns):
    session_id = created(local, "hello", dryRun=True, asOf="2026-01-31T12:00:00Z")["sessionId"]

    detail = local.get(f"/support/v1/session/{session_id}").json()
    assert detail["options"] == {"dryRun": True, "asOf": "2026-01-31T12:00:00+00:00"}
    started = events_of(session_id, "session.started")[0]
    assert started["options"] == {"dryRun": True, "asOf": "2026-01-31T12:00:00+00:00"}


@pytest.mark.django_db
def test_an_agent_without_a_deployment_refuses_new_sessions_with_409(local):
    from agents.models import Agent

    Agent.objects.create(slug="draft")
    response = post_json(local, "/draft/v1/session", {"message": "hello"})

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "agent_not_deployed"

# -- task mode -----------------------------------------------------------------

@transactional
def test_a_task_session_ends_in_session_completed_and_refuses_follow_ups(local, support_agent, sync_turns):
    first = created(local, "do it", mode="task")
    session_id = first["sessionId"]

    assert first["mode"] == "task"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.completed"]
    assert Session.objects.get(pk=session_id).status == "completed"

    follow_up = post_json(local, f"/support/v1/session/{session_id}/message",
                          {"message": "more", "continuationToken": first["continuationToken"]})
    assert follow_up.status_code == 409
    assert follow_up.json()["error"]["code"] == "task_session"

    via_token = create(local, "more", continuationToken=first["continuationToken"])
    assert via_token.status_code == 409
    assert via_token.json()["error"]["code"] == "task_session"
    assert Turn.objects.filter(session_id=session_id).count() == 1


@transactional
def test_a_task_session_whose_model_fails_ends_in_session_failed(local, support_agent, sync_turns):
    session_id = created(local, "/fail boom", mode="task")["sessionId"]

    assert event_types(session_id)[-2:] == ["turn.failed", "session.failed"]
    failed = events_of(session_id, "turn.failed")[0]
    assert failed["error"] == "boom"
    assert failed["code"] == "scripted_failure"
    assert events_of(session_id, "session.failed") == [{"error": "boom"}]
    assert local.get(f"/support/v1/session/{session_id}").json()["status"] == "failed"


@transactional
def test_a_chat_turn_whose_model_fails_leaves_the_session_usable(local, support_agent, sync_turns):
    first = created(local, "/fail boom")
    session_id = first["sessionId"]
    assert event_types(session_id)[-2:] == ["turn.failed", "session.waiting"]

    again = post_json(local, f"/support/v1/session/{session_id}/message",
                      {"message": "hello", "continuationToken": first["continuationToken"]})

    assert again.status_code == 202
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@transactional
def test_a_new_session_starts_on_the_release_active_now(local, support_agent, tmp_path):
    """The web process keeps the agent it loaded; a deploy or a rollback in between must still be seen."""
    import shutil

    from agents.discovery import deploy_agent_folder
    from agents.models import Deployment
    from tests.conftest import EXAMPLE

    first = created(local, "hello")["sessionId"]
    copy = tmp_path / "support"
    shutil.copytree(EXAMPLE, copy)
    (copy / "agent" / "instructions.md").write_text("Changed instructions.\n")
    second_release = deploy_agent_folder(copy, slug="support")
    second = created(local, "hello")["sessionId"]
    Deployment.objects.get(agent=support_agent, version=1).activate()  # rollback
    third = created(local, "hello")["sessionId"]

    versions = [Session.objects.get(pk=s).deployment.version for s in (first, second, third)]
    assert second_release.version == 2
    assert versions == [1, 2, 1]
