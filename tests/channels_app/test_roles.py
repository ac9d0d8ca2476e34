"""Members see and act on their own sessions only; operators (the operators group and
staff) read, follow, stop and delete any session of the agent, list them all with
`all=1`, and each act on someone else's session is recorded once as `operator.acted`.
Turns are left queued (no worker runs them), so every session has a turn to stop."""
from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions.models import Session
from tests.channels_app.roles_support import (
    CHANNEL, HOST, PEER, SCHEDULE, People, acted, anonymous, people, start_as, start_for,  # noqa: F401
)

KINDS = ["member", "schedule", "channel"]


def session_of(kind: str, people: People) -> str:
    if kind == "member":
        return start_as(people.mia.client)
    return start_for(SCHEDULE if kind == "schedule" else CHANNEL)


def listed(client: Client, query: str = "") -> tuple[int, list[str]]:
    response = client.get(f"/support/v1/sessions{query}")
    ids = [s["sessionId"] for s in response.json()["sessions"]] if response.status_code == 200 else []
    return response.status_code, ids


def test_the_lists_show_members_their_own_and_operators_everything_with_all(people):
    mine, scheduled, channelled = session_of("member", people), start_for(SCHEDULE), start_for(CHANNEL)
    olgas = start_as(people.olga.client)
    everything = sorted([mine, scheduled, channelled, olgas])

    assert listed(people.mia.client) == (200, [mine])
    assert listed(people.max.client) == (200, [])
    # Without all=1 an operator's list is their own, as anyone's.
    assert listed(people.olga.client) == (200, [olgas])
    assert listed(people.sam.client, "?all=0") == (200, [])
    for operator in people.operators:
        status, ids = listed(operator.client, "?all=1")
        assert status == 200 and sorted(ids) == everything
    assert sorted(listed(people.sam.client, "?all=true")[1]) == everything


def test_all_from_a_member_is_a_403_that_says_why(people):
    session_of("member", people)
    response = people.mia.client.get("/support/v1/sessions?all=1")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "operators_only"
    assert "operators" in response.json()["error"]["message"]


def test_a_bad_all_value_is_a_400_and_anonymous_is_a_401(people):
    assert people.sam.client.get("/support/v1/sessions?all=yes").status_code == 400
    assert anonymous().get("/support/v1/sessions?all=1").status_code == 401
    assert anonymous().get("/support/v1/sessions").status_code == 401


READS = ["", "/events", "/approvals"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("route", READS)
def test_reads_of_a_session_by_each_role(people, kind, route):
    session_id = session_of(kind, people)
    path = f"/support/v1/session/{session_id}{route}"

    if kind == "member":
        assert people.mia.client.get(path).status_code == 200
    refused = people.max.client.get(path)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous().get(path).status_code == 401
    for operator in people.operators:
        assert operator.client.get(path).status_code == 200, (operator.user.username, path)
    if route == "":
        assert people.olga.client.get(path).json()["sessionId"] == session_id
    assert acted(session_id) == []  # reading is not acting


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("who", ["olga", "sam"])
def test_an_operator_stops_any_session_and_it_is_recorded_once(people, kind, who):
    session_id = session_of(kind, people)
    stop = f"/support/v1/session/{session_id}/stop"
    assert people.max.client.post(stop).status_code == 403
    assert anonymous().post(stop).status_code == 401
    operator = getattr(people, who)

    assert operator.client.post(stop).status_code == 202
    assert acted(session_id) == [{"operator": who, "action": "stop"}]
    # The turn has not ended yet, so asking again is another accepted stop, and another record.
    assert operator.client.post(stop).status_code == 202
    assert acted(session_id) == [{"operator": who, "action": "stop"}] * 2


@pytest.mark.django_db(transaction=True)
def test_a_stop_that_stops_nothing_records_nothing(people, sync_turns):
    session_id = start_as(people.mia.client)  # its turn has run: the session waits
    assert people.olga.client.post(f"/support/v1/session/{session_id}/stop").status_code == 409
    assert acted(session_id) == []


def test_the_owner_stopping_records_nothing_nor_an_operator_stopping_their_own(people):
    mias, olgas = start_as(people.mia.client), start_as(people.olga.client)
    assert people.mia.client.post(f"/support/v1/session/{mias}/stop").status_code == 202
    assert people.olga.client.post(f"/support/v1/session/{olgas}/stop").status_code == 202
    assert acted(mias) == [] and acted(olgas) == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_operator_deletes_any_session_and_the_server_log_names_them(people, kind, caplog):
    session_id = session_of(kind, people)
    path = f"/support/v1/session/{session_id}"
    assert people.max.client.delete(path).status_code == 403
    assert anonymous().delete(path).status_code == 401

    with caplog.at_level(logging.WARNING, logger="sessions.retention.deletion"):
        assert people.sam.client.delete(path).status_code == 204
    assert not Session.objects.filter(pk=session_id).exists()
    [record] = [r for r in caplog.records if r.name == "sessions.retention.deletion"]
    assert session_id in record.getMessage() and "operator sam" in record.getMessage()


def test_deleting_ones_own_session_is_not_logged_as_an_operator_act(people, caplog):
    olgas, mias = start_as(people.olga.client), start_as(people.mia.client)
    with caplog.at_level(logging.WARNING, logger="sessions.retention.deletion"):
        assert people.olga.client.delete(f"/support/v1/session/{olgas}").status_code == 204
        assert people.mia.client.delete(f"/support/v1/session/{mias}").status_code == 204
    assert [r for r in caplog.records if r.name == "sessions.retention.deletion"] == []


def test_operators_may_not_post_into_someone_elses_conversation(people):
    session_id = session_of("member", people)
    for operator in people.operators:
        response = operator.client.post(f"/support/v1/session/{session_id}/message", {"message": "hi"},
                                        content_type="application/json")
        assert response.status_code == 403
    assert acted(session_id) == []


def test_a_staff_login_is_an_operator_too(people):
    session_id = start_for(SCHEDULE)
    login = Client(HTTP_HOST=HOST, REMOTE_ADDR=PEER)
    login.force_login(people.sam.user)
    assert listed(login, "?all=1") == (200, [session_id])
    assert login.post(f"/support/v1/session/{session_id}/stop").status_code == 202
    assert acted(session_id) == [{"operator": "sam", "action": "stop"}]


def test_leaving_the_operators_group_takes_the_role_away(people):
    session_id = start_for(CHANNEL)
    assert people.olga.client.get(f"/support/v1/session/{session_id}").status_code == 200
    people.olga.user.groups.clear()
    assert people.olga.client.get(f"/support/v1/session/{session_id}").status_code == 403
    assert listed(people.olga.client, "?all=1")[0] == 403


def test_the_migration_makes_the_operators_group(db):
    import importlib

    from django.apps import apps

    from types import SimpleNamespace

    from django.db import connection

    migration = importlib.import_module("sessions.migrations.0011_operators_group")
    editor = SimpleNamespace(connection=connection)  # the migration writes through its schema editor's connection
    Group.objects.filter(name="operators").delete()
    migration.create_group(apps, editor)
    migration.create_group(apps, editor)  # again: still one
    assert Group.objects.filter(name="operators").count() == 1
    assert User.objects.count() == 0
