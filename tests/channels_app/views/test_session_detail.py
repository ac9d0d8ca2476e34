"""One session and the list of them: stop, detail, delete, GET /<slug>/v1/sessions.

Bad input is in tests/channels_app/test_bad_*.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.discovery import deploy_agent_folder
from sessions.turn.engine import run_turn
from sessions.models import Event, Session, Turn
from tests.channels_app.views.http import (
    created, event_types, events_of, post_json, transactional, write_agent,
)


# -- stop -------------------------------------------------------------------------

@transactional
def test_stop_with_no_running_turn_gets_409(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    response = local.post(f"/support/v1/session/{session_id}/stop")

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "not_running"


@transactional
def test_stop_interrupts_the_turn_which_ends_with_turn_interrupted(local, support_agent):
    # No sync_turns: the turn waits in django-q's queue, as it would for a busy worker.
    body = created(local, "hello")
    session_id = body["sessionId"]
    assert body["status"] == "running"

    response = local.post(f"/support/v1/session/{session_id}/stop")
    assert response.status_code == 202
    assert response.json() == {"sessionId": session_id, "stopping": True}

    run_turn(body["turnId"])  # what the worker does when it gets to the task

    assert event_types(session_id)[-2:] == ["turn.failed", "session.waiting"]
    assert events_of(session_id, "turn.failed")[0]["error"] == "turn interrupted"
    assert Turn.objects.get(pk=body["turnId"]).status == "interrupted"
    assert local.get(f"/support/v1/session/{session_id}").json()["status"] == "waiting"
    assert local.post(f"/support/v1/session/{session_id}/stop").status_code == 409


# -- GET /<slug>/v1/session/<id> and DELETE ---------------------------------------

@transactional
def test_session_detail_shows_status_mode_principal_usage_and_deployment(local, support_agent, sync_turns):
    session_id = created(local, "hello", title="Greeting")["sessionId"]

    response = local.get(f"/support/v1/session/{session_id}")

    assert response.status_code == 200
    detail = response.json()
    deployment = support_agent.active_deployment
    assert detail["sessionId"] == session_id
    assert detail["agent"] == "support"
    assert detail["status"] == "waiting"
    assert detail["mode"] == "chat"
    assert detail["title"] == "Greeting"
    assert detail["channel"] == "http"
    assert detail["principal"] == {"authenticator": "local", "principalId": "local", "principalType": "user"}
    assert detail["usage"]["inputTokens"] > 0
    assert detail["usage"]["outputTokens"] > 0
    assert detail["deployment"] == {"version": deployment.version, "contentHash": deployment.content_hash}
    assert "abVariants" not in detail
    assert detail["activeTurnId"] is None
    assert detail["lastEventIndex"] == Event.objects.filter(session_id=session_id).count() - 1
    assert detail["createdAt"].endswith("Z")


@transactional
def test_deleting_a_session_removes_it_with_its_events_and_turns(local, support_agent, sync_turns):
    session_id = created(local, "hello")["sessionId"]

    response = local.delete(f"/support/v1/session/{session_id}")

    assert response.status_code == 204
    assert not Session.objects.filter(pk=session_id).exists()
    assert not Event.objects.filter(session_id=session_id).exists()
    assert not Turn.objects.filter(session_id=session_id).exists()
    gone = local.get(f"/support/v1/session/{session_id}")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "session_not_found"
    assert local.delete(f"/support/v1/session/{session_id}").status_code == 404

# -- GET /<slug>/v1/sessions --------------------------------------------------------

@pytest.mark.django_db
def test_sessions_are_listed_newest_first_and_paginated_by_cursor(alice, support_agent):
    ids = [created(alice, f"message {i}")["sessionId"] for i in range(5)]
    newest_first = list(reversed(ids))

    first = alice.get("/support/v1/sessions?limit=2")
    assert first.status_code == 200
    page1 = first.json()
    assert [s["sessionId"] for s in page1["sessions"]] == newest_first[:2]
    assert page1["sessions"][0]["title"] == "message 4"

    page2 = alice.get("/support/v1/sessions", {"limit": 2, "cursor": page1["nextCursor"]}).json()
    assert [s["sessionId"] for s in page2["sessions"]] == newest_first[2:4]

    page3 = alice.get("/support/v1/sessions", {"limit": 2, "cursor": page2["nextCursor"]}).json()
    assert [s["sessionId"] for s in page3["sessions"]] == newest_first[4:]
    assert page3["nextCursor"] is None

    everything = alice.get("/support/v1/sessions").json()
    assert [s["sessionId"] for s in everything["sessions"]] == newest_first
    assert everything["nextCursor"] is None


@pytest.mark.django_db
def test_pagination_neither_skips_nor_repeats_sessions_created_in_the_same_instant(alice, support_agent):
    ids = {created(alice, f"message {i}")["sessionId"] for i in range(5)}
    Session.objects.update(created_at=timezone.now() - timedelta(minutes=1))

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = alice.get("/support/v1/sessions", params).json()
        seen += [s["sessionId"] for s in page["sessions"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break

    assert sorted(seen) == sorted(ids)
    assert len(seen) == len(set(seen))


@pytest.mark.django_db
def test_the_sessions_list_shows_only_sessions_of_that_agent(alice, support_agent, tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "other"))
    mine = created(alice, "for support")["sessionId"]
    post_json(alice, "/other/v1/session", {"message": "for other"})

    listed = alice.get("/support/v1/sessions").json()["sessions"]

    assert [s["sessionId"] for s in listed] == [mine]
