"""PostgreSQL + Redis while django-q2 keeps replacing its workers, and while connections die.

django-q2 forks a replacement worker from its sentinel process after a
worker has run `recycle` tasks. A replacement must never use a connection it
inherited: parent and child would interleave their messages on one socket.
The first test runs concurrent sessions, a worker replaced every few turns,
until more than ten workers have run turns, and checks that no two processes
ever hold one PostgreSQL connection, that every turn completed and that the
server log is clean. The second kills a running turn's database connections,
then every connection of the server, as a database restart would.
"""
from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from typing import Iterator

import httpx
import psutil
import psycopg
import pytest

from tests.support import Server, postgres_database, redis_database, run_server

RECYCLE = 4
CLIENTS = 6
TURNS = 100
WORKERS = 10
# Only a bound on a stuck run: the test stops as soon as TURNS turns ran on more than WORKERS workers.
BOUND = 120
LOG_ERRORS = re.compile(
    r"Traceback|ProgrammingError|OperationalError|PIPELINE|pipeline mode|couldn't get a connection"
    r"|recovery sweep failed|timer tick failed|Failed '",
)


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_database(migrated=True))
        env = {
            "DATABASE_URL": database,
            "REDIS_URL": stack.enter_context(redis_database()),
            "AGENTSITE_Q_RECYCLE": str(RECYCLE),
        }
        server = stack.enter_context(run_server(tmp_path_factory.mktemp("state-recycle"), "--workers", "2", env=env))
        server.database = database
        yield server


def one_turn(client: httpx.Client, n: int) -> list[str]:
    """Create a session and read its stream to the end of the turn; the event types it saw."""
    created = client.post("/support/v1/session", json={"message": f"turn {n}"})
    assert created.status_code == 201, created.text
    session_id = created.json()["sessionId"]
    types = []
    with client.stream("GET", f"/support/v1/session/{session_id}/stream?startIndex=0") as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                types.append(json.loads(line)["type"])
                if types[-1] == "session.waiting":
                    break
    return types


def shared_database_sockets(server: Server) -> dict[int, list[int]]:
    """Local ports of PostgreSQL connections held by more than one process of the server's tree."""
    holders: dict[int, set[int]] = {}
    for process in psutil.Process(server.process.pid).children(recursive=True):
        try:
            for conn in process.net_connections(kind="tcp"):
                if conn.raddr and conn.raddr.port == 5432:
                    holders.setdefault(conn.laddr.port, set()).add(process.pid)
        except psutil.NoSuchProcess:
            continue
    return {port: sorted(pids) for port, pids in holders.items() if len(pids) > 1}


def workers_that_ran_turns(server: Server) -> int:
    with psycopg.connect(server.database) as conn:
        return conn.execute("SELECT count(DISTINCT claimed_by) FROM agent_sessions_turn").fetchone()[0]


def test_concurrent_turns_survive_worker_replacement(pg_server):
    outcomes: list[tuple[int, list[str] | str]] = []
    lock = threading.Lock()
    stop = threading.Event()
    counter = iter(range(10**6))

    def client_loop() -> None:
        with pg_server.client(timeout=20) as client:
            while not stop.is_set():
                n = next(counter)
                try:
                    result: list[str] | str = one_turn(client, n)
                except (httpx.HTTPError, AssertionError) as exc:  # a stalled or refused turn
                    result = f"{type(exc).__name__}: {exc}"
                with lock:
                    outcomes.append((n, result))

    threads = [threading.Thread(target=client_loop) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    shared: list[dict[int, list[int]]] = []
    bound = time.monotonic() + BOUND
    while not stop.wait(1):
        if found := shared_database_sockets(pg_server):
            shared.append(found)
        if (len(outcomes) > TURNS and workers_that_ran_turns(pg_server) > WORKERS) or time.monotonic() > bound:
            stop.set()
    for thread in threads:
        thread.join()

    assert shared == [], "processes share PostgreSQL connections"
    failed = [(n, r) for n, r in outcomes if not isinstance(r, list) or "turn.completed" not in r]
    assert len(outcomes) > TURNS
    assert failed == []
    with psycopg.connect(pg_server.database) as conn:
        unfinished = conn.execute("SELECT count(*) FROM agent_sessions_turn WHERE status <> 'completed'").fetchone()[0]
    assert workers_that_ran_turns(pg_server) > WORKERS, "workers were not replaced"
    assert unfinished == 0
    errors = [line for line in pg_server.output().splitlines() if LOG_ERRORS.search(line)]
    assert errors == []


def test_a_turn_whose_database_connection_dies_fails_at_once_and_the_session_goes_on(pg_server):
    """The worker's connections are killed mid-turn: turn.failed (database_error) at once, not worker_lost 30 s later."""
    with pg_server.client(timeout=20) as client:
        created = client.post("/support/v1/session", json={"message": "/sleep 5000"}).json()
        stream_url = f"/support/v1/session/{created['sessionId']}/stream?startIndex=0"
        with psycopg.connect(pg_server.database, autocommit=True) as conn:
            worker = None
            for _ in range(100):
                worker = conn.execute("SELECT claimed_by FROM agent_sessions_turn WHERE id = %s AND status = 'running'",
                                      [created["turnId"]]).fetchone()
                if worker:
                    break
                time.sleep(0.05)
            assert worker, "the turn never started"
            pid = int(worker[0].rpartition(":")[2])
            ports = [c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.raddr and c.raddr.port == 5432]
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports],
            ).fetchone()[0]
        assert killed >= 1

        events = []
        with client.stream("GET", stream_url) as response:
            for line in response.iter_lines():
                if line:
                    events.append(json.loads(line))
                    if events[-1]["type"] == "session.waiting":
                        break
        failed = [e for e in events if e["type"] == "turn.failed"]
        assert [f["data"]["code"] for f in failed] == ["database_error"]
        assert "database error" in failed[0]["data"]["error"]

        # As after a database restart: every connection of every process dies; pooled ones are checked before use.
        with psycopg.connect(pg_server.database, autocommit=True) as conn:
            gone = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                                   "AND pid <> pg_backend_pid()").fetchall()]
            conn.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [gone])
            # pg_terminate_backend only signals: until a backend has exited, a pool's check on its
            # connection still passes. A restart is over before anyone reconnects; so is this.
            for _ in range(100):
                if not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", [gone]).fetchone():
                    break
                time.sleep(0.05)
        follow_up = client.post(f"/support/v1/session/{created['sessionId']}/message",
                                json={"message": "still there?", "continuationToken": created["continuationToken"]})
        assert follow_up.status_code == 202, follow_up.text
        events = []
        with client.stream("GET", f"/support/v1/session/{created['sessionId']}/stream?startIndex=0") as response:
            for line in response.iter_lines():
                if line:
                    events.append(json.loads(line))
                    if events[-1]["type"] == "session.waiting" and events[-1]["turnId"] == follow_up.json()["turnId"]:
                        break
        assert "turn.completed" in [e["type"] for e in events if e["turnId"] == follow_up.json()["turnId"]]
