"""Hosts are named (AGENTSITE_HOST_ID) and leased: a host whose lease lapsed is lost, and its turns end.

Unit level: `Host.renew`, `process_gone` and `sweep()` against rows set up
directly, sweeping as another host. Process level: a real worker on
PostgreSQL as host h1, killed with SIGKILL mid-turn with all of h1; a sweep
run as host h2 fails the turn once h1's lease lapsed, long before the turn's
own lease would.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import psutil
import pytest
from django.utils import timezone

from sessions.eventlog.events import read_events
from sessions.models import Host, Reminder, Turn
from sessions.plumbing.processes import process_gone, process_id
from sessions.turn.recovery import LOST_ERROR, sweep
from sessions.timers.schedules import create_reminder, disarm_lost_handlers
from tests.sessions.test_recovery import SLOW_TOOL, idle_session, running_turn, types_after, wait_for
from tests.sessions.test_reminders import T0, chat_session
from tests.support import ROOT, backend_env, child_env, run_server

transactional = pytest.mark.django_db(transaction=True)


def lease(host_id: str, *, left: timedelta) -> Host:
    now = timezone.now()
    return Host.objects.create(host_id=host_id, kind=Host.Kind.WORKER, processes={"4242": now.isoformat()},
                               started_at=now - timedelta(hours=1), last_seen=now - timedelta(seconds=5),
                               lease_until=now + left)


def test_process_ids_name_the_configured_host(settings, sync_turns):
    settings.AGENTSITE_HOST_ID = "web-3.example"
    assert process_id() == f"web-3.example:{os.getpid()}"


@pytest.mark.django_db
def test_a_lease_is_taken_renewed_and_taken_again_after_it_lapsed():
    now = timezone.now()
    assert Host.renew("h1", Host.Kind.WORKER, 10, 15, now) is False, "a new lease"
    assert Host.renew("h1", Host.Kind.WORKER, 11, 15, now + timedelta(seconds=5)) is True
    row = Host.objects.get(host_id="h1")
    assert (set(row.processes), row.started_at, row.lease_until) == ({"10", "11"}, now, now + timedelta(seconds=20))

    later = now + timedelta(minutes=5)
    assert Host.renew("h1", Host.Kind.WORKER, 12, 15, later) is False, "it had lapsed"
    row.refresh_from_db()
    assert (set(row.processes), row.started_at) == ({"12"}, later)


@pytest.mark.django_db
def test_a_host_is_lost_when_every_lease_of_it_lapsed():
    lease("gone", left=timedelta(seconds=-1))
    lease("alive", left=timedelta(seconds=-1))
    Host.objects.create(host_id="alive", kind=Host.Kind.WEB, started_at=timezone.now(), last_seen=timezone.now(),
                        lease_until=timezone.now() + timedelta(seconds=10))

    assert Host.objects.lost(timezone.now()) == {"gone"}
    assert process_gone("gone:4242") is True
    assert process_gone("alive:4242") is False
    assert process_gone("never-seen:4242") is False, "a host that never took a lease is unknown, not lost"


@transactional
def test_a_turn_of_a_host_whose_lease_lapsed_fails_at_a_sweep_on_another_host(alice, support_agent, sync_turns,
                                                                               settings):
    settings.AGENTSITE_HOST_ID = "h2"
    session = idle_session(alice)
    start = session.next_event_index
    lease("h1", left=timedelta(seconds=-1))
    lost = running_turn(session, lease=timedelta(minutes=10), claimed_by="h1:4242")

    assert sweep() == 1

    lost.refresh_from_db()
    assert (lost.status, lost.error) == (Turn.Status.FAILED, LOST_ERROR)
    assert types_after(session, start) == ["turn.failed", "session.waiting"]
    failed = read_events(session.id)[-2]
    assert (failed["turnId"], failed["data"]["code"]) == (lost.id, "worker_lost")


@transactional
def test_turns_of_a_live_host_and_of_an_unknown_one_are_left_alone(alice, support_agent, sync_turns, settings):
    settings.AGENTSITE_HOST_ID = "h2"
    lease("h1", left=timedelta(seconds=10))
    live = running_turn(idle_session(alice), lease=timedelta(minutes=10), claimed_by="h1:4242")
    unknown = running_turn(idle_session(alice), lease=timedelta(minutes=10), claimed_by="h9:4242")

    assert sweep() == 0

    live.refresh_from_db(), unknown.refresh_from_db()
    assert (live.status, unknown.status) == (Turn.Status.RUNNING, Turn.Status.RUNNING)


@transactional
def test_a_sweep_never_takes_its_own_host_for_lost(alice, support_agent, sync_turns, settings):
    settings.AGENTSITE_HOST_ID = "h1"
    lease("h1", left=timedelta(seconds=-1))  # its renewals stalled; its processes are checked by pid
    mine = running_turn(idle_session(alice), lease=timedelta(minutes=10), claimed_by=f"h1:{os.getpid()}")

    assert sweep() == 0

    mine.refresh_from_db()
    assert mine.status == Turn.Status.RUNNING


@transactional
def test_run_form_reminders_held_on_a_lost_host_are_disarmed_and_a_live_hosts_kept(alice, support_agent, sync_turns,
                                                                                   settings):
    settings.AGENTSITE_HOST_ID = "h2"
    lease("h1", left=timedelta(seconds=-1))
    lease("h3", left=timedelta(seconds=10))
    session = chat_session(alice)
    lost = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    live = create_reminder(session, every="1h", run=lambda ctx: "skip", now=T0)
    Reminder.objects.filter(pk=lost.pk).update(handler_owner="h1:4242")
    Reminder.objects.filter(pk=live.pk).update(handler_owner="h3:4242")

    assert disarm_lost_handlers() == 1

    states = {r.pk: (r.status, r.reason) for r in Reminder.objects.all()}
    assert states == {lost.pk: ("disarmed", "handler_lost_on_restart"), live.pk: ("armed", "")}


# --- a whole host killed mid-turn: real processes on PostgreSQL ---------------------------


def running_claim(database: str, turn_id: str) -> tuple[str, str]:
    import psycopg

    with psycopg.connect(database) as db:
        row = db.execute("SELECT status, claimed_by FROM agent_sessions_turn WHERE id = %s", [turn_id]).fetchone()
    return (row[0], row[1]) if row else ("", "")


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants at once, as a host that loses power."""
    root = psutil.Process(pid)
    for process in [*root.children(recursive=True), root]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)


SWEEP_AS_H2 = """
import json, time
from sessions.models import Host, Turn
from sessions.turn.recovery import sweep
turn_id = {turn_id!r}
deadline = time.monotonic() + 90
while Turn.objects.get(pk=turn_id).status == "running" and time.monotonic() < deadline:
    sweep()
    time.sleep(0.2)
turn = Turn.objects.get(pk=turn_id)
h1 = max(Host.objects.filter(host_id="h1").values_list("lease_until", flat=True))
print(json.dumps({{"status": turn.status, "error": turn.error, "endedAt": turn.ended_at.isoformat(),
                  "hostLeaseUntil": h1.isoformat(), "turnLeaseSeconds": {turn_lease}}}))
"""


def test_a_host_killed_mid_turn_has_its_turn_failed_by_a_sweep_on_another_host(tmp_path):
    agents = tmp_path / "agents"
    side_effects = tmp_path / "side-effects.txt"
    (agents / "jobs" / "agent" / "tools").mkdir(parents=True)
    (agents / "jobs" / "agent" / "instructions.md").write_text("You run jobs.\n")
    (agents / "jobs" / "agent" / "tools" / "slow_job.py").write_text(SLOW_TOOL.format(path=str(side_effects)))
    turn_lease = 600  # far longer than the host's: only the host's lease can end the turn in time
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, "postgres+redis", migrated=True)
        database = env["DATABASE_URL"]
        h1 = {**env, "AGENTSITE_HOST_ID": "h1", "AGENTSITE_HOST_LEASE_SECONDS": "3",
              "AGENTSITE_TURN_LEASE_SECONDS": str(turn_lease)}
        server = stack.enter_context(run_server(tmp_path / "h1", "--agents", str(agents), "--no-examples", env=h1))
        with server.client(timeout=20) as client:
            response = client.post("/jobs/v1/session", json={"message": '/call slow_job {"seconds": 120}'})
            assert response.status_code == 201, response.text
            turn_id = response.json()["turnId"]
            wait_for(lambda: side_effects.exists() and side_effects.read_text(), "the tool to start", timeout=60)
            status, holder = running_claim(database, turn_id)
            assert status == "running" and holder.startswith("h1:"), holder

            kill_tree(server.process.pid)
            killed_at = timezone.now()
            server.process.wait(timeout=10)

        swept = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c",
             SWEEP_AS_H2.format(turn_id=turn_id, turn_lease=turn_lease)],
            cwd=ROOT, env=child_env(**env, AGENTSITE_HOST_ID="h2", AGENTSITE_STATE_ROOT=str(tmp_path / "h2")),
            capture_output=True, text=True, timeout=150)
        assert swept.returncode == 0, swept.stderr
        found = json.loads(swept.stdout.strip().splitlines()[-1])

    assert (found["status"], found["error"]) == ("failed", LOST_ERROR)
    ended_at, host_lease = (timezone.datetime.fromisoformat(found[k]) for k in ("endedAt", "hostLeaseUntil"))
    print(f"\nturn failed {(ended_at - killed_at).total_seconds():.1f}s after the host was killed "
          f"(host lease 3 s, turn lease {turn_lease} s)")
    assert ended_at > host_lease, "ended once h1's lease had lapsed"
    # The turn's own lease, renewed until the kill, had most of its 600 s left: the host's lease ended it.
    assert ended_at < host_lease + timedelta(seconds=turn_lease / 2)
    assert side_effects.read_text().splitlines()[0].startswith("start ")
