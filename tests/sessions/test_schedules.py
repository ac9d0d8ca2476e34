"""Schedules: `agent/schedules/<id>.md` and `<id>.py`, synced on deploy, fired through the claim.

Time is controlled, never slept: the tick is `fire_due(now=...)` with the
instant under test, and rows are put at known due times by hand.
"""
from __future__ import annotations

import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, load_agent_folder
from agents.schedules import next_after
from sessions.eventlog.events import read_events
from sessions.models import Reminder, Schedule, Session
from sessions.timers.schedules import fire_due

UTC = timezone.utc
T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)  # a Monday, 09:00 UTC

transactional = pytest.mark.django_db(transaction=True)

LOOKUP_TOOL = """
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        service: str

    @tool(description="Look up a service's status.")
    def lookup(input: Input, ctx) -> dict:
        return {"service": input.service, "status": "degraded"}
"""


def write_agent(root: Path, files: dict[str, str | None], *, model: str = "scripted:echo", extra: str = "") -> Path:
    """Write (or, with None, remove) files of an agent folder under `root`; returns `root`."""
    base = {
        "agent/instructions.md": "You are a test agent.\n",
        "agent/agent.py": f"from agents.sdk import Agent\nagent = Agent(model={model!r}{extra})\n",
    }
    for rel, text in {**base, **files}.items():
        path = root / rel
        if text is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def markdown_schedule(cron: str, prompt: str = "Summarize open incidents.", title: str = "") -> str:
    lines = ["---", f'cron: "{cron}"'] + ([f"title: {title}"] if title else []) + ["---", prompt, ""]
    return "\n".join(lines)


def handler_schedule(cron: str, body: str) -> str:
    return (
        "from agents.sdk import Schedule\n\n"
        "def run(ctx):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n\n"
        f"schedule = Schedule(cron={cron!r}, run=run, title='Handler')\n"
    )


def due_at(agent, schedule_id: str, when: datetime) -> Schedule:
    """Put a schedule's next firing at `when`, as if synced a while ago."""
    Schedule.objects.filter(agent=agent, schedule_id=schedule_id).update(next_fire_at=when)
    return Schedule.objects.get(agent=agent, schedule_id=schedule_id)


# --- discovery -----------------------------------------------------------------


def test_markdown_and_handler_schedules_are_discovered(tmp_path):
    root = write_agent(tmp_path / "disc", {
        "agent/schedules/morning.md": markdown_schedule("0 9 * * 1-5", "Pull open incidents.", title="Morning"),
        "agent/schedules/watch.py": handler_schedule("*/30 * * * *", "ctx.receive('look')"),
    })

    loaded = load_agent_folder(root)

    morning, watch = loaded.schedules["morning"], loaded.schedules["watch"]
    assert (morning.kind, morning.cron, morning.title, morning.prompt, morning.run) == (
        "markdown", "0 9 * * 1-5", "Morning", "Pull open incidents.", None)
    assert (watch.kind, watch.cron, watch.title, watch.prompt) == ("handler", "*/30 * * * *", "Handler", "")
    assert callable(watch.run)
    listed = {s["id"]: s for s in loaded.manifest()["schedules"]}
    assert listed["morning"]["file"] == "agent/schedules/morning.md"
    assert listed["watch"]["file"] == "agent/schedules/watch.py"


@pytest.mark.parametrize("cron, says", [
    ("* * * *", "exactly 5 fields"),
    ("* * * * * *", "exactly 5 fields"),
    ("garbage is not a cron", "not a valid cron"),
    ("61 * * * *", "not a valid cron"),
    ("0 0 30 2 *", "never"),  # February 30th: valid syntax, no firing ever
])
@pytest.mark.parametrize("form", ["md", "py"])
def test_a_bad_cron_is_refused_naming_the_file(tmp_path, cron, says, form):
    text = markdown_schedule(cron) if form == "md" else handler_schedule(cron, "pass")
    root = write_agent(tmp_path / "bad", {f"agent/schedules/nightly.{form}": text})

    with pytest.raises(AgentFolderError) as caught:
        load_agent_folder(root)

    [problem] = caught.value.problems
    assert problem.path == f"agent/schedules/nightly.{form}"
    assert says in problem.message


def test_a_schedule_without_cron_or_body_is_refused(tmp_path):
    root = write_agent(tmp_path / "bad", {
        "agent/schedules/nocron.md": "---\ntitle: x\n---\nDo it.\n",
        "agent/schedules/empty.md": markdown_schedule("0 * * * *", prompt=""),
        "agent/schedules/norun.py": "from agents.sdk import Schedule\nschedule = Schedule(cron='0 * * * *', run=None)\n",
    })
    with pytest.raises(AgentFolderError) as caught:
        load_agent_folder(root)
    found = {p.path: p.message for p in caught.value.problems}
    assert "set `cron:`" in found["agent/schedules/nocron.md"]
    assert "empty body" in found["agent/schedules/empty.md"]
    assert "must be a function" in found["agent/schedules/norun.py"]


# --- sync on deploy ------------------------------------------------------------------


@transactional
def test_deploy_creates_a_row_per_schedule_with_its_next_firing(tmp_path):
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/morning.md": markdown_schedule("0 9 * * 1-5", "Pull open incidents."),
        "agent/schedules/watch.py": handler_schedule("*/30 * * * *", "pass"),
    })
    before = datetime.now(UTC)
    agent = deploy_agent_folder(root).agent
    after = datetime.now(UTC)

    rows = {s.schedule_id: s for s in Schedule.objects.filter(agent=agent)}
    assert set(rows) == {"morning", "watch"}
    assert (rows["morning"].kind, rows["morning"].prompt, rows["morning"].active) == ("markdown", "Pull open incidents.", True)
    assert (rows["watch"].kind, rows["watch"].cron) == ("handler", "*/30 * * * *")
    for row in rows.values():
        # The first cron time after the deploy instant.
        assert next_after(row.cron, before) <= row.next_fire_at <= next_after(row.cron, after)
        assert row.fire_count == 0


@transactional
def test_removing_a_schedule_file_stops_it_and_restoring_it_starts_it(tmp_path):
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/morning.md": markdown_schedule("0 9 * * *"),
        "agent/schedules/hourly.md": markdown_schedule("0 * * * *"),
    })
    agent = deploy_agent_folder(root).agent

    write_agent(root, {"agent/schedules/morning.md": None})
    deploy_agent_folder(root)

    morning = Schedule.objects.get(agent=agent, schedule_id="morning")
    assert (morning.active, morning.next_fire_at) == (False, None)
    assert Schedule.objects.get(agent=agent, schedule_id="hourly").active
    due_at(agent, "hourly", T0)
    assert fire_due(now=T0 + timedelta(days=2)) == 1, "only the remaining schedule fires"
    assert Session.objects.filter(agent=agent).count() == 1

    write_agent(root, {"agent/schedules/morning.md": markdown_schedule("0 9 * * *")})
    before = datetime.now(UTC)
    deploy_agent_folder(root)
    morning.refresh_from_db()
    assert morning.active and morning.next_fire_at >= next_after("0 9 * * *", before)


@transactional
def test_a_changed_cron_recomputes_the_next_firing_and_an_unchanged_one_keeps_it(tmp_path):
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/report.md": markdown_schedule("0 9 * * *"),
        "agent/schedules/steady.md": markdown_schedule("0 * * * *", "Steady."),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "report", T0)
    due_at(agent, "steady", T0)

    write_agent(root, {
        "agent/schedules/report.md": markdown_schedule("30 * * * *", "A new prompt."),
        "agent/schedules/steady.md": markdown_schedule("0 * * * *", "Steady, reworded."),
    })
    before = datetime.now(UTC)
    deploy_agent_folder(root)
    after = datetime.now(UTC)

    report = Schedule.objects.get(agent=agent, schedule_id="report")
    assert (report.cron, report.prompt) == ("30 * * * *", "A new prompt.")
    assert next_after("30 * * * *", before) <= report.next_fire_at <= next_after("30 * * * *", after)
    assert report.next_fire_at.minute == 30
    steady = Schedule.objects.get(agent=agent, schedule_id="steady")
    assert (steady.prompt, steady.next_fire_at) == ("Steady, reworded.", T0), "a redeploy must not postpone a due firing"


# --- firing --------------------------------------------------------------------------


@transactional
def test_a_markdown_schedule_starts_a_task_session_that_completes(tmp_path, sync_turns):
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/morning.md": markdown_schedule("0 9 * * 1-5", "Pull open incidents.", title="Morning"),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "morning", T0)

    assert fire_due(now=T0 + timedelta(seconds=3)) == 1

    row = Schedule.objects.get(agent=agent, schedule_id="morning")
    [session] = Session.objects.filter(agent=agent)
    assert row.last_session_ids == [session.id]
    assert (row.fire_count, row.last_fired_at, row.last_error) == (1, T0 + timedelta(seconds=3), "")
    assert row.next_fire_at == datetime(2025, 3, 4, 9, 0, tzinfo=UTC), "the next weekday at 09:00"
    assert (session.mode, session.status, session.channel, session.title) == ("task", "completed", "schedule", "Morning")
    assert (session.principal_type, session.authenticator, session.principal_id) == (
        "app", "schedule", f"schedule:{agent.slug}/morning")
    events = read_events(session.id)
    received = next(e for e in events if e["type"] == "message.received")
    assert received["data"]["source"] == "schedule"
    assert received["data"]["scheduleId"] == "morning"
    assert received["data"]["text"] == "Pull open incidents."
    assert events[-1]["type"] == "session.completed"
    assert any(e["type"] == "message.completed" and "Pull open incidents." in e["data"]["text"] for e in events)

    assert fire_due(now=T0 + timedelta(minutes=5)) == 0, "one firing per due time"


@transactional
def test_a_schedule_over_its_agents_spent_budget_records_why_it_did_not_start(tmp_path, sync_turns, caplog):
    from decimal import Decimal

    from sessions.models import Spend
    from sessions.models.spend import utc_day

    root = write_agent(tmp_path / "sched", {"agent/schedules/morning.md": markdown_schedule("0 9 * * *")},
                       extra=", budget={'daily': 1}")
    agent = deploy_agent_folder(root).agent
    Spend.objects.create(day=utc_day(), principal_id="pat", authenticator="django", agent=agent, model="openai:x",
                         cost_usd=Decimal("1"))
    due_at(agent, "morning", T0)

    assert fire_due(now=T0) == 1

    row = Schedule.objects.get(agent=agent, schedule_id="morning")
    assert row.last_error.startswith("budget_exceeded: the agent's daily budget of $1 is spent")
    assert not Session.objects.filter(agent=agent).exists()
    assert row.next_fire_at == T0 + timedelta(days=1), "it keeps its cadence"
    assert not [r for r in caplog.records if r.exc_info], "a spent budget is no bug: no traceback"


@transactional
def test_a_handler_schedule_hands_work_to_a_chat_session_as_the_app_principal(tmp_path, sync_turns):
    root = write_agent(tmp_path / "sched", {
        "agent/tools/lookup.py": LOOKUP_TOOL,
        "agent/schedules/watch.py": handler_schedule("*/30 * * * *", """
            status = ctx.call_tool("lookup", {"service": "payments"})
            if status["status"] != "ok":
                ctx.receive(f"payments is {status['status']} (due {ctx.due.isoformat()})", title="payments watch")
        """),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "watch", T0)

    assert fire_due(now=T0) == 1

    row = Schedule.objects.get(agent=agent, schedule_id="watch")
    [session] = Session.objects.filter(agent=agent)
    assert (row.last_error, row.last_session_ids, row.next_fire_at) == ("", [session.id], T0 + timedelta(minutes=30))
    assert (session.mode, session.status, session.channel, session.title) == ("chat", "waiting", "http", "payments watch")
    assert (session.principal_type, session.authenticator, session.principal_id) == (
        "app", "schedule", f"schedule:{agent.slug}/watch")
    received = next(e for e in read_events(session.id) if e["type"] == "message.received")
    assert received["data"]["source"] == "schedule"
    assert received["data"]["text"] == f"payments is degraded (due {T0.isoformat()})"


@transactional
def test_a_failing_handler_records_its_error_and_keeps_the_cadence(tmp_path, sync_turns):
    marker = tmp_path / "fail-now"
    marker.touch()
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/flaky.py": handler_schedule("0 * * * *", f"""
            from pathlib import Path
            if Path({str(marker)!r}).exists():
                raise RuntimeError("the upstream is down")
            ctx.receive("all good")
        """),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "flaky", T0)

    assert fire_due(now=T0) == 1
    row = Schedule.objects.get(agent=agent, schedule_id="flaky")
    assert (row.fire_count, row.last_error, row.last_session_ids) == (1, "RuntimeError: the upstream is down", [])
    assert row.next_fire_at == T0 + timedelta(hours=1)

    assert fire_due(now=T0 + timedelta(hours=1)) == 1
    row.refresh_from_db()
    assert (row.fire_count, row.next_fire_at) == (2, T0 + timedelta(hours=2))

    marker.unlink()
    assert fire_due(now=T0 + timedelta(hours=2)) == 1
    row.refresh_from_db()
    assert (row.fire_count, row.last_error, len(row.last_session_ids)) == (3, "", 1), "a success clears the error"


@transactional
def test_schedules_switched_off_do_not_fire_but_reminders_would(tmp_path, settings, sync_turns):
    root = write_agent(tmp_path / "sched", {"agent/schedules/hourly.md": markdown_schedule("0 * * * *")})
    agent = deploy_agent_folder(root).agent
    due_at(agent, "hourly", T0)

    settings.AGENTSITE_SCHEDULES = False  # serve --no-schedules
    assert fire_due(now=T0 + timedelta(hours=3)) == 0
    assert Schedule.objects.get(agent=agent, schedule_id="hourly").next_fire_at == T0

    settings.AGENTSITE_SCHEDULES = True
    assert fire_due(now=T0 + timedelta(hours=3)) == 1


@transactional
def test_an_overdue_schedule_fires_once_then_resumes_its_cadence(tmp_path, sync_turns):
    """Catch-up after downtime: one firing for all that was missed, then the next cron time after now."""
    root = write_agent(tmp_path / "sched", {"agent/schedules/hourly.md": markdown_schedule("0 * * * *")})
    agent = deploy_agent_folder(root).agent
    due_at(agent, "hourly", T0)  # 09:00; the server was down until 13:07
    back = T0 + timedelta(hours=4, minutes=7)

    assert fire_due(now=back) == 1
    assert fire_due(now=back + timedelta(seconds=30)) == 0

    row = Schedule.objects.get(agent=agent, schedule_id="hourly")
    assert row.next_fire_at == datetime(2025, 3, 3, 14, 0, tzinfo=UTC)
    assert (row.fire_count, row.last_fired_at) == (1, back)
    assert Session.objects.filter(agent=agent).count() == 1

    assert fire_due(now=datetime(2025, 3, 3, 14, 0, 2, tzinfo=UTC)) == 1
    row.refresh_from_db()
    assert row.next_fire_at == datetime(2025, 3, 3, 15, 0, tzinfo=UTC)


@transactional
def test_a_handler_schedule_sets_reminders_on_its_own_agents_sessions_only(tmp_path, alice, support_agent, sync_turns):
    target = tmp_path / "target-session"
    root = write_agent(tmp_path / "sched", {
        "agent/schedules/nudge.py": handler_schedule("0 * * * *", f"""
            from pathlib import Path
            session_id = Path({str(target)!r}).read_text()
            ctx.host.reminders.create(session_id=session_id, delay="1h", prompt="Nudge from the schedule.")
        """),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "nudge", T0)
    other = alice.post("/support/v1/session", {"message": "hi"}, content_type="application/json").json()["sessionId"]
    own = alice.post("/sched/v1/session", {"message": "hi"}, content_type="application/json").json()["sessionId"]

    target.write_text(other)
    assert fire_due(now=T0) == 1
    row = Schedule.objects.get(agent=agent, schedule_id="nudge")
    assert row.last_error == f"TimerError: no session {other!r} on this agent"
    assert not Reminder.objects.exists()

    target.write_text(own)
    assert fire_due(now=T0 + timedelta(hours=1)) == 1
    row.refresh_from_db()
    assert row.last_error == ""
    [reminder] = Reminder.objects.all()
    assert (reminder.session_id, reminder.agent_id, reminder.prompt) == (own, agent.pk, "Nudge from the schedule.")
