"""Schedule handlers and reminder handlers reach the same `ctx.host` services as tools.

A schedule handler has its agent and no session: it keeps state in the
agent's key-value store and file store, and attributes artifacts to a
session by id. A reminder's handler is bound to its session.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from agents.discovery import deploy_agent_folder
from sessions.direct.calls import call_tool
from sessions.eventlog.events import read_events
from sessions.host import Host
from sessions.models import Artifact, Session
from sessions.timers.schedules import create_reminder, fire_due
from tests.agents.integrations.fakeapi import Answer, FakeAPI
from tests.sessions.test_schedules import due_at, handler_schedule, write_agent

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
transactional = pytest.mark.django_db(transaction=True)


@transactional
def test_a_schedule_handler_keeps_state_and_files_and_attributes_artifacts_to_a_session(tmp_path, sync_turns):
    root = write_agent(tmp_path / "digest", {
        "agent/schedules/daily.py": handler_schedule("0 * * * *", """
            runs = ctx.host.kv.get("runs", 0) + 1
            ctx.host.kv.set("runs", runs)
            ctx.host.files.write(f"digests/{runs}.md", f"digest {runs}")
            session_id = ctx.receive(f"Digest {runs} is ready.")
            ctx.host.artifacts.save("digest.md", ctx.host.files.read(f"digests/{runs}.md"), session_id=session_id)
        """),
    })
    agent = deploy_agent_folder(root).agent
    due_at(agent, "daily", T0)

    assert fire_due(now=T0) == 1
    assert fire_due(now=T0 + timedelta(hours=1)) == 1

    host = Host(session=None, agent=agent)
    assert host.kv.get("runs") == 2
    assert [f.path for f in host.files.list("digests/")] == ["digests/1.md", "digests/2.md"]
    artifacts = Artifact.objects.filter(session__agent=agent).order_by("created_at")
    assert [(a.read(), a.turn_id, a.call_id) for a in artifacts] == [(b"digest 1", "", ""), (b"digest 2", "", "")]
    first = artifacts[0].session_id
    saved = [e for e in read_events(first) if e["type"] == "artifact.saved"]
    assert len(saved) == 1 and saved[0]["turnId"] is None and "callId" not in saved[0]["data"]


@transactional
def test_a_reminder_handler_uses_its_sessions_host(alice, support_agent, sync_turns):
    created = alice.post("/support/v1/session", {"message": "hi"}, content_type="application/json")
    session = Session.objects.get(pk=created.json()["sessionId"])

    def check(ctx):
        seen = ctx.host.kv.get("checks", 0, scope="session") + 1
        ctx.host.kv.set("checks", seen, scope="session")
        ctx.host.artifacts.save("status.txt", f"check {seen}")
        return "delivered"

    reminder = create_reminder(session, every="1h", run=check, now=T0)
    assert fire_due(now=reminder.next_fire_at) == 1
    assert fire_due(now=reminder.next_fire_at + timedelta(hours=1)) == 1

    assert Host(session=session).kv.get("checks", scope="session") == 2
    assert Host(session=None, agent=support_agent).kv.get("checks") is None, "session-scoped, not agent-wide"
    (artifact,) = Artifact.objects.filter(session=session)
    assert (artifact.name, artifact.read()) == ("status.txt", b"check 2")
    assert [e["data"]["replaced"] for e in read_events(session.id) if e["type"] == "artifact.saved"] == [False, True]


FETCH_TOOL = '''\
from typing import Any
from pydantic import BaseModel
from agents.sdk import OutboundError, tool


class Input(BaseModel):
    url: str
    method: str = "GET"
    params: dict[str, str] | None = None
    headers: dict[str, str] | None = None
    body: Any = None


@tool(description="Fetch a URL.")
def fetch(input: Input, ctx) -> dict:
    try:
        if input.method == "GET":
            response = ctx.host.http.get(input.url, params=input.params, headers=input.headers, timeout=3)
        else:
            with ctx.host.http as http:
                response = http.request(input.method, input.url, params=input.params, headers=input.headers,
                                        json=input.body, timeout=3)
    except OutboundError as exc:
        return {"refused": type(exc).__name__, "why": str(exc)}
    return {"status": response.status_code, "body": response.json()}
'''


def fetcher(tmp_path):
    root = tmp_path / "fetcher"
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[])\n')
    (root / "agent" / "tools" / "fetch.py").write_text(FETCH_TOOL)
    (root / "agent" / "instructions.md").write_text("Fetch.\n")
    return deploy_agent_folder(root).agent


@pytest.mark.django_db
def test_a_tools_outbound_http_goes_through_the_ssrf_guard(tmp_path, settings):
    agent = fetcher(tmp_path)
    with FakeAPI() as fake:
        fake.route("GET", "/status", Answer(body={"ok": True}))
        settings.AGENTSITE_OUTBOUND_ALLOW = []
        for url in (f"{fake.url}/status", "http://169.254.169.254/latest/meta-data/", "http://0x7f000001/"):
            assert call_tool(agent, "fetch", {"url": url})["output"]["refused"] == "OutboundRefused", url
        assert fake.requests == []

        settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
        assert call_tool(agent, "fetch", {"url": f"{fake.url}/status"})["output"] == {"status": 200, "body": {"ok": True}}


@pytest.mark.django_db
def test_a_tools_params_headers_and_json_reach_the_server_and_a_redirect_to_loopback_is_refused(tmp_path, settings):
    agent = fetcher(tmp_path)
    settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    with FakeAPI() as fake, FakeAPI(host="127.0.0.2") as elsewhere:
        fake.route("POST", "/orders", lambda request, match: Answer(200, {"got": request.json()}))
        fake.route("GET", "/go", Answer(302, headers={"location": f"http://127.0.0.2:{elsewhere.port}/inside"}))
        elsewhere.route("GET", "/inside", Answer(200, {"inside": True}))

        posted = call_tool(agent, "fetch", {"url": f"{fake.url}/orders", "method": "POST", "params": {"dry": "1"},
                                            "headers": {"X-Request-Id": "r-7"}, "body": {"sku": "A1", "n": 2}})
        assert posted["output"] == {"status": 200, "body": {"got": {"sku": "A1", "n": 2}}}
        seen = fake.requests[0]
        assert (seen.query, seen.headers["x-request-id"]) == ({"dry": ["1"]}, "r-7")

        redirected = call_tool(agent, "fetch", {"url": f"{fake.url}/go"})["output"]
        assert redirected["refused"] == "OutboundRefused"
        assert "127.0.0.2 is a loopback address" in redirected["why"]
        assert elsewhere.requests == [], "the allowlist names 127.0.0.1/32, not the rest of loopback"
