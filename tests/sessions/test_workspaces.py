"""Session workspaces in turns: what a local workspace holds, agent tools run with
shell, the shell's limits (time, Stop, environment) with no process left behind,
dry runs and approvals of workspace tools, per-session virtual filesystems, and
deleting a session's workspace."""
from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from agents.discovery import deploy_agent_folder, load_deployment
from sessions.admission import start_session, stop_session
from sessions.deletion import delete_session
from sessions.engine import TurnRunner, run_turn
from sessions.events import read_events
from sessions.models import Session, ToolCall, Turn
from sessions.principal import Principal
from sessions.workspaces import open_workspace
from tests.sessions.test_lifecycle import post_json

transactional = pytest.mark.django_db(transaction=True)
ME = Principal(authenticator="bearer", principal_id="alice")

WEATHER = '''
from pydantic import BaseModel
from agents.sdk import tool

class Input(BaseModel):
    city: str

@tool(description="Say the weather in a city.", execution="agent")
def weather(input: Input, ctx) -> dict:
    return {"city": input.city, "sky": "clear"}
'''


def call(tool: str, **arguments) -> str:
    return f"/call {tool} {json.dumps(arguments)}"


def deploy(tmp_path: Path, name: str, agent_py: str = "", files: dict[str, str] | None = None):
    root = tmp_path / name
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You work in your workspace.\n")
    if agent_py:
        (root / "agent" / "agent.py").write_text(textwrap.dedent(agent_py))
    for rel, content in (files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return deploy_agent_folder(root).agent


def start(client, slug: str, message: str, **fields) -> str:
    response = post_json(client, f"/{slug}/v1/session", {"message": message, **fields})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def results(session_id: str) -> list[dict]:
    return [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]


def workspace_of(session_id: str) -> Path:
    return Path(settings.AGENTSITE_WORKSPACES_ROOT) / session_id


def leftovers(marker: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


# -- what a local workspace holds ---------------------------------------------------------

@transactional
def test_a_local_workspace_holds_instructions_skills_seeds_and_agent_tool_launchers(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", files={
        "agent/skills/triage.md": "---\ndescription: Sort issues\n---\nFirst, read the issue.\n",
        "agent/skills/runbook/SKILL.md": "---\ndescription: Restart\n---\nBody.\n",
        "agent/skills/runbook/refs/restart.md": "How.\n",
        "agent/workspace/data/orders.csv": "id,total\nA1,10\n",
        "agent/tools/weather.py": WEATHER,
    })
    session_id = start(alice, "desk", call("ls", path="."))

    root = workspace_of(session_id)
    assert (root / "AGENTS.md").read_text() == "You work in your workspace.\n"
    assert (root / ".skills" / "triage" / "SKILL.md").read_text().endswith("First, read the issue.\n")
    assert (root / ".skills" / "runbook" / "refs" / "restart.md").read_text() == "How.\n"
    assert (root / "data" / "orders.csv").read_text() == "id,total\nA1,10\n"
    assert os.access(root / ".tools" / "weather", os.X_OK)
    [listed] = results(session_id)
    names = [e["name"] for e in listed["output"]["entries"]]
    assert names == [".skills", ".tools", "AGENTS.md", "data"]


@transactional
def test_an_agent_tool_runs_as_a_script_with_shell_and_is_not_offered_as_a_tool(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", files={"agent/tools/weather.py": WEATHER})
    script = call("shell", command=""".tools/weather '{"city": "Oslo"}'""") + "\n" + call("weather", city="Oslo")
    session_id = start(alice, "desk", script)

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["shell"]["output"]["exitCode"] == 0, by_tool["shell"]
    assert json.loads(by_tool["shell"]["output"]["stdout"]) == {"city": "Oslo", "sky": "clear"}
    assert by_tool["weather"]["error"].startswith("execution_unavailable: ")
    assert "with the shell tool" in by_tool["weather"]["error"]


@transactional
def test_an_agent_tool_script_validates_its_input(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", files={"agent/tools/weather.py": WEATHER})
    session_id = start(alice, "desk", call("shell", command=""".tools/weather '{"town": 1}'"""))

    [result] = results(session_id)
    assert result["output"]["exitCode"] == 2
    assert "invalid input: city: Field required" in result["output"]["stderr"]


# -- refusals are results, not crashes --------------------------------------------------------

@transactional
def test_a_hostile_path_in_a_turn_is_an_error_result_and_the_turn_completes(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    script = "\n".join([call("read", path="../outside.txt"), call("write", path=str(outside), content="x"),
                        call("delete", path="%2e%2e/outside.txt")])
    session_id = start(alice, "desk", script)

    errors = [r["error"] for r in results(session_id)]
    assert [e.split(":")[0] for e in errors] == ["WorkspaceError"] * 3
    assert "climbs out" in errors[0] and "absolute" in errors[1] and "percent-encoded" in errors[2]
    assert outside.read_text() == "secret"
    assert Session.objects.get(pk=session_id).status == "waiting"
    assert [e["type"] for e in read_events(session_id)][-2:] == ["turn.completed", "session.waiting"]


# -- shell's limits -----------------------------------------------------------------------------

@transactional
def test_shell_is_killed_at_its_time_limit_with_nothing_left_behind(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", "from agents.sdk import Agent, local_runtime\n"
                             "agent = Agent(runtime=local_runtime(shell_timeout=1))\n")
    marker = "31.41592"
    started = time.monotonic()
    session_id = start(alice, "desk", call("shell", command=f"sleep {marker} & sleep {marker}; echo never"))

    [result] = results(session_id)
    assert time.monotonic() - started < 10
    assert result["output"]["timedOut"] is True and result["output"]["exitCode"] == -9
    assert "never" not in result["output"]["stdout"]
    assert "[killed after 1 s" in result["output"]["stderr"]
    assert leftovers(marker) == []


@transactional
def test_background_jobs_of_a_finished_command_are_killed_too(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    marker = "27.18281"
    session_id = start(alice, "desk", call("shell", command=f"(sleep {marker} &) ; sleep {marker} & echo started"))

    [result] = results(session_id)
    assert result["output"]["stdout"] == "started\n" and result["output"]["timedOut"] is False
    assert leftovers(marker) == []


@transactional
def test_shell_output_is_capped(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", "from agents.sdk import Agent, local_runtime\n"
                             "agent = Agent(runtime=local_runtime(output_limit=2048))\n")
    session_id = start(alice, "desk", call("shell", command="head -c 100000 /dev/zero | tr '\\0' x"))

    [result] = results(session_id)
    assert result["output"]["truncated"] is True
    assert result["output"]["stdout"].startswith("x" * 2048 + "\n[output truncated at 2048 bytes]")


@transactional
def test_shell_gets_an_allowlisted_environment_without_the_servers_secrets(alice, tmp_path, sync_turns, monkeypatch):
    for name, value in {"DATABASE_URL": "postgres://u:pw@db/x", "OPENAI_API_KEY": "sk-secret",
                        "ANTHROPIC_API_KEY": "sk-ant", "AGENTSITE_SECRET_KEY": "django", "REDIS_URL": "redis://x"}.items():
        monkeypatch.setenv(name, value)
    deploy(tmp_path, "desk", "from agents.sdk import Agent, local_runtime\n"
                             "agent = Agent(model='scripted:echo', runtime=local_runtime(env={'REPORT_FORMAT': 'csv'}))\n")
    session_id = start(alice, "desk", call("shell", command="env"))

    [result] = results(session_id)
    env = dict(line.split("=", 1) for line in result["output"]["stdout"].splitlines())
    assert set(env) <= {"PATH", "HOME", "PWD", "SHELL", "TERM", "LANG", "LC_ALL", "TZ", "TMPDIR", "REPORT_FORMAT",
                        "SHLVL", "_"}
    assert env["REPORT_FORMAT"] == "csv" and env["HOME"] == os.path.realpath(workspace_of(session_id))
    for secret in ("postgres://", "sk-secret", "sk-ant", "django", "redis://"):
        assert secret not in result["output"]["stdout"]


@transactional
def test_stop_kills_a_running_shell_and_its_whole_process_group(tmp_path):
    agent = deploy(tmp_path, "desk")
    marker = "16.18033"
    admitted = start_session(agent, ME, call("shell", command=f"sleep {marker} & sleep {marker}"))
    turn_id = admitted.turn.id
    worker = threading.Thread(target=run_turn, args=(turn_id,))  # as a django-q worker would
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not (ToolCall.objects.filter(turn_id=turn_id, status=ToolCall.Status.RUNNING).exists()
                   and len(leftovers(marker)) >= 2):
            assert time.monotonic() < deadline, "the shell never started"
            time.sleep(0.05)

        assert stop_session(Session.objects.get(pk=admitted.session.id))
        worker.join(timeout=10)
    finally:
        worker.join(timeout=30)
    assert not worker.is_alive()

    row = ToolCall.objects.get(turn_id=turn_id)
    assert row.status == ToolCall.Status.FAILED and "stopped: the turn was interrupted" in row.error
    assert Turn.objects.get(pk=turn_id).status == Turn.Status.INTERRUPTED
    assert [e["data"].get("error") for e in read_events(admitted.session.id) if e["type"] == "turn.failed"] == [
        "turn interrupted"]
    assert leftovers(marker) == []


# -- effects, dry runs, approvals ------------------------------------------------------------------

@transactional
def test_write_tools_are_stubbed_in_a_dry_run_and_reads_still_run(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    script = "\n".join([call("write", path="a.txt", content="x"), call("shell", command="touch b.txt"),
                        call("ls", path=".")])
    session_id = start(alice, "desk", script, dryRun=True)

    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["write"] == {**by_tool["write"], "stubbed": True, "output": "Operation acknowledged."}
    assert by_tool["shell"]["stubbed"] is True
    assert by_tool["ls"]["stubbed"] is False
    assert not (workspace_of(session_id) / "a.txt").exists() and not (workspace_of(session_id) / "b.txt").exists()


@transactional
def test_a_workspace_tool_that_needs_approval_parks_until_approved(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", "from agents.sdk import Agent, local_runtime\n"
                             "agent = Agent(runtime=local_runtime(needs_approval=['delete']))\n",
           files={"agent/workspace/old.log": "x"})
    session_id = start(alice, "desk", call("delete", path="old.log"))

    assert Session.objects.get(pk=session_id).status == "awaiting_approval"
    assert (workspace_of(session_id) / "old.log").exists()
    [parked] = alice.get(f"/desk/v1/session/{session_id}/approvals").json()["approvals"]
    assert parked["toolName"] == "delete"
    decided = post_json(alice, f"/desk/v1/session/{session_id}/approvals/{parked['callId']}", {"decision": "approve"})
    assert decided.status_code == 200

    assert not (workspace_of(session_id) / "old.log").exists()
    assert results(session_id)[-1]["output"] == {"path": "old.log", "deleted": True}


# -- virtual workspaces ------------------------------------------------------------------------

@transactional
def test_a_per_session_factory_builds_each_sessions_filesystem_once(alice, tmp_path, sync_turns):
    deploy(tmp_path, "planner", """
        from itertools import count
        from agents.sdk import Agent, virtual_runtime, memory_fs, union_fs, skills_fs
        builds = count(1)

        def workspace(ctx):
            plan = memory_fs({"/build.txt": str(next(builds)), "/owner.txt": ctx.principal_id,
                              "/reminders.txt": str(len(ctx.host.reminders.list()))})
            return union_fs({"/plan": plan, "/skills": skills_fs()})

        agent = Agent(runtime=virtual_runtime(workspace))
    """, files={"agent/skills/plan.md": "---\ndescription: Plan\n---\nPlan well.\n"})
    first = start(alice, "planner", call("write", path="/plan/step.txt", content="one") + "\n" +
                  call("read", path="/plan/build.txt"))
    follow = post_json(alice, f"/planner/v1/session/{first}/message", {"message": "\n".join([
        call("read", path="/plan/step.txt"), call("read", path="/plan/owner.txt"), call("read", path="/plan/build.txt"),
        call("read", path="/plan/reminders.txt")])})
    assert follow.status_code == 202, follow.content
    second = start(alice, "planner", "\n".join([call("read", path="/plan/step.txt"), call("read", path="/plan/build.txt"),
                                                 call("glob", pattern="**", path="/skills")]))

    wrote, built, step, owner, built_again, reminders = [r.get("output") for r in results(first)]
    assert (wrote, step, owner, reminders) == ({"path": "/plan/step.txt", "bytes": 3}, "one", "alice", "0")
    assert built == built_again, "built once for the session, at its first turn"
    missing, built_second, skills = results(second)
    assert missing["error"] == "WorkspaceError: no file /plan/step.txt", "sessions never share a filesystem"
    assert int(built_second["output"]) == int(built) + 1
    assert skills["output"]["files"] == ["/skills/plan/SKILL.md"]


@transactional
def test_a_factory_whose_filesystem_lacks_an_allowlisted_tool_fails_the_turn_closed(alice, tmp_path, sync_turns):
    deploy(tmp_path, "planner", """
        from agents.sdk import Agent, virtual_runtime, memory_fs
        agent = Agent(runtime=virtual_runtime(lambda ctx: memory_fs(writable=False)), tools=["read", "write"])
    """)
    session_id = start(alice, "planner", call("read", path="/a.txt"))

    [failed] = [e["data"] for e in read_events(session_id) if e["type"] == "turn.failed"]
    assert failed["code"] == "workspace_error"
    assert "names 'write'" in failed["error"] and "does not implement" in failed["error"]
    assert not ToolCall.objects.filter(session_id=session_id).exists()


@transactional
def test_a_fixed_memory_fs_gives_every_session_its_own_copy(alice, tmp_path, sync_turns):
    deploy(tmp_path, "mem", "from agents.sdk import Agent, virtual_runtime, memory_fs\n"
                            "agent = Agent(runtime=virtual_runtime(memory_fs({'/a.txt': 'hi'})))\n")
    first = start(alice, "mem", call("write", path="/a.txt", content="changed") + "\n/next\n" + call("read", path="a.txt"))
    second = start(alice, "mem", call("read", path="/a.txt"))

    assert results(first)[-1]["output"] == "changed"
    assert results(second)[-1]["output"] == "hi"


@transactional
def test_an_empty_virtual_runtime_offers_no_workspace_tools(alice, tmp_path, sync_turns):
    deploy(tmp_path, "bare", "from agents.sdk import Agent, virtual_runtime\nagent = Agent(runtime=virtual_runtime())\n")
    session_id = start(alice, "bare", call("read", path="/a.txt"))

    [result] = results(session_id)
    assert result["error"] == "unknown tool 'read'; available tools: none"
    assert not workspace_of(session_id).exists()


# -- direct calls ------------------------------------------------------------------------------

@transactional
def test_a_workspace_tool_is_callable_directly(alice, tmp_path, sync_turns):
    deploy(tmp_path, "mem", "from agents.sdk import Agent, virtual_runtime, memory_fs\n"
                            "agent = Agent(runtime=virtual_runtime(memory_fs({'/a.txt': 'hi'})))\n")
    deploy(tmp_path, "desk")

    read = post_json(alice, "/mem/v1/tools/read/call", {"input": {"path": "/a.txt"}})
    assert read.status_code == 200 and read.json()["output"] == "hi"

    refused = post_json(alice, "/desk/v1/tools/ls/call", {"input": {}})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "workspace_unavailable"

    session_id = start(alice, "desk", "hello")
    listed = post_json(alice, "/desk/v1/tools/ls/call", {"input": {}, "sessionId": session_id})
    assert listed.status_code == 200, listed.content
    assert "AGENTS.md" in [e["name"] for e in listed.json()["output"]["entries"]]
    [requested] = [e["data"]["calls"][0] for e in read_events(session_id) if e["type"] == "actions.requested"]
    assert requested["family"] == "workspace"


# -- deleting ----------------------------------------------------------------------------------

@transactional
def test_deleting_a_session_deletes_its_workspace(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    session_id = start(alice, "desk", call("write", path="a.txt", content="x"))
    assert (workspace_of(session_id) / "a.txt").exists()

    assert alice.delete(f"/desk/v1/session/{session_id}").status_code == 204

    assert not workspace_of(session_id).exists()


@transactional
def test_deleting_a_virtual_session_forgets_its_filesystem(alice, tmp_path, sync_turns):
    agent = deploy(tmp_path, "mem", "from agents.sdk import Agent, virtual_runtime, memory_fs\n"
                                    "agent = Agent(runtime=virtual_runtime(memory_fs()))\n")
    session_id = start(alice, "mem", call("write", path="/a.txt", content="x"))
    session = Session.objects.get(pk=session_id)
    loaded = load_deployment(session.deployment)
    before = open_workspace(session, loaded).fs

    delete_session(session)

    assert open_workspace(session, loaded).fs is not before
    assert agent.slug == "mem"


# -- the environment brief ------------------------------------------------------------------------

def brief_of(session_id: str) -> str:
    session = Session.objects.get(pk=session_id)
    runner = TurnRunner(Turn.objects.filter(session=session).first())
    loaded = load_deployment(session.deployment)
    runner.workspace = open_workspace(session, loaded)
    return runner.system_prompt(loaded)


@transactional
def test_the_system_prompt_says_what_the_workspace_offers(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk", "from agents.sdk import Agent\nagent = Agent(tools=['read', 'ls', 'shell'])\n",
           files={"agent/tools/weather.py": WEATHER})
    deploy(tmp_path, "mem", "from agents.sdk import Agent, virtual_runtime, memory_fs, union_fs, skills_fs\n"
                            "agent = Agent(runtime=virtual_runtime(union_fs({'/docs': memory_fs(writable=False), "
                            "'/skills': skills_fs()})))\n")
    deploy(tmp_path, "bare", "from agents.sdk import Agent\nagent = Agent(tools=[])\n")

    local = brief_of(start(alice, "desk", "hi"))
    assert local.startswith("You work in your workspace.\n\n## Workspace\n")
    assert "Workspace tools: read, ls, shell." in local and "with a 30 s limit" in local
    assert "- .tools/weather: Say the weather in a city. Input schema: {" in local
    virtual = brief_of(start(alice, "mem", "hi"))
    assert "virtual filesystem rooted at /; there is no shell" in virtual
    assert "- /docs: read, ls, glob, grep" in virtual
    assert "- /skills: the agent's skills, one folder each with its SKILL.md (read-only); read, ls, glob, grep" in virtual
    assert brief_of(start(alice, "bare", "hi")) == "You work in your workspace."


# -- what the model is offered, as the model request carries it ------------------------------------

@pytest.mark.parametrize("agent_py, offered", [
    ("from agents.sdk import Agent\nagent = Agent()\n",
     "delete, edit, glob, grep, load_skill, ls, read, shell, write"),
    ("from agents.sdk import Agent\nagent = Agent(tools=['read', 'edit'])\n", "edit, load_skill, read, write"),
    ("from agents.sdk import Agent\nagent = Agent(tools=[])\n", "load_skill"),
    ("from agents.sdk import Agent, local_runtime\nagent = Agent(runtime=local_runtime(shell=False))\n",
     "delete, edit, glob, grep, load_skill, ls, read, write"),
    ("from agents.sdk import Agent, virtual_runtime\nagent = Agent(runtime=virtual_runtime())\n", "load_skill"),
    ("from agents.sdk import Agent, virtual_runtime, memory_fs\n"
     "agent = Agent(runtime=virtual_runtime(memory_fs(writable=False)))\n", "glob, grep, load_skill, ls, read"),
    ("from agents.sdk import Agent, virtual_runtime, memory_fs, union_fs, skills_fs\n"
     "agent = Agent(runtime=virtual_runtime(lambda ctx: union_fs({'/s': skills_fs(), '/w': memory_fs()})), "
     "tools=['read', 'write'])\n", "load_skill, read, write"),
])
@transactional
def test_the_model_request_offers_exactly_the_workspace_tools(alice, tmp_path, sync_turns, agent_py, offered):
    deploy(tmp_path, "probe", agent_py, files={"agent/skills/tidy.md": "Tidy up.\n"})
    session_id = start(alice, "probe", "/tools")

    [reply] = [e["data"]["text"] for e in read_events(session_id) if e["type"] == "message.completed"]
    assert reply == f"Tools: {offered}"


@transactional
def test_a_workspace_the_model_emptied_still_serves_the_next_turn(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    session_id = start(alice, "desk", call("shell", command="rm -rf ./* ./.[!.]*"))
    follow = post_json(alice, f"/desk/v1/session/{session_id}/message", {"message": call("write", path="a.txt",
                                                                                         content="x")})
    assert follow.status_code == 202

    assert results(session_id)[-1]["output"] == {"path": "a.txt", "bytes": 1}
    assert sorted(p.name for p in workspace_of(session_id).iterdir()) == ["a.txt"]
