"""A stdio MCP server that cannot start says why wherever its author looks: `/info` (`mcp[].error`,
with the first lines of its stderr, secrets masked), `validate --check-mcp` and `mcp test SLUG NAME`
(exit 1 with the reason); one that works lists its tools there. Real sandboxed processes throughout."""
from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.discovery import deploy_agent_folder
from sessions.mcp.launch import KEPT_CHARACTERS, StderrTail, masked
from tests.sessions.test_mcp import SERVER, transactional, write_agent
from tests.sessions.test_mcp_sandbox import fresh_connections  # noqa: F401 (autouse)

LEAKED = "sk-broken-server-7781"


def broken_script(tmp_path: Path, body: str) -> Path:
    """An installed script outside any virtual environment, as `pip install --user` or a tarball leaves one."""
    script = tmp_path / "opt" / "broken" / "bin" / "broken-server"
    script.parent.mkdir(parents=True)
    script.write_text(body)
    script.chmod(0o755)
    return script


@pytest.fixture
def missing_interpreter(tmp_path) -> Path:
    return broken_script(tmp_path, "#!/usr/bin/env no-such-interpreter\nprint('never')\n")


def notes_folder(tmp_path: Path) -> Path:
    root = write_agent(tmp_path / "notes", {"notes": {"command": "python", "args": ["agent/servers/notes_server.py", "stdio"],
                                                      "connectTimeout": 90}})
    (root / "agent" / "servers").mkdir()
    shutil.copy(SERVER, root / "agent" / "servers" / "notes_server.py")
    return root


def broken_folder(tmp_path: Path, script: Path, **declared) -> Path:
    return write_agent(tmp_path / "broken", {"broken": {"command": str(script), "connectTimeout": 60, **declared}})


def info_of(local, slug: str) -> dict:
    response = local.get(f"/{slug}/v1/info")
    assert response.status_code == 200, response.content
    return response.json()


@transactional
def test_info_shows_why_a_server_could_not_start_in_its_own_words(local, tmp_path, missing_interpreter):
    deploy_agent_folder(broken_folder(tmp_path, missing_interpreter))

    (server,) = info_of(local, "broken")["mcp"]
    assert "could not be started" in server["error"]
    assert "stderr: /usr/bin/env: ‘no-such-interpreter’: No such file or directory" in server["error"]


@transactional
def test_a_secret_a_failing_server_prints_is_masked_in_its_error(local, tmp_path, monkeypatch):
    monkeypatch.setenv("BROKEN_TOKEN", LEAKED)
    script = broken_script(tmp_path, '#!/bin/sh\necho "cannot log in with $TOKEN" >&2\nexit 3\n')
    deploy_agent_folder(broken_folder(tmp_path, script, env={"TOKEN": "${BROKEN_TOKEN}"}))

    (server,) = info_of(local, "broken")["mcp"]
    assert "cannot log in with ***" in server["error"]
    assert LEAKED not in server["error"]


@transactional
def test_a_server_that_starts_has_no_error_in_info(local, tmp_path):
    deploy_agent_folder(notes_folder(tmp_path))

    info = info_of(local, "notes")
    assert "notes__add" in {t["name"] for t in info["offeredTools"]}
    assert "error" not in info["mcp"][0]


@transactional
def test_a_missing_program_is_named_with_the_fix(local, tmp_path):
    deploy_agent_folder(broken_folder(tmp_path, tmp_path / "venv" / "bin" / "not-installed"))

    (server,) = info_of(local, "broken")["mcp"]
    assert f"{tmp_path}/venv/bin/not-installed does not exist on this host" in server["error"]


@transactional
def test_a_program_in_the_state_root_is_refused_with_the_reason(local, tmp_path, settings):
    script = broken_script(tmp_path, "#!/bin/sh\nexit 0\n")
    inside = Path(settings.STATE_ROOT) / "programs" / "bin" / "server"
    inside.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, inside)
    deploy_agent_folder(broken_folder(tmp_path, inside))

    (server,) = info_of(local, "broken")["mcp"]
    assert f"{inside} is or holds the server's state root or workspaces" in server["error"]
    assert "install the program into a folder of its own (a virtual environment) outside it" in server["error"]


def validate(*args: str) -> tuple[str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("validate", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), str(exc)
    return out.getvalue(), err.getvalue(), ""


@transactional
def test_validate_check_mcp_fails_with_the_reason_a_server_cannot_start(tmp_path, missing_interpreter):
    out, err, failed = validate(str(broken_folder(tmp_path, missing_interpreter)), "--check-mcp")

    assert failed == "validation failed"
    assert "MCP server 'broken': FAILED: could not be started" in err
    assert "stderr: /usr/bin/env: ‘no-such-interpreter’: No such file or directory" in err


@transactional
def test_validate_check_mcp_lists_the_tools_of_a_server_that_starts(tmp_path):
    out, err, failed = validate(str(notes_folder(tmp_path)), "--check-mcp")

    assert failed == "", err
    assert "MCP server 'notes': 7 tool(s): add, die, note, peek, poke, reach, slow" in out


@transactional
def test_validate_without_check_mcp_starts_no_server(tmp_path, missing_interpreter):
    assert validate(str(broken_folder(tmp_path, missing_interpreter)))[2] == ""


@transactional
def test_mcp_test_lists_the_tools_of_a_deployed_agents_server(tmp_path):
    deploy_agent_folder(notes_folder(tmp_path))
    out = io.StringIO()

    call_command("mcp", "test", "notes", "notes", stdout=out)

    assert "notes: MCP server 'notes': 7 tool(s): add, die, note, peek, poke, reach, slow" in out.getvalue()


@transactional
def test_mcp_test_fails_with_the_reason_a_server_cannot_start(tmp_path, missing_interpreter):
    deploy_agent_folder(broken_folder(tmp_path, missing_interpreter))

    with pytest.raises(CommandError, match="No such file or directory"):
        call_command("mcp", "test", "broken", "broken", stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"declares no MCP server 'other' \(it declares: broken\)"):
        call_command("mcp", "test", "broken", "other", stdout=io.StringIO())


@pytest.mark.parametrize("given, problem", [
    ("relative/dir", "is not absolute: write the whole path, from /"),
    ("/no/such/folder-9151", "does not exist on this host: create it or remove it from paths"),
    ("{state}", "is or holds the server's state root or workspaces"),
    ("{state}/workspaces", "is or holds the server's state root or workspaces"),
    ("/", "is the root of the filesystem"),
    ("/root", "is or holds the home directory /root"),
    ("/home", "is or holds the home directory /home"),  # always: accounts may come from a directory service
    ("/etc/passwd", "is in /etc, the host's own"),
    ("/proc/self/environ", "is in /proc, the host's own"),
])
def test_paths_must_be_existing_absolute_paths_outside_the_state_root(tmp_path, settings, given, problem):
    from agents.discovery import AgentFolderError, load_agent_folder

    root = write_agent(tmp_path / "paths", {"files": {"command": "python", "args": ["x.py"],
                                                      "paths": [given.format(state=settings.STATE_ROOT)]}})

    with pytest.raises(AgentFolderError) as raised:
        load_agent_folder(root)
    assert any("agent/mcp.json" in str(p) and problem in str(p) for p in raised.value.problems), raised.value.problems


@transactional
def test_the_admin_and_the_playground_show_why_a_server_cannot_start(local, tmp_path, missing_interpreter):
    from django.contrib.auth import get_user_model
    from django.test import Client

    agent = deploy_agent_folder(broken_folder(tmp_path, missing_interpreter)).agent
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "x"))

    page = admin.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    assert 'class="mcp-servers"' in page and "could not be started" in page
    assert "‘no-such-interpreter’: No such file or directory" in page
    playground = local.get("/playground/broken").content.decode()
    assert 'class="mcp-error" data-server="broken"' in playground
    assert "‘no-such-interpreter’: No such file or directory" in playground


def test_an_error_that_quotes_a_secret_shows_it_masked_whole():
    secret = "sk-the-query-key-6021"
    said = masked(f"Redirect to https://mcp.example.com/mcp/?api_key={secret} not followed", (secret,))
    assert secret not in said and "api_key=***" in said
    tail = StderrTail(secrets=(secret,))
    tail.kept.extend(b"x" * (KEPT_CHARACTERS - 5) + secret.encode())  # the secret across the cut
    assert secret[:5] not in tail.text() and tail.text().endswith("x***")
