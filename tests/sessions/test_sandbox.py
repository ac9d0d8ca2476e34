"""The workspace sandbox against a real server, tried as a hostile agent would.

Each test runs commands through `shell` (the direct tool route, and once a
model turn) and checks what a user would see: the answers hold no secret of
the server's environment, nothing outside the session's workspace is read or
written, runaway processes, files and sleepers are stopped, and the server's
port cannot be reached. One server serves the slow tries; the last tests ask /info
in this process, with the sandbox turned off or without bubblewrap on the PATH.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from agents.discovery import deploy_agent_folder
from agents.workspaces import sandbox
from tests.support import ROOT, Server, run_server, unmount_under

SECRETS = {"OPENAI_API_KEY": "sk-test-secret-123", "GITHUB_WEBHOOK_SECRET": "gh-secret-456",
           "SLACK_SIGNING_SECRET": "slack-secret-789"}
ENV = {**SECRETS, "AGENTSITE_DEFAULT_MODEL": "scripted:echo"}  # a provider key would pick that provider
MiB = 1024 * 1024
GiB = 1024 * MiB

QUOTA_AGENT = """\
from agents.sdk import Agent, local_runtime

agent = Agent(name="Quota", description="A small workspace.",
              runtime=local_runtime(shell_timeout=20, disk_limit=64 * 1024 * 1024))
"""
HASTY_AGENT = """\
from agents.sdk import Agent, local_runtime

agent = Agent(name="Hasty", description="Commands get two seconds.", runtime=local_runtime(shell_timeout=2))
"""
PEEK_TOOL = """\
import os
from pydantic import BaseModel
from agents.sdk import tool

DATABASE = {database!r}
STATE_ROOT = {state_root!r}


class Input(BaseModel):
    pass


def attempt(action):
    try:
        return "ok: " + repr(action())[:400]
    except Exception as exc:
        return "refused: " + type(exc).__name__


@tool(description="Look around.", execution="agent")
def peek(input: Input, ctx) -> dict:
    return {{
        "environ": dict(os.environ),
        "pid1": attempt(lambda: open("/proc/1/environ", "rb").read()),
        "parent": attempt(lambda: open(f"/proc/{{os.getppid()}}/environ", "rb").read()),
        "database": attempt(lambda: open(DATABASE, "rb").read(64)),
        "stateRoot": attempt(lambda: os.listdir(STATE_ROOT)),
        "uid": os.getuid(),
    }}
"""


def agent_folder(root: Path, name: str, agent_py: str, tools: dict[str, str] | None = None) -> None:
    (root / name / "agent" / "tools").mkdir(parents=True)
    (root / name / "agent" / "instructions.md").write_text("Work in your workspace.\n")
    (root / name / "agent" / "agent.py").write_text(agent_py)
    for file, source in (tools or {}).items():
        (root / name / "agent" / "tools" / file).write_text(source)


def bare_path(root: Path) -> str:
    """A PATH with the sandbox's helpers but no bubblewrap."""
    root.mkdir()
    for tool in ("prlimit", "setpriv"):
        (root / tool).symlink_to(f"/usr/bin/{tool}")
    return str(root)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """The examples (notes has shell) plus `quota` (64 MiB workspace, a tool script) and `hasty` (2 s commands)."""
    state = tmp_path_factory.mktemp("sandbox-state")
    agents = tmp_path_factory.mktemp("sandbox-agents")
    agent_folder(agents, "quota", QUOTA_AGENT,
                 {"peek.py": PEEK_TOOL.format(database=str(state / "db.sqlite3"), state_root=str(state))})
    agent_folder(agents, "hasty", HASTY_AGENT)
    with contextlib.ExitStack() as stack:
        stack.callback(unmount_under, state)  # last, once the server has stopped
        # As root, its sandboxed workspaces are filesystems of their own (agents.workspaces.disks).
        yield stack.enter_context(run_server(state, "--agents", str(agents),
                                             env={**ENV, "AGENTSITE_WORKSPACE_DISKS": "auto"}, ready_timeout=90))


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with server.client(timeout=90) as c:
        yield c


POOL = {"notes": 9, "quota": 3, "hasty": 1}


@pytest.fixture(scope="module")
def pool(client: httpx.Client) -> dict[str, list[str]]:
    """Sessions whose first turn has settled, made all at once: each test takes fresh ones."""
    made = {slug: [start_session(client, slug) for _ in range(count)] for slug, count in POOL.items()}
    for slug, ids in made.items():
        for session_id in ids:
            wait_settled(client, slug, session_id)
    return made


@pytest.fixture
def fresh(pool):
    return lambda slug: pool[slug].pop()


def start_session(client: httpx.Client, slug: str, message: str = "hello") -> str:
    created = client.post(f"/{slug}/v1/session", json={"message": message})
    assert created.status_code == 201, created.text
    return created.json()["sessionId"]


def wait_settled(client: httpx.Client, slug: str, session_id: str) -> str:
    deadline = time.monotonic() + 30
    while client.get(f"/{slug}/v1/session/{session_id}").json()["status"] == "running":
        assert time.monotonic() < deadline, "the first turn never settled"
        time.sleep(0.1)
    return session_id


def shell(client: httpx.Client, slug: str, session_id: str, command: str) -> dict:
    answer = client.post(f"/{slug}/v1/tools/shell/call", json={"input": {"command": command}, "sessionId": session_id})
    assert answer.status_code == 200, answer.text
    return answer.json()["output"]


def workspace(server: Server, session_id: str) -> Path:
    return (server.state_root / "workspaces" / session_id).resolve()


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for value in SECRETS.values():
            assert value not in text


def sandboxed_in(root: Path) -> list[psutil.Process]:
    """The host's processes running as its workspace's uid with `root` as their home: what a session's commands left."""
    found = []
    for process in psutil.process_iter(["uids"]):
        try:
            if process.info["uids"] and process.info["uids"].real == sandbox.runs_as(root)[0] \
                    and process.environ().get("HOME") == str(root):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def settle_leftovers(root: Path, marker: str = "", timeout: float = 3) -> list[str]:
    """Wait a little for `root`'s processes (and any sandboxed process whose command has `marker`) to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = [" ".join(p.cmdline()) for p in sandboxed_in(root)]
        if marker:
            left += [" ".join(p.info["cmdline"]) for p in psutil.process_iter(["cmdline", "uids"])
                     if p.info["uids"] and p.info["uids"].real >= sandbox.UID_BASE
                     and marker in " ".join(p.info["cmdline"] or [])]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


# -- 1. secrets ------------------------------------------------------------------------------


def test_no_environment_of_the_server_is_readable(server, client, fresh):
    session = fresh("notes")
    for command in ("tr '\\0' '\\n' < /proc/$PPID/environ", "cat /proc/*/environ", "cat /proc/1/environ",
                    "env; set", "cat /proc/self/environ; cat /proc/$$/environ",
                    f"cat /proc/{server.process.pid}/environ"):
        result = shell(client, "notes", session, command)
        assert_no_secret(result["stdout"], result["stderr"])
    assert os.environ.get("OPENAI_API_KEY") != SECRETS["OPENAI_API_KEY"]  # the secrets are the server's alone
    assert SECRETS["OPENAI_API_KEY"] in Path(f"/proc/{server.process.pid}/environ").read_text()


def test_a_model_turn_running_shell_sees_no_secret_either(server, client, fresh):
    command = "cat /proc/*/environ; tr '\\0' '\\n' < /proc/$PPID/environ; env; echo turn-$((40 + 2))"
    session = wait_settled(client, "notes", start_session(client, "notes", f"/call shell {json.dumps({'command': command})}"))
    events = [json.loads(line) for line in client.get(f"/notes/v1/session/{session}/events").text.splitlines()]
    assert [e["type"] for e in events if e["type"].startswith("turn.")][-1] == "turn.completed", events
    [output] = [e["data"]["output"] for e in events if e["type"] == "action.result"]
    assert "turn-42" in output["stdout"], output  # the worker ran the command in the sandbox
    assert_no_secret(json.dumps(events))


# -- 2. processes ----------------------------------------------------------------------------


def test_only_the_sandboxs_own_processes_are_visible(server, client, fresh):
    session = fresh("notes")
    result = shell(client, "notes", session, "ls /proc | grep -c '^[0-9]'; ps ax -o pid=,args=; cat /proc/*/cmdline")
    lines = result["stdout"].splitlines()
    assert 0 < int(lines[0]) <= 8, result
    assert "manage.py" not in result["stdout"] and "serve" not in result["stdout"]
    pids = [line.split()[0] for line in lines[1:] if line.strip() and line.split()[0].isdigit()]
    assert len(pids) <= 8 and (server.process.pid <= 8 or str(server.process.pid) not in pids), result
    seen = shell(client, "notes", session, f"cat /proc/{server.process.pid}/cmdline; ls /proc/{server.process.pid}/fd")
    assert "manage.py" not in seen["stdout"] and "db.sqlite3" not in seen["stdout"], seen


# -- 3. reading outside ----------------------------------------------------------------------


def test_the_state_root_database_and_another_workspace_cannot_be_read(server, client, fresh):
    first, second = fresh("notes"), fresh("notes")
    written = client.post("/notes/v1/tools/write/call",
                          json={"input": {"path": "marker", "content": "first-session-private"}, "sessionId": first})
    assert written.status_code == 200, written.text
    marker = workspace(server, first) / "marker"
    assert marker.read_text() == "first-session-private"
    database = server.state_root / "db.sqlite3"
    assert database.read_bytes().startswith(b"SQLite format")

    for command in (f"ls -la {server.state_root}", f"head -c 64 {database}", f"cat {marker}",
                    f"cat /tmp/../{marker}", f"cat {server.state_root / 'workspaces'}/*/marker",
                    "find / -name marker 2>/dev/null; find / -name 'db.sqlite3*' 2>/dev/null"):
        result = shell(client, "notes", second, command)
        assert "first-session-private" not in result["stdout"] and "SQLite format" not in result["stdout"]
        assert "db.sqlite3" not in result["stdout"] and "serve-" not in result["stdout"], result
    listed = shell(client, "notes", second, f"ls {server.state_root / 'workspaces'}")
    assert listed["stdout"].split() == [second]


def test_a_link_planted_by_shell_does_not_let_the_file_tools_read_outside(server, client, fresh):
    session = fresh("notes")
    database = server.state_root / "db.sqlite3"
    shell(client, "notes", session, f"ln -s {database} leak; ln -s / top; ln -s {server.state_root} state")
    for path in ("leak", "top/etc/hostname", f"state/serve-{server.base_url.rsplit(':', 1)[1]}.log"):
        answer = client.post("/notes/v1/tools/read/call", json={"input": {"path": path}, "sessionId": session})
        assert answer.status_code != 200 or "SQLite format" not in answer.text, answer.text
        assert "SQLite format" not in answer.text and "Starting" not in answer.text
        # Refused, or the tool ran and raised (a 200 with isError).
        assert answer.status_code >= 400 or answer.json()["isError"] is True, answer.text


# -- 4. writing outside ----------------------------------------------------------------------


def test_nothing_outside_the_workspace_can_be_written(server, client, fresh):
    session = fresh("notes")
    targets = [server.state_root / "pwn", Path("/pwn"), server.state_root / "workspaces" / "pwn",
               Path(sys.prefix) / "pwn", Path(__file__).resolve().parents[2] / "agents" / "pwn"]
    command = f"echo x > /tmp/../{server.state_root}/pwn; touch {server.state_root}/pwn; touch /pwn; " + \
        "; ".join(f"touch {shlex.quote(str(t))}" for t in targets[2:]) + f"; echo x >> {server.state_root}/db.sqlite3"
    result = shell(client, "notes", session, command)
    try:
        assert result["exitCode"] != 0 and result["stderr"], result
        for target in targets:
            assert not target.exists(), target
    finally:
        for target in targets:  # a sandbox that let them through must not leave them behind
            target.unlink(missing_ok=True)
    assert (server.state_root / "db.sqlite3").read_bytes()[-2:] != b"x\n"


# -- 5. processes without end -----------------------------------------------------------------


def test_a_fork_bomb_is_contained_and_leaves_nothing_behind(server, client, fresh):
    session = fresh("notes")
    started = time.monotonic()
    result = shell(client, "notes", session, "f(){ f|f& }; f; sleep 1; "
                   "i=0; while [ $i -lt 1000 ]; do sleep 977 & i=$((i+1)); done; echo spawned")
    assert time.monotonic() - started < 25
    assert "fork" in result["stderr"].lower() or "resource" in result["stderr"].lower(), result
    assert settle_leftovers(workspace(server, session), "sleep 977") == []
    assert client.get("/healthz").status_code == 200
    assert shell(client, "notes", session, "echo ok")["stdout"] == "ok\n"


# -- 6. disk -----------------------------------------------------------------------------------


def test_ten_gigabytes_of_writes_stop_at_the_workspace_limit(server, client, fresh):
    session = fresh("quota")
    root = workspace(server, session)
    started = time.monotonic()
    result = shell(client, "quota", session,
                   "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 1073741824 /dev/zero > f$i; done; echo finished")
    assert time.monotonic() - started < 20, result
    stopped = ("File size limit", "No space left on device")
    assert "finished" not in result["stdout"] or any(s in result["stderr"] for s in stopped), result
    assert result.get("limitExceeded") or any(s in result["stderr"] for s in stopped), result
    held = sum(f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file())
    try:
        assert held < 1 * GiB, held
        # Over the limit, the next command is refused until files go.
        again = client.post("/quota/v1/tools/shell/call", json={"input": {"command": "echo again"}, "sessionId": session})
        if held > 64 * MiB:
            # The shell tool raised: a call that ran, answered 200 with isError and the error.
            assert again.status_code == 200 and again.json()["isError"] is True, again.text
            assert "limit" in again.json()["error"], again.text
    finally:
        for f in root.glob("f*"):
            f.unlink()


def test_parallel_fallocate_bursts_stay_within_the_workspace_limit(server, client, fresh):
    if os.geteuid() != 0:
        pytest.skip("not root: the workspace is a plain folder whose size is watched (docs/runtimes-and-workspaces.md)")
    session = fresh("quota")
    root = workspace(server, session)
    assert os.path.ismount(root)  # a filesystem of its own holds it to its size
    result = shell(client, "quota", session, "for i in 1 2 3 4 5 6; do fallocate -l 60M p$i & done; wait; "
                   "for i in $(seq 40); do fallocate -l 15M q$i & done; wait; echo finished")
    held = sum(f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file())
    assert held <= 64 * MiB, (held, result)


# -- 7. time -----------------------------------------------------------------------------------


def test_a_background_sleeper_dies_with_a_command_past_its_time_limit(server, client, fresh):
    session = fresh("hasty")
    started = time.monotonic()
    result = shell(client, "hasty", session, "sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & sleep 30")
    assert result["timedOut"] is True and time.monotonic() - started < 10, result
    assert settle_leftovers(workspace(server, session), "sleep 1000") == []


# -- 8. network --------------------------------------------------------------------------------


def test_the_servers_port_is_unreachable(server, client, fresh):
    session = fresh("notes")
    port = server.base_url.rsplit(":", 1)[1]
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('CONNECTED')"
    for python in (sys.executable, "python3"):
        result = shell(client, "notes", session, f"{python} -c {shlex.quote(probe)}")
        assert "CONNECTED" not in result["stdout"], result
        assert result["exitCode"] != 0, result
    curl = shell(client, "notes", session, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED; "
                 f"getent hosts example.com || echo no-dns")
    assert "CONNECTED" not in curl["stdout"]


# -- 9. agent tool scripts -------------------------------------------------------------------


def test_an_agent_tool_script_sees_no_secret_and_no_database(server, client, fresh):
    session = fresh("quota")
    result = shell(client, "quota", session, ".tools/peek '{}'")
    assert result["exitCode"] == 0, result
    assert_no_secret(result["stdout"], result["stderr"])
    seen = json.loads(result["stdout"])
    assert seen["uid"] == sandbox.runs_as(workspace(server, session))[0] >= sandbox.UID_BASE
    assert seen["database"].startswith("refused"), seen
    assert seen["stateRoot"].startswith("refused") or "db.sqlite3" not in seen["stateRoot"], seen
    assert not set(SECRETS) & set(seen["environ"])


# -- 10, 11. /info --------------------------------------------------------------------------


def test_info_shows_the_sandbox_active_without_network_and_with_limits(server, client):
    sandbox = client.get("/notes/v1/info").json()["runtime"]["sandbox"]
    assert sandbox["active"] is True and sandbox["mode"] == "on" and sandbox["network"] is False
    assert sandbox["limits"]["processes"] == 128 and sandbox["limits"]["diskBytes"] == GiB
    quota = client.get("/quota/v1/info").json()["runtime"]["sandbox"]
    assert quota["limits"]["diskBytes"] == 64 * MiB


@pytest.mark.django_db
def test_info_shows_the_sandbox_off_when_turned_off(local, settings):
    settings.AGENTSITE_SANDBOX = "off"
    deploy_agent_folder(ROOT / "examples" / "notes")
    runtime = local.get("/notes/v1/info").json()["runtime"]
    assert runtime["sandbox"]["mode"] == "off" and runtime["sandbox"]["active"] is False
    assert "shell" in runtime["workspaceTools"]


@pytest.mark.django_db
def test_a_host_without_bubblewrap_offers_no_shell(local, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", bare_path(tmp_path / "bin"))
    sandbox._probe.cache_clear()  # probed once per process: again, on this PATH
    try:
        deploy_agent_folder(ROOT / "examples" / "notes")
        info = local.get("/notes/v1/info").json()
    finally:
        sandbox._probe.cache_clear()
    described = info["runtime"]["sandbox"]
    assert described["active"] is False and described["mode"] == "on" and "bwrap" in described["reason"]
    assert "shell" not in info["runtime"]["workspaceTools"]
    assert "shell" not in [t["name"] for t in info["offeredTools"]]
