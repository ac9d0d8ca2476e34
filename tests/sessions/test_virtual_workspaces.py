"""Session workspaces in turns: per-session virtual filesystems, direct calls of workspace
tools, deleting a session's workspace, and what the model is told and offered."""
from __future__ import annotations

import os
import subprocess

import pytest

from agents.discovery import load_deployment
from agents.workspaces import disks, sandbox
from sessions.retention.deletion import delete_session
from sessions.turn.engine import TurnRunner
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall, Turn
from sessions.workspaces.store import list_files, open_workspace
from tests.sessions.test_lifecycle import post_json
from tests.sessions.workspace_support import WEATHER, call, deploy, results, start, transactional, workspace_of
from tests.support import unmount_under


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
def test_a_workspace_on_a_filesystem_of_its_own_is_unmounted_and_removed_with_its_session(alice, tmp_path, sync_turns,
                                                                                         settings):
    settings.AGENTSITE_WORKSPACE_DISKS = "auto"
    settings.AGENTSITE_WORKSPACES_ROOT = tmp_path / "workspaces"
    if reason := disks.available(tmp_path) or ("" if sandbox.status().active else "no sandbox"):
        pytest.skip(f"no filesystem of its own for a workspace here: {reason}")
    deploy(tmp_path, "desk", "from agents.sdk import Agent, local_runtime\n"
                             "agent = Agent(runtime=local_runtime(disk_limit=8 * 1024 * 1024))\n")
    try:
        session_id = start(alice, "desk", call("write", path="a.txt", content="x") + "\n/next\n" +
                           call("shell", command="for i in 1 2 3 4; do fallocate -l 3M p$i & done; wait; cat a.txt"))
        root = workspace_of(session_id)
        assert os.path.ismount(root) and disks.image_of(root).is_file()
        shell = results(session_id)[-1]["output"]
        assert shell["stdout"] == "x" and "No space left on device" in shell["stderr"], shell
        assert not (root / "lost+found").exists() and {"AGENTS.md", "a.txt"} <= {f["path"] for f in list_files(session_id)}

        # A mount stacked on the workspace, held busy (as by a command still running): each one goes, and
        # nothing is deleted through the workspace's own filesystem left below.
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "stacked", str(root)], check=True)
        with open(root / "busy", "w"):
            assert alice.delete(f"/desk/v1/session/{session_id}").status_code == 204

        assert not os.path.ismount(root) and not root.exists() and not disks.image_of(root).exists()
        with open("/proc/self/mountinfo", encoding="utf-8") as info:
            assert str(root) not in info.read()
    finally:
        unmount_under(tmp_path)


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
