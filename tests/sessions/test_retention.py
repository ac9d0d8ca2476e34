"""Retention: idle sessions deleted with everything they own, by `manage.py purge` and by the ticker's job.

Sessions are made old by moving their timestamps (and their events' times) back in the database.
"""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.discovery import AgentFolderError, deploy_agent_folder
from sessions.retention import sweep as retention
from sessions.timers import ticker
from sessions.host import Host
from sessions.models import Artifact, Event, KVEntry, Reminder, Session, ToolCall, Turn
from sessions.timers.schedules import create_reminder
from tests.sessions.test_approvals import PAY_5, write_gated_agent
from tests.sessions.workspace_support import call, deploy, start, transactional, workspace_of

ROOT = Path(__file__).resolve().parents[2]


def age(session_id: str, days: float) -> None:
    """Make the session's last activity `days` ago: its creation, last update and every event."""
    when = timezone.now() - timedelta(days=days)
    Session.objects.filter(pk=session_id).update(created_at=when, updated_at=when)
    Event.objects.filter(session_id=session_id).update(at=when)


def purge(*args: str) -> str:
    out = StringIO()
    call_command("purge", *args, stdout=out)
    return out.getvalue()


def busy_session(client, slug: str) -> str:
    """A session whose next turn is running (claimed by a worker), as the lock holder sees it."""
    session_id = start(client, slug, "hello")
    turn = Turn.objects.create(session_id=session_id, status=Turn.Status.RUNNING, claimed_by="worker-1",
                               lease_until=timezone.now() + timedelta(minutes=5))
    Session.objects.filter(pk=session_id).update(active_turn=turn, status=Session.Status.RUNNING)
    return session_id


@pytest.fixture
def ticker_job():
    """The retention job exactly as the ticker runs it, its hourly gate open."""
    [job] = [job for name, job in ticker._jobs if name == "retention"]
    retention._next_run = 0.0
    yield job
    retention._next_run = 0.0


@transactional
def test_a_purged_session_is_gone_from_every_table_and_its_workspace_from_disk(alice, tmp_path, sync_turns):
    agent = deploy(tmp_path, "desk")
    old = start(alice, "desk", call("write", path="notes.txt", content="old"))
    recent = start(alice, "desk", call("write", path="notes.txt", content="recent"))
    for session_id in (old, recent):
        session = Session.objects.get(pk=session_id)
        Host(session=session, agent=agent).artifacts.save("report.md", "# report")
        Host(session=session, agent=agent).kv.set("draft", "mine", scope="session")
        create_reminder(session, delay="2h", prompt="check back")
    Host(session=None, agent=agent).kv.set("plan", "agent-wide")
    assert (workspace_of(old) / "notes.txt").is_file()
    owned = {model: model.objects.filter(session_id=old) for model in (Event, Turn, Artifact, KVEntry, Reminder)}
    owned[ToolCall] = ToolCall.objects.filter(turn__session_id=old)
    assert all(rows.exists() for rows in owned.values())
    age(old, 31)
    age(recent, 29)

    output = purge("--older-than", "30")

    assert f"deleted {old} (desk, last active " in output
    assert output.splitlines()[-1] == "deleted 1 session(s) idle for more than 30 day(s); skipped 0 with a turn in flight; spared 0 with a decision pending"
    assert not Session.objects.filter(pk=old).exists()
    assert {model.__name__: rows.count() for model, rows in owned.items()} == {
        "Event": 0, "Turn": 0, "Artifact": 0, "KVEntry": 0, "Reminder": 0, "ToolCall": 0}
    assert not workspace_of(old).exists()
    assert Reminder.objects.filter(session__isnull=True).count() == 0, "no orphaned reminder rows stay behind"

    assert (workspace_of(recent) / "notes.txt").read_text() == "recent"
    for model in (Event, Turn, Artifact, KVEntry, Reminder):
        assert model.objects.filter(session_id=recent).exists(), model.__name__
    assert Reminder.objects.get(session_id=recent).status == Reminder.Status.ARMED
    assert KVEntry.objects.filter(session__isnull=True, key="plan").exists(), "agent-wide keys are not a session's"


@transactional
def test_a_recent_event_keeps_an_old_session(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    session_id = start(alice, "desk", "hello")
    age(session_id, 90)
    last = Event.objects.filter(session_id=session_id).order_by("-index").first()
    Event.objects.filter(pk=last.pk).update(at=timezone.now() - timedelta(days=2))

    assert purge("--older-than", "30").splitlines()[-1].startswith("deleted 0 session(s)")
    assert Session.objects.filter(pk=session_id).exists()


@transactional
def test_a_session_with_a_running_turn_is_skipped_and_goes_the_next_time(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    session_id = busy_session(alice, "desk")
    age(session_id, 60)

    output = purge("--older-than", "30")

    assert f"skipped {session_id} (desk): a turn is queued or running" in output
    assert output.splitlines()[-1].endswith("skipped 1 with a turn in flight; spared 0 with a decision pending")
    assert Session.objects.filter(pk=session_id, active_turn__isnull=False).exists()
    assert Turn.objects.get(session_id=session_id, status=Turn.Status.RUNNING).interrupt_requested is False

    Turn.objects.filter(session_id=session_id, status=Turn.Status.RUNNING).update(
        status=Turn.Status.COMPLETED, ended_at=timezone.now())
    Session.objects.filter(pk=session_id).update(active_turn=None, status=Session.Status.WAITING)
    age(session_id, 60)
    assert purge("--older-than", "30").splitlines()[-1].startswith("deleted 1 session(s)")
    assert not Session.objects.filter(pk=session_id).exists()


def parked_session(client, tmp_path) -> str:
    """A session of the `gated` agent whose turn is parked on a payment someone has to approve."""
    deploy_agent_folder(write_gated_agent(tmp_path / "gated", tmp_path / "ledger.txt", tmp_path / "notes.txt"))
    session_id = start(client, "gated", PAY_5)
    assert Session.objects.get(pk=session_id).status == Session.Status.AWAITING_APPROVAL
    assert ToolCall.objects.get(session_id=session_id).status == ToolCall.Status.AWAITING_APPROVAL
    return session_id


@transactional
def test_a_session_parked_on_an_approval_is_spared_unless_pending_ones_are_included(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    parked = parked_session(alice, tmp_path)
    idle = start(alice, "desk", "hello")
    for session_id in (parked, idle):
        age(session_id, 60)

    output = purge("--older-than", "30")

    assert f"spared {parked} (gated): a call awaits approval (--include-pending deletes it)" in output
    assert output.splitlines()[-1] == ("deleted 1 session(s) idle for more than 30 day(s); skipped 0 with a turn "
                                       "in flight; spared 1 with a decision pending")
    assert ToolCall.objects.get(session_id=parked).status == ToolCall.Status.AWAITING_APPROVAL
    assert not Session.objects.filter(pk=idle).exists()
    assert purge("--older-than", "30", "--dry-run").splitlines()[-1].endswith("spared 1 with a decision pending")

    output = purge("--older-than", "30", "--include-pending")

    assert f"deleted {parked} (gated, last active " in output
    assert output.splitlines()[-1].startswith("deleted 1 session(s)")
    assert not Session.objects.filter(pk=parked).exists()
    assert not ToolCall.objects.filter(session_id=parked).exists()


@transactional
def test_the_configured_retention_spares_a_session_parked_on_an_approval(alice, tmp_path, sync_turns, settings,
                                                                         ticker_job):
    settings.AGENTSITE_RETENTION_DAYS = 30
    parked = parked_session(alice, tmp_path)
    age(parked, 400)

    done = ticker_job()

    assert [s.session_id for s in done.spared] == [parked] and not done.deleted
    assert Session.objects.get(pk=parked).status == Session.Status.AWAITING_APPROVAL


@transactional
def test_a_dry_run_lists_what_it_would_delete_and_deletes_nothing(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    deploy(tmp_path, "other")
    old = start(alice, "desk", call("write", path="a.txt", content="x"))
    elsewhere = start(alice, "other", "hello")
    for session_id in (old, elsewhere):
        age(session_id, 40)

    output = purge("--older-than", "30", "--dry-run", "--agent", "desk")

    assert output.splitlines() == [
        output.splitlines()[0],
        "would delete 1 session(s) idle for more than 30 day(s); skipped 0 with a turn in flight; spared 0 with a decision pending"]
    assert output.startswith(f"would delete {old} (desk, last active ")
    assert Session.objects.filter(pk__in=[old, elsewhere]).count() == 2
    assert (workspace_of(old) / "a.txt").is_file()

    assert f"deleted {old} " in purge("--older-than", "30", "--agent", "desk")
    assert Session.objects.filter(pk=elsewhere).exists(), "--agent keeps to that agent's sessions"


@pytest.mark.django_db
@pytest.mark.parametrize("days", ["0", "-3", "ten", "1.5", "99999"])
def test_purge_refuses_a_bad_number_of_days(days):
    with pytest.raises(CommandError, match="invalid whole number of days"):
        purge("--older-than", days)


@pytest.mark.django_db
def test_purge_refuses_an_unknown_agent():
    with pytest.raises(CommandError, match="no agent 'nope'"):
        purge("--older-than", "30", "--agent", "nope")


@transactional
def test_the_ticker_job_applies_the_setting_and_each_agents_own_retention(alice, tmp_path, sync_turns, settings,
                                                                         ticker_job):
    settings.AGENTSITE_RETENTION_DAYS = 30
    deploy(tmp_path, "plain")
    deploy(tmp_path, "brief", "from agents.sdk import Agent\nagent = Agent(retention_days=7)\n")
    deploy(tmp_path, "long", "from agents.sdk import Agent\nagent = Agent(retention_days=365)\n")
    deploy(tmp_path, "forever", "from agents.sdk import Agent\nagent = Agent(retention_days=0)\n")
    ages = {("plain", 40): "gone", ("plain", 20): "kept", ("brief", 10): "gone", ("brief", 3): "kept",
            ("long", 100): "kept", ("long", 400): "gone", ("forever", 5000): "kept"}
    sessions = {}
    for (slug, days) in ages:
        sessions[slug, days] = start(alice, slug, "hello")
        age(sessions[slug, days], days)

    done = ticker_job()

    assert {key: "kept" if Session.objects.filter(pk=sid).exists() else "gone" for key, sid in sessions.items()} == ages
    assert sorted(s.agent for s in done.deleted) == ["brief", "long", "plain"]
    assert ticker_job() is None, "at most one pass an hour in a process"


@transactional
def test_the_ticker_job_keeps_everything_when_retention_is_off_and_skips_running_turns(alice, tmp_path, sync_turns,
                                                                                       settings, ticker_job):
    settings.AGENTSITE_RETENTION_DAYS = None
    deploy(tmp_path, "plain")
    deploy(tmp_path, "brief", "from agents.sdk import Agent\nagent = Agent(retention_days=7)\n")
    kept = start(alice, "plain", "hello")
    busy = busy_session(alice, "brief")
    gone = start(alice, "brief", "hello")
    for session_id in (kept, busy, gone):
        age(session_id, 3000)

    done = ticker_job()

    assert [s.session_id for s in done.deleted] == [gone]
    assert [s.session_id for s in done.skipped] == [busy]
    assert set(Session.objects.values_list("pk", flat=True)) == {kept, busy}


@pytest.mark.django_db
@pytest.mark.parametrize("days", [-1, 2.5, "30", True, 10 ** 6])
def test_a_bad_retention_days_is_a_validation_error_naming_agent_py(tmp_path, days):
    with pytest.raises(AgentFolderError) as raised:
        deploy(tmp_path, "desk", f"from agents.sdk import Agent\nagent = Agent(retention_days={days!r})\n")
    [problem] = raised.value.problems
    assert problem.path == "agent/agent.py"
    assert problem.message.startswith(f"retention_days must be a whole number of days between 0 and 36500, not {days!r}")
    assert "Agent(retention_days=90)" in problem.message and "AGENTSITE_RETENTION_DAYS" in problem.message


@pytest.mark.django_db
def test_an_agents_retention_days_is_in_its_manifest(tmp_path):
    agent = deploy(tmp_path, "desk", "from agents.sdk import Agent\nagent = Agent(retention_days=14)\n")
    assert agent.active_deployment.manifest["retentionDays"] == 14
    assert deploy(tmp_path, "plain").active_deployment.manifest["retentionDays"] is None


@pytest.mark.parametrize("value", ["soon", "-1", "40000"])
def test_a_bad_AGENTSITE_RETENTION_DAYS_stops_the_server_from_starting(value):
    env = {**os.environ, "AGENTSITE_RETENTION_DAYS": value}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    assert f"AGENTSITE_RETENTION_DAYS={value!r}: give a whole number of days (such as 90)" in result.stderr
