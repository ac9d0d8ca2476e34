"""Every command on a state root no server has migrated, and on a user's mistakes: a line, never a traceback."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.command_line import run_command_line
from tests.support import ROOT, child_env

EXAMPLE = ROOT / "examples" / "support"


def manage(state_root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                          env=child_env(AGENTSITE_STATE_ROOT=str(state_root)), capture_output=True, text=True,
                          timeout=120)


def fails_in_one_line(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert says in done.stderr, done.stderr


def test_deploy_on_a_fresh_state_root_migrates_it_and_prints_the_release(tmp_path):
    done = manage(tmp_path / "state", "deploy", str(EXAMPLE), "--json")

    assert done.returncode == 0, done.stderr
    release = json.loads(done.stdout)
    assert (release["agent"], release["version"], release["sourceKind"], release["reused"]) == ("support", 1, "folder", False)
    assert release["deployedBy"].startswith("cli")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, says", [
    (("info", "support"), "no agent 'support'"),
    (("call", "support", "lookup_order"), "no agent 'support'"),
    (("run", "support", "-m", "hi"), "no agent 'support'"),
    (("trajectory", "--session", "ses_missing"), "no session 'ses_missing'"),
    (("createtoken", "bob", "--name", "ci"), "no user 'bob'"),
    (("secrets", "list", "support"), "no agent 'support'"),
    (("secrets", "unset", "support", "TOKEN"), "no agent 'support'"),
    (("mcp", "oauth", "support", "search", "--no-browser"), "no agent 'support'"),
])
def test_the_other_commands_on_a_fresh_state_root_migrate_it_and_say_what_is_missing(tmp_path, args, says):
    fails_in_one_line(manage(tmp_path / "state", *args), says)


def in_this_process(*args: str) -> subprocess.CompletedProcess:
    """The command line on the test database: a real process runs each of these commands on a fresh state root
    above, so these tests are about what the user typed, not the process."""
    code, out, err = run_command_line(*args)
    return subprocess.CompletedProcess(["manage.py", *args], code, out, err)


@pytest.fixture
def state(db, settings, tmp_path) -> Path:
    settings.STATE_ROOT = tmp_path / "state"
    settings.STATE_ROOT.mkdir()
    return settings.STATE_ROOT


def bad_agent(tmp_path: Path) -> str:
    (tmp_path / "bad" / "agent").mkdir(parents=True)
    (tmp_path / "bad" / "agent" / "instructions.md").write_text("You help.\n")
    (tmp_path / "bad" / "agent" / "agent.py").write_text("this is not python\n")
    return str(tmp_path / "bad")


@pytest.mark.parametrize("args, says", [
    (("deploy", "{tmp}/missing"), "not a folder"),
    (("deploy", "{bad}"), "invalid: agent/agent.py: failed to import"),
    (("deploy",), "pass agent folders or --repo URL"),
    (("deploy", str(EXAMPLE), "--ref", "main"), "--ref and --path go with --repo"),
    (("deploy", str(EXAMPLE), "--allow-domain", "API.example.com"), "lowercase only"),
    (("deploy", "--repo", "ssh://git@example.com/a.git"), "ssh is not supported"),
    (("trajectory", "--events", "{tmp}/none.ndjson"), "no file"),
])
def test_a_users_mistakes_are_one_line_errors(state, tmp_path, args, says):
    bad = bad_agent(tmp_path)
    args = tuple(a.format(tmp=tmp_path, bad=bad) for a in args)
    fails_in_one_line(in_this_process(*args), says)


def test_a_call_with_bad_input_or_an_unknown_tool_is_a_one_line_error(state):
    assert in_this_process("deploy", str(EXAMPLE)).returncode == 0

    fails_in_one_line(in_this_process("call", "support", "lookup_order", "--input", "{nope"), "--input is not JSON")
    fails_in_one_line(in_this_process("call", "support", "no_such_tool"), "no_such_tool")


def test_purge_on_a_fresh_state_root_migrates_it_and_finds_nothing(tmp_path):
    done = manage(tmp_path / "state", "purge", "--older-than", "30", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_secrets_rotate_on_a_fresh_state_root_migrates_it_and_finds_nothing(tmp_path):
    done = manage(tmp_path / "state", "secrets", "rotate")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "re-encrypted 0 of 0 secret(s) with the first key"
