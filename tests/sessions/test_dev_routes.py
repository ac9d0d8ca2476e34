"""Dev-mode routes: fire a schedule or a reminder by hand, exactly once, through the production path.

What the code guarantees: a hand firing claims the timer's *current* due time
with the same conditional update the ticker uses. So one due time is fired
once however many callers race for it (the losers get 409), and a later call
fires the next due time, never the same one again. Outside dev mode the
routes answer 403; in dev mode the ticker fires nothing by itself.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test import Client

from agents.discovery import deploy_agent_folder
from agents.schedules import next_after
from sessions.eventlog.events import read_events
from sessions.models import Reminder, Schedule, Session
from sessions.timers.schedules import _handlers, create_reminder, fire_reminder_now, fire_schedule_now, tick
from tests.conftest import ALICE_TOKEN
from tests.sessions.test_schedules import handler_schedule, markdown_schedule, write_agent

UTC = timezone.utc
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)

transactional = pytest.mark.django_db(transaction=True)


def post_json(client, path: str, body) -> object:
    return client.post(path, json.dumps(body), content_type="application/json")


@pytest.fixture
def dev(settings):
    settings.AGENTSITE_DEV = True


@pytest.fixture
def scheduled(db, tmp_path):
    """An agent with a markdown schedule (hourly) and a handler schedule that hands work to a chat."""
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/hourly.md": markdown_schedule("0 * * * *", "Count the open incidents.", title="Hourly"),
        "agent/schedules/handoff.py": handler_schedule("*/30 * * * *", "ctx.receive('Look at the queue.')"),
    })
    return deploy_agent_folder(root).agent


def chat_session(client, message: str = "hello") -> Session:
    response = post_json(client, "/support/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return Session.objects.get(pk=response.json()["sessionId"])


@transactional
def test_the_dev_routes_answer_403_outside_dev_mode(alice, scheduled, support_agent, sync_turns, settings):
    settings.AGENTSITE_DEV = False
    session = chat_session(alice)
    reminder = create_reminder(session, delay="5m", prompt="x")

    for response in (
        alice.post("/sched/v1/dev/schedules/hourly"),
        alice.get("/support/v1/dev/reminders"),
        alice.post(f"/support/v1/dev/reminders/{reminder.id}"),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "dev_mode_required"
    assert Schedule.objects.get(agent=scheduled, schedule_id="hourly").fire_count == 0
    reminder.refresh_from_db()
    assert (reminder.status, reminder.fire_count) == ("armed", 0)


@transactional
def test_firing_a_schedule_by_hand_runs_its_current_due_time_then_the_next(alice, scheduled, sync_turns, dev):
    due = Schedule.objects.get(agent=scheduled, schedule_id="hourly").next_fire_at

    first = alice.post("/sched/v1/dev/schedules/hourly")

    assert first.status_code == 200, first.content
    body = first.json()
    assert set(body) == {"scheduleId", "sessionIds"} and body["scheduleId"] == "hourly"
    [session_id] = body["sessionIds"]
    session = Session.objects.get(pk=session_id)
    assert (session.mode, session.status, session.channel) == ("task", "completed", "schedule")
    received = next(e for e in read_events(session_id) if e["type"] == "message.received")
    assert (received["data"]["source"], received["data"]["text"]) == ("schedule", "Count the open incidents.")
    row = Schedule.objects.get(agent=scheduled, schedule_id="hourly")
    assert (row.fire_count, row.next_fire_at, row.last_session_ids) == (1, next_after("0 * * * *", due), [session_id])

    second = alice.post("/sched/v1/dev/schedules/hourly")

    assert second.status_code == 200
    [other] = second.json()["sessionIds"]
    assert other != session_id
    row.refresh_from_db()
    assert row.fire_count == 2
    assert row.next_fire_at == next_after("0 * * * *", next_after("0 * * * *", due)), "each call took the next due time"


@transactional
def test_firing_a_handler_schedule_by_hand_answers_the_sessions_it_started(alice, scheduled, sync_turns, dev):
    response = alice.post("/sched/v1/dev/schedules/handoff")

    assert response.status_code == 200
    [session_id] = response.json()["sessionIds"]
    session = Session.objects.get(pk=session_id)
    assert (session.mode, session.status, session.principal_type) == ("chat", "waiting", "app")


@transactional
def test_a_unknown_or_removed_schedule_is_404(alice, scheduled, tmp_path, dev):
    assert alice.post("/sched/v1/dev/schedules/nope").json()["error"]["code"] == "schedule_not_found"
    write_agent(tmp_path / "sched", {"agent/schedules/hourly.md": None})
    deploy_agent_folder(tmp_path / "sched")
    response = alice.post("/sched/v1/dev/schedules/hourly")
    assert response.status_code == 404
    assert alice.post("/nobody/v1/dev/schedules/hourly").status_code == 404


@transactional
def test_one_due_time_is_fired_once_by_racing_callers(scheduled, sync_turns, dev):
    """Two callers that read the same due time: the claim lets exactly one of them fire it."""
    a = Schedule.objects.select_related("agent__active_deployment").get(agent=scheduled, schedule_id="hourly")
    b = Schedule.objects.select_related("agent__active_deployment").get(agent=scheduled, schedule_id="hourly")
    assert a.next_fire_at == b.next_fire_at

    won = fire_schedule_now(a)
    lost = fire_schedule_now(b)

    assert won is not None and len(won) == 1
    assert lost is None, "the route answers 409 already_fired for this"
    assert Schedule.objects.get(pk=a.pk).fire_count == 1
    assert Session.objects.filter(agent=scheduled).count() == 1


@transactional
def test_concurrent_hand_firings_each_take_a_distinct_due_time(two_principals, scheduled, sync_turns, dev):
    """Four simultaneous POSTs: each 200 is one firing of its own due time, each loser a 409; never a double."""
    due = Schedule.objects.get(agent=scheduled, schedule_id="hourly").next_fire_at
    gate = threading.Barrier(4)
    results: list[tuple[int, dict]] = []

    def caller() -> None:
        try:
            client = Client(HTTP_AUTHORIZATION=f"Bearer {ALICE_TOKEN}", HTTP_HOST="127.0.0.1:8000")
            gate.wait(timeout=10)
            response = client.post("/sched/v1/dev/schedules/hourly")
            results.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert len(results) == 4
    assert {status for status, _ in results} <= {200, 409}
    fired = [body["sessionIds"] for status, body in results if status == 200]
    assert all(body["error"]["code"] == "already_fired" for status, body in results if status == 409)
    assert fired, "someone fires"
    row = Schedule.objects.get(agent=scheduled, schedule_id="hourly")
    assert row.fire_count == len(fired)
    sessions = [sid for ids in fired for sid in ids]
    assert len(set(sessions)) == len(fired) == Session.objects.filter(agent=scheduled, channel="schedule").count()
    expected = due
    for _ in fired:
        expected = next_after("0 * * * *", expected)
    assert row.next_fire_at == expected, "one cron step per firing: no due time fired twice"


@transactional
def test_dev_reminder_list_shows_the_callers_armed_reminders(alice, bob, support_agent, sync_turns, dev):
    mine = chat_session(alice)
    theirs = chat_session(bob)
    armed = create_reminder(mine, every="1h", prompt="a")
    ended = create_reminder(mine, delay="5m", prompt="b")
    ended.end(Reminder.Status.CANCELLED, "cancelled")
    create_reminder(theirs, delay="5m", prompt="c")

    listed = alice.get("/support/v1/dev/reminders")

    assert listed.status_code == 200
    assert [r["reminderId"] for r in listed.json()["reminders"]] == [armed.id]
    assert [r["prompt"] for r in bob.get("/support/v1/dev/reminders").json()["reminders"]] == ["c"]


@transactional
def test_firing_a_one_time_reminder_by_hand_wakes_the_session_once(alice, bob, support_agent, sync_turns, dev):
    session = chat_session(alice)
    reminder = create_reminder(session, delay="2h", prompt="Wake for the follow-up.")
    url = f"/support/v1/dev/reminders/{reminder.id}"

    assert bob.post(url).status_code == 403
    assert alice.post("/support/v1/dev/reminders/rem_nope").status_code == 404
    response = alice.post(url)

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["reminderId"], body["fireCount"], body["status"], body["nextFireAt"]) == (reminder.id, 1, "done", None)
    wakes = [e["data"] for e in read_events(session.id) if e["type"] == "message.received" and e["data"]["source"] == "reminder"]
    assert wakes == [{"source": "reminder", "text": "Wake for the follow-up.", "reminderId": reminder.id}]

    again = alice.post(url)
    assert again.status_code == 409 and again.json()["error"]["code"] == "reminder_not_armed"


@transactional
def test_firing_a_recurring_reminder_by_hand_takes_the_next_due_time_each_call(alice, support_agent, sync_turns, dev):
    session = chat_session(alice)
    reminder = create_reminder(session, every="30m", prompt="Re-check.")
    due = reminder.next_fire_at
    stale = Reminder.objects.get(pk=reminder.id)

    first = alice.post(f"/support/v1/dev/reminders/{reminder.id}").json()
    second = alice.post(f"/support/v1/dev/reminders/{reminder.id}").json()

    assert (first["fireCount"], second["fireCount"]) == (1, 2)
    reminder.refresh_from_db()
    assert reminder.next_fire_at == due + timedelta(hours=1), "two calls, two distinct due times, the cadence kept"
    assert fire_reminder_now(stale) is False, "a caller holding an already fired due time loses the claim"
    assert Reminder.objects.get(pk=reminder.id).fire_count == 2


@transactional
def test_in_dev_mode_the_ticker_fires_nothing(alice, scheduled, support_agent, sync_turns, settings):
    Schedule.objects.filter(agent=scheduled).update(next_fire_at=T0)
    reminder = create_reminder(chat_session(alice), every="5m", prompt="x", now=T0)
    later = T0 + timedelta(days=1)

    settings.AGENTSITE_DEV = True
    assert tick(now=later) == 0
    assert list(Schedule.objects.filter(agent=scheduled).values_list("fire_count", "next_fire_at")) == [(0, T0), (0, T0)]
    reminder.refresh_from_db()
    assert (reminder.fire_count, reminder.next_fire_at) == (0, T0 + timedelta(minutes=5))

    settings.AGENTSITE_DEV = False
    assert tick(now=later) == 3, "the same tick outside dev mode fires the two schedules and the reminder"


@transactional
def test_a_run_form_reminder_whose_handler_lives_in_another_process_is_not_fired_here(alice, support_agent,
                                                                                          sync_turns, dev):
    """Its handler is only in the memory of the process that made it: this one refuses, and leaves it armed."""
    session = chat_session(alice)
    reminder = create_reminder(session, every="1h", run=lambda ctx: "delivered")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # As if made in that process: its handler is not in this one's memory.
        Reminder.objects.filter(pk=reminder.pk).update(handler_owner=f"{socket.gethostname()}:{holder.pid}")
        _handlers.pop(reminder.id)

        response = alice.post(f"/support/v1/dev/reminders/{reminder.id}")

        assert response.status_code == 409, response.content
        error = response.json()["error"]
        assert error["code"] == "handler_elsewhere" and str(holder.pid) in error["message"]
        reminder.refresh_from_db()
        assert (reminder.status, reminder.fire_count, reminder.reason) == ("armed", 0, "")
    finally:
        holder.kill()
        holder.wait()

    # Once that process is gone, firing it tells the truth: the handler was lost.
    response = alice.post(f"/support/v1/dev/reminders/{reminder.id}")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["reason"]) == ("disarmed", "handler_lost_on_restart")
