"""A hard kill of `serve` takes its whole process tree down, and the next `serve` comes up clean.

Real processes throughout: serve, its web server, the qcluster with its sentinel and
forked workers, killed with SIGKILL as the OOM killer would. The server a kill
test restarts is the one the next test on that backend kills.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import psutil
import pytest

from agents.serving import stop_server
from agents.socketdir import bell_dir_for
from tests.agentsite.test_serve import alive
from tests.sessions.test_live_stream import is_type, postgres_database, read_ndjson, redis_database
from tests.support import ROOT, Server, child_env, run_server

# Every task recycles its worker, so a turn makes the sentinel fork a new one.
RECYCLE_EVERY_TASK = {"AGENTSITE_Q_RECYCLE": "1", "AGENTSITE_LOG_LEVEL": "INFO"}


class Servers:
    """Per backend, the running server the next test kills: a kill test leaves behind the server it restarted
    (each test's sessions are its own), so the next one needs no server of its own."""

    def __init__(self, stack: contextlib.ExitStack, root: Path):
        self.stack, self.root = stack, root
        self.envs: dict[str, dict[str, str]] = {}
        self.running: dict[str, Server] = {}
        self.taken: dict[str, Server] = {}

    def env(self, name: str) -> dict[str, str]:
        if name not in self.envs:
            env = dict(RECYCLE_EVERY_TASK)
            if name == "postgres+redis":
                env["DATABASE_URL"] = self.stack.enter_context(postgres_database(migrated=True))
                env["REDIS_URL"] = self.stack.enter_context(redis_database())
            self.envs[name] = env
        return self.envs[name]

    def state(self, name: str) -> Path:
        return self.root / name.replace("+", "-")

    def take(self, name: str) -> Server:
        """The backend's running server, started if there is none; it is the caller's to kill."""
        stale = self.taken.pop(name, None)
        if stale is not None and stale.process.poll() is None:
            stop_server(stale.process, grace=20)  # its test failed before killing it: never two on one state root
        server = self.running.pop(name, None)
        if server is None or server.process.poll() is not None:
            server = self.stack.enter_context(run_server(self.state(name), env=self.env(name)))
        self.taken[name] = server
        return server

    def restart(self, name: str, port: int) -> Server:
        """A server on the killed one's state root and port, left running for the next test."""
        self.running[name] = self.stack.enter_context(run_server(self.state(name), env=self.env(name), port=port))
        return self.running[name]


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[Servers]:
    with contextlib.ExitStack() as stack:
        yield Servers(stack, tmp_path_factory.mktemp("killed"))


def wait_for(condition, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except psutil.NoSuchProcess:
            pass  # the tree changed under us: look again
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def cluster_processes(server: Server) -> set[int]:
    """pids of the qcluster sentinel's children: the workers, the pusher and the monitor (none while
    serve has not started the cluster yet)."""
    serve = psutil.Process(server.process.pid)
    clusters = [p for p in serve.children() if "qcluster" in " ".join(p.cmdline())]
    return {c.pid for cluster in clusters for sentinel in cluster.children() for c in sentinel.children()}


def full_cluster(server: Server) -> set[int] | None:
    """The sentinel's children once all are up: 2 workers, the pusher and the monitor."""
    pids = cluster_processes(server)
    return pids if len(pids) == 4 else None


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_turn(client: httpx.Client, message: str) -> str:
    created = client.post("/support/v1/session", json={"message": message})
    assert created.status_code == 201, created.text
    return created.json()["sessionId"]


def run_turn(client: httpx.Client, message: str) -> list[dict]:
    session_id = start_turn(client, message)
    return read_ndjson(client, f"/support/v1/session/{session_id}/stream", until=is_type("session.waiting"))


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres+redis"])
@pytest.mark.parametrize("victims", ["serve", "whole tree"])
def test_after_a_kill_9_nothing_of_serve_is_left_and_a_restart_recovers_the_running_turn(servers, backend_name, victims):
    server = servers.take(backend_name)
    state = server.state_root
    port = int(server.base_url.rsplit(":", 1)[1])
    with server.client() as client:
        before = wait_for(lambda: full_cluster(server), "the cluster to start")
        recycled = server.output().count("recycled worker")  # a server an earlier test restarted ran turns
        assert run_turn(client, "warm up")[-2]["type"] == "turn.completed"
        forked_later = wait_for(lambda: (full_cluster(server) or before) - before,
                                "the sentinel to fork a worker in place of the recycled one")
        # django-q2's sentinel forks the replacement before it logs the recycling.
        wait_for(lambda: server.output().count("recycled worker") > recycled, "the sentinel to log the recycled worker")

        session_id = start_turn(client, "/sleep 60000")
        url = f"/support/v1/session/{session_id}/stream"
        read_ndjson(client, url, until=is_type("step.started"))  # a worker is inside the turn

    serve = psutil.Process(server.process.pid)
    tree = serve.children(recursive=True)
    assert forked_later <= {p.pid for p in tree}
    assert len(tree) >= 7, [p.cmdline() for p in tree]  # the web server, qcluster, sentinel and its 4
    for process in [serve, *tree] if victims == "whole tree" else [serve]:
        process.kill()
    server.process.wait(timeout=10)

    gone, still = psutil.wait_procs(tree, timeout=5)
    assert not alive(still), [(p.pid, p.cmdline()) for p in alive(still)]
    assert port_is_free(port)
    if backend_name == "sqlite":
        # What the killed processes leave behind, for the next serve to cope with.
        assert list(bell_dir_for(state).glob("*.sock"))
        assert (state / "db.sqlite3-wal").exists()

    again = servers.restart(backend_name, port)
    with again.client() as client:
        events = read_ndjson(client, url, until=is_type("session.waiting"))
        failed = [e for e in events if e["type"] == "turn.failed"]
        assert len(failed) == 1 and failed[0]["data"]["code"] == "worker_lost", events[-3:]
        assert "turn.completed" not in {e["type"] for e in events}

        events = run_turn(client, "hello again")
        assert [e["type"] for e in events][-2:] == ["turn.completed", "session.waiting"]


def test_a_taken_port_fails_at_once_naming_the_port_and_starts_no_workers(tmp_path):
    state = tmp_path / "state"
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--state-root", str(state)],
            cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60,
        )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"CommandError: port {port} on 127.0.0.1 is already in use; "
                                                "stop what listens there or pass --port"]
    assert "agentsite serving" not in done.stdout
    assert not (state / "db.sqlite3").exists(), "nothing ran before the check"


def test_when_the_web_server_dies_serve_stops_the_workers_and_exits_non_zero(servers):
    server = servers.take("sqlite")  # whichever server a kill test left running
    serve = psutil.Process(server.process.pid)
    wait_for(lambda: len(serve.children(recursive=True)) >= 7, "the cluster to start")
    tree = serve.children(recursive=True)
    [web] = [p for p in serve.children() if "agentsite web" in " ".join(p.cmdline())]
    web.kill()
    assert server.process.wait(timeout=60) != 0
    gone, still = psutil.wait_procs(tree, timeout=10)
    assert not alive(still), [(p.pid, p.cmdline()) for p in alive(still)]
    assert "web exited" in server.output()


TIED = ("import pathlib, sys; from agentsite.lifeline import tie_to_parent; "
        "tie_to_parent(int(sys.argv[1])); pathlib.Path(sys.argv[2]).touch()")


def test_a_child_whose_parent_is_already_gone_does_not_run(tmp_path):
    def run_tied_to(parent: int, marker: Path) -> int:
        command = [sys.executable, "-c", TIED, str(parent), str(marker)]
        return subprocess.run(command, cwd=ROOT, env=child_env(), timeout=30).returncode

    assert run_tied_to(os.getpid(), tmp_path / "ran") == 0
    assert (tmp_path / "ran").exists()
    # The parent can die between the fork and the tie: the child must notice and not run.
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert run_tied_to(dead.pid, tmp_path / "orphan") == -signal.SIGKILL
    assert not (tmp_path / "orphan").exists()
