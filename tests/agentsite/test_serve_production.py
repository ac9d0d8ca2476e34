"""`manage.py serve --production --web-processes N`: N web processes on one port, on PostgreSQL and Redis."""
from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.agentsite.test_serve import alive
from tests.sessions.test_live_stream import is_type, read_ndjson
from tests.support import ROOT, backend_env, child_env, free_port, run_server

FERNET_KEY = "7oHTbu0fbxZyP3GDBy6-yn-n_p_1XsYM0J7X5TClHzs="  # a fixed, valid Fernet key

TOKEN = "production-serve-token-5d1a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def serve(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), "serve", "--no-examples", "--port", str(free_port()),
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"), **env))


@pytest.mark.parametrize("missing", ["AGENTSITE_SECRET_KEY", "AGENTSITE_PUBLIC_URL", "AGENTSITE_SECRETS_KEYS"])
def test_serve_production_turns_production_on_and_refuses_without_each_required_setting(tmp_path, missing):
    # No AGENTSITE_ENV in the environment: --production alone asks for production.
    env = {"AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
           "AGENTSITE_SECRETS_KEYS": FERNET_KEY, "AGENTSITE_PUBLIC_URL": "https://agents.example.com"}
    del env[missing]

    done = serve(tmp_path, "--production", env=env)

    assert done.returncode != 0
    assert "agentsite will not start with AGENTSITE_ENV=production" in done.stderr
    assert f"{missing} is not set" in done.stderr and f"export {missing}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "agentsite serving" not in done.stdout


def test_serve_refuses_dev_mode_in_production_and_several_web_processes_without_redis(tmp_path):
    production = {"AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
                  "AGENTSITE_SECRETS_KEYS": FERNET_KEY, "AGENTSITE_PUBLIC_URL": "https://agents.example.com"}

    dev = serve(tmp_path, "--production", "--dev", env=production)
    assert dev.returncode != 0 and "--dev" in dev.stderr and "--production" in dev.stderr

    several = serve(tmp_path, "--web-processes", "2", env={"REDIS_URL": ""})
    assert several.returncode != 0
    assert "--web-processes 2 needs REDIS_URL" in several.stderr and "Traceback" not in several.stderr


def web_processes(serve_pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(serve_pid).children() if "(uvicorn)" in " ".join(p.cmdline())]


@contextlib.contextmanager
def paused(process: psutil.Process):
    """The process stopped (SIGSTOP): a connection made meanwhile can only be accepted by another."""
    process.suspend()
    try:
        yield
    finally:
        process.resume()


def test_two_web_processes_under_production_each_serve_a_session_and_stop_with_serve(tmp_path):
    port = free_port()
    with contextlib.ExitStack() as stack:
        env = {**backend_env(stack, "postgres+redis"), "AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
               "AGENTSITE_SECRETS_KEYS": FERNET_KEY,
               # Plain http: no redirect to https on a loopback test.
               "AGENTSITE_PUBLIC_URL": f"http://127.0.0.1:{port}"}
        support = ROOT / "examples" / "support"
        server = stack.enter_context(run_server(tmp_path / "state", "--production", "--web-processes", "2",
                                                "--bearer-token", TOKEN, "--agents", str(support), env=env, port=port))
        assert "2 web (uvicorn)" in server.output()
        assert "(production)" in server.output()
        # Production serves what the operator named, and says so: no example agent besides it.
        assert f"agent support: v1 (scripted:echo) from {support}" in server.output()
        assert [line for line in server.output().splitlines() if line.startswith("agent ")] == [
            f"agent support: v1 (scripted:echo) from {support}"]
        listed = httpx.get(f"{server.base_url}/v1/agents", headers=AUTH, timeout=10).json()["agents"]
        assert [a["slug"] for a in listed] == ["support"]
        # collectstatic ran: the admin's files are in the state root, and served.
        assert (server.state_root / "static" / "admin" / "css" / "base.css").is_file()
        assert httpx.get(f"{server.base_url}/static/admin/css/base.css", timeout=10).status_code == 200

        first, second = web_processes(server.process.pid)
        # One socket, serve's, inherited by both: each listens on the port.
        assert [{c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
                for p in (first, second)] == [{port}, {port}]
        # Each web process alone: a session started and followed through one, continued through the other.
        with paused(first), server.client(headers=AUTH) as client:
            created = client.post("/support/v1/session", json={"message": "hello first"})
            assert created.status_code == 201, created.text
            session_id = created.json()["sessionId"]
            events = read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))
            assert "turn.completed" in [e["type"] for e in events]
        with paused(second), server.client(headers=AUTH) as client:
            sent = client.post(f"/support/v1/session/{session_id}/message", json={"message": "hello second"})
            assert sent.status_code in (200, 202), sent.text
            more = read_ndjson(client, f"/support/v1/session/{session_id}/stream?startIndex={len(events)}",
                               until=is_type("session.waiting"))
            replies = [e["data"]["text"] for e in more if e["type"] == "message.completed"]
            assert replies and "hello second" in replies[-1], more

        tree = psutil.Process(server.process.pid).children(recursive=True)
        assert server.stop(signal.SIGINT, timeout=60) == 0
        gone, still = psutil.wait_procs(tree, timeout=20)
        assert not alive(still), [(p.pid, p.cmdline()) for p in alive(still)]
        assert "agentsite stopped" in server.output()
