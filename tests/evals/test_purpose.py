"""Who may mark a session as an eval run's, and who may download a session as a case file."""
from __future__ import annotations

import pytest

from sessions.models import Session
from tests.channels_app.roles_support import People, people, start_as  # noqa: F401

EVAL = {"message": "hello", "purpose": "eval"}


def create(client, body: dict):
    return client.post("/support/v1/session", body, content_type="application/json")


def test_a_member_asking_for_purpose_eval_gets_403(people: People):
    refused = create(people.mia.client, EVAL)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "purpose_refused"
    assert not Session.objects.exists()


@pytest.mark.parametrize("who", ["olga", "sam"])
def test_operators_start_eval_sessions(people: People, who):
    created = create(getattr(people, who).client, EVAL)
    assert created.status_code == 201, created.content
    session = Session.objects.get(pk=created.json()["sessionId"])
    assert session.options == {"purpose": "eval"} and session.run_options.purpose == "eval"


def test_the_loopback_principal_starts_eval_sessions_and_no_other_purpose_exists(support_agent, local):
    assert create(local, EVAL).status_code == 201
    assert create(local, {"message": "hello", "purpose": "load-test"}).status_code == 400


def test_a_session_downloads_as_a_case_file_for_its_owner_and_operators(people: People):
    session_id = start_as(people.mia.client, message='/call lookup_order {"order_id": "A100"}')
    url = f"/playground/support/session/{session_id}/eval-case"
    for person in (people.mia, people.olga, people.sam):
        downloaded = person.client.get(url)
        assert downloaded.status_code == 200
        assert downloaded["Content-Disposition"].startswith("attachment; filename=")
        assert "def test(t):" in downloaded.content.decode()
    assert people.max.client.get(url).status_code == 403
