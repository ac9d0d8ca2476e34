"""Reminders: durable timers bound to one chat session, prompt form and run form.

The clock is controlled: reminders are armed with `create_reminder(..., now=T0)`
or read back from their row, and the tick is `fire_due(now=...)` walked over
simulated minutes. Turns run inline (`sync_turns`).
"""
from __future__ import annotations

import shutil

import json
import socket
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from agents.discovery import deploy_agent_folder
from sessions.admission import dispatch_next
from sessions.events import read_events
from sessions.models import Reminder, Session, Turn
from sessions.timers import (
    TimerError,
    _handlers,
    create_reminder,
    disarm_lost_handlers,
    fire_due,
    owner_id,
    parse_duration,
)
from tests.conftest import EXAMPLE
from tests.sessions.test_schedules import write_agent

UTC = timezone.utc
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)

transactional = pytest.mark.django_db(transaction=True)

WATCH_TOOL = """
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        every: str = "30m"

    def check(ctx):
        ctx.followup(f"Re-check CI (firing {ctx.fire_count}).")
        return "stop" if ctx.fire_count >= 3 else "delivered"

    @tool(description="Watch CI: re-check it on a cadence, three times at most.", effect="write")
    def watch(input: Input, ctx) -> dict:
        reminder = ctx.host.reminders.create(every=input.every, run=check, title="ci watch")
        return {"reminderId": reminder.id}
"""


def post_json(client, path: str, body) -> object:
    return client.post(path, json.dumps(body), content_type="application/json")


def chat_session(client, slug: str = "support", message: str = "hello", **fields) -> Session:
    response = post_json(client, f"/{slug}/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return Session.objects.get(pk=response.json()["sessionId"])


def minutes(start: datetime, end: datetime, step: int = 1):
    """Every `step`-minute boundary from start to end, both included: the ticks of a ticker."""
    t = start
    while t <= end:
        yield t
        t += timedelta(minutes=step)


def tick_through(start: datetime, end: datetime, step: int = 1) -> int:
    return sum(fire_due(now=t) for t in minutes(start, end, step))


def received(session: Session, source: str = "reminder") -> list[dict]:
    return [e["data"] for e in read_events(session.id) if e["type"] == "message.received" and e["data"]["source"] == source]


# --- cadence -------------------------------------------------------------------------


def test_durations_take_seconds_minutes_hours_and_days():
    assert [parse_duration(s) for s in ("5s", "20m", "2h", "1d", " 90s ")] == [
        timedelta(seconds=5), timedelta(minutes=20), timedelta(hours=2), timedelta(days=1), timedelta(seconds=90)]
    for bad in ("20", "0m", "-5m", "1.5h", "20 minutes", "", None, 20, "9" * 18 + "d", "١m", "٣h", "９m", "1_0m",
                "+5m", "\u20035m"):
        with pytest.raises(TimerError):
            parse_duration(bad)


@transactional
def test_every_30m_fires_six_times_over_three_hours(alice, support_agent, sync_turns):
    session = chat_session(alice)
    reminder = create_reminder(session, every="30m", prompt="Re-check the order.", now=T0)
    assert reminder.next_fire_at == T0 + timedelta(minutes=30)

    assert tick_through(T0, T0 + timedelta(hours=3)) == 6

    reminder.refresh_from_db()
    assert (reminder.fire_count, reminder.status, reminder.last_fired_at) == (6, "armed", T0 + timedelta(hours=3))
    assert reminder.next_fire_at == T0 + timedelta(hours=3, minutes=30)
    wakes = received(session)
    assert len(wakes) == 6
    assert all(w["reminderId"] == reminder.id and w["text"] == "Re-check the order." for w in wakes)
    assert Turn.objects.filter(session=session, trigger="reminder", status="completed").count() == 6
    session.refresh_from_db()
    assert session.status == "waiting"


@transactional
def test_a_delay_fires_once_and_is_done(alice, support_agent, sync_turns):
    session = chat_session(alice)
    reminder = create_reminder(session, delay="2h", prompt="Follow up on the refund.", now=T0)
    assert reminder.next_fire_at == T0 + timedelta(hours=2)

    assert tick_through(T0, T0 + timedelta(hours=2) - timedelta(minutes=1)) == 0
    assert tick_through(T0 + timedelta(hours=2), T0 + timedelta(hours=5), step=5) == 1

    reminder.refresh_from_db()
    assert (reminder.status, reminder.reason, reminder.fire_count, reminder.next_fire_at) == ("done", "fired", 1, None)
    assert [w["text"] for w in received(session)] == ["Follow up on the refund."]


@transactional
def test_a_cron_reminder_fires_on_its_cron_times(alice, support_agent, sync_turns):
    session = chat_session(alice)
    start = T0 + timedelta(minutes=10)  # 09:10
    reminder = create_reminder(session, cron="0 * * * *", prompt="Hourly check.", now=start)
    assert reminder.next_fire_at == T0 + timedelta(hours=1)

    assert tick_through(start, start + timedelta(hours=3)) == 3  # 10:00, 11:00, 12:00

    reminder.refresh_from_db()
    assert (reminder.fire_count, reminder.next_fire_at) == (3, T0 + timedelta(hours=4))
    assert len(received(session)) == 3


@transactional
def test_an_overdue_every_reminder_fires_once_then_resumes_its_cadence(alice, support_agent, sync_turns):
    """Catch-up after downtime: one firing, then the next step of the original cadence after now."""
    session = chat_session(alice)
    reminder = create_reminder(session, every="30m", prompt="Re-check.", now=T0)  # due 09:30
    back = T0 + timedelta(hours=3, minutes=5)  # the server was down until 12:05

    assert fire_due(now=back) == 1
    assert fire_due(now=back + timedelta(minutes=1)) == 0

    reminder.refresh_from_db()
    assert (reminder.fire_count, reminder.next_fire_at) == (1, T0 + timedelta(hours=3, minutes=30))
    assert tick_through(back, T0 + timedelta(hours=4)) == 2  # 12:30 and 13:00
    assert len(received(session)) == 3


@transactional
def test_overdue_delay_and_cron_reminders_fire_once(alice, support_agent, sync_turns):
    session = chat_session(alice)
    delay = create_reminder(session, delay="20m", prompt="Once.", now=T0)
    cron = create_reminder(session, cron="*/15 * * * *", prompt="Quarterly.", now=T0)
    back = T0 + timedelta(hours=6, minutes=7)

    assert fire_due(now=back) == 2

    delay.refresh_from_db(), cron.refresh_from_db()
    assert (delay.status, delay.fire_count) == ("done", 1)
    assert (cron.status, cron.fire_count, cron.next_fire_at) == ("armed", 1, T0 + timedelta(hours=6, minutes=15))


# --- the wake ------------------------------------------------------------------------


@transactional
def test_the_prompt_form_wakes_the_session_and_states_the_until_condition(alice, support_agent, sync_turns):
    session = chat_session(alice)
    reminder = create_reminder(session, every="1h", prompt="Re-check CI for PR 7.",
                               until="CI is green or the PR is merged.", now=T0)

    assert fire_due(now=T0 + timedelta(hours=1)) == 1

    [wake] = received(session)
    assert wake["reminderId"] == reminder.id
    assert wake["text"].startswith("Re-check CI for PR 7.")
    assert "CI is green or the PR is merged." in wake["text"]
    turn = Turn.objects.get(session=session, trigger="reminder")
    assert (turn.source_ref, turn.admission, turn.status) == (reminder.id, "coalesce", "completed")
    events = read_events(session.id)
    assert events[-1]["type"] == "session.waiting"
    assert any(e["type"] == "message.completed" and "Re-check CI for PR 7." in e["data"]["text"] for e in events)


@transactional
def test_a_one_time_reminder_states_its_condition_without_calling_itself_recurring(alice, support_agent, sync_turns):
    session = chat_session(alice)
    create_reminder(session, delay="1h", prompt="Ask whether the parcel arrived.", until="the customer confirmed it", now=T0)

    assert fire_due(now=T0 + timedelta(hours=1)) == 1

    [wake] = received(session)
    assert wake["text"].startswith("Ask whether the parcel arrived.")
    assert "the customer confirmed it" in wake["text"]
    assert "recurring" not in wake["text"]


def busy(session: Session) -> Turn:
    """A turn in flight in some worker: claimed, leased, holding the session."""
    running = Turn.objects.create(session=session, status=Turn.Status.RUNNING, message="long work",
                                  claimed_by="elsewhere:1", started_at=T0, lease_until=datetime.now(UTC) + timedelta(minutes=5))
    Session.objects.filter(pk=session.pk).update(active_turn=running, status=Session.Status.RUNNING)
    return running


def settle(session: Session, running: Turn) -> None:
    """The running turn ends; the next queued turn is dispatched, as the engine does."""
    Turn.objects.filter(pk=running.pk).update(status=Turn.Status.COMPLETED)
    Session.objects.filter(pk=session.pk).update(active_turn=None, status=Session.Status.WAITING)
    dispatch_next(session.id)


@transactional
def test_a_firing_for_a_busy_session_queues_behind_the_running_turn(alice, support_agent, sync_turns):
    session = chat_session(alice)
    reminder = create_reminder(session, delay="10m", prompt="Wake up.", now=T0)
    running = busy(session)

    assert fire_due(now=T0 + timedelta(minutes=10)) == 1

    running.refresh_from_db()
    assert (running.status, running.interrupt_requested) == ("running", False), "a reminder never preempts"
    queued = Turn.objects.get(session=session, trigger="reminder")
    assert (queued.status, queued.admission, queued.source_ref) == ("queued", "coalesce", reminder.id)
    assert received(session) == []

    settle(session, running)

    queued.refresh_from_db()
    assert queued.status == "completed"
    assert [w["text"] for w in received(session)] == ["Wake up."]


@transactional
def test_a_recurring_reminder_keeps_one_wake_waiting_behind_a_long_turn(alice, support_agent, sync_turns):
    """Firings while its last wake still waits to start add nothing: the waiting wake stands for them."""
    session = chat_session(alice)
    reminder = create_reminder(session, every="30m", prompt="Re-check CI.", now=T0)
    running = busy(session)  # e.g. parked on an approval for hours

    assert tick_through(T0, T0 + timedelta(hours=3), step=5) == 6

    reminder.refresh_from_db()
    assert reminder.fire_count == 6, "every due time is still claimed once"
    assert list(Turn.objects.filter(session=session, trigger="reminder").values_list("status", flat=True)) == ["queued"]

    settle(session, running)
    assert fire_due(now=T0 + timedelta(hours=3, minutes=30)) == 1

    assert [w["text"] for w in received(session)] == ["Re-check CI.", "Re-check CI."]
    assert Turn.objects.filter(session=session, trigger="reminder", status="completed").count() == 2


# --- run form and tools ------------------------------------------------------------------


@transactional
def test_a_run_form_reminder_made_by_a_tool_stops_itself_after_three_firings(alice, tmp_path, sync_turns):
    deploy_agent_folder(write_agent(tmp_path / "watcher", {"agent/tools/watch.py": WATCH_TOOL}))
    session = chat_session(alice, "watcher", '/call watch {"every": "30m"}')
    reminder = Reminder.objects.get(session=session)
    assert reminder.is_run_form and reminder.kind == "every" and reminder.status == "armed"
    first = reminder.next_fire_at

    assert tick_through(first - timedelta(minutes=5), first + timedelta(hours=3)) == 3

    reminder.refresh_from_db()
    assert (reminder.status, reminder.reason, reminder.fire_count, reminder.next_fire_at) == (
        "cancelled", "stopped_by_handler", 3, None)
    assert [w["text"] for w in received(session)] == [f"Re-check CI (firing {n})." for n in (1, 2, 3)]
    assert all(w["reminderId"] == reminder.id for w in received(session))


@transactional
def test_the_remind_me_tool_sets_a_reminder_that_comes_back_as_a_follow_up(alice, tmp_path, sync_turns):
    deploy_agent_folder(write_agent(tmp_path / "helper", {}, extra=", reminders_tool=True"))
    session = chat_session(alice, "helper", '/call remind_me {"delay": "20m", "prompt": "Check whether the oven is off."}')

    reminder = Reminder.objects.get(session=session)
    assert (reminder.kind, reminder.spec, reminder.prompt, reminder.is_run_form) == (
        "delay", "20m", "Check whether the oven is off.", False)
    assert reminder.created_by == {"tool": "remind_me"}
    [result] = [e["data"] for e in read_events(session.id) if e["type"] == "action.result"]
    assert result["output"]["reminderId"] == reminder.id
    assert result["output"]["nextFireAt"] == reminder.next_fire_at.isoformat()

    assert fire_due(now=reminder.next_fire_at) == 1
    [wake] = received(session)
    assert (wake["text"], wake["reminderId"]) == ("Check whether the oven is off.", reminder.id)


@transactional
def test_remind_me_is_offered_only_to_agents_that_opt_in(alice, support_agent, tmp_path, sync_turns):
    session = chat_session(alice, "support", '/call remind_me {"delay": "20m", "prompt": "x"}')
    [result] = [e["data"] for e in read_events(session.id) if e["type"] == "action.result"]
    assert "remind_me" in result["error"]
    assert not Reminder.objects.filter(session=session).exists()


# --- over HTTP ---------------------------------------------------------------------------


@transactional
def test_reminders_are_listed_and_cancelled_by_their_owner_only(alice, bob, support_agent, sync_turns):
    session = chat_session(alice)
    url = f"/support/v1/session/{session.id}/reminders"
    response = post_json(alice, url, {"every": "2h", "prompt": "Re-check the refund.", "until": "it is refunded"})
    assert response.status_code == 201, response.content
    made = response.json()
    assert (made["kind"], made["spec"], made["form"], made["status"], made["fireCount"]) == ("every", "2h", "prompt", "armed", 0)
    assert (made["sessionId"], made["until"], made["title"]) == (session.id, "it is refunded", "Re-check the refund.")
    rid = made["reminderId"]

    listed = alice.get(url)
    assert listed.status_code == 200
    assert [r["reminderId"] for r in listed.json()["reminders"]] == [rid]

    assert bob.get(url).status_code == 403
    assert post_json(bob, url, {"delay": "5m", "prompt": "mine now"}).status_code == 403
    refused = bob.delete(f"/support/v1/reminders/{rid}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    unknown = alice.delete("/support/v1/reminders/rem_nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "reminder_not_found"

    assert alice.delete(f"/support/v1/reminders/{rid}").status_code == 204
    again = alice.delete(f"/support/v1/reminders/{rid}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "reminder_not_armed"
    row = Reminder.objects.get(pk=rid)
    assert (row.status, row.reason, row.next_fire_at) == ("cancelled", "cancelled", None)
    assert fire_due(now=T0 + timedelta(days=3650)) == 0
    assert alice.get(url).json()["reminders"][0]["status"] == "cancelled"


@transactional
def test_a_task_session_takes_no_reminders(alice, support_agent, sync_turns):
    session = chat_session(alice, mode="task")
    response = post_json(alice, f"/support/v1/session/{session.id}/reminders", {"delay": "5m", "prompt": "x"})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "task_session"
    assert not Reminder.objects.exists()


@transactional
def test_deleting_a_session_cancels_its_reminders(alice, support_agent, sync_turns):
    session = chat_session(alice)
    kept = chat_session(alice)
    gone = [create_reminder(session, every="1h", prompt="a", now=T0), create_reminder(session, delay="5m", prompt="b", now=T0)]
    other = create_reminder(kept, delay="5m", prompt="c", now=T0)

    assert alice.delete(f"/support/v1/session/{session.id}").status_code == 204

    for reminder in gone:
        reminder.refresh_from_db()
        assert (reminder.status, reminder.reason, reminder.next_fire_at) == ("cancelled", "session_deleted", None)
    assert fire_due(now=T0 + timedelta(hours=2)) == 1, "only the other session's reminder fires"
    other.refresh_from_db()
    assert other.status == "done"


@pytest.mark.parametrize("body, says", [
    ({"delay": "20", "prompt": "x"}, "not a duration"),
    ({"delay": "0m", "prompt": "x"}, "not a duration"),
    ({"every": "-5m", "prompt": "x"}, "not a duration"),
    ({"delay": "20 minutes", "prompt": "x"}, "not a duration"),
    ({"delay": "9999999999999999999d", "prompt": "x"}, "too long"),
    ({"every": "100000000d", "prompt": "x"}, "too long"),
    ({"cron": "* * * *", "prompt": "x"}, "exactly 5 fields"),
    ({"cron": "garbage is not a cron", "prompt": "x"}, "not a valid cron"),
    ({"cron": "0 0 30 2 *", "prompt": "x"}, "never fires"),
    ({"delay": "١m", "prompt": "x"}, "not a duration"),
    ({"every": "٣h", "prompt": "x"}, "not a duration"),
    ({"delay": "20m", "every": "30m", "prompt": "x"}, "exactly one of"),
    ({"prompt": "x"}, "exactly one of"),
    ({"delay": "20m"}, "prompt"),
    ({"delay": "20m", "prompt": ""}, "prompt"),
    ({"delay": 20, "prompt": "x"}, "delay"),
])
@transactional
def test_bad_reminders_get_a_400_that_says_what_is_wrong(alice, support_agent, sync_turns, body, says):
    session = chat_session(alice)
    response = post_json(alice, f"/support/v1/session/{session.id}/reminders", body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert says in error["message"], error
    assert not Reminder.objects.exists()


@transactional
def test_a_tool_called_directly_on_a_session_can_set_a_reminder(alice, tmp_path, sync_turns):
    """`POST /tools/<name>/call` with a sessionId gives the tool the same `ctx.host.reminders` a turn does."""
    deploy_agent_folder(write_agent(tmp_path / "watcher", {"agent/tools/watch.py": WATCH_TOOL}))
    session = chat_session(alice, "watcher")

    response = post_json(alice, "/watcher/v1/tools/watch/call", {"input": {"every": "1h"}, "sessionId": session.id})

    assert response.status_code == 200, response.content
    reminder = Reminder.objects.get(pk=response.json()["output"]["reminderId"])
    assert (reminder.session_id, reminder.kind, reminder.spec, reminder.is_run_form) == (session.id, "every", "1h", True)
    assert fire_due(now=reminder.next_fire_at) == 1
    assert [w["text"] for w in received(session)] == ["Re-check CI (firing 1)."]


@transactional
def test_run_form_reminders_whose_handler_is_gone_are_disarmed_saying_why(alice, support_agent, sync_turns):
    session = chat_session(alice)
    child = subprocess.Popen(["true"])
    child.wait()  # a pid of this host whose process has exited
    dead = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    forgotten = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    alive = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    elsewhere = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    Reminder.objects.filter(pk=dead.pk).update(handler_owner=f"{socket.gethostname()}:{child.pid}")
    _handlers.pop(forgotten.id)  # this process's handler table no longer has it (a restarted worker, same pid)
    Reminder.objects.filter(pk=elsewhere.pk).update(handler_owner="another-host:1")

    assert disarm_lost_handlers() == 2

    states = {r.pk: (r.status, r.reason) for r in Reminder.objects.all()}
    assert states[dead.pk] == states[forgotten.pk] == ("disarmed", "handler_lost_on_restart")
    assert states[alive.pk] == ("armed", "") and alive.handler_owner == owner_id()
    assert states[elsewhere.pk] == ("armed", ""), "another host's process cannot be checked from here"
    # The other host's reminder is left to its own process: this one never fires it.
    assert fire_due(now=T0 + timedelta(hours=1)) == 1


@pytest.mark.django_db(transaction=True)
def test_the_model_cancels_its_own_reminder_when_until_is_met(local, tmp_path, sync_turns):
    root = tmp_path / "minder"
    shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "agent" / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(reminders_tool=True)\n")
    deploy_agent_folder(root)
    created = local.post("/minder/v1/session", {"message": '/call remind_me {"every": "30m", "prompt": "check", "until": "shipped"}'},
                         content_type="application/json")
    session_id = created.json()["sessionId"]
    reminder = Reminder.objects.get(session_id=session_id)

    local.post(f"/minder/v1/session/{session_id}/message",
               {"message": f'/call cancel_reminder {{"reminder_id": "{reminder.id}"}}'}, content_type="application/json")
    local.post(f"/minder/v1/session/{session_id}/message",
               {"message": '/call cancel_reminder {"reminder_id": "rem_not_mine"}'}, content_type="application/json")

    reminder.refresh_from_db()
    assert reminder.status == Reminder.Status.CANCELLED
    results = [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]
    assert results[1]["output"] == {"reminderId": reminder.id, "cancelled": True}
    assert "no armed reminder 'rem_not_mine'" in results[2]["error"]
