"""What a console agent reaches and what reaches it, from its data: a Slack channel, a service's signed JSON
webhook, tools a folder agent shares (copied into each save), an MCP server that reads the agent's
secret, and a schedule that fires once."""
from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

from agents.discovery import AgentFolderError, deploy_agent_folder, load_agent_folder
from agents.models import Agent
from sessions.eventlog.events import read_events
from sessions.models import Schedule, Session
from sessions.timers.schedules import fire_due
from tests.agents.test_console_agents import HELPER, definition, post
from tests.channels_app.roles_support import people  # noqa: F401
from tests.channels_app.slack_support import message_event, signed_headers
from tests.channels_app.test_slack_channel import fake, slack  # noqa: F401
from tests.sessions.test_mcp import http_server, notes_file  # noqa: F401
from tests.sessions.test_schedules import T0, due_at

transactional = pytest.mark.django_db(transaction=True)

@transactional
def test_a_console_agent_answers_in_slack_through_the_channel_its_data_declares(people, slack, sync_turns):  # noqa: F811
    ops = people.olga.client
    spec = {**HELPER, "slack": {"streaming": False, "engagement": "threads"}}
    assert post(ops, "/v1/agents", spec).status_code == 201
    [channel] = [c for c in people.mia.client.get("/helper/v1/info").json()["channels"] if c["kind"] == "slack"]
    assert channel["id"] == "slack"

    body = json.dumps(message_event("hello from slack", ts="1712345620.000100")).encode()
    delivered = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="203.0.113.9").post(
        "/helper/v1/channels/slack/events", body, content_type="application/json",
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in signed_headers(body).items()})
    assert delivered.status_code == 200, delivered.content
    assert slack.replies("1712345620.000100") == ["You said: hello from slack"]


SHOUT = """from pydantic import BaseModel

from agents.sdk import tool


class Input(BaseModel):
    word: str


@tool(description="Shout a word.")
def shout(input: Input, ctx) -> str:
    return input.word.upper() + "{mark}"
"""


def deploy_shop(root: Path, mark: str = "!", shared: str = "['shout']") -> None:
    (root / "agent" / "tools").mkdir(parents=True, exist_ok=True)
    (root / "agent" / "instructions.md").write_text("A shop.\n")
    (root / "agent" / "tools" / "shout.py").write_text(SHOUT.format(mark=mark))
    (root / "agent" / "tools" / "whisper.py").write_text(SHOUT.format(mark="").replace("shout", "whisper"))
    (root / "agent" / "agent.py").write_text(f"from agents.sdk import Agent\nagent = Agent(share_tools={shared})\n")
    deploy_agent_folder(root)


@transactional
def test_a_console_agent_takes_a_tool_a_folder_agent_shares_and_keeps_its_copy(people, tmp_path, sync_turns):  # noqa: F811
    ops = people.olga.client
    deploy_shop(tmp_path / "shop")
    refused = post(ops, "/v1/agents", {**HELPER, "toolsFrom": {"shop": ["whisper"], "nobody": ["x"]}})
    assert refused.status_code == 400
    said = {d["field"]: d["message"] for d in refused.json()["error"]["details"]}
    assert "share_tools=['whisper']" in said["toolsFrom.shop"] and "no agent 'nobody'" in said["toolsFrom.nobody"]

    assert post(ops, "/v1/agents", {**HELPER, "toolsFrom": {"shop": ["shout"]}}).status_code == 201
    assert [t["name"] for t in people.mia.client.get("/helper/v1/info").json()["tools"]] == ["shout"]

    def shouted() -> str:
        started = post(people.mia.client, "/helper/v1/session", {"message": '/call shout {"word": "hi"}'})
        return [e["data"] for e in read_events(started.json()["sessionId"]) if e["type"] == "action.result"][0]["output"]

    assert shouted() == "HI!"
    deploy_shop(tmp_path / "shop", mark="!!")  # the owner changes its tool: the copy in helper's release stays
    assert shouted() == "HI!"
    resaved = post(ops, "/v1/agents/helper", definition({**HELPER, "toolsFrom": {"shop": ["shout"]}}), "put")
    assert resaved.json()["release"]["version"] == 2 and shouted() == "HI!!"

    deploy_shop(tmp_path / "shop", shared="[]")  # no longer shared: the next save is refused
    again = post(ops, "/v1/agents/helper", definition({**HELPER, "toolsFrom": {"shop": ["shout"]}}), "put")
    assert again.status_code == 400 and again.json()["error"]["details"][0]["field"] == "toolsFrom.shop"


def test_a_folder_may_only_share_its_own_server_tools(tmp_path):
    with pytest.raises(AgentFolderError, match="share_tools: 'nothing' is not one of this agent's server tools"):
        load_agent_folder(_shop_folder(tmp_path))


def _shop_folder(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("A shop.\n")
    (root / "agent" / "tools" / "shout.py").write_text(SHOUT.format(mark=""))
    (root / "agent" / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(share_tools=['nothing'])\n")
    return root


@transactional
def test_a_console_agent_takes_a_services_signed_webhook_declared_as_data(people, sync_turns):  # noqa: F811
    ops = people.olga.client
    spec = {**HELPER, "webhooks": [{"id": "tracker", "message": "issue.title", "thread": "issue.id",
                                    "secretEnv": "TRACKER_SECRET"}, {"id": "inbox"}]}
    assert post(ops, "/v1/agents", spec).status_code == 201
    assert post(ops, "/v1/agents/helper/secrets/TRACKER_SECRET", {"value": "s3cret"}, "put").status_code in (200, 201)
    service = Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="203.0.113.9")

    def deliver(payload: dict, secret: str = "s3cret"):
        body = json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return service.post("/helper/v1/channels/tracker/deliveries", body, content_type="application/json",
                            HTTP_X_SIGNATURE_256=signature)

    first = deliver({"issue": {"id": 7, "title": "The build is red"}})
    assert first.status_code == 202, first.content
    again = deliver({"issue": {"id": 7, "title": "Still red"}})
    assert again.status_code == 202 and again.json()["sessionId"] == first.json()["sessionId"]
    assert (first.json()["created"], again.json()["created"], again.json()["thread"]) == (True, False, "7")
    received = [e["data"]["text"] for e in read_events(first.json()["sessionId"]) if e["type"] == "message.received"]
    assert received == ["The build is red", "Still red"]

    assert deliver({"issue": {"id": 8, "title": "x"}}, secret="wrong").status_code == 401
    assert deliver({"issue": {"id": 8}}).json()["error"]["code"] == "invalid_payload"
    assert deliver({"issue": {"id": 8, "title": "a\u0000b"}}).json()["error"]["code"] == "invalid_text"
    deep = b'{"issue": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    signature = "sha256=" + hmac.new(b"s3cret", deep, hashlib.sha256).hexdigest()
    nested = service.post("/helper/v1/channels/tracker/deliveries", deep, content_type="application/json",
                          HTTP_X_SIGNATURE_256=signature)
    assert nested.status_code == 400 and nested.json()["error"]["code"] == "invalid_payload"
    # Unsigned, the server's chain admits callers, each with their own conversations.
    assert service.post("/helper/v1/channels/inbox/deliveries", b'{"text": "hi"}',
                        content_type="application/json").status_code == 401
    mine = people.mia.client.post("/helper/v1/channels/inbox/deliveries", b'{"text": "hi"}',
                                  content_type="application/json")
    assert mine.status_code == 202 and Session.objects.get(pk=mine.json()["sessionId"]).principal_id == "mia"


@transactional
def test_a_console_agents_mcp_server_reads_its_secret_and_its_schedule_fires_once(people, http_server, notes_file,  # noqa: F811
                                                                                 sync_turns):
    ops = people.olga.client
    spec = {**HELPER, "builtins": [], "models": ["scripted:echo"],
            "mcpServers": {"notes": {"url": http_server, "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}}}}
    assert post(ops, "/v1/agents", spec).status_code == 201
    assert post(ops, "/v1/agents/helper/secrets/MCP_TOKEN", {"value": "sesame"}, "put").status_code in (200, 201)

    session = post(people.mia.client, "/helper/v1/session", {"message": '/call notes__add {"a": 2, "b": 3}'})
    assert session.status_code == 201, session.content
    [result] = [e["data"] for e in read_events(session.json()["sessionId"]) if e["type"] == "action.result"]
    assert result["output"] == {"result": 5}, result

    agent = Agent.objects.get(slug="helper")
    due_at(agent, "daily", T0)
    assert fire_due(now=T0 + timedelta(seconds=3)) == 1
    assert fire_due(now=T0 + timedelta(minutes=5)) == 0
    [fired] = Session.objects.filter(agent=agent, channel="schedule")
    assert fired.title == "Morning"
    received = next(e for e in read_events(fired.id) if e["type"] == "message.received")
    assert received["data"]["text"] == "Say good morning."
    assert Schedule.objects.get(agent=agent, schedule_id="daily").fire_count == 1



def test_webhook_channel_names_what_is_wrong_with_its_arguments():
    from agents.sdk import webhook_channel

    for kwargs, said in (({"message": "a..b"}, "dotted paths"), ({"thread": "x y"}, "dotted paths"),
                         ({"secret_env": "lower"}, "names a secret"), ({"signature_header": "X Sig"}, "header name")):
        with pytest.raises(ValueError, match=said):
            webhook_channel(**kwargs)
    assert webhook_channel(message="issue.title").routes[0].path == "/deliveries"
