"""`manage.py run|info|call --dir PATH`: an agent folder tried without deploying it, and `run`'s
--model, --as-of, --file and --json."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.models import Agent, Deployment
from sessions.models import Session
from tests.command_line import run_command_line

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support"

CLOCK = '''from pydantic import BaseModel

from agents.sdk import tool


class Input(BaseModel):
    pass


@tool(description="The session's now.", effect="read")
def clock(input: Input, ctx) -> str:
    return ctx.now().isoformat()
'''


def folder(tmp_path: Path, name: str = "support", instructions: str = "") -> Path:
    """A copy of the support example (its slug is the folder's name), with other instructions if given."""
    root = tmp_path / name
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    if instructions:
        (root / "agent" / "instructions.md").write_text(instructions)
    return root


def clock_agent(tmp_path: Path, agent_py: str = "") -> Path:
    root = tmp_path / "timekeeper"
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You tell the time.")
    (root / "agent" / "tools" / "clock.py").write_text(CLOCK)
    if agent_py:
        (root / "agent" / "agent.py").write_text(agent_py)
    return root


def ran(*args: str) -> dict:
    code, out, err = run_command_line("run", *args, "--json")
    assert code == 0, err
    return json.loads(out)


# -- the folder is never what others reach -----------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_run_dir_runs_a_folder_that_was_never_deployed_and_lists_no_agent(tmp_path, local):
    code, out, err = run_command_line("run", "--dir", str(folder(tmp_path, "draft")), "-m", "hello")

    assert (code, err) == (0, "")
    assert out.splitlines()[:2] == ["> hello", "You said: hello"]
    assert out.splitlines()[-1].startswith("status: waiting (session ses_")
    agent = Agent.objects.get(slug="draft")
    assert agent.active_deployment is None
    assert local.get("/v1/agents").json()["agents"] == []
    assert run_command_line("deployments", "draft")[1] == ""


@pytest.mark.django_db(transaction=True)
def test_run_dir_of_a_deployed_agent_leaves_its_active_release_and_sessions_alone(support_agent, tmp_path, local):
    active = support_agent.active_deployment
    earlier = ran("support", "-m", "before")
    changed = folder(tmp_path, instructions="You are a draft of the support agent.")

    tried = ran("--dir", str(changed), "-m", "hello")
    again = ran("--dir", str(changed), "-m", "hello again")

    session = Session.objects.select_related("deployment").get(pk=tried["sessionId"])
    assert session.deployment.scratch and session.deployment.version == 0
    assert session.deployment.manifest["instructions"] == "You are a draft of the support agent."
    # The same content is one scratch copy, however often it is tried.
    assert Session.objects.get(pk=again["sessionId"]).deployment_id == session.deployment_id
    support_agent.refresh_from_db()
    assert support_agent.active_deployment_id == active.pk
    assert Session.objects.get(pk=earlier["sessionId"]).deployment_id == active.pk
    [listed] = local.get("/v1/agents").json()["agents"]
    assert listed["deployment"]["version"] == 1
    assert [line.split()[:2] for line in run_command_line("deployments", "support")[1].splitlines()] == [["*", "v1"]]
    # A deploy of the same folder numbers its release after the real ones, and activates it.
    code, out, err = run_command_line("deploy", str(changed))
    assert code == 0, err
    support_agent.refresh_from_db()
    assert support_agent.active_deployment.version == 2 and not support_agent.active_deployment.scratch


@pytest.mark.django_db
def test_a_scratch_copy_cannot_be_activated(support_agent, tmp_path):
    code, _, err = run_command_line("info", "--dir", str(folder(tmp_path, instructions="A draft.")))
    assert code == 0, err

    code, _, err = run_command_line("activate", "support", "0")

    assert code == 1
    assert "has no release '0' (releases: v1)" in err
    assert not Deployment.objects.get(scratch=True).activate()
    assert Agent.objects.get(slug="support").active_deployment.version == 1


@pytest.mark.django_db(transaction=True)
def test_an_agents_newest_scratch_copies_are_kept_and_those_a_session_runs_on(tmp_path):
    root = folder(tmp_path, "drafts", instructions="Draft 0.")
    first = ran("--dir", str(root), "-m", "hello")  # a session runs on this copy: kept whatever follows
    for n in range(1, 8):
        (root / "agent" / "instructions.md").write_text(f"Draft {n}.")
        assert run_command_line("info", "--dir", str(root))[0] == 0

    copies = Deployment.objects.filter(agent__slug="drafts", scratch=True)
    assert copies.count() == 6  # the newest five, and the one the session runs on
    session = Session.objects.get(pk=first["sessionId"])
    assert copies.filter(pk=session.deployment_id).exists()
    assert "Draft 7." in copies.latest("created_at").manifest["instructions"]


# -- which agent -----------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("command", [("run", "-m", "hi"), ("info",), ("call", "lookup_order")])
def test_a_slug_and_dir_together_or_neither_are_refused(support_agent, tmp_path, command):
    name, *rest = command
    for target in (["support", "--dir", str(EXAMPLE)], []):  # (positionals before --dir: argparse)
        code, out, err = run_command_line(name, *rest, *target)

        assert code == 1 and out == ""
        assert err.strip() == "CommandError: pass an agent's slug or --dir PATH (one of the two)"


@pytest.mark.django_db
def test_an_invalid_folder_is_one_line_naming_the_file_and_fix(tmp_path):
    bad = tmp_path / "bad"
    (bad / "agent").mkdir(parents=True)
    (bad / "agent" / "instructions.md").write_text("")

    code, out, err = run_command_line("run", "--dir", str(bad), "-m", "hi")

    assert code == 1 and out == ""
    assert "Traceback" not in err
    assert "agent/instructions.md: empty: write the agent's system prompt" in err
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_call_dir_runs_the_folders_tool_and_the_slug_the_deployed_one(support_agent, tmp_path):
    changed = folder(tmp_path)
    tool = changed / "agent" / "tools" / "lookup_order.py"
    tool.write_text(tool.read_text().replace('"status": "shipped"', '"status": "lost at sea"'))

    code, out, err = run_command_line("call", "--dir", str(changed), "lookup_order", "--input", '{"order_id": "A101"}')
    assert code == 0, err
    assert json.loads(out)["output"]["status"] == "lost at sea"
    code, out, err = run_command_line("call", "support", "lookup_order", "--input", '{"order_id": "A101"}')
    assert code == 0, err
    assert json.loads(out)["output"]["status"] == "shipped"
    # A session runs its own release's tools, never the folder's: the two together are refused.
    code, out, err = run_command_line("call", "--dir", str(changed), "lookup_order", "--session", "ses_x")
    assert (code, out) == (1, "") and "--session runs a tool of the session's own release: not with --dir" in err


# -- info: where each tool comes from ----------------------------------------------------------

@pytest.mark.django_db
def test_info_dir_names_the_source_of_every_tool(tmp_path):
    root = clock_agent(tmp_path)
    (root / "agent" / "skills").mkdir()
    (root / "agent" / "skills" / "refunds.md").write_text("---\ndescription: How refunds work\n---\nBe kind.\n")

    code, out, err = run_command_line("info", "--dir", str(root))

    assert code == 0, err
    info = json.loads(out)
    assert info["deployment"]["scratch"] is True and info["deployment"]["version"] == 0
    assert info["tools"][0]["source"] == {"kind": "file", "path": "agent/tools/clock.py"}
    sources = {t["name"]: t["source"] for t in info["offeredTools"]}
    assert sources["clock"] == {"kind": "file", "path": "agent/tools/clock.py"}
    assert sources["load_skill"] == {"kind": "builtin", "feature": "skills"}
    assert sources["read"] == {"kind": "builtin", "feature": "workspace"}
    assert Agent.objects.get(slug="timekeeper").active_deployment is None


# -- run's options ------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_run_model_binds_the_session_to_one_of_the_agents_models(tmp_path):
    root = clock_agent(tmp_path, "from agents.sdk import Agent\n\n"
                                 "agent = Agent(models=['scripted:echo', 'scripted:other'])\n")

    trajectory = ran("--dir", str(root), "--model", "scripted:other", "-m", "hi")

    assert Session.objects.get(pk=trajectory["sessionId"]).model == "scripted:other"
    code, out, err = run_command_line("run", "--dir", str(root), "--model", "openai:gpt-4.1", "-m", "hi")
    assert (code, out) == (1, "")
    assert err.strip() == ("CommandError: model 'openai:gpt-4.1' is not one this agent may run on; "
                           "choose one of: scripted:echo, scripted:other (--model)")


@pytest.mark.django_db(transaction=True)
def test_run_as_of_is_the_now_the_agents_tools_read(tmp_path):
    trajectory = ran("--dir", str(clock_agent(tmp_path)), "--as-of", "2026-01-31T12:00:00Z", "-m", "/call clock {}")

    [call] = trajectory["toolCalls"]
    assert call["output"] == "2026-01-31T12:00:00+00:00"
    assert Session.objects.get(pk=trajectory["sessionId"]).options == {"asOf": "2026-01-31T12:00:00+00:00"}


@pytest.mark.django_db
@pytest.mark.parametrize("value, says", [
    ("yesterday", "--as-of 'yesterday' is not an ISO-8601 instant; e.g. 2026-01-31T12:00:00Z"),
    ("2026-01-31T12:00:00", "--as-of '2026-01-31T12:00:00' needs a time zone"),
])
def test_run_refuses_an_as_of_that_is_not_an_instant(support_agent, value, says):
    code, out, err = run_command_line("run", "support", "--as-of", value, "-m", "hi")

    assert (code, out) == (1, "")
    assert says in err and err.count("\n") == 1


@pytest.mark.django_db(transaction=True)
def test_run_file_copies_files_into_the_workspace_before_the_turn(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("order A101 is a gift")
    blob = tmp_path / "photo.bin"
    blob.write_bytes(b"\x89PNG\x00\xff")

    trajectory = ran("--dir", str(clock_agent(tmp_path)), "--file", str(notes), "--file", str(blob),
                     "-m", '/call read {"path": "notes.txt"}\n/call ls {}')

    read, listing = trajectory["toolCalls"]
    assert "order A101 is a gift" in json.dumps(read["output"])
    assert "photo.bin" in json.dumps(listing["output"])


@pytest.mark.django_db
def test_run_file_refuses_a_missing_file_and_a_name_sent_twice(support_agent, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("one")
    (tmp_path / "notes.txt").write_text("two")

    code, _, err = run_command_line("run", "support", "--file", str(tmp_path / "missing.txt"), "-m", "hi")
    assert code == 1 and f"--file {tmp_path / 'missing.txt'}: no such file" in err
    code, _, err = run_command_line("run", "support", "--file", str(tmp_path / "a" / "notes.txt"),
                                    "--file", str(tmp_path / "notes.txt"), "-m", "hi")
    assert code == 1 and "a file named 'notes.txt' is sent already" in err
    assert not Session.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_without_json_prints_the_tool_calls_reply_and_status(support_agent):
    code, out, err = run_command_line("run", "support", "-m", '/call lookup_order {"order_id": "A101"}')

    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == '> /call lookup_order {"order_id": "A101"}'
    assert lines[1] == '  tool lookup_order {"order_id": "A101"}'
    assert lines[2].startswith('    -> {"orderId": "A101", "status": "shipped"')
    assert lines[3] == "Tool results:"
    assert lines[-1].startswith("status: waiting (session ses_") and "tokens in" in lines[-1]


@pytest.mark.django_db(transaction=True)
def test_run_without_json_says_why_a_turn_failed(support_agent):
    code, out, err = run_command_line("run", "support", "--mode", "task", "-m", "/fail boom")

    assert code == 0, err
    assert "error: boom" in out.splitlines()
    assert out.splitlines()[-1].startswith("status: failed")
