"""Reminders: durable timers bound to one chat session, prompt form and run form.

The clock is controlled: reminders are armed with `create_reminder(..., now=T0)`
or read back from their row, and the tick is `fire_due(now=...)` walked over
simulated minutes. Turns run inline (`sync_turns`).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from agents.discovery import deploy_agent_folder
from sessions.turn.admission import dispatch_next
from sessions.eventlog.events import read_events
from sessions.models import Reminder, Session, Turn
from sessions.timers.schedules import (
    TimerError,
    create_reminder,
    fire_due,
    parse_duration,
)
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


@transactional
def test_a_wake_over_a_spent_budget_is_skipped_and_the_reminder_keeps_its_cadence(alice, support_agent, settings,
                                                                                   sync_turns):
    from decimal import Decimal

    from sessions.models import Spend
    from sessions.models.spend import utc_day

    session = chat_session(alice)
    reminder = create_reminder(session, every="30m", prompt="Re-check the order.", now=T0)
    settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY = Decimal("1")
    Spend.objects.create(day=utc_day(), principal_id=session.principal_id, authenticator=session.authenticator,
                         agent=support_agent, model="openai:x", cost_usd=Decimal("1"))

    assert tick_through(T0, T0 + timedelta(hours=1)) == 2

    reminder.refresh_from_db()
    assert (reminder.status, reminder.fire_count) == ("armed", 2)
    assert received(session) == []
    Spend.objects.all().delete()  # the budget refills: the next wake goes through
    assert tick_through(T0 + timedelta(minutes=61), T0 + timedelta(minutes=90)) == 1
    assert len(received(session)) == 1
