"""The playground's pages by role: operators list every session of an agent (`?all=1`) and
open anyone's session to follow it (no composer: they do not post in it), its trace too;
members see their own only and get 403 for the rest; a caller no policy admits is sent to log in."""
from __future__ import annotations

import pytest

from tests.channels_app.roles_support import (
    CHANNEL, SCHEDULE, People, anonymous, people, start_as, start_for,  # noqa: F401
)


def page(client, path: str) -> tuple[int, str]:
    response = client.get(path)
    return response.status_code, response.content.decode()


def signs_in(client, path: str) -> bool:
    response = client.get(path)
    return response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")


def test_operators_list_every_session_of_the_agent_and_members_only_their_own(people):
    mias, scheduled, channelled = start_as(people.mia.client), start_for(SCHEDULE), start_for(CHANNEL)
    olgas = start_as(people.olga.client)

    for operator in people.operators:
        status, body = page(operator.client, "/playground/support?all=1")
        assert status == 200 and "All sessions" in body
        for session_id in (mias, scheduled, channelled, olgas):
            assert f'data-session="{session_id}"' in body, (operator.user.username, session_id)
        assert 'data-principal="schedule:support/daily"' in body and 'data-principal="mia"' in body
        assert 'id="own-sessions"' in body
    # Without all=1 an operator's list is their own, with a link to every session.
    status, body = page(people.olga.client, "/playground/support")
    assert status == 200 and f'data-session="{olgas}"' in body and mias not in body and scheduled not in body
    assert 'id="all-sessions" href="/playground/support?all=1"' in body

    status, body = page(people.mia.client, "/playground/support")
    assert status == 200 and f'data-session="{mias}"' in body
    assert scheduled not in body and olgas not in body and 'id="all-sessions"' not in body
    for member in (people.mia, people.max):
        status, body = page(member.client, "/playground/support?all=1")
        assert status == 403 and "Operators only" in body and mias not in body
    assert signs_in(anonymous(), "/playground/support?all=1")


@pytest.mark.parametrize("kind", ["member", "schedule"])
def test_an_operator_opens_someone_elses_session_to_follow_it(people, kind):
    session_id = start_as(people.mia.client) if kind == "member" else start_for(SCHEDULE)
    path = f"/playground/support/session/{session_id}"

    for operator in people.operators:
        status, body = page(operator.client, path)
        assert status == 200
        assert 'id="following"' in body and 'data-following="1"' in body
        assert 'id="follow-up"' not in body and 'id="no-follow-up"' in body
        assert 'id="stop"' in body and 'id="approvals"' in body
        assert page(operator.client, f"{path}/trace")[0] == 200
        assert page(operator.client, f"/playground/support?sessionId={session_id}")[0] == 200
    for other in (people.max,) if kind == "member" else (people.mia, people.max):
        status, body = page(other.client, path)
        assert status == 403 and "Not your session" in body
        assert page(other.client, f"{path}/trace")[0] == 403
    assert signs_in(anonymous(), path) and signs_in(anonymous(), f"{path}/trace")


def test_the_owner_and_an_operator_on_their_own_session_follow_nothing(people):
    for person in (people.mia, people.olga):
        session_id = start_as(person.client)
        status, body = page(person.client, f"/playground/support/session/{session_id}")
        assert status == 200
        assert 'id="following"' not in body and 'id="follow-up"' in body


def test_a_reminder_on_the_session_page_has_a_cancel_button_for_the_owner_and_operators(people):
    session_id = start_as(people.mia.client)
    made = people.mia.client.post(f"/support/v1/session/{session_id}/reminders", {"delay": "1h", "prompt": "Again."},
                                  content_type="application/json")
    reminder_id = made.json()["reminderId"]
    for person in (people.mia, people.olga):
        body = page(person.client, f"/playground/support/session/{session_id}")[1]
        assert f'data-cancel="/support/v1/reminders/{reminder_id}"' in body
