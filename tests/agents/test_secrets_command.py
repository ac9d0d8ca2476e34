"""`manage.py secrets` end to end, as an operator runs it: the value on standard input,
never an argument; names, setters and times listed, never values; refusals on one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from agents.models import Agent
from tests.command_line import run_command_line
from tests.support import child_env, premigrate

MANAGE = Path(__file__).resolve().parents[2] / "manage.py"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support"
MARKER = "MARKER-cmd-7d3a90e1c4"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    state = tmp_path_factory.mktemp("state")
    premigrate(state)
    env = child_env(AGENTSITE_STATE_ROOT=str(state), AGENTSITE_SECRETS_KEYS=Fernet.generate_key().decode())
    deployed = manage(env, "deploy", str(EXAMPLE))
    assert deployed.returncode == 0, deployed.stderr
    return env


def manage(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(MANAGE), *args], env=env, input=stdin, capture_output=True,
                          text=True, timeout=120)


def listed(env: dict[str, str]) -> list[dict]:
    done = manage(env, "secrets", "list", "support", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["secrets"]


@pytest.fixture
def support(db, settings, tmp_path) -> Agent:
    settings.STATE_ROOT = tmp_path
    settings.AGENTSITE_SECRETS_KEYS = Fernet.generate_key().decode()
    return Agent.objects.create(slug="support", name="Support")


def test_set_reads_the_value_from_standard_input_and_list_never_shows_it(env):
    done = manage(env, "secrets", "set", "support", "CMD_TOKEN", stdin=MARKER + "\n")
    assert (done.returncode, done.stdout.strip()) == (0, "support: CMD_TOKEN set"), done.stderr

    rows = listed(env)
    [secret] = [s for s in rows if s["name"] == "CMD_TOKEN"]
    assert secret["setBy"].startswith("cli") and secret["setAt"] and secret["expiresAt"] is None
    plain = manage(env, "secrets", "list", "support")
    assert "CMD_TOKEN" in plain.stdout and "by cli" in plain.stdout
    for out in (plain.stdout, plain.stderr, json.dumps(rows), done.stdout, done.stderr):
        assert MARKER not in out

    shown = manage(env, "shell", "-c", "from agents.secrets.store import acting_for\n"
                   "from agents.secrets.lookup import credential\n"
                   "with acting_for('support'): print(repr(credential('CMD_TOKEN')))")
    assert shown.stdout.strip().splitlines()[-1] == repr(MARKER)  # one trailing newline stripped, nothing else


def test_set_again_replaces_and_unset_removes(support, env):
    run_command_line("secrets", "set", "support", "TWICE", stdin="one")  # in this process, on the test database
    _, again, _ = run_command_line("secrets", "set", "support", "TWICE", stdin="two\n\n")
    assert again.strip() == "support: TWICE replaced"

    code, gone, _ = run_command_line("secrets", "unset", "support", "TWICE")
    assert (code, gone.strip()) == (0, "support: TWICE unset")
    _, listing, _ = run_command_line("secrets", "list", "support", "--json")
    assert "TWICE" not in [s["name"] for s in json.loads(listing)["secrets"]]
    twice = manage(env, "secrets", "unset", "support", "TWICE")  # a real process: its exit code and stderr
    assert twice.returncode != 0
    assert twice.stderr.strip() == "CommandError: agent 'support' has no secret TWICE"


def test_rotate_says_how_many_changed(env):
    manage(env, "secrets", "set", "support", "ROTATED", stdin="value")
    first = Fernet.generate_key().decode()
    rotated = {**env, "AGENTSITE_SECRETS_KEYS": f"{first},{env['AGENTSITE_SECRETS_KEYS']}"}

    done = manage(rotated, "secrets", "rotate")
    assert done.returncode == 0, done.stderr
    changed, total = done.stdout.split()[1], done.stdout.split()[3]
    assert int(changed) == int(total) >= 1
    assert manage(rotated, "secrets", "rotate").stdout.startswith("re-encrypted 0 of")
    env["AGENTSITE_SECRETS_KEYS"] = first  # the old key can go now
    assert manage(env, "secrets", "list", "support").returncode == 0


@pytest.mark.parametrize("args, stdin, message", [
    (("set", "nobody", "TOKEN"), "v", "no agent 'nobody' on this server"),
    (("set", "support", "1BAD"), "v", "'1BAD' is not a secret name"),
    (("set", "support", "BAD-NAME"), "v", "'BAD-NAME' is not a secret name"),
    (("set", "support", "EMPTY"), "", "no value for EMPTY on standard input"),
    (("set", "support", "EMPTY"), "\n", "no value for EMPTY on standard input"),
    (("set", "support", "NUL"), "a\x00b", "may not contain NUL"),
    (("set", "support", "BLANK"), "   ", "a secret's value is blank (only whitespace)"),
    (("set", "support", "BLANK"), " \t \n\n", "a secret's value is blank (only whitespace)"),
    (("list", "nobody"), "", "no agent 'nobody' on this server"),
    (("unset", "support", "no-such"), "", "is not a secret name"),
])
def test_every_refusal_is_one_line_on_stderr_with_no_traceback(support, args, stdin, message):
    code, stdout, stderr = run_command_line("secrets", *args, stdin=stdin)

    assert code != 0
    [line] = stderr.strip().splitlines()
    assert message in line and "Traceback" not in stderr
    assert not stdout.strip()


def test_a_value_is_never_taken_as_an_argument():
    code, _, stderr = run_command_line("secrets", "set", "support", "ARG", MARKER)  # refused as the arguments parse
    assert code != 0 and "unrecognized arguments" in stderr
