"""A session's artifacts and reminders by each role: the owner and operators list and read
them (reads are not recorded), another member gets 403 and anonymous 401. Cancelling
someone else's reminder is an operator's act, recorded once as `operator.acted`; setting
one in someone else's conversation is speaking in it, which operators may not."""
from __future__ import annotations

import pytest

from sessions.models import Reminder, Session
from sessions.timers.schedules import create_reminder
from tests.channels_app.roles_support import (
    SCHEDULE, People, acted, anonymous, people, start_as, start_for,  # noqa: F401
)
from tests.channels_app.views.test_session_artifacts import call, reporter  # noqa: F401

transactional = pytest.mark.django_db(transaction=True)


def set_reminder(client, session_id: str, prompt: str = "Check the refund again."):
    return client.post(f"/support/v1/session/{session_id}/reminders", {"delay": "1h", "prompt": prompt},
                       content_type="application/json")


def mias_reminder(people: People) -> tuple[str, str]:
    session_id = start_as(people.mia.client)
    response = set_reminder(people.mia.client, session_id)
    assert response.status_code == 201, response.content
    return session_id, response.json()["reminderId"]


@transactional
def test_a_sessions_artifacts_are_read_by_the_owner_and_operators_only(people, reporter):
    session_id = start_as(people.mia.client, "reporter", call(name="q3.md", text="# Q3\n"))
    listing = f"/reporter/v1/session/{session_id}/artifacts"
    download = f"{listing}/q3.md"

    for reader in (people.mia, *people.operators):
        listed = reader.client.get(listing)
        assert listed.status_code == 200, reader.user.username
        assert [a["name"] for a in listed.json()["artifacts"]] == ["q3.md"]
        got = reader.client.get(download)
        assert got.status_code == 200 and got.content == b"# Q3\n"
    for path in (listing, download):
        refused = people.max.client.get(path)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
        assert anonymous().get(path).status_code == 401
    assert acted(session_id) == []  # reading is not acting


def test_a_sessions_reminders_are_listed_for_the_owner_and_operators_only(people):
    session_id, reminder_id = mias_reminder(people)
    path = f"/support/v1/session/{session_id}/reminders"

    for reader in (people.mia, *people.operators):
        listed = reader.client.get(path)
        assert listed.status_code == 200, reader.user.username
        assert [r["reminderId"] for r in listed.json()["reminders"]] == [reminder_id]
    refused = people.max.client.get(path)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous().get(path).status_code == 401
    assert acted(session_id) == []


@pytest.mark.parametrize("who", ["olga", "sam"])
def test_an_operator_cancels_someone_elses_reminder_and_it_is_recorded_once(people, who):
    session_id, reminder_id = mias_reminder(people)
    path = f"/support/v1/reminders/{reminder_id}"
    refused = people.max.client.delete(path)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous().delete(path).status_code == 401
    assert Reminder.objects.get(pk=reminder_id).status == Reminder.Status.ARMED

    assert getattr(people, who).client.delete(path).status_code == 204
    assert Reminder.objects.get(pk=reminder_id).status == Reminder.Status.CANCELLED
    assert acted(session_id) == [{"operator": who, "action": "cancel_reminder", "reminderId": reminder_id}]
    # Already cancelled: a 409, and nothing more in the log.
    again = getattr(people, who).client.delete(path)
    assert again.status_code == 409 and again.json()["error"]["code"] == "reminder_not_armed"
    assert len(acted(session_id)) == 1


def test_an_operator_cancels_a_reminder_of_a_schedules_session(people):
    session_id = start_for(SCHEDULE)
    reminder = create_reminder(Session.objects.get(pk=session_id), delay="1h", prompt="Run it again.")
    assert people.olga.client.delete(f"/support/v1/reminders/{reminder.id}").status_code == 204
    assert acted(session_id) == [{"operator": "olga", "action": "cancel_reminder", "reminderId": reminder.id}]


def test_the_owner_cancelling_records_nothing_nor_an_operator_cancelling_their_own(people):
    mias, mias_reminder_id = mias_reminder(people)
    olgas = start_as(people.olga.client)
    olgas_reminder_id = set_reminder(people.olga.client, olgas).json()["reminderId"]

    assert people.mia.client.delete(f"/support/v1/reminders/{mias_reminder_id}").status_code == 204
    assert people.olga.client.delete(f"/support/v1/reminders/{olgas_reminder_id}").status_code == 204
    assert acted(mias) == [] and acted(olgas) == []


def test_operators_may_not_set_a_reminder_in_someone_elses_conversation(people):
    session_id = start_as(people.mia.client)
    for operator in people.operators:
        refused = set_reminder(operator.client, session_id)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert set_reminder(people.max.client, session_id).status_code == 403
    assert set_reminder(anonymous(), session_id).status_code == 401
    assert not Reminder.objects.filter(session_id=session_id).exists()
    assert acted(session_id) == []
