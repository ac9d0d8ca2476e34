"""MCP servers installed as their READMEs say, started in the sandbox: the MCP project's reference
servers from PyPI declared by the absolute path of their scripts in a virtual environment, one run
with `uvx` and one npm server run with `npx -y`. Each lists its tools and answers a call. These need
PyPI and the npm registry (tests/sessions/mcp_packages.py)."""
from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from agents.discovery import deploy_agent_folder
from tests.sessions.mcp_packages import NPM_FILESYSTEM, UVX_TIME, reference_servers
from tests.sessions.test_mcp import SERVER, transactional, write_agent
from tests.sessions.test_mcp_sandbox import fresh_connections  # noqa: F401 (autouse)

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]  # the first run builds the environment
# Loading a package's modules, or fetching it, takes seconds on a loaded machine; none of these is about time.
SLOW_START = {"connectTimeout": 120, "timeout": 60}


@pytest.fixture(scope="module")
def servers() -> Path:
    return reference_servers()


def deploy(tmp_path: Path, **declared: dict) -> Path:
    root = write_agent(tmp_path / "tools", {name: {**SLOW_START, **entry} for name, entry in declared.items()})
    deploy_agent_folder(root)
    return root


def offered(local) -> set[str]:
    response = local.get("/tools/v1/info")
    assert response.status_code == 200, response.content
    return {t["name"] for t in response.json()["offeredTools"]}


def call(local, tool: str, **arguments) -> dict:
    response = local.post(f"/tools/v1/tools/{tool}/call", json.dumps({"input": arguments}),
                          content_type="application/json")
    assert response.status_code == 200, response.content
    reply = response.json()
    assert not reply.get("isError"), reply
    return reply["output"]


def text(output: dict) -> str:
    """A tool's output as one string, whatever shape the server gives it (text blocks or structured content)."""
    return json.dumps(output)


@transactional
def test_the_time_server_from_pypi_runs_by_its_scripts_path(local, tmp_path, servers):
    deploy(tmp_path, time={"command": str(servers / "bin" / "mcp-server-time")})

    assert {"time__get_current_time", "time__convert_time"} <= offered(local)
    now = call(local, "time__get_current_time", timezone="UTC")
    assert now["timezone"] == "UTC" and now["datetime"].endswith("+00:00")


@transactional
def test_a_script_reached_through_a_symlinked_folder_runs_where_it_is_named(local, tmp_path, servers):
    (tmp_path / "linked").symlink_to(servers, target_is_directory=True)
    deploy(tmp_path, time={"command": str(tmp_path / "linked" / "bin" / "mcp-server-time")})

    assert call(local, "time__get_current_time", timezone="UTC")["timezone"] == "UTC"


@transactional
def test_a_script_outside_the_environment_runs_with_the_interpreter_its_shebang_names(local, tmp_path, servers):
    script = tmp_path / "opt" / "time" / "bin" / "time-server"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!{servers}/bin/python\nfrom mcp_server_time import main\nmain()\n")
    script.chmod(0o755)
    deploy(tmp_path, time={"command": str(script)})

    assert call(local, "time__get_current_time", timezone="UTC")["timezone"] == "UTC"


@transactional
def test_the_git_server_reads_a_repository_it_is_given_in_paths(local, tmp_path, servers):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(repo)], check=True)
    (repo / "draft.txt").write_text("not yet added\n")
    # The sandbox runs as a uid of its own, which git would take for a stranger's repository.
    trust = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}
    deploy(tmp_path, git={"command": str(servers / "bin" / "mcp-server-git"), "paths": [str(repo)], "env": trust})

    assert "git__git_status" in offered(local)
    status = text(call(local, "git__git_status", repo_path=str(repo)))
    assert "trunk" in status and "draft.txt" in status


@contextlib.contextmanager
def web_page(body: str) -> Iterator[str]:
    """A page on this host's loopback, served while the block runs."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            page = body.encode() if self.path == "/page" else b"not here"
            self.send_response(200 if self.path == "/page" else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/page"
        finally:
            server.shutdown()


@transactional
def test_the_fetch_server_fetches_a_page_with_the_network_declared(local, tmp_path, servers):
    with web_page("<html><body><p>page-marker-5150</p></body></html>") as url:
        deploy(tmp_path, fetch={"command": str(servers / "bin" / "mcp-server-fetch"), "network": True,
                                "args": ["--ignore-robots-txt", "--allow-private-ips"]})

        # raw: the page as served (simplifying it runs `npm install` inside its read-only package)
        assert "page-marker-5150" in text(call(local, "fetch__fetch", url=url, raw=True))


@transactional
def test_a_server_run_with_uvx_fetches_its_package_and_answers(local, tmp_path):
    deploy(tmp_path, time={"command": "uvx", "args": [UVX_TIME]})

    assert "time__get_current_time" in offered(local)
    assert call(local, "time__get_current_time", timezone="UTC")["timezone"] == "UTC"
    info = {m["name"]: m for m in local.get("/tools/v1/info").json()["mcp"]}
    assert info["time"]["network"] is True and "error" not in info["time"]


@transactional
def test_an_npm_server_run_with_npx_reads_the_folder_it_is_given(local, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hello.txt").write_text("hello-marker-8086")
    deploy(tmp_path, files={"command": "npx", "args": ["-y", NPM_FILESYSTEM, str(shared)], "paths": [str(shared)]})

    assert "files__read_text_file" in offered(local)
    assert "hello-marker-8086" in text(call(local, "files__read_text_file", path=str(shared / "hello.txt")))


SECRET = "sk-installed-server-secret-0451"


@transactional
def test_a_hostile_server_in_a_virtual_environment_still_sees_nothing_else(local, tmp_path, servers, monkeypatch,
                                                                          settings):
    """The notes server's `peek` and `poke`, run by the environment's Python with the network and a
    `paths` mount, as much as a declaration can give: still no secret, state, other workspace, other
    folder's package cache, or anything else of the home directory its environment lives in."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    deploy(tmp_path, time={"command": "uvx", "args": [UVX_TIME]})  # another folder's servers, with a package cache
    assert "time__get_current_time" in offered(local)
    their_cache = next((Path(settings.STATE_ROOT) / "mcp-cache").glob("*/uv"))
    assert any(their_cache.iterdir())
    workspace = Path(settings.AGENTSITE_WORKSPACES_ROOT) / "someone-else"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "theirs.txt").write_text("workspace-marker-31")
    beside = servers.parent / "beside-the-environment.txt"
    beside.write_text("home-marker-42")
    shared = tmp_path / "shared"
    shared.mkdir()
    root = write_agent(tmp_path / "notes", {"notes": {**SLOW_START, "command": str(servers / "bin" / "python"),
                                                      "args": ["agent/servers/notes_server.py", "stdio"],
                                                      "network": True, "paths": [str(shared)]}})
    (root / "agent" / "servers").mkdir()
    (root / "agent" / "servers" / "notes_server.py").write_text(SERVER.read_text())
    deploy_agent_folder(root)

    def peek(path) -> str:
        response = local.post("/notes/v1/tools/notes__peek/call", json.dumps({"input": {"path": str(path)}}),
                              content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()["output"]["result"]

    for path in ("/proc/1/environ", "/proc/self/environ"):
        assert SECRET not in peek(path)
    for path in (settings.DATABASES["default"]["NAME"], workspace / "theirs.txt", beside, their_cache,
                 next(their_cache.iterdir())):
        assert peek(path).startswith("refused"), path
    assert peek(servers / "pyvenv.cfg").startswith("home =")  # its own environment it reads
    response = local.post("/notes/v1/tools/notes__poke/call",
                          json.dumps({"input": {"path": str(servers / "bin" / "pwned")}}), content_type="application/json")
    assert response.json()["output"]["result"].startswith("refused")
    assert not (servers / "bin" / "pwned").exists()
