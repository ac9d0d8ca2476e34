"""Build a database at an earlier schema, with rows in every table of agentsite's apps; print what it wrote.

Run in a child process (`python -m tests.agentsite.earlier_database`, settings from the environment):
1. migrate agents and agent_sessions only up to EARLIER (the other apps as far as those need);
2. write, with the historical models of that state (none of today's model code runs), the example
   `support` agent's release and its bundle, a secret, an OAuth flow, a staff user with a personal
   token, sessions with turns (completed, failed, parked on a call awaiting approval, a task), their
   events, host data (key-value, file, artifact), a channel delivery, an experiment and its sample,
   a schedule and a reminder; the rows are shaped as the engine writes them (a parked turn's state
   as `sessions.turn.engine` stores it);
3. print, as JSON, what a reader should find through the HTTP API after the upgrade.
"""
from __future__ import annotations

import json
import secrets
import sys
from datetime import timedelta

import django

# The schema as of commit 1969ee0 ("Releases live in the database"): releases have bundles; no Host
# leases, model selection, agent messages, spend ledger, secret refresh leases or folder problems yet.
EARLIER = [("agents", "0006_release_bundles"), ("agent_sessions", "0014_experiments")]
EXAMPLE = "support"
USAGE = {"inputTokens": 95, "outputTokens": 4, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def migrate_to_earlier() -> None:
    from django.core.management import call_command

    for app, name in EARLIER:
        call_command("migrate", app, name, interactive=False, verbosity=0)


def write_rows() -> dict:
    # Imported here, after django.setup(): the module is run as a script, and these need the app registry.
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader
    from django.utils import timezone

    from agents.discovery.bundles import pack
    from agents.discovery.folder import load_agent_folder
    from agents.models import snapshot_location
    from agents.secrets.keys import encrypt
    from sessions.models.ids import hash_token
    from tests.support import ROOT

    models = MigrationLoader(connection).project_state(EARLIER).apps
    Agent, Deployment, ReleaseBundle, Secret, OAuthFlow = (
        models.get_model("agents", m) for m in ("Agent", "Deployment", "ReleaseBundle", "Secret", "OAuthFlow"))
    Session, Turn, Event, ToolCall, Schedule, Reminder = (
        models.get_model("agent_sessions", m) for m in ("Session", "Turn", "Event", "ToolCall", "Schedule", "Reminder"))
    User = models.get_model("auth", "User")
    now = timezone.now()

    loaded = load_agent_folder(ROOT / "examples" / EXAMPLE)
    manifest = loaded.manifest()
    agent = Agent.objects.create(slug=EXAMPLE, name=manifest["name"], description=manifest["description"])
    release = Deployment.objects.create(
        agent=agent, version=1, source=str(loaded.root), source_kind="folder", deployed_by="local",
        snapshot_path=snapshot_location(EXAMPLE, loaded.content_hash), content_hash=loaded.content_hash,
        manifest=manifest, status="running", activated_at=now)
    bundle = pack(loaded.root)
    ReleaseBundle.objects.create(deployment=release, data=bundle, size=len(bundle))
    Agent.objects.filter(pk=agent.pk).update(active_deployment=release)
    Secret.objects.create(agent=agent, name="ORDERS_API_KEY", ciphertext=encrypt("s3cret"), set_by="local", set_at=now)
    OAuthFlow.objects.create(agent=agent, server="tracker", state=secrets.token_urlsafe(16),
                             verifier_ciphertext=encrypt("verifier"), registration_ciphertext=encrypt("{}"),
                             redirect_uri="http://127.0.0.1/oauth/callback", token_endpoint="https://auth.test/token",
                             endpoint={"issuer": "https://auth.test"}, started_by="local", created_at=now,
                             expires_at=now + timedelta(minutes=10))

    alice = User.objects.create(username="alice", is_staff=True, password="!")
    key = secrets.token_hex(6)
    token = f"ast_{key}_{secrets.token_urlsafe(32)}"
    models.get_model("agent_sessions", "PersonalToken").objects.create(
        id=f"tok_{key}", user=alice, name="laptop", token_hash=hash_token(token), created_at=now)

    written = Writer(Session, Turn, Event, ToolCall, agent, release, now)
    chat = written.session("hello")
    written.completed_turn(chat, "hello", "You said: hello")
    written.completed_turn(chat, "again", "You said: again")
    failed = written.session("/fail down")
    written.failed_turn(failed, "/fail down", "down")
    parked = written.session('/call cancel_order {"order_id": "A102"}')
    call_id = written.parked_turn(parked, "cancel_order", {"order_id": "A102"})
    task = written.session("summarize", mode="task")
    written.completed_turn(task, "summarize", "You said: summarize", task=True)

    Schedule.objects.create(agent=agent, schedule_id="morning", kind="markdown", cron="0 9 * * *",
                            title="Morning check", prompt="good morning", updated_at=now,
                            next_fire_at=(now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0))
    reminder = Reminder.objects.create(
        id=f"rem_{secrets.token_hex(12)}", agent=agent, session=chat, title="follow up", kind="delay", spec="1h",
        prompt="follow up on the order", next_fire_at=now + timedelta(hours=1), created_at=now,
        created_by={"principalId": "local"})
    models.get_model("agent_sessions", "KVEntry").objects.create(agent=agent, session=chat, key="cart",
                                                                 value={"items": 2})
    models.get_model("agent_sessions", "HostFile").objects.create(agent=agent, path="notes/a.txt", content=b"a",
                                                                  size=1, sha256="0" * 64)
    models.get_model("agent_sessions", "Artifact").objects.create(
        session=chat, name="report.txt", content_type="text/plain", content=b"the report", size=10,
        sha256="1" * 64, turn_id=written.turns[chat.id][-1])
    models.get_model("agent_sessions", "ChannelDelivery").objects.create(agent=agent, channel="github",
                                                                         key_hash="2" * 64)
    models.get_model("agent_sessions", "Experiment").objects.create(agent=agent, name="tone")
    models.get_model("agent_sessions", "ExperimentSample").objects.create(
        agent=EXAMPLE, experiment="tone", variant="control", session_id=chat.id, turn_id=written.turns[chat.id][0],
        metrics={"resolved": 1})
    return {"agent": EXAMPLE, "version": 1, "contentHash": loaded.content_hash, "token": token,
            "sessions": {"chat": chat.id, "failed": failed.id, "parked": parked.id, "task": task.id},
            "statuses": {chat.id: "waiting", failed.id: "waiting", parked.id: "awaiting_approval",
                         task.id: "completed"},
            "events": written.events, "callId": call_id, "reminder": reminder.id, "schedule": "morning",
            "secret": "ORDERS_API_KEY", "artifact": "report.txt"}


class Writer:
    """Sessions, turns and events as the engine leaves them, each session's events numbered from 0."""

    def __init__(self, Session, Turn, Event, ToolCall, agent, release, now):
        self.Session, self.Turn, self.Event, self.ToolCall = Session, Turn, Event, ToolCall
        self.agent, self.release, self.now = agent, release, now
        self.events: dict[str, list[dict]] = {}
        self.turns: dict[str, list[str]] = {}

    def session(self, title: str, mode: str = "chat"):
        row = self.Session.objects.create(
            id=f"ses_{secrets.token_hex(12)}", agent=self.agent, deployment=self.release, mode=mode, title=title,
            principal_id="local", principal_type="user", authenticator="local", status="idle",
            created_at=self.now, updated_at=self.now)
        self.events[row.id], self.turns[row.id] = [], []
        self.emit(row, None, "session.started", {
            "mode": mode, "title": title, "channel": "http", "agent": self.agent.slug, "options": {},
            "principal": {"authenticator": "local", "principalId": "local", "principalType": "user",
                          "attributes": {}}})
        self.emit(row, None, "agent.bound", {"agent": self.agent.slug, "deployment": {
            "version": self.release.version, "contentHash": self.release.content_hash}})
        return row

    def emit(self, session, turn_id: str | None, type_: str, data: dict) -> None:
        index = len(self.events[session.id])
        self.Event.objects.create(session=session, index=index, turn_id=turn_id or "", type=type_, data=data,
                                  at=self.now)
        self.events[session.id].append({"index": index, "type": type_, "turnId": turn_id, "data": data})
        self.Session.objects.filter(pk=session.pk).update(next_event_index=index + 1)

    def turn(self, session, message: str, status: str, **fields):
        row = self.Turn.objects.create(id=f"turn_{secrets.token_hex(12)}", session=session, message=message,
                                       status=status, created_at=self.now, started_at=self.now, **fields)
        self.turns[session.id].append(row.id)
        self.emit(session, row.id, "message.received", {"source": "user", "text": message})
        self.emit(session, row.id, "turn.started", {"trigger": "user", "admission": "preempt"})
        self.emit(session, row.id, "step.started", {"step": 1})
        return row

    def completed_turn(self, session, message: str, reply: str, task: bool = False) -> None:
        turn = self.turn(session, message, "completed", usage=USAGE, ended_at=self.now)
        self.emit(session, turn.id, "message.appended", {"delta": reply})
        self.emit(session, turn.id, "message.completed", {"text": reply})
        self.emit(session, turn.id, "step.completed", {"step": 1, "durationMs": 30.8, "usage": USAGE})
        self.emit(session, turn.id, "turn.completed", {"usage": USAGE, "durationMs": 39.1})
        self.emit(session, turn.id, "session.completed" if task else "session.waiting", {})
        conversation = [*session.conversation, {"role": "user", "content": message},
                        {"role": "assistant", "content": reply}]
        session.conversation = conversation
        self.Session.objects.filter(pk=session.pk).update(
            conversation=conversation, usage=USAGE, status="completed" if task else "waiting")

    def failed_turn(self, session, message: str, error: str) -> None:
        turn = self.turn(session, message, "failed", error=error, ended_at=self.now)
        self.emit(session, turn.id, "turn.failed", {"error": error, "code": "scripted_failure", "durationMs": 17.9})
        self.emit(session, turn.id, "session.waiting", {})
        self.Session.objects.filter(pk=session.pk).update(
            conversation=[{"role": "user", "content": message}], status="waiting")

    def parked_turn(self, session, tool: str, arguments: dict) -> str:
        """A turn parked on `tool`, its call awaiting approval: the state `Engine.park` stores."""
        call_id = "call_1_0"
        message = f"/call {tool} {json.dumps(arguments)}"
        state = {"messages": [{"role": "user", "content": message},
                              {"role": "assistant", "content": "",
                               "toolCalls": [{"id": call_id, "name": tool, "input": arguments}]}],
                 "step": 1, "usage": USAGE, "elapsedMs": 489.7, "model": "scripted:echo"}
        turn = self.turn(session, message, "awaiting_approval", state=state)
        self.emit(session, turn.id, "step.completed", {"step": 1, "durationMs": 153.2, "usage": USAGE})
        self.emit(session, turn.id, "actions.requested",
                  {"calls": [{"callId": call_id, "toolName": tool, "input": arguments}]})
        self.emit(session, turn.id, "action.approval_requested",
                  {"callId": call_id, "toolName": tool, "input": arguments, "effect": "write"})
        self.ToolCall.objects.create(session=session, turn=turn, call_id=call_id, tool=tool, input=arguments,
                                     status="awaiting_approval", created_at=self.now)
        self.Session.objects.filter(pk=session.pk).update(status="awaiting_approval", active_turn=turn)
        return call_id


if __name__ == "__main__":
    django.setup()
    migrate_to_earlier()
    json.dump(write_rows(), sys.stdout)
