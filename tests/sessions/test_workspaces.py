"""Session workspaces in turns: what a local workspace holds, agent tools run with
shell, the shell's limits (time, Stop, environment) with no process left behind,
dry runs and approvals of workspace tools. Virtual workspaces, direct calls,
deleting and what the model is offered: test_virtual_workspaces."""
from __future__ import annotations

import json
import os
import shlex
import threading
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.test import override_settings

from sessions.turn.admission import start_session, stop_session
from sessions.turn.engine import run_turn
from sessions.eventlog.events import read_events
from sessions.models import Session, ToolCall, Turn
from sessions.workspaces.store import list_files, workspace_size
from tests.sessions.test_lifecycle import post_json
from tests.sessions.workspace_support import (
    ME, WEATHER, call, deploy, leftovers, results, start, transactional, workspace_of,
)


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


@transactional
@override_settings(AGENTSITE_SANDBOX="off")  # the host's own shell, which can link to a file outside
def test_a_hard_link_made_with_shell_to_a_file_outside_is_refused_by_the_file_tools(alice, tmp_path, sync_turns):
    deploy(tmp_path, "desk")
    # Beside the workspaces, so on their filesystem: a hard link cannot cross filesystems.
    outside = Path(settings.AGENTSITE_WORKSPACES_ROOT).parent / f"outside-{uuid.uuid4().hex}.txt"
    outside.write_text("secret\n")
    try:
        before = outside.stat().st_mtime_ns
        steps = [call("shell", command=f"ln {shlex.quote(str(outside))} hard"),
                 call("read", path="hard"), call("write", path="hard", content="pwned"),
                 call("edit", path="hard", old_text="secret", new_text="pwned"),
                 call("grep", pattern="secret"), call("glob", pattern="**"), call("delete", path="hard")]
        session_id = start(alice, "desk", "\n/next\n".join(steps))  # one call per step, in this order

        shell, read, write, edit, grep, glob, delete = results(session_id)
        assert shell["output"]["exitCode"] == 0, shell["output"]
        for refused in (read, write, edit, delete):
            error = refused.get("error", "")
            assert error.startswith("WorkspaceError: hard is a hard link to a file elsewhere"), refused
            assert "secret" not in error
        assert grep["output"] == {"matches": [], "truncated": False}
        assert "hard" not in glob["output"]["files"]
        assert outside.read_text() == "secret\n" and outside.stat().st_mtime_ns == before
        listed = {f["path"]: f for f in list_files(session_id)}
        assert listed["hard"] == {"path": "hard", "bytes": None, "symlink": False, "hardlink": True}
        assert workspace_size(session_id) == sum(f["bytes"] for f in listed.values() if not f["hardlink"])
        assert Session.objects.get(pk=session_id).status == "waiting"
    finally:
        outside.unlink()


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
