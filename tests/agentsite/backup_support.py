"""A state root with something in it to back up, and `manage.py` run in it as a separate process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.sessions.test_concurrent_appends import writer_env
from tests.support import ROOT, premigrate

AGENT = "from agents.sdk import Agent\nagent = Agent(model='scripted:echo')\n"

# Three sessions with finished logs (the last with a follow-up queued), one whose turn a worker held when
# the backup was taken, a schedule that fired before it, and a workspace file.
FILL = """
import json, sys
import django
django.setup()
from django.core.management import call_command
from django.utils import timezone
from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import append_event
from sessions.models import BackupRun, Schedule, Session, Turn

call_command("migrate", verbosity=0)
deployment = deploy_agent_folder(sys.argv[1])
def session():
    return Session.objects.create(agent=deployment.agent, deployment=deployment, principal_id="tester",
                                  authenticator="test")
done = []
for i in range(3):
    s = session()
    for n in range(5):
        append_event(s.id, "test.appended", {"session": i, "n": n})
    done.append(s.id)
held = session()
append_event(held.id, "test.appended", {"n": 0})
now = timezone.now()
turn = Turn.objects.create(session=held, status=Turn.Status.RUNNING, message="the long thing", claimed_by="gone:4242",
                           started_at=now, lease_until=now + timezone.timedelta(hours=1))
Session.objects.filter(pk=held.pk).update(active_turn=turn, status=Session.Status.RUNNING)
# A follow-up queued on a finished session: its task was in the old server's queue.
queued = Turn.objects.create(session_id=done[-1], status=Turn.Status.QUEUED, message="and then?")
Session.objects.filter(pk=done[-1]).update(active_turn=queued, status=Session.Status.RUNNING)
Schedule.objects.create(agent=deployment.agent, schedule_id="nightly", kind=Schedule.Kind.values[0], cron="0 3 * * *",
                        next_fire_at=now + timezone.timedelta(hours=20), last_fired_at=now - timezone.timedelta(hours=4),
                        fire_count=1)
BackupRun.claim(now, "gone:4243")  # a scheduled backup under way: the one taking this archive, say
print(json.dumps({"done": done, "held": held.id, "turn": turn.id, "queued": queued.id}))
"""


def agent_folder(parent: Path) -> Path:
    folder = parent / "shop"
    (folder / "agent").mkdir(parents=True, exist_ok=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    (folder / "agent" / "instructions.md").write_text("Echo.\n")
    return folder


def state_env(state_root: Path, database_url: str | None = None, **extra: str) -> dict[str, str]:
    env = writer_env(state_root, database_url)
    env.pop("AGENTSITE_SECRETS_KEYS", None)
    env.pop("AGENTSITE_WORKSPACES_ROOT", None)
    env.update(extra)
    return env


def fill(state_root: Path, env: dict[str, str]) -> dict:
    """Put the sessions above in the state root's database (a copy of the migrated one on SQLite)."""
    state_root.mkdir(parents=True, exist_ok=True)
    premigrate(state_root, env)
    folder = agent_folder(state_root.parent / f"{state_root.name}-agents")
    done = subprocess.run([sys.executable, "-c", FILL, str(folder)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    workspace = state_root / "workspaces" / "ses_files"
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text("kept across the restore\n")
    return json.loads(done.stdout)


def manage(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, input=stdin)


def manage_ok(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = manage(env, *args, stdin=stdin)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def manage_json(env: dict[str, str], *args: str) -> dict:
    return json.loads(manage_ok(env, *args, "--json"))
