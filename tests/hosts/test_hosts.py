"""agentsite on two web hosts and two worker hosts (bench/hostslib/), each with a state root of its own,
on one PostgreSQL database and Redis, behind nginx (deploy/nginx-hosts.conf).

A session made through one web host is followed through the other and through
nginx (NDJSON, SSE, websocket); a stop and a preempting follow-up sent to one
web host end the turn a worker host runs, and the other web host shows it; a
reminder and a schedule fire once with both worker hosts sweeping. The
topology starts once for the file; the schedule's test comes last, so the
minute it waits for overlaps the others.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from bench.hostslib import topology
from tests.hosts.support import WAITING, create, indexes_contiguous, is_type, query, read_until, wait_for
from tests.support import postgres_database

pytestmark = pytest.mark.slow

AGENTS = Path(__file__).resolve().parent / "agents"
TOPOLOGY: dict = {}
LONG = "/sleep 60000\nstill here"


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    with postgres_database(migrated=True) as database, \
            topology(tmp_path_factory.mktemp("hosts"), agents=[AGENTS / "streamer", AGENTS / "ticker"],
                     database_url=database) as (topo, _, _):
        TOPOLOGY["topo"] = topo
        TOPOLOGY["started"] = time.time()
        yield topo
        TOPOLOGY.clear()


@pytest.fixture(scope="module")
def web_a(topo):
    with topo.client(topo.procs["web-a"].url) as client:
        yield client


@pytest.fixture(scope="module")
def web_b(topo):
    with topo.client(topo.procs["web-b"].url) as client:
        yield client


@pytest.fixture(scope="module")
def edge(topo):
    with topo.client() as client:
        yield client


def sse_events(client, path: str, until_type: str) -> list[dict]:
    events = []
    with client.stream("GET", f"{path}/stream", headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == until_type:
                    return events
    raise AssertionError(f"the SSE stream ended first: {events}")


def websocket_events(topo, path: str, until_type: str) -> list[dict]:
    frames: list[dict] = []
    with connect(f"ws://127.0.0.1:{topo.nginx_port}{path}/ws?startIndex=0", open_timeout=20,
                 additional_headers={"Authorization": f"Bearer {topo.token}", "Origin": topo.url}) as ws:
        while not frames or frames[-1]["type"] != until_type:
            frames.append(json.loads(ws.recv(timeout=30)))
    return frames


def test_a_session_made_through_web_a_streams_through_web_b_and_nginx_and_takes_a_follow_up(topo, web_a, web_b, edge):
    created = web_a.post("/streamer/v1/session", json={"message": "hello from web-a"})
    assert created.status_code == 201, created.text
    path = f"/streamer/v1/session/{created.json()['sessionId']}"

    on_b = read_until(web_b, path, is_type(WAITING))
    assert on_b[0]["type"] == "session.started" and indexes_contiguous(on_b)
    assert [e["type"] for e in on_b][-2:] == ["turn.completed", WAITING]
    types = [e["type"] for e in on_b]
    assert [e["type"] for e in read_until(edge, path, is_type(WAITING))] == types
    assert [e["type"] for e in sse_events(edge, path, WAITING)] == types
    assert [e["type"] for e in websocket_events(topo, path, WAITING)] == types

    # The follow-up goes to web-b; web-a streams it from where its reader left off.
    sent = web_b.post(f"{path}/message", json={"message": "and again, to web-b",
                                                "continuationToken": created.json()["continuationToken"]})
    assert sent.status_code == 202, sent.text
    more = read_until(web_a, path, is_type(WAITING), start=len(on_b))
    assert more[0]["index"] == len(on_b) and indexes_contiguous(more)
    received = [e for e in more if e["type"] == "message.received"]
    assert len(received) == 1 and "and again, to web-b" in json.dumps(received[0]["data"]), received
    assert [e["type"] for e in more][-2:] == ["turn.completed", WAITING]


def running_on_worker(path: str, client) -> None:
    """Wait until a worker host is inside the session's turn (its model call started)."""
    read_until(client, path, is_type("step.started"))


def test_a_stop_sent_to_web_b_ends_the_turn_a_worker_runs_and_web_a_shows_it(topo, web_a, web_b):
    path = create(web_a, LONG)
    running_on_worker(path, web_a)
    [(claimed_by,)] = query(topo, "SELECT claimed_by FROM agent_sessions_turn WHERE session_id = %s AND status = 'running'",
                            path.rsplit("/", 1)[1])
    assert topo.host_of_pid(int(claimed_by.rsplit(":", 1)[1])) in ("worker-a", "worker-b"), claimed_by

    stopped = web_b.post(f"{path}/stop")
    assert stopped.status_code in (200, 202), stopped.text

    events = read_until(web_a, path, is_type(WAITING))
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert len(failed) == 1 and "interrupted" in json.dumps(failed[0]["data"]), failed
    assert "turn.completed" not in [e["type"] for e in events]


def test_a_preempting_follow_up_sent_to_web_b_interrupts_the_running_turn_and_web_a_shows_both(topo, web_a, web_b):
    created = web_a.post("/streamer/v1/session", json={"message": LONG})
    assert created.status_code == 201, created.text
    path = f"/streamer/v1/session/{created.json()['sessionId']}"
    running_on_worker(path, web_a)

    sent = web_b.post(f"{path}/message", json={"message": "instead, this",
                                                "continuationToken": created.json()["continuationToken"]})
    assert sent.status_code == 202, sent.text

    events = read_until(web_a, path, lambda e: e["type"] == "turn.completed")
    ends = [e["type"] for e in events if e["type"] in ("turn.failed", "turn.completed")]
    assert ends == ["turn.failed", "turn.completed"], [e["type"] for e in events]
    assert indexes_contiguous(events)


def test_a_reminder_fires_once_with_both_worker_hosts_sweeping(topo, web_a, web_b):
    path = create(web_a, "remind me")
    read_until(web_a, path, is_type(WAITING))
    made = web_b.post(f"{path}/reminders", json={"delay": "2s", "prompt": "the reminder is due"})
    assert made.status_code == 201, made.text

    events = read_until(web_a, path, lambda e: e["type"] == "message.received" and e["data"].get("source") == "reminder")
    read_until(web_b, path, is_type(WAITING), start=events[-1]["index"])
    # Both worker hosts sweep every second: a few more sweeps must not fire it again.
    time.sleep(3)
    dump = [json.loads(line) for line in web_b.get(f"{path}/events").text.splitlines() if line]
    fired = [e for e in dump if e["type"] == "message.received" and e["data"].get("source") == "reminder"]
    assert len(fired) == 1, fired
    [reminder] = web_a.get(f"{path}/reminders").json()["reminders"]
    assert reminder["fireCount"] == 1, reminder


def test_the_every_minute_schedule_fires_once_a_minute_with_both_worker_hosts(topo):
    def fired() -> list[tuple]:
        return query(topo, "SELECT date_trunc('minute', at), count(*) FROM agent_sessions_event "
                           "WHERE type = 'message.received' AND data->>'source' = 'schedule' GROUP BY 1 ORDER BY 1")

    minutes = wait_for(fired, "the schedule to fire", timeout=100, every=1)  # it fires on a minute's turn
    time.sleep(3)  # more sweeps of both hosts
    minutes = fired()
    assert minutes and all(count == 1 for _, count in minutes), minutes
    [(sessions,)] = query(topo, "SELECT count(*) FROM agent_sessions_session s JOIN agents_agent a ON a.id = s.agent_id "
                                "WHERE a.slug = 'ticker'")
    assert sessions == len(minutes)


def test_every_host_runs_the_release_from_its_own_state_root(topo):
    # The deploying machine's state root is gone before any host started: a release reaches
    # a host through the database, unpacked under that host's own state root.
    assert not (topo.folder / "deployer").exists()
    claims = query(topo, "SELECT DISTINCT claimed_by FROM agent_sessions_turn WHERE claimed_by <> ''")
    # A holder is `host:pid`, the host named by its AGENTSITE_HOST_ID.
    ran = {claimed_by.rsplit(":", 1)[0] for (claimed_by,) in claims}
    assert ran and ran <= {"worker-a", "worker-b"}, claims
    for host in ran:
        assert list((topo.folder / host / "deployments" / "streamer").iterdir()), host


def test_every_host_left_its_mark_on_the_shared_workspaces_volume(topo):
    # Web processes at start, workers as they spawn: none waits for a local turn to do it, so no
    # host's turn is refused for another host's missing mark (sessions.workspaces.volume).
    marks = topo.folder / "shared-workspaces" / ".agentsite-hosts"
    wait_for(lambda: {p.name for p in marks.iterdir()} >= {"web-a", "web-b", "worker-a", "worker-b"},
             "every host's mark")
