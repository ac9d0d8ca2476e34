"""`claude-agent:` sessions: turns run by the Claude Agent SDK's bundled runtime (the real one),
against a loopback server that speaks the Messages API."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from agents.workspaces import sandbox
from sessions.models import Event, Session, ToolCall, Turn
from tests.providers.conftest import event_types, start
from tests.providers.loopback import Reply, an_text, an_tool_uses
from tests.support import child_env, run_server

pytest.importorskip("claude_agent_sdk", reason="the optional runtime: pip install -r requirements-claude-agent.txt")

pytestmark = pytest.mark.usefixtures("no_runtime_child_kept")

MODEL = "claude-agent:claude-sonnet-4-5"
ROOT = Path(__file__).resolve().parents[2]


def texts(server) -> list[list[str]]:
    """Each model request's conversation as (role, text) pairs, without the runtime's own reminders."""
    out = []
    for request in server.requests:
        turns = []
        for message in request["body"]["messages"]:
            content = message["content"]
            parts = [content] if isinstance(content, str) else [
                b.get("text") or json.dumps(b.get("content") or b.get("input")) for b in content
                if "<system-reminder>" not in (b.get("text") or "")]
            turns.append(f"{message['role']}: {' | '.join(parts)}")
        out.append(turns)
    return out


@pytest.mark.django_db(transaction=True)
def test_a_text_turn_gives_the_same_events_as_the_own_loop(local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model(MODEL, slug="official")
    agent_on_model("anthropic:claude-sonnet-4-5", slug="own")
    anthropic_server.replies.extend([Reply(events=an_text("Hello from the runtime.", 12, 6)),
                                     Reply(events=an_text("Hello from the runtime.", 12, 6))])
    official = start(local, "official", "hi")
    own = start(local, "own", "hi")

    assert event_types(official) == event_types(own)
    deltas = "".join(e.data["delta"] for e in Event.objects.filter(session_id=official, type="message.appended"))
    assert deltas == "Hello from the runtime."
    usage = Event.objects.get(session_id=official, type="turn.completed").data["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (12, 6)
    assert usage["costUsd"] > 0  # as the SDK reports it
    session = Session.objects.get(pk=official)
    assert session.model == MODEL
    assert session.conversation[-1] == {"role": "assistant", "content": "Hello from the runtime."}
    request = anthropic_server.requests[0]
    assert request["body"]["model"] == "claude-sonnet-4-5"
    # The agent's tools, as the own loop offers them; none of the runtime's own.
    own_tools = sorted(t["name"] for t in anthropic_server.requests[1]["body"]["tools"])
    assert sorted(t["name"] for t in request["body"]["tools"]) == [f"mcp__agent__{name}" for name in own_tools]
    assert "sk-ant-test" in request["headers"]["x-api-key"]
    # The agent's instructions are the runtime's system prompt, as the own loop's.
    assert any(block["text"].startswith("You are the support agent of a small online shop.")
               for block in request["body"]["system"])


@pytest.mark.django_db(transaction=True)
def test_a_typed_tool_runs_once_as_an_action_and_a_follow_up_resumes_the_conversation(
        local, agent_on_model, anthropic_server, sync_turns):
    agent_on_model(MODEL, slug="official")
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_1", "mcp__agent__lookup_order", {"order_id": "A100"})])),
        Reply(events=an_text("A100 has shipped.")),
        Reply(events=an_text("You asked about A100.")),
    ])
    session_id = start(local, "official", "where is A100?")

    types = event_types(session_id)
    assert types.index("actions.requested") < types.index("action.result") < types.index("turn.completed")
    [requested] = Event.objects.filter(session_id=session_id, type="actions.requested")
    assert requested.data["calls"] == [{"callId": "toolu_1", "toolName": "lookup_order", "input": {"order_id": "A100"}}]
    [result] = Event.objects.filter(session_id=session_id, type="action.result")
    assert result.data["toolName"] == "lookup_order" and "error" not in result.data
    handed = anthropic_server.requests[1]["body"]["messages"][-1]["content"][0]
    assert handed["type"] == "tool_result" and handed["tool_use_id"] == "toolu_1"
    assert json.dumps(result.data["output"])[:20] in json.dumps(handed["content"]).replace('\\"', '"')

    from sessions.claude_agent import pool

    assert pool.kept_sessions() == [session_id]  # its child waits for the next turn
    homes = set((settings.STATE_ROOT / "run-homes").iterdir())
    response = local.post(f"/official/v1/session/{session_id}/message", {"message": "what did I ask?"},
                          content_type="application/json")
    assert response.status_code in (200, 201, 202), response.content
    last = texts(anthropic_server)[-1]
    assert last[0].startswith("user: where is A100?")
    assert any(t.startswith("assistant: ") and "lookup_order" not in t and "A100 has shipped." in t for t in last)
    assert last[-1].endswith("what did I ask?")
    assert set((settings.STATE_ROOT / "run-homes").iterdir()) == homes  # the same child: no new run home
    # The SDK reports its session's running total: each turn is charged what it added (one call, not three).
    first, second = [e.data["usage"]["costUsd"] for e in Event.objects.filter(
        session_id=session_id, type="turn.completed").order_by("index")]
    assert 0 < second < first
    # The waterfall: how each turn had its child, and each model call the runtime made.
    first, second = [e.data["timings"] for e in Event.objects.filter(
        session_id=session_id, type="turn.completed").order_by("index")]
    assert [(s["kind"], s["name"]) for s in first["steps"] if s["kind"] in ("runtime", "model")] == [
        ("runtime", "new"), ("model", MODEL), ("model", MODEL)]
    assert [(s["kind"], s["name"]) for s in second["steps"] if s["kind"] in ("runtime", "model")] == [
        ("runtime", "kept"), ("model", MODEL)]
    assert first["runtimeMs"] > second["runtimeMs"] and first["firstTokenMs"] is not None
    conversation = Session.objects.get(pk=session_id).conversation
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant", "user", "assistant"]

    # A later turn that ended in another process: this one's kept child will never be taken, and is closed.
    assert pool.kept_sessions() == [session_id]
    pool.reap()
    assert pool.kept_sessions() == [session_id]  # nothing newer yet
    Turn.objects.create(session_id=session_id, message="elsewhere", status=Turn.Status.COMPLETED)
    pool.reap()
    assert pool.kept_sessions() == []

    # A turn the child did not see (another process ran it): the next starts a child from the stored conversation.
    Session.objects.filter(pk=session_id).update(conversation=conversation + [
        {"role": "user", "content": "a turn run elsewhere"}, {"role": "assistant", "content": "ELSEWHERE-REPLY"}])
    anthropic_server.replies.append(Reply(events=an_text("Fresh child.")))
    local.post(f"/official/v1/session/{session_id}/message", {"message": "again?"}, content_type="application/json")
    assert len(set((settings.STATE_ROOT / "run-homes").iterdir()) - homes) == 1
    assert "ELSEWHERE-REPLY" in json.dumps(anthropic_server.requests[-1]["body"]["messages"])
    assert conversation[1]["toolCalls"][0]["name"] == "lookup_order"


@pytest.mark.django_db(transaction=True)
def test_the_model_directory_the_session_and_the_playground_name_the_runtime(local, agent_on_model, anthropic_server,
                                                                             sync_turns):
    agent_on_model(MODEL, slug="official")
    anthropic_server.replies.append(Reply(events=an_text("hi")))
    session_id = start(local, "official", "hi")
    listed = {m["id"]: m for m in local.get("/v1/models").json()["models"]}
    assert listed[MODEL]["runtime"] == "claude-agent" and listed[MODEL]["provider"] == "claude-agent"
    assert listed[MODEL]["configured"] is True and listed[MODEL]["reachable"] is True
    assert listed[MODEL]["agents"] == ["official"] and listed[MODEL]["sessions"] == 1
    assert all(m["runtime"] == "agentsite" for i, m in listed.items() if i != MODEL)
    assert local.get("/official/v1/info").json()["models"] == [MODEL]
    assert local.get(f"/official/v1/session/{session_id}").json()["model"] == MODEL
    bound = Event.objects.get(session_id=session_id, type="agent.bound").data
    assert MODEL in json.dumps(bound)
    page = local.get(f"/playground/official/session/{session_id}").content.decode()
    assert '<span id="runtime" class="badge"' in page and "Claude Agent SDK" in page


@pytest.mark.django_db(transaction=True)
def test_skills_and_subagents_are_the_runtimes_own_read_from_the_run_home(local, anthropic_server, sync_turns, tmp_path):
    from agents.discovery import deploy_agent_folder
    from tests.conftest import EXAMPLE

    root = tmp_path / "official"
    shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='with skills', tools=[])\n")
    (root / "agent" / "skills").mkdir()
    (root / "agent" / "skills" / "refunds.md").write_text(
        "---\ndescription: How to refund an order\n---\nSKILL-BODY: refund within 30 days.\n")
    sub = root / "agent" / "subagents" / "researcher"
    sub.mkdir(parents=True)
    (sub / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(description='Finds facts')\n")
    (sub / "instructions.md").write_text("SUBAGENT-PROMPT: research carefully.\n")
    deploy_agent_folder(root)
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_s", "Skill", {"skill": "refunds"})])),
        Reply(events=an_tool_uses([("toolu_a", "Task", {"description": "research", "prompt": "find X",
                                                        "subagent_type": "researcher"})])),
        Reply(events=an_text("SUB-RESULT found X")),
        Reply(events=an_text("All done.")),
    ])
    session_id = start(local, "official", "refund A100 after researching")

    first = anthropic_server.requests[0]["body"]
    names = [t["name"] for t in first["tools"]]
    assert "Skill" in names and "Agent" in names, names
    assert "mcp__agent__load_skill" not in names and "mcp__agent__delegate" not in names
    assert "load_skill" not in json.dumps(first["system"]) and "refunds" in json.dumps(first["messages"])
    assert "SKILL-BODY" in json.dumps(anthropic_server.requests[1]["body"]["messages"][-1])
    assert "SUBAGENT-PROMPT" in json.dumps(anthropic_server.requests[2]["body"]["system"])
    [called] = Event.objects.filter(session_id=session_id, type="subagent.called")
    assert called.data == {"subagent": "researcher", "task": "find X"}
    [completed] = Event.objects.filter(session_id=session_id, type="subagent.completed")
    assert "SUB-RESULT found X" in completed.data["reply"] and completed.data["error"] is None
    results = {e.data["callId"]: e.data for e in Event.objects.filter(session_id=session_id, type="action.result")}
    assert set(results) == {"toolu_s", "toolu_a"} and not any("error" in r for r in results.values())
    assert Event.objects.filter(session_id=session_id, type="turn.completed").exists()
    assert Session.objects.get(pk=session_id).conversation[-1]["content"] == "All done."


HIDE_SDK = """import importlib.abc, sys


class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "claude_agent_sdk":
            raise ImportError(name)


sys.meta_path.insert(0, Hidden())
"""


@pytest.fixture
def without_sdk(tmp_path) -> dict[str, str]:
    """An environment whose Python cannot import the SDK (a sitecustomize hides it), as on a host without it."""
    hidden = tmp_path / "hide-sdk"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_SDK)
    return {"PYTHONPATH": str(hidden)}


def test_a_server_without_the_sdk_refuses_such_a_model_at_deploy(tmp_path, without_sdk):
    folder = tmp_path / "official" / "agent"
    folder.mkdir(parents=True)
    (folder / "instructions.md").write_text("Be brief.\n")
    (folder / "agent.py").write_text(f"from agents.sdk import Agent\nagent = Agent(model={MODEL!r}, description='x')\n")
    done = subprocess.run([sys.executable, "manage.py", "deploy", str(tmp_path / "official")], cwd=ROOT,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"), **without_sdk),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "Claude Agent SDK" in line]
    assert len(lines) == 1 and "install it with `pip install -r requirements-claude-agent.txt`" in lines[0], lines


def test_the_quickstart_without_the_sdk_serves_the_other_examples_and_says_why_not_this_one(tmp_path, without_sdk):
    with run_server(tmp_path / "state", "--no-schedules", env=without_sdk) as server:
        listed = httpx.get(f"{server.base_url}/v1/agents", headers={"host": "127.0.0.1"}).json()
        output = server.output()
    slugs = {agent["slug"] for agent in listed["agents"]}
    assert "support" in slugs and "coder" not in slugs, slugs
    [line] = [line for line in output.splitlines() if line.startswith("example coder:")]
    assert "not deployed" in line and "requirements-claude-agent.txt" in line


def write_shell_agent(root: Path, *, subagent: bool = False) -> Path:
    """The example agent with the shell verb, every command gated, and optionally a subagent."""
    from tests.conftest import EXAMPLE

    shutil.copytree(EXAMPLE / "agent", root / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent, local_runtime\n"
        f"agent = Agent(model={MODEL!r}, description='shell', tools=['shell'],\n"
        "              runtime=local_runtime(needs_approval=[] if " + repr(subagent) + " else ['shell']))\n")
    if subagent:
        sub = root / "agent" / "subagents" / "runner"
        sub.mkdir(parents=True)
        (sub / "agent.py").write_text("from agents.sdk import Agent\nagent = Agent(description='Runs commands')\n")
        (sub / "instructions.md").write_text("Run what you are asked to.\n")
    return root


needs_sandbox = pytest.mark.skipif(not sandbox.status().active,
                                   reason="the runtime's own tools are offered only where the sandbox runs")


def park_a_bash_call(local, anthropic_server, tmp_path, call_id: str, command: str, then: Reply,
                     counts: tuple[int, ...] = ()) -> str:
    """A session of the gated-shell agent whose first turn parked on the runtime's Bash call `command`;
    `then`: the model's reply once the call is decided."""
    from agents.discovery import deploy_agent_folder

    deploy_agent_folder(write_shell_agent(tmp_path / "official"))
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([(call_id, "Bash", {"command": command, "description": "a step"})], *counts)),
        then,
    ])
    session_id = start(local, "official", "run it")
    assert Session.objects.get(pk=session_id).status == "awaiting_approval"
    return session_id


@needs_sandbox
@pytest.mark.django_db(transaction=True)
def test_a_gated_bash_call_parks_then_runs_once_approved_and_the_turn_costs_both_parts(
        local, anthropic_server, sync_turns, tmp_path):
    session_id = park_a_bash_call(local, anthropic_server, tmp_path, "toolu_sh",
                                  "echo RAN-ONCE >> ran.txt; cat ran.txt", Reply(events=an_text("Done.", 30, 4)), (40, 9))
    [asked] = Event.objects.filter(session_id=session_id, type="action.approval_requested")
    assert asked.data["toolName"] == "Bash" and asked.data["family"] == "workspace"
    parked_cost = Turn.objects.get(session_id=session_id).state["usage"]["costUsd"]
    assert parked_cost > 0

    decided = local.post(f"/official/v1/session/{session_id}/approvals/toolu_sh", {"decision": "approve"},
                         content_type="application/json")
    assert decided.status_code == 200, decided.content
    [result] = Event.objects.filter(session_id=session_id, type="action.result")
    assert result.data["toolName"] == "Bash" and "RAN-ONCE" in json.dumps(result.data["output"])
    assert json.dumps(result.data["output"]).count("RAN-ONCE") == 1
    [completed] = Event.objects.filter(session_id=session_id, type="turn.completed")
    usage = completed.data["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (70, 13)  # both parts of the turn
    assert usage["costUsd"] > parked_cost  # the part after the decision is charged too


@needs_sandbox
@pytest.mark.django_db(transaction=True)
def test_a_gated_call_denied_in_the_admin_never_runs_and_the_runtime_hears_why(
        local, anthropic_server, sync_turns, tmp_path):
    from django.contrib.auth import get_user_model
    from django.test import Client

    session_id = park_a_bash_call(local, anthropic_server, tmp_path, "toolu_rm", "touch denied.txt",
                                  Reply(events=an_text("Understood, I left it.")))
    operator = Client()
    operator.force_login(get_user_model().objects.create_superuser("ops", "ops@example.com", "not-used"))
    call = ToolCall.objects.get(session_id=session_id, call_id="toolu_rm")

    response = operator.post("/admin/agent_sessions/toolcall/", {"action": "deny", "_selected_action": [call.pk]},
                             follow=True)

    assert [str(m) for m in response.context["messages"]] == ["Denied 1 parked call(s)."]
    resolved = Event.objects.get(session_id=session_id, type="action.approval_resolved")
    assert resolved.data["decision"] == "deny" and resolved.data["decidedBy"]["principalId"] == "ops"
    assert Turn.objects.get(session_id=session_id).status == Turn.Status.COMPLETED
    assert Session.objects.get(pk=session_id).conversation[-1]["content"] == "Understood, I left it."
    handed = anthropic_server.requests[-1]["body"]["messages"][-1]["content"][0]
    assert handed["type"] == "tool_result" and handed["tool_use_id"] == "toolu_rm" and handed["is_error"]
    assert "denied" in json.dumps(handed["content"]).lower()
    assert not any(Path(settings.STATE_ROOT).rglob("denied.txt"))  # never ran


@needs_sandbox
@pytest.mark.django_db(transaction=True)
def test_a_subagents_runtime_tool_call_ends_with_its_result(local, anthropic_server, sync_turns, tmp_path):
    from agents.discovery import deploy_agent_folder

    deploy_agent_folder(write_shell_agent(tmp_path / "official", subagent=True))
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_a", "Task", {"description": "run", "prompt": "run pwd",
                                                        "subagent_type": "runner"})])),
        Reply(events=an_tool_uses([("toolu_sub", "Bash", {"command": "echo FROM-SUBAGENT",
                                                          "description": "say"})])),
        Reply(events=an_text("It printed FROM-SUBAGENT.")),
        Reply(events=an_text("All done.")),
    ])
    session_id = start(local, "official", "have the runner say something")

    rows = {row.call_id: row for row in ToolCall.objects.filter(session_id=session_id)}
    assert rows["toolu_sub"].status == "done" and "FROM-SUBAGENT" in json.dumps(rows["toolu_sub"].output)
    assert rows["toolu_a"].status == "done"
    results = [e.data["callId"] for e in Event.objects.filter(session_id=session_id, type="action.result")]
    assert results == ["toolu_sub", "toolu_a"]
    assert Event.objects.filter(session_id=session_id, type="turn.completed").exists()


def test_the_model_proxy_forwards_the_messages_api_only_and_adds_the_key(tmp_path):
    from sessions.claude_agent.proxy import PLACEHOLDER_KEY, ModelProxy
    from tests.providers.loopback import LoopbackModelServer

    socket_path = tmp_path / "m.sock"
    with LoopbackModelServer("anthropic") as upstream, ModelProxy(socket_path, upstream.url, "sk-real"), \
            httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)), base_url="http://localhost") as client:
        upstream.replies.append(Reply(events=an_text("hi")))
        answered = client.post("/v1/messages?beta=true", json={"model": "m", "messages": []},
                               headers={"x-api-key": PLACEHOLDER_KEY})
        assert answered.status_code == 200 and "text_delta" in answered.text
        assert upstream.requests[-1]["headers"]["x-api-key"] == "sk-real"
        for path in ("/v1/messagesX", "/v1/messages/../../admin", "/v1/files", "/admin/"):
            assert client.post(path, json={}).status_code == 404, path
        assert len(upstream.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_a_stream_that_breaks_off_is_asked_again_and_only_the_whole_reply_is_kept(local, agent_on_model,
                                                                                   anthropic_server, sync_turns):
    agent_on_model(MODEL, slug="official")
    anthropic_server.replies.extend([Reply(events=an_text("The whole reply.", 10, 5), break_after=3),
                                     Reply(events=an_text("The whole reply.", 10, 5))])
    session_id = start(local, "official", "hi")

    assert len(anthropic_server.requests) == 2  # the runtime made the call again
    assert Session.objects.get(pk=session_id).conversation == [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "The whole reply."}]
    completed = [e.data["text"] for e in Event.objects.filter(session_id=session_id, type="message.completed")]
    assert completed[-1] == "The whole reply." and Event.objects.filter(session_id=session_id,
                                                                         type="turn.completed").exists()


def test_a_non_streaming_call_gets_the_same_reply_whole():
    from tests.providers.loopback import as_message

    message = as_message(an_tool_uses([("toolu_1", "lookup_order", {"order_id": "A100"})]))
    assert message["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
                                   "input": {"order_id": "A100"}}]
    assert message["stop_reason"] == "tool_use" and message["usage"]["output_tokens"] == 8
    assert as_message(an_text("Hello there.", thinking="Hmm."))["content"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1"}, {"type": "text", "text": "Hello there."}]
