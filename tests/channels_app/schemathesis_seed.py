"""Real ids for the Schemathesis run: rows only a conversation makes, made before it starts.

Some operations take the id of something that exists only after a turn has
run a certain way: a call parked on an approval, an artifact a tool saved, a
turn still running, an armed reminder. Generated requests reach them through
the document's links only by luck (a generated message rarely parks a turn),
so the test makes one of each through the API, as a person with a personal
token, and sends each such operation one request with the real ids through
Schemathesis (`real_id_cases`), under every check, before the generated run.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support import ROOT, Server, child_env, read_stream_until

USER = "schemathesis"
PARKED = '/call cancel_order {"order_id": "A102"}'
ARTIFACT = '/call write_incident_report {"service": "web", "summary": "Seeded for the OpenAPI run."}'
RUNNING = "/sleep 600000"
QUESTION = '/call ask_question {"question": "Which carrier?", "options": ["UPS", "DHL"]}'
# Two of each: a reminder is fired and another cancelled, and what the cases leave the generated
# run finds in the member's lists (sessions, approvals, artifacts) and follows from there.
COPIES = 2


@dataclass
class Seeds:
    token: str
    operator_token: str  # staff: the release routes are for operators
    values: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, value: str) -> None:
        self.values.setdefault(kind, []).append(value)


def accounts_and_releases(server: Server, env: dict[str, str]) -> tuple[str, str]:
    """A member and an operator (staff) with their personal tokens (`createtoken`), then `duo` and support
    v2 deployed (`deploy`), in the server's own database: one process for all, as each start of one costs
    seconds on a busy machine."""
    duo, support_v2 = two_model_agent(server), second_release(server)
    script = ("from django.contrib.auth.models import User; from django.core.management import call_command; "
              f"User.objects.create_user({USER!r}, password='unused-password-1'); "
              f"User.objects.create_user('{USER}-operator', password='unused-password-1', is_staff=True); "
              f"call_command('createtoken', {USER!r}, '--name', 'openapi'); "
              f"call_command('createtoken', '{USER}-operator', '--name', 'openapi'); "
              f"call_command('deploy', {str(duo)!r}); call_command('deploy', {str(support_v2)!r})")
    lines = manage(server, env, "shell", "-c", script).strip().splitlines()
    member, operator = [line for line in lines if line.startswith("ast_")]
    return member, operator


def manage(server: Server, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240,
                          env=child_env(AGENTSITE_STATE_ROOT=str(server.state_root), **env))
    assert done.returncode == 0, done.stderr
    return done.stdout


def second_release(server: Server) -> Path:
    """support v2 (changed instructions), so that an operator can activate v1 again."""
    folder = server.state_root / "support-v2" / "support"
    shutil.copytree(ROOT / "examples" / "support", folder, ignore=shutil.ignore_patterns("__pycache__"))
    instructions = folder / "agent" / "instructions.md"
    instructions.write_text(instructions.read_text() + "\nA second release, for the OpenAPI run.\n")
    return folder


def two_model_agent(server: Server) -> Path:
    """`duo`: the support agent's instructions on two scripted models and no tools (so it adds no
    tool operations of its own), for a handoff that succeeds; it may ask the person a question."""
    folder = server.state_root / "duo" / "duo"
    (folder / "agent").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "support" / "agent" / "instructions.md", folder / "agent")
    (folder / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\n"
        "agent = Agent(models=['scripted:echo', 'scripted:careful'], description='On two models.', tools=[],\n"
        "              builtins=['ask_question'])\n")
    return folder


def seed(server: Server, env: dict[str, str]) -> Seeds:
    seeds = Seeds(*accounts_and_releases(server, env))
    with server.client(timeout=30, headers={"Authorization": f"Bearer {seeds.token}"}) as client:
        for _ in range(COPIES):
            parked = start(client, "support", PARKED)
            read_stream_until(client, f"/support/v1/session/{parked}/stream", "action.approval_requested")
            (approval,) = ok(client.get(f"/support/v1/session/{parked}/approvals"))["approvals"]
            seeds.add("parked_sessions", parked)
            seeds.add("parked_calls", approval["callId"])

            reported = start(client, "ops", ARTIFACT)
            read_stream_until(client, f"/ops/v1/session/{reported}/stream", "session.waiting")
            (artifact,) = ok(client.get(f"/ops/v1/session/{reported}/artifacts"))["artifacts"]
            seeds.add("artifact_sessions", reported)
            seeds.add("artifact_names", artifact["name"])

            reminder = ok(client.post(f"/ops/v1/session/{reported}/reminders",
                                      json={"delay": "1h", "prompt": "Seeded for the OpenAPI run."}))
            seeds.add("reminders", reminder["reminderId"])

            for slug in ("support", "notes"):
                idle = start(client, slug, "Hello.")
                read_stream_until(client, f"/{slug}/v1/session/{idle}/stream", "session.waiting")
                seeds.add(f"idle_{slug}_sessions", idle)

            token = ok(client.post("/v1/tokens", json={"name": "to revoke"}))
            seeds.add("tokens", token["tokenId"])
        for schedule in ok(client.get("/ops/v1/info"))["schedules"]:
            seeds.add("schedules", schedule["id"])
        moving = start(client, "duo", "Hello.")
        read_stream_until(client, f"/duo/v1/session/{moving}/stream", "session.waiting")
        seeds.add("handoff_sessions", moving)
        seeds.add("handoff_reviews", ok(client.get(f"/duo/v1/session/{moving}/handoff",
                                                  params={"to": "scripted:careful"}))["reviewId"])
        asking = start(client, "duo", QUESTION)
        read_stream_until(client, f"/duo/v1/session/{asking}/stream", "action.approval_requested")
        (question,) = ok(client.get(f"/duo/v1/session/{asking}/approvals"))["approvals"]
        seeds.add("question_sessions", asking)
        seeds.add("question_calls", question["callId"])
        # A task that has ended: its stream ends too, so one request can read it whole.
        task = start(client, "notes", "Hello.", mode="task")
        read_stream_until(client, f"/notes/v1/session/{task}/stream", "session.completed")
        seeds.add("task_sessions", task)
        # One, last: a running turn holds a worker process until it is stopped.
        running = start(client, "notes", RUNNING)
        read_stream_until(client, f"/notes/v1/session/{running}/stream", "turn.started")
        seeds.add("running_sessions", running)
    return seeds


def start(client: httpx.Client, slug: str, message: str, **fields: str) -> str:
    return ok(client.post(f"/{slug}/v1/session", json={"message": message, **fields}))["sessionId"]


def ok(response: httpx.Response) -> dict:
    assert response.is_success, f"{response.request.method} {response.request.url}: {response.status_code} {response.text}"
    return response.json()


@dataclass
class RealIdCase:
    method: str
    path: str
    path_parameters: dict[str, str] = field(default_factory=dict)
    body: dict | None = None
    operator: bool = False
    query: dict[str, str] | None = None


def real_id_cases(seeds: Seeds) -> list[RealIdCase]:
    """One request per operation that takes a seeded id, in an order that leaves each id usable."""
    first = {name: values[0] for name, values in seeds.values.items()}
    parked, reported = first["parked_sessions"], first["artifact_sessions"]
    last_idle = seeds.values["idle_notes_sessions"][-1]
    task = first["task_sessions"]
    return [
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/approvals", {"slug": "support", "session_id": parked}),
        RealIdCase("POST", "/{slug}/v1/session/{session_id}/approvals/{call_id}",
                   {"slug": "support", "session_id": parked, "call_id": first["parked_calls"]}, {"decision": "approve"}),
        RealIdCase("POST", "/{slug}/v1/session/{session_id}/questions/{call_id}",
                   {"slug": "duo", "session_id": first["question_sessions"], "call_id": first["question_calls"]},
                   {"answer": "DHL"}),
        RealIdCase("POST", "/support/v1/tools/cancel_order/call", body={
            "input": {"order_id": "A102"}, "sessionId": first["idle_support_sessions"]}),
        RealIdCase("POST", "/ops/v1/tools/write_incident_report/call", body={
            "input": {"service": "search", "summary": "Reached with a real session."}, "sessionId": reported}),
        RealIdCase("POST", "/{slug}/v1/tools/{tool_name}/call", {"slug": "notes", "tool_name": "ls"},
                   {"input": {}, "sessionId": first["idle_notes_sessions"]}),
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/artifacts", {"slug": "ops", "session_id": reported}),
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/artifacts/{name}",
                   {"slug": "ops", "session_id": reported, "name": first["artifact_names"]}),
        RealIdCase("POST", "/{slug}/v1/session/{session_id}/reminders", {"slug": "ops", "session_id": reported},
                   {"every": "2h", "prompt": "Reached with a real session."}),
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/reminders", {"slug": "ops", "session_id": reported}),
        RealIdCase("POST", "/{slug}/v1/dev/reminders/{reminder_id}",
                   {"slug": "ops", "reminder_id": seeds.values["reminders"][0]}),
        RealIdCase("DELETE", "/{slug}/v1/reminders/{reminder_id}",
                   {"slug": "ops", "reminder_id": seeds.values["reminders"][1]}),
        RealIdCase("POST", "/{slug}/v1/dev/schedules/{schedule_id}", {"slug": "ops", "schedule_id": first["schedules"]}),
        RealIdCase("POST", "/{slug}/v1/session/{session_id}/stop",
                   {"slug": "notes", "session_id": first["running_sessions"]}),
        RealIdCase("DELETE", "/v1/tokens/{token_id}", {"token_id": first["tokens"]}),
        RealIdCase("GET", "/v1/agents/{slug}/deployments", {"slug": "support"}, operator=True),
        RealIdCase("GET", "/v1/agents/{slug}/deployments/{version}", {"slug": "support", "version": "1"},
                   operator=True),
        # v2 is active (second_release): this makes v1, what the examples deployed, active again.
        RealIdCase("POST", "/v1/agents/{slug}/deployments/{version}/activate", {"slug": "support", "version": "1"},
                   operator=True),
        # Secrets are for operators too: set one (201), list, show, then unset it (204).
        RealIdCase("PUT", "/v1/agents/{slug}/secrets/{name}", {"slug": "support", "name": "SEEDED_TOKEN"},
                   {"value": "seeded"}, operator=True),
        RealIdCase("GET", "/v1/agents/{slug}/secrets", {"slug": "support"}, operator=True),
        RealIdCase("GET", "/v1/agents/{slug}/secrets/{name}", {"slug": "support", "name": "SEEDED_TOKEN"},
                   operator=True),
        RealIdCase("DELETE", "/v1/agents/{slug}/secrets/{name}", {"slug": "support", "name": "SEEDED_TOKEN"},
                   operator=True),
        # The model directory is for operators too.
        RealIdCase("GET", "/v1/models", {}, operator=True),
        # An agent made from data, a new release of it, and its definition read back (operators).
        RealIdCase("POST", "/v1/agents", {}, {"slug": "seeded", "instructions": "Seeded for the OpenAPI run."},
                   operator=True),
        RealIdCase("PUT", "/v1/agents/{slug}", {"slug": "seeded"}, {"instructions": "Seeded again."}, operator=True),
        RealIdCase("GET", "/v1/agents/{slug}/definition", {"slug": "seeded"}, operator=True),
        # Its eval cases kept in the admin, replaced then listed (operators).
        RealIdCase("PUT", "/v1/agents/{slug}/eval-cases", {"slug": "seeded"},
                   {"cases": [{"id": "smoke", "steps": [{"message": "hi", "expect": [{"gate": "succeeded"}]}]}]},
                   operator=True),
        RealIdCase("GET", "/v1/agents/{slug}/eval-cases", {"slug": "seeded"}, operator=True),
        # The experiment examples/support declares.
        RealIdCase("GET", "/{slug}/v1/abs/{name}", {"slug": "support", "name": "brief-replies"}),
        # Routes the fuzzing phase reaches only with made-up ids (the stateful one follows links to them).
        RealIdCase("POST", "/{slug}/v1/session", {"slug": "notes"}, {"message": "Seeded for the OpenAPI run."}),
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/events", {"slug": "notes", "session_id": task}),
        RealIdCase("GET", "/{slug}/v1/session/{session_id}/stream", {"slug": "notes", "session_id": task}),
        RealIdCase("POST", "/{slug}/v1/session/{session_id}/message",
                   {"slug": "support", "session_id": seeds.values["idle_support_sessions"][-1]},
                   {"message": "Seeded for the OpenAPI run."}),
        RealIdCase("GET", "/duo/v1/session/{session_id}/handoff", {"session_id": first["handoff_sessions"]},
                   query={"to": "scripted:careful"}),
        # A reviewed handoff (nothing happens on the session between its review and this).
        RealIdCase("POST", "/duo/v1/session/{session_id}/handoff", {"session_id": first["handoff_sessions"]},
                   {"to": "scripted:careful", "reviewId": first["handoff_reviews"]}),
        # A session's detail, then its deletion, last (the random run reaches them through the
        # links of POST /session only by chance).
        RealIdCase("GET", "/{slug}/v1/session/{session_id}", {"slug": "notes", "session_id": last_idle}),
        RealIdCase("DELETE", "/{slug}/v1/session/{session_id}", {"slug": "notes", "session_id": last_idle}),
    ]
