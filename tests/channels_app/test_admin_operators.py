"""The admin's acts on someone else's session are recorded as the API's are: a turn stopped
and a reminder cancelled there append `operator.acted` (once, only when something happened;
never on the operator's own session), and the session's page and the event list say who did what."""
from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from sessions.eventlog.events import describe_act
from sessions.models import Reminder, Session, Turn
from sessions.timers.schedules import create_reminder
from tests.channels_app.roles_support import acted
from tests.channels_app.test_admin import action, messages_of, start

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ops(db) -> Client:
    """A staff login: the admin's user, whose own sessions are started under the same login."""
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "not-used")
    client = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    client.force_login(user)
    return client


@transactional
def test_stopping_someone_elses_turn_in_the_admin_is_recorded_once(ops, local, support_agent):
    session_id = start(local, "/sleep 60000")  # no worker: the turn stays queued, so it can be stopped
    turn = Turn.objects.get(session_id=session_id)

    response = action(ops, "/admin/agent_sessions/turn/", "stop_turns", turn.pk)

    assert messages_of(response) == ["Asked 1 turn(s) to stop."]
    assert acted(session_id) == [{"operator": "ops", "action": "stop", "turnId": turn.pk}]
    Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.INTERRUPTED)  # as the worker ends it
    assert messages_of(action(ops, "/admin/agent_sessions/turn/", "stop_turns", turn.pk)) == [
        "Asked 0 turn(s) to stop."]
    assert len(acted(session_id)) == 1


@transactional
def test_stopping_a_turn_of_ones_own_session_in_the_admin_records_nothing(ops, support_agent):
    session_id = start(ops, "/sleep 60000")
    assert Session.objects.get(pk=session_id).principal_id == "ops"

    action(ops, "/admin/agent_sessions/turn/", "stop_turns", Turn.objects.get(session_id=session_id).pk)

    assert Turn.objects.get(session_id=session_id).interrupt_requested
    assert acted(session_id) == []


@transactional
def test_cancelling_someone_elses_reminder_in_the_admin_is_recorded_once(ops, local, support_agent, sync_turns):
    session = Session.objects.get(pk=start(local, "hello"))
    reminder = create_reminder(session, delay="1h", prompt="Check again.")
    mine = create_reminder(Session.objects.get(pk=start(ops, "hello")), delay="1h", prompt="Mine.")

    response = action(ops, "/admin/agent_sessions/reminder/", "cancel", reminder.pk, mine.pk)

    assert messages_of(response) == ["Cancelled 2 reminder(s)."]
    assert Reminder.objects.get(pk=reminder.pk).status == Reminder.Status.CANCELLED
    assert acted(session.id) == [{"operator": "ops", "action": "cancel_reminder", "reminderId": reminder.pk}]
    assert acted(mine.session_id) == []
    assert messages_of(action(ops, "/admin/agent_sessions/reminder/", "cancel", reminder.pk)) == [
        "Cancelled 0 reminder(s)."]
    assert len(acted(session.id)) == 1


@transactional
def test_the_session_page_and_the_event_list_say_who_did_what(ops, local, support_agent):
    session_id = start(local, "/sleep 60000")
    turn = Turn.objects.get(session_id=session_id)
    action(ops, "/admin/agent_sessions/session/", "stop_running_turns", session_id)
    action(ops, "/admin/agent_sessions/turn/", "stop_turns", turn.pk)

    page = ops.get(reverse("admin:agent_sessions_session_change", args=[quote(session_id)])).content.decode()
    table = page.split('<table class="operator-actions">')[1].split("</table>")[0]
    assert table.index(f"ops stopped turn {turn.pk}") < table.index("ops stopped the session")  # latest first
    assert 'type=operator.acted">2 operator actions</a>' in page

    listed = ops.get(f"/admin/agent_sessions/event/?session={session_id}&type=operator.acted")
    assert listed.context["cl"].result_count == 2
    assert "ops stopped the session" in listed.content.decode()
    assert f"ops stopped turn {turn.pk}" in listed.content.decode()


@transactional
def test_a_session_no_operator_acted_on_says_none(ops, local, support_agent, sync_turns):
    session_id = start(local, "hello")
    page = ops.get(reverse("admin:agent_sessions_session_change", args=[quote(session_id)])).content.decode()
    assert '<table class="operator-actions">' not in page
    assert 'type=operator.acted">0 operator actions</a>' in page


def test_each_act_reads_as_a_sentence():
    assert describe_act({"operator": "olga", "action": "approve", "callId": "call_1"}) == "olga approved call call_1"
    assert describe_act({"operator": "sam", "action": "deny", "callId": "call_2"}) == "sam denied call call_2"
    assert describe_act({"operator": "sam", "action": "stop"}) == "sam stopped the session"
    assert describe_act({"operator": "ops", "action": "stop", "turnId": "trn_1"}) == "ops stopped turn trn_1"
    assert describe_act({"operator": "ops", "action": "cancel_reminder", "reminderId": "rem_1"}) == (
        "ops cancelled reminder rem_1")
