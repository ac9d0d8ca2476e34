"""Workspace tools in turns over HTTP, with the scripted model: write, list, read back,
files sent with messages, the runtime overlay, and deleting a session's workspace."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.conf import settings

from agents.discovery import deploy_agent_folder
from sessions.models import Session, ToolCall
from tests.channels_app.views.http import event_types, events_of, post_json, transactional


def call(tool: str, **arguments) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def make_agent(root: Path, agent_py: str = "", files: dict[str, str] | None = None) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You keep notes in your workspace.\n")
    if agent_py:
        (root / "agent" / "agent.py").write_text(agent_py)
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


@pytest.fixture
def notes(db, tmp_path):
    return deploy_agent_folder(make_agent(tmp_path / "notes")).agent


def start(client, slug: str, message: str, **fields) -> dict:
    response = post_json(client, f"/{slug}/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()


def results(session_id: str) -> list[dict]:
    return events_of(session_id, "action.result")


@transactional
def test_a_turn_writes_a_file_lists_it_and_reads_it_back(alice, notes, sync_turns):
    script = "\n".join([call("write", path="notes/todo.md", content="- buy milk\n"), "/next",
                        call("ls", path="notes"), "/next", call("read", path="notes/todo.md")])
    session_id = start(alice, "notes", script)["sessionId"]

    write, ls, read = results(session_id)
    assert write["output"] == {"path": "notes/todo.md", "bytes": 11}
    assert ls["output"] == {"path": "notes", "entries": [{"name": "todo.md", "type": "file", "size": 11}]}
    assert read["output"] == "- buy milk\n"
    requested = [c for e in events_of(session_id, "actions.requested") for c in e["calls"]]
    assert [(c["toolName"], c["family"]) for c in requested] == [("write", "workspace"), ("ls", "workspace"),
                                                                 ("read", "workspace")]
    assert events_of(session_id, "message.completed")[-1]["text"] == "Tool results:\nread (ok): - buy milk\n"
    assert (Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id / "notes" / "todo.md").read_text() == "- buy milk\n"
    assert Session.objects.get(pk=session_id).status == "waiting"
    assert event_types(session_id)[-2:] == ["turn.completed", "session.waiting"]


@pytest.fixture
def memo(db, tmp_path):
    """An agent on a virtual runtime."""
    return deploy_agent_folder(make_agent(tmp_path / "memo", (
        "from agents.sdk import Agent, virtual_runtime, memory_fs\n"
        "agent = Agent(runtime=virtual_runtime(memory_fs({'/a.txt': 'hi'})))\n"))).agent


# -- files sent with a message ------------------------------------------------------------------

@transactional
def test_workspace_files_sent_on_create_and_follow_up_are_written_and_recorded(alice, notes, sync_turns):
    body = start(alice, "notes", call("read", path="in/brief.md"),
                 workspaceFiles=[{"path": "in/brief.md", "content": "# Brief\n"},
                                 {"path": "in/logo.bin", "content": "AAEC", "encoding": "base64"}])
    session_id = body["sessionId"]

    assert results(session_id)[0]["output"] == "# Brief\n"
    root = Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id
    assert (root / "in" / "logo.bin").read_bytes() == b"\x00\x01\x02"
    [received] = events_of(session_id, "message.received")
    assert received["workspaceFiles"] == [
        {"path": "in/brief.md", "bytes": 8, "sha256": hashlib.sha256(b"# Brief\n").hexdigest()},
        {"path": "in/logo.bin", "bytes": 3, "sha256": hashlib.sha256(b"\x00\x01\x02").hexdigest()},
    ]

    follow = post_json(alice, f"/notes/v1/session/{session_id}/message", {
        "message": call("read", path="in/brief.md"), "continuationToken": body["continuationToken"],
        "workspaceFiles": [{"path": "in/brief.md", "content": "# Brief v2\n"}]})
    assert follow.status_code == 202, follow.content
    assert results(session_id)[-1]["output"] == "# Brief v2\n"
    assert events_of(session_id, "message.received")[-1]["workspaceFiles"][0]["bytes"] == 11


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", "%2e%2e/x", "a\\b", ".", "",
                                  "a/\u0000b"])
@transactional
def test_a_workspace_file_whose_path_could_escape_is_a_400(alice, notes, path):
    response = post_json(alice, "/notes/v1/session", {"message": "hi",
                                                      "workspaceFiles": [{"path": path, "content": "x"}]})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    if "\u0000" in path:  # refused with the body, as text neither database stores
        assert error["code"] == "invalid_text"
    else:
        assert error["code"] == "invalid_request" and error["message"].startswith("workspaceFiles.0.path")
    assert not Session.objects.exists()


@transactional
def test_workspace_files_are_capped_in_size_and_count(alice, notes, settings):
    settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES = 10
    settings.AGENTSITE_WORKSPACE_FILES_MAX = 2

    too_big = post_json(alice, "/notes/v1/session", {"message": "hi",
                                                     "workspaceFiles": [{"path": "a.txt", "content": "x" * 11}]})
    assert too_big.status_code == 400
    assert too_big.json()["error"] == {"code": "workspace_file_too_large", "details": None,
                                       "message": "workspaceFiles[0] (a.txt) is 11 bytes, more than 10"}
    too_many = post_json(alice, "/notes/v1/session", {"message": "hi", "workspaceFiles": [
        {"path": f"{i}.txt", "content": "x"} for i in range(3)]})
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "too_many_workspace_files"
    twice = post_json(alice, "/notes/v1/session", {"message": "hi", "workspaceFiles": [
        {"path": "a.txt", "content": "x"}, {"path": "./a.txt", "content": "y"}]})
    assert twice.status_code == 400 and "a.txt is sent twice" in twice.json()["error"]["message"]
    not_base64 = post_json(alice, "/notes/v1/session", {"message": "hi", "workspaceFiles": [
        {"path": "a.bin", "content": "***", "encoding": "base64"}]})
    assert not_base64.status_code == 400 and "not valid base64" in not_base64.json()["error"]["message"]
    assert not Session.objects.exists()


@transactional
def test_workspace_files_for_a_virtual_runtime_are_refused(alice, memo):
    response = post_json(alice, "/memo/v1/session", {"message": "hi",
                                                     "workspaceFiles": [{"path": "a.txt", "content": "x"}]})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "workspace_files_unsupported" and "virtual_runtime" in error["message"]


# -- the runtime overlay ------------------------------------------------------------------------

@transactional
def test_a_local_runtime_overlay_may_add_workspace_files(alice, notes, sync_turns):
    body = start(alice, "notes", call("glob", pattern="**/*.txt"), runtime={
        "kind": "local", "workspaceFiles": [{"path": "extra/one.txt", "content": "1"}]},
        workspaceFiles=[{"path": "top.txt", "content": "t"}])

    assert results(body["sessionId"])[0]["output"]["files"] == ["extra/one.txt", "top.txt"]
    session = Session.objects.get(pk=body["sessionId"])
    assert session.options == {"runtime": "local"}


@pytest.mark.parametrize("runtime, code, words", [
    ({"kind": "local", "workspaceDir": "/srv/repo"}, "runtime_overlay_refused", "never a host path"),
    ({"kind": "local", "cwd": "/"}, "runtime_overlay_refused", "runtime.cwd cannot be sent"),
    ({"kind": "local", "shellTimeout": 999}, "runtime_overlay_refused", "may only add workspaceFiles"),
    ({"kind": "virtual"}, "runtime_not_sendable", "filesystem is code"),
    ({"kind": "cloud", "repos": []}, "runtime_unavailable", "no cloud runtime"),
    ({"kind": "mainframe"}, "runtime_unknown", "'mainframe' is not a runtime"),
    ({}, "runtime_kind_required", "runtime.kind is required"),
    ({"kind": "local", "workspaceFiles": [{"path": "../x", "content": "x"}]}, "invalid_request",
     "runtime.workspaceFiles.0.path"),
    ({"kind": "local", "workspaceFiles": "x"}, "invalid_request", "must be a list"),
])
@transactional
def test_a_runtime_overlay_the_reference_does_not_allow_is_a_400_that_says_why(alice, notes, runtime, code, words):
    response = post_json(alice, "/notes/v1/session", {"message": "hi", "runtime": runtime})

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"], error
    assert not Session.objects.exists()


@transactional
def test_no_runtime_can_be_overlaid_on_a_virtual_runtime(alice, memo):
    response = post_json(alice, "/memo/v1/session", {"message": "hi", "runtime": {"kind": "local"}})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "runtime_overlay_refused"
    assert "runs on virtual_runtime" in response.json()["error"]["message"]


@transactional
def test_a_follow_up_cannot_change_the_runtime(alice, notes, sync_turns):
    body = start(alice, "notes", "hi")
    response = post_json(alice, "/notes/v1/session", {"message": "again", "continuationToken": body["continuationToken"],
                                                      "runtime": {"kind": "local"}})

    assert response.status_code == 400 and response.json()["error"]["code"] == "runtime_overlay_refused"


# -- what /info says ------------------------------------------------------------------------

@transactional
def test_info_lists_every_offered_tool_with_its_family_and_the_runtime(alice, tmp_path):
    tool = ("from pydantic import BaseModel\nfrom agents.sdk import tool\n\nclass Input(BaseModel):\n    q: str\n\n"
            "@tool(description='Search the catalog.')\ndef search(input: Input, ctx):\n    return []\n")
    deploy_agent_folder(make_agent(tmp_path / "desk", (
        "from agents.sdk import Agent, local_runtime\n"
        "agent = Agent(runtime=local_runtime(needs_approval=['shell']), tools=['read', 'ls', 'shell'])\n"), {
        "agent/tools/search.py": tool,
        "agent/skills/triage.md": "---\ndescription: Sort issues\n---\nBody.\n",
        "agent/subagents/helper/agent.py": "from agents.sdk import Agent\nagent = Agent(description='Helps.')\n",
        "agent/subagents/helper/instructions.md": "You help.\n",
    }))

    info = alice.get("/desk/v1/info").json()

    assert [t["name"] for t in info["tools"]] == ["search"], "the agent's own tools, as before"
    offered = {t["name"]: t for t in info["offeredTools"]}
    assert {n: t["family"] for n, t in offered.items()} == {
        "delegate": "builtin", "load_skill": "builtin", "ls": "workspace", "read": "workspace", "search": "server",
        "shell": "workspace"}
    assert offered["read"]["inputSchema"]["required"] == ["path"]
    assert offered["shell"]["needsApproval"] is True and offered["shell"]["effect"] == "write"
    assert offered["search"]["inputSchema"]["properties"]["q"]["type"] == "string"
    assert info["runtime"]["kind"] == "local" and info["runtime"]["workspaceTools"] == ["read", "ls", "shell"]
    assert info["runtime"]["toolsAllowlist"] == ["read", "ls", "shell"]


@transactional
def test_info_of_a_virtual_runtime(alice, memo):
    info = alice.get("/memo/v1/info").json()

    assert info["runtime"]["kind"] == "virtual" and info["runtime"]["filesystem"] == "memory_fs()"
    assert [t["name"] for t in info["offeredTools"]] == ["delete", "edit", "glob", "grep", "ls", "read", "write"]


# -- playground and admin ----------------------------------------------------------------------

@transactional
def test_the_session_page_lists_the_workspace_files(alice, notes, sync_turns):
    session_id = start(alice, "notes", call("write", path="notes/todo.md", content="- milk\n"))["sessionId"]

    page = alice.get(f"/playground/notes/session/{session_id}").content.decode()

    assert '<div id="workspace" data-kind="local">' in page
    assert "<code>notes/todo.md</code>" in page and "<code>AGENTS.md</code>" in page


@transactional
def test_the_admin_shows_a_sessions_workspace_size(alice, notes, sync_turns, client):
    from django.contrib.auth import get_user_model

    session_id = start(alice, "notes", call("write", path="a.txt", content="x" * 100))["sessionId"]
    user = get_user_model().objects.create_superuser("root", "root@example.com", "not-used")
    client.force_login(user)

    page = client.get(reverse("admin:agent_sessions_session_change", args=[quote(session_id)]), HTTP_HOST="127.0.0.1:8000")

    assert page.status_code == 200
    size = sum(p.stat().st_size for p in (Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id).rglob("*")
               if p.is_file())
    assert f"{size} bytes" in page.content.decode()


PUBLISH = '''
from pydantic import BaseModel
from agents.sdk import tool

class Input(BaseModel):
    name: str
    content: str

@tool(description="Publish a report for the user to download.", effect="write")
def publish(input: Input, ctx) -> dict:
    saved = ctx.host.artifacts.save(input.name, input.content)
    return {"artifact": saved.name, "size": saved.size}
'''


@transactional
def test_one_turn_writes_lists_reads_back_and_publishes_an_artifact_only_its_owner_downloads(
        alice, bob, tmp_path, sync_turns):
    deploy_agent_folder(make_agent(tmp_path / "desk", files={"agent/tools/publish.py": PUBLISH}))
    script = "\n".join([call("write", path="out/report.md", content="# Report\nall good\n"), "/next",
                        call("ls", path="out"), "/next", call("read", path="out/report.md"), "/next",
                        call("publish", name="report.md", content="# Report\nall good\n")])

    session_id = start(alice, "desk", script)["sessionId"]

    write, ls, read, publish = results(session_id)
    assert ls["output"]["entries"] == [{"name": "report.md", "type": "file", "size": 18}]
    assert read["output"] == "# Report\nall good\n"
    assert publish["output"] == {"artifact": "report.md", "size": 18}
    assert events_of(session_id, "artifact.saved")[0]["name"] == "report.md"
    listed = alice.get(f"/desk/v1/session/{session_id}/artifacts")
    assert [a["name"] for a in listed.json()["artifacts"]] == ["report.md"]
    download = alice.get(f"/desk/v1/session/{session_id}/artifacts/report.md")
    assert download.status_code == 200 and b"".join(download.streaming_content if download.streaming
                                                   else [download.content]) == b"# Report\nall good\n"
    assert bob.get(f"/desk/v1/session/{session_id}/artifacts/report.md").status_code == 403
    assert bob.get(f"/desk/v1/session/{session_id}/artifacts").status_code == 403
