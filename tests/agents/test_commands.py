"""The management commands, run in-process through call_command."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent, Deployment
from sessions.models import Event, Session

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support"


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def make_agent(parent: Path, name: str, instructions: str = "You help.", agent_py: str | None = None) -> Path:
    root = parent / name
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text(instructions)
    if agent_py is not None:
        (root / "agent" / "agent.py").write_text(agent_py)
    return root


# -- validate -----------------------------------------------------------------------------

def test_validate_reports_a_valid_folder_with_its_model_and_tools():
    out, err = run("validate", str(EXAMPLE))

    assert out.strip() == f"{EXAMPLE}: ok (support, scripted:echo, cancel_order, lookup_order, refund_order)"
    assert err == ""


def test_validate_lists_every_problem_of_an_invalid_folder_and_fails(tmp_path):
    bad = make_agent(tmp_path, "bad", instructions="", agent_py="agent = 1\n")
    err = StringIO()

    with pytest.raises(CommandError, match="validation failed"):
        call_command("validate", str(bad), stdout=StringIO(), stderr=err)

    lines = err.getvalue().splitlines()
    assert lines[0] == f"{bad}: invalid"
    assert "  agent/instructions.md: empty: write the agent's system prompt" in lines
    assert any(line.startswith("  agent/agent.py: define `agent = Agent(...)`") for line in lines)


def test_validate_checks_every_folder_even_after_a_bad_one(tmp_path):
    bad = make_agent(tmp_path, "bad", instructions="")
    good = make_agent(tmp_path, "good")
    out = StringIO()

    with pytest.raises(CommandError):
        call_command("validate", str(bad), str(good), stdout=out, stderr=StringIO())

    assert out.getvalue().strip() == f"{good}: ok (good, scripted:echo, no tools)"


def test_validate_works_without_a_database(tmp_path, django_db_blocker):
    # validate must work before any migration: it never opens the database.
    with django_db_blocker.block():
        out, _ = run("validate", str(make_agent(tmp_path, "good")))

    assert ": ok (good" in out


# -- deploy and info ------------------------------------------------------------------------

@pytest.mark.django_db
def test_deploy_prints_the_version_and_activates_it(tmp_path):
    root = make_agent(tmp_path, "helper")

    out, _ = run("deploy", str(root))

    deployment = Deployment.objects.get()
    assert out.strip() == f"helper: v1 ({deployment.content_hash[:12]}) from {root.resolve()}"
    assert Agent.objects.get(slug="helper").active_deployment == deployment


@pytest.mark.django_db
def test_deploy_of_unchanged_content_keeps_the_version_and_of_changed_content_makes_v2(tmp_path):
    root = make_agent(tmp_path, "helper")
    run("deploy", str(root))
    again, _ = run("deploy", str(root))
    assert again.startswith("helper: v1 ")

    (root / "agent" / "instructions.md").write_text("You help more.")
    changed, _ = run("deploy", str(root))

    assert changed.startswith("helper: v2 ")
    assert Agent.objects.get(slug="helper").active_deployment.version == 2


@pytest.mark.django_db
def test_deploy_takes_a_folder_of_agent_folders(tmp_path):
    make_agent(tmp_path, "one")
    make_agent(tmp_path, "two")

    out, _ = run("deploy", str(tmp_path))

    assert [line.split(":")[0] for line in out.splitlines()] == ["one", "two"]
    assert sorted(Agent.objects.values_list("slug", flat=True)) == ["one", "two"]


@pytest.mark.django_db
def test_deploy_of_an_invalid_folder_fails_naming_the_problem_and_deploys_nothing(tmp_path):
    root = make_agent(tmp_path, "helper", instructions="  ")

    with pytest.raises(CommandError) as raised:
        run("deploy", str(root))

    message = str(raised.value)
    assert f"{root.resolve()}: invalid" in message
    assert "agent/instructions.md: empty" in message
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_deploy_of_a_missing_path_fails(tmp_path):
    with pytest.raises(CommandError, match="not a folder"):
        run("deploy", str(tmp_path / "missing"))


@pytest.mark.django_db
def test_info_prints_the_active_manifest_as_json(support_agent):
    out, _ = run("info", "support")

    info = json.loads(out)
    deployment = Agent.objects.get(slug="support").active_deployment
    assert info["slug"] == "support"
    assert info["model"] == "scripted:echo"
    assert info["deployment"] == {"version": 1, "contentHash": deployment.content_hash, "source": str(EXAMPLE)}
    assert [t["name"] for t in info["tools"]] == ["cancel_order", "lookup_order", "refund_order"]
    assert info["tools"][0]["inputSchema"]["required"] == ["order_id"]
    assert info["instructions"].startswith("You are the support agent")


@pytest.mark.django_db
def test_info_of_an_unknown_agent_fails_saying_how_to_deploy(db):
    with pytest.raises(CommandError, match="deploy it with"):
        run("info", "nobody")


# -- run and trajectory ----------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_run_prints_the_json_trajectory_with_reply_tool_calls_and_usage(support_agent):
    out, _ = run("run", "support", "--json", "--message", '/call lookup_order {"order_id": "A101"}')

    trajectory = json.loads(out)
    assert trajectory["status"] == "waiting"
    assert trajectory["reply"].startswith("Tool results:\nlookup_order (ok):")
    [call] = trajectory["toolCalls"]
    assert call["toolName"] == "lookup_order"
    assert call["input"] == {"order_id": "A101"}
    assert call["output"]["status"] == "shipped"
    assert trajectory["usage"]["inputTokens"] > 0
    assert trajectory["usage"]["outputTokens"] > 0
    assert trajectory["error"] is None
    session = Session.objects.get(pk=trajectory["sessionId"])
    assert (session.channel, session.principal_id, session.authenticator) == ("http", "cli", "cli")


@pytest.mark.django_db(transaction=True)
def test_run_a_plain_message_replies_with_the_echo(support_agent):
    trajectory = json.loads(run("run", "support", "--json", "-m", "hello")[0])

    assert trajectory["reply"] == "You said: hello"
    assert trajectory["toolCalls"] == []
    assert [t["status"] for t in trajectory["turns"]] == ["completed"]


@pytest.mark.django_db(transaction=True)
def test_run_in_task_mode_reports_the_failure_of_the_model(support_agent):
    trajectory = json.loads(run("run", "support", "--json", "--mode", "task", "-m", "/fail boom")[0])

    assert trajectory["status"] == "failed"
    assert trajectory["error"] == "boom"
    assert trajectory["reply"] == ""


@pytest.mark.django_db(transaction=True)
def test_run_with_dry_run_records_the_option(support_agent):
    trajectory = json.loads(run("run", "support", "--json", "--dry-run", "-m", "hello")[0])

    assert Session.objects.get(pk=trajectory["sessionId"]).options == {"dryRun": True}


@pytest.mark.django_db
def test_run_of_an_unknown_agent_fails(db):
    with pytest.raises(CommandError, match="no agent 'nobody'"):
        run("run", "nobody", "-m", "hello")


@pytest.mark.django_db
def test_run_of_an_agent_with_no_deployment_fails_saying_so(db):
    Agent.objects.create(slug="draft")

    with pytest.raises(CommandError, match="no active deployment"):
        run("run", "draft", "-m", "hello")


@pytest.mark.django_db(transaction=True)
def test_trajectory_of_a_stored_session_matches_what_run_printed(support_agent):
    printed = json.loads(run("run", "support", "--json", "-m", '/call lookup_order {"order_id": "A100"}')[0])

    out, _ = run("trajectory", "--session", printed["sessionId"])

    assert json.loads(out) == printed


@pytest.mark.django_db(transaction=True)
def test_trajectory_reads_an_ndjson_file_of_events(support_agent, tmp_path):
    printed = json.loads(run("run", "support", "--json", "-m", "hello")[0])
    dump = tmp_path / "events.ndjson"
    events = Event.objects.filter(session_id=printed["sessionId"]).order_by("index")
    dump.write_text("".join(json.dumps(e.envelope()) + "\n" for e in events))

    out, _ = run("trajectory", "--events", str(dump))

    assert json.loads(out) == printed


@pytest.mark.django_db
def test_trajectory_of_an_unknown_session_fails(db):
    with pytest.raises(CommandError, match="no session 'ses_missing'"):
        run("trajectory", "--session", "ses_missing")


def test_trajectory_of_a_file_that_is_not_ndjson_fails_naming_it(tmp_path):
    dump = tmp_path / "events.ndjson"
    dump.write_text("not json\n")

    with pytest.raises(CommandError, match="line is not JSON"):
        run("trajectory", "--events", str(dump))
    with pytest.raises(CommandError, match="no file"):
        run("trajectory", "--events", str(tmp_path / "missing.ndjson"))


def test_trajectory_needs_a_session_or_a_file():
    with pytest.raises(CommandError):
        run("trajectory")
