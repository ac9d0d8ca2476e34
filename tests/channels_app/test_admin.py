"""The operators' console (Django admin): sessions with their turns, tool
calls and events, the stop action and deciding parked tool calls.

A superuser logs in with `force_login`; history is shown read-only.
"""
from __future__ import annotations

import json
import re

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.test import Client

from sessions.turn.engine import run_turn
from sessions.models import Event, Session, ToolCall, Turn

transactional = pytest.mark.django_db(transaction=True)

CANCEL_A102 = '/call cancel_order {"order_id": "A102"}'
LOOKUP_A100 = '/call lookup_order {"order_id": "A100"}'


@pytest.fixture
def operator(db) -> Client:
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "not-used")
    client = Client()
    client.force_login(user)
    return client


def start(client: Client, message: str) -> str:
    response = client.post("/support/v1/session", json.dumps({"message": message}), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def action(client: Client, changelist: str, name: str, *pks) -> object:
    return client.post(changelist, {"action": name, "_selected_action": [str(pk) for pk in pks]}, follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def busy_session(local, support_agent, sync_turns) -> str:
    """A session with a completed tool-calling turn and a parked approval."""
    session_id = start(local, LOOKUP_A100)
    response = local.post(f"/support/v1/session/{session_id}/message", json.dumps({"message": CANCEL_A102}),
                          content_type="application/json")
    assert response.status_code == 202, response.content
    assert ToolCall.objects.get(session_id=session_id, tool="cancel_order").status == ToolCall.Status.AWAITING_APPROVAL
    return session_id


@transactional
def test_the_admin_requires_a_staff_login(busy_session):
    response = Client().get("/admin/agent_sessions/session/")

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


@transactional
def test_the_index_and_every_list_page_show_the_rows_of_a_session(operator, busy_session):
    turns = list(Turn.objects.filter(session_id=busy_session).values_list("id", flat=True))
    calls = list(ToolCall.objects.filter(session_id=busy_session).values_list("call_id", flat=True))
    assert len(turns) == len(calls) == 2
    deployment = Session.objects.get(pk=busy_session).deployment
    expected = {
        "/admin/": ["/admin/agent_sessions/session/", "/admin/agents/deployment/"],
        "/admin/agent_sessions/session/": [busy_session],
        "/admin/agent_sessions/turn/": turns,
        "/admin/agent_sessions/toolcall/": [*calls, "lookup_order", "cancel_order"],
        "/admin/agent_sessions/event/": [busy_session, "action.approval_requested"],
        "/admin/agents/agent/": ["support"],
        "/admin/agents/deployment/": [deployment.content_hash[:12]],  # the full hash is on the release page
    }
    for path, shown in expected.items():
        response = operator.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        for text in shown:
            assert text in page, f"{path} does not show {text!r}"


@transactional
def test_the_session_list_shows_the_session_with_a_playground_link(operator, busy_session):
    page = operator.get("/admin/agent_sessions/session/").content.decode()

    assert busy_session in page
    assert f'href="/playground/support/session/{busy_session}"' in page


@transactional
def test_the_session_list_filters_and_searches(operator, busy_session):
    assert busy_session in operator.get("/admin/agent_sessions/session/?status__exact=awaiting_approval").content.decode()
    assert busy_session not in operator.get("/admin/agent_sessions/session/?status__exact=completed").content.decode()
    assert busy_session in operator.get(f"/admin/agent_sessions/session/?q={busy_session}").content.decode()


@transactional
def test_the_session_change_page_shows_turns_tool_calls_and_events(operator, busy_session):
    response = operator.get(reverse("admin:agent_sessions_session_change", args=[quote(busy_session)]))

    assert response.status_code == 200
    page = response.content.decode()
    for turn in Turn.objects.filter(session_id=busy_session):
        assert turn.id in page
    assert "lookup_order" in page and "cancel_order" in page
    assert "action.approval_requested" in page, "the events are listed"
    assert "continuation_token_hash" not in page, "the token hash is never shown"


@transactional
def test_links_reach_objects_whose_ids_hold_what_the_admin_unquotes(operator, local, support_agent, sync_turns,
                                                                    monkeypatch):
    """`_22`, `_40` ... in a path are unquoted by the admin: ses_22ab... must still be linked to."""
    import secrets

    real = secrets.token_hex
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: "22" + real(n)[2:])  # every new id: <prefix>_22...
    session_id = start(local, LOOKUP_A100)
    turn_id = Turn.objects.get(session_id=session_id).id
    assert session_id.startswith("ses_22") and turn_id.startswith("turn_22")

    page = operator.get(reverse("admin:agent_sessions_session_change", args=[quote(session_id)]))

    assert page.status_code == 200
    turn_link = re.search(r'<a href="([^"]+)">' + turn_id, page.content.decode())
    assert turn_link, "the turn is linked from its session's page"
    assert operator.get(turn_link.group(1)).status_code == 200


@transactional
def test_a_long_sessions_change_page_shows_its_latest_history_and_links_to_all(operator, busy_session):
    """Thousands of events must not make the page slow: it shows the latest and links to the rest."""
    from sessions.admin import LATEST_EVENTS
    from sessions.eventlog.events import append_events

    append_events(busy_session, [("test.filler", {"n": n}) for n in range(LATEST_EVENTS + 20)])
    total = Event.objects.filter(session_id=busy_session).count()

    page = operator.get(reverse("admin:agent_sessions_session_change", args=[quote(busy_session)])).content.decode()

    table = page.split('<table class="session-history">')[4]  # turns, tool calls, artifacts, events
    shown = [int(i) for i in re.findall(r'<a href="/admin/agent_sessions/event/\d+/change/">(\d+)</a>', table)]
    assert shown == list(range(total - LATEST_EVENTS, total)), "the latest events, in index order"
    assert f'href="/admin/agent_sessions/event/?session={busy_session}">{total} events</a>' in page
    turns = Turn.objects.filter(session_id=busy_session).count()
    assert f'href="/admin/agent_sessions/turn/?session={busy_session}">{turns} turns</a>' in page
    assert f'href="/admin/agent_sessions/toolcall/?session={busy_session}">2 tool calls</a>' in page

    events = operator.get(f"/admin/agent_sessions/event/?session={busy_session}")
    assert events.status_code == 200
    assert events.context["cl"].result_count == total
    assert operator.get(f"/admin/agent_sessions/turn/?session={busy_session}").context["cl"].result_count == turns
    assert operator.get(f"/admin/agent_sessions/toolcall/?session={busy_session}").context["cl"].result_count == 2


@transactional
def test_turn_tool_call_and_event_change_pages_render(operator, busy_session):
    turn = Turn.objects.filter(session_id=busy_session).first()
    call = ToolCall.objects.filter(session_id=busy_session).first()
    event = Event.objects.filter(session_id=busy_session).first()

    for path in (
        reverse("admin:agent_sessions_turn_change", args=[quote(turn.pk)]),
        f"/admin/agent_sessions/toolcall/{call.pk}/change/",
        f"/admin/agent_sessions/event/{event.pk}/change/",
    ):
        response = operator.get(path)
        assert response.status_code == 200, path
    assert turn.id in operator.get(reverse("admin:agent_sessions_turn_change", args=[quote(turn.pk)])).content.decode()


@transactional
def test_history_is_read_only(operator, busy_session):
    event = Event.objects.filter(session_id=busy_session).first()
    before = event.data

    response = operator.post(f"/admin/agent_sessions/event/{event.pk}/change/", {"type": "forged", "data": "{}"})

    assert response.status_code == 403
    event.refresh_from_db()
    assert event.type != "forged" and event.data == before
    assert operator.get("/admin/agent_sessions/session/add/").status_code == 403
    assert operator.get("/admin/agent_sessions/turn/add/").status_code == 403


@transactional
def test_the_stop_action_interrupts_a_running_turn(operator, local, support_agent):
    """Without a worker the turn stays queued; the action flags it, and the worker ends it as interrupted."""
    session_id = start(local, "/sleep 60000")
    turn = Turn.objects.get(session_id=session_id)
    assert Session.objects.get(pk=session_id).status == Session.Status.RUNNING

    response = action(operator, "/admin/agent_sessions/session/", "stop_running_turns", session_id)

    assert response.status_code == 200
    assert messages_of(response) == ["Asked 1 running turn(s) to stop."]
    turn.refresh_from_db()
    assert turn.interrupt_requested

    run_turn(turn.id)  # what the worker does next

    turn.refresh_from_db()
    assert turn.status == Turn.Status.INTERRUPTED
    failed = Event.objects.get(session_id=session_id, type="turn.failed")
    assert failed.data["error"] == "turn interrupted"
    assert Session.objects.get(pk=session_id).status == Session.Status.WAITING


@transactional
def test_the_stop_action_on_an_idle_session_stops_nothing(operator, local, support_agent, sync_turns):
    session_id = start(local, "hello")

    response = action(operator, "/admin/agent_sessions/session/", "stop_running_turns", session_id)

    assert messages_of(response) == ["Asked 0 running turn(s) to stop."]


@transactional
def test_the_turn_stop_action_flags_unfinished_turns_only(operator, local, support_agent):
    session_id = start(local, "/sleep 60000")
    turn = Turn.objects.get(session_id=session_id)

    response = action(operator, "/admin/agent_sessions/turn/", "stop_turns", turn.pk)

    assert messages_of(response) == ["Asked 1 turn(s) to stop."]
    turn.refresh_from_db()
    assert turn.interrupt_requested


@transactional
def test_the_approve_action_runs_the_parked_call_and_resumes_the_turn(operator, busy_session):
    call = ToolCall.objects.get(session_id=busy_session, tool="cancel_order")

    response = action(operator, "/admin/agent_sessions/toolcall/", "approve", call.pk)

    assert messages_of(response) == ["Approved 1 parked call(s)."]
    call.refresh_from_db()
    assert call.status == ToolCall.Status.DONE
    assert call.output["cancelled"] is True and call.output["orderId"] == "A102"
    assert call.decided_by["authenticator"] == "django" and call.decided_by["principalId"] == "ops"
    resolved = Event.objects.get(session_id=busy_session, type="action.approval_resolved")
    assert resolved.data["decision"] == "approve" and resolved.data["decidedBy"]["principalId"] == "ops"
    result = Event.objects.get(session_id=busy_session, type="action.result", data__callId=call.call_id)
    assert result.data["output"]["cancelled"] is True
    assert Turn.objects.get(pk=call.turn_id).status == Turn.Status.COMPLETED
    assert Session.objects.get(pk=busy_session).status == Session.Status.WAITING


@transactional
def test_the_deny_action_tells_the_model_and_never_runs_the_call(operator, busy_session):
    call = ToolCall.objects.get(session_id=busy_session, tool="cancel_order")

    response = action(operator, "/admin/agent_sessions/toolcall/", "deny", call.pk)

    assert messages_of(response) == ["Denied 1 parked call(s)."]
    call.refresh_from_db()
    assert call.status == ToolCall.Status.DENIED
    assert call.output is None
    assert Turn.objects.get(pk=call.turn_id).status == Turn.Status.COMPLETED


@transactional
def test_deciding_an_already_decided_call_changes_nothing(operator, busy_session):
    call = ToolCall.objects.get(session_id=busy_session, tool="cancel_order")
    action(operator, "/admin/agent_sessions/toolcall/", "approve", call.pk)

    response = action(operator, "/admin/agent_sessions/toolcall/", "deny", call.pk)

    assert response.status_code == 200
    call.refresh_from_db()
    assert call.status == ToolCall.Status.DONE
    assert Event.objects.filter(session_id=busy_session, type="action.approval_resolved").count() == 1


@transactional
def test_the_delete_action_removes_sessions_and_their_events(operator, busy_session):
    response = action(operator, "/admin/agent_sessions/session/", "delete_sessions", busy_session)

    assert messages_of(response) == ["Deleted 1 session(s)."]
    assert not Session.objects.filter(pk=busy_session).exists()
    assert not Event.objects.filter(session_id=busy_session).exists()


# -- host services: artifacts, stored files, key-value entries -----------------------------

@pytest.fixture
def reporting_session(local, tmp_path, sync_turns) -> str:
    """A session whose turn saved two artifacts; its agent also keeps a file and keys."""
    from agents.discovery import deploy_agent_folder
    from sessions.host import Host
    from tests.channels_app.views.test_session_artifacts import REPORT_TOOL, call
    from tests.sessions.test_schedules import write_agent

    agent = deploy_agent_folder(write_agent(tmp_path / "reporter", {"agent/tools/make_report.py": REPORT_TOOL})).agent
    response = local.post("/reporter/v1/session", json.dumps(
        {"message": "\n".join([call(name="q3.md", text="# Q3\n"), call(name="chart.bin", base64="AAEC")])}),
        content_type="application/json")
    assert response.status_code == 201, response.content
    host = Host(session=None, agent=agent)
    host.files.write("notes/plan.md", "the plan")
    host.kv.set("counter", 7)
    return response.json()["sessionId"]


@transactional
def test_the_session_change_page_lists_its_artifacts_with_download_links(operator, reporting_session):
    from sessions.models import Artifact

    page = operator.get(reverse("admin:agent_sessions_session_change", args=[quote(reporting_session)])).content.decode()

    assert "Latest artifacts" in page
    for artifact in Artifact.objects.filter(session_id=reporting_session):
        assert f'href="/admin/agent_sessions/artifact/{artifact.pk}/download/"' in page
        assert artifact.name in page
    assert f'href="/admin/agent_sessions/artifact/?session={reporting_session}">2 artifacts</a>' in page
    assert f'href="/admin/agent_sessions/kventry/?session={reporting_session}">1 key-value entries</a>' in page


@transactional
def test_operators_download_artifacts_and_stored_files_in_the_admin(operator, reporting_session):
    from sessions.models import Artifact, HostFile

    chart = Artifact.objects.get(session_id=reporting_session, name="chart.bin")
    response = operator.get(f"/admin/agent_sessions/artifact/{chart.pk}/download/")
    assert response.status_code == 200
    assert response.content == b"\x00\x01\x02"
    assert response["Content-Disposition"] == 'attachment; filename="chart.bin"'
    assert response["Content-Type"] == "application/octet-stream"

    stored = HostFile.objects.get(path="notes/plan.md")
    response = operator.get(f"/admin/agent_sessions/hostfile/{stored.pk}/download/")
    assert (response.status_code, response.content) == (200, b"the plan")
    assert response["Content-Disposition"] == 'attachment; filename="plan.md"'

    assert Client().get(f"/admin/agent_sessions/artifact/{chart.pk}/download/").status_code == 302, "staff only"
    assert operator.get("/admin/agent_sessions/artifact/999999/download/").status_code == 404


@transactional
def test_the_host_service_lists_show_artifacts_files_and_keys_read_only(operator, reporting_session):
    from sessions.models import Artifact

    expected = {
        "/admin/agent_sessions/artifact/": ["q3.md", "chart.bin", reporting_session, "text/markdown"],
        f"/admin/agent_sessions/artifact/?session={reporting_session}": ["q3.md", "chart.bin"],
        "/admin/agent_sessions/hostfile/": ["notes/plan.md", "reporter"],
        "/admin/agent_sessions/kventry/": ["counter", "last", "reporter", reporting_session],
    }
    for path, shown in expected.items():
        response = operator.get(path)
        assert response.status_code == 200, path
        for text in shown:
            assert text in response.content.decode(), f"{path} does not show {text!r}"

    artifact = Artifact.objects.get(session_id=reporting_session, name="q3.md")
    page = operator.get(f"/admin/agent_sessions/artifact/{artifact.pk}/change/").content.decode()
    assert "# Q3" not in page, "content is downloaded, never inlined"
    assert f"/admin/agent_sessions/artifact/{artifact.pk}/download/" in page
    assert operator.get("/admin/agent_sessions/artifact/add/").status_code == 403
    assert operator.get("/admin/agent_sessions/kventry/add/").status_code == 403


@transactional
def test_the_session_list_shows_each_session_s_model_and_filters_by_it(operator, busy_session):
    page = operator.get("/admin/agent_sessions/session/?model=scripted:echo").content.decode()
    assert busy_session in page and "scripted:echo" in page
    assert busy_session not in operator.get("/admin/agent_sessions/session/?model=scripted:other").content.decode()


@transactional
def test_handoffs_and_agent_messages_are_listed_read_only(operator, busy_session):
    from sessions.models import AgentMessage, Handoff

    session = Session.objects.get(pk=busy_session)
    handoff = Handoff.objects.create(session=session, from_model="scripted:echo", to_model="scripted:other",
                                     review_id="r" * 64, status=Handoff.Status.FAILED, error="target refused")
    message = AgentMessage.objects.create(sender=session, sender_agent="support", recipient=session, text="ping")
    for path, row in (("handoff", handoff), ("agentmessage", message)):
        listing = operator.get(f"/admin/agent_sessions/{path}/")
        assert listing.status_code == 200 and row.id in listing.content.decode()
        change = operator.get(reverse(f"admin:agent_sessions_{path}_change", args=[quote(row.id)]))
        assert change.status_code == 200
        assert 'name="_save"' not in change.content.decode(), "nothing is editable"
        assert operator.get(f"/admin/agent_sessions/{path}/add/").status_code == 403
        assert operator.post(reverse(f"admin:agent_sessions_{path}_delete", args=[quote(row.id)]),
                             {"post": "yes"}).status_code == 403
    assert Handoff.objects.filter(pk=handoff.pk).exists() and AgentMessage.objects.filter(pk=message.pk).exists()


def test_django_q2s_scheduled_tasks_are_not_offered_for_they_would_never_run(operator):
    assert "/admin/django_q/schedule/" not in operator.get("/admin/").content.decode()
    assert operator.get("/admin/django_q/schedule/").status_code == 404
    assert operator.get("/admin/django_q/failure/").status_code == 200  # the queue's own pages stay
