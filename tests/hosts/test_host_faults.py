"""Faults on the several-hosts topology (bench/hostslib/) with a PostgreSQL cluster and a redis-server
of its own, so the tests can kill and restart them: a web host killed under 50 streaming clients, a
worker host killed mid-turn, Redis restarted, PostgreSQL restarted.

Each test prints how long the service was unavailable: from the fault to the
first request (or turn) that succeeded after it; docs/scale-out.md lists the
figures ("Faults and what they cost"). Every test leaves the topology whole again.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.hostslib import topology
from tests.hosts.support import WAITING, create, indexes_contiguous, is_type, one_turn, query, read_until

pytestmark = pytest.mark.slow

AGENTS = Path(__file__).resolve().parent / "agents"
LEASE_SECONDS = 5
SWEEP_SECONDS = 1
TOPOLOGY: dict = {}
COSTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    env = {"AGENTSITE_TURN_LEASE_SECONDS": str(LEASE_SECONDS), "AGENTSITE_HOST_LEASE_SECONDS": str(LEASE_SECONDS),
           "AGENTSITE_SWEEP_SECONDS": str(SWEEP_SECONDS), "AGENTSITE_REQUEUE_SECONDS": str(LEASE_SECONDS),
           "AGENTSITE_SCHEDULES": "0"}
    with topology(tmp_path_factory.mktemp("faults"), agents=[AGENTS / "streamer"], private=True, env=env) as found:
        TOPOLOGY["topo"] = found[0]
        yield found
        TOPOLOGY.clear()
    print("\nFaults and what they cost (seconds unavailable):",
          ", ".join(f"{name} {seconds:.1f}" for name, seconds in COSTS.items()))


@pytest.fixture(scope="module")
def topo(world):
    return world[0]


@pytest.fixture
def edge(topo):
    with topo.client(timeout=30) as client:
        yield client


def first_success(what, since: float, timeout: float = 120) -> float:
    """Call `what` until it returns without an error; the seconds from `since` to that success."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            what()
            return time.monotonic() - since
        except (httpx.HTTPError, AssertionError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def follow(topo, path: str, out: list, reconnects: list, timeout: float = 120) -> None:
    """Follow a session through nginx until `session.waiting`, reconnecting past the last index seen."""
    deadline = time.monotonic() + timeout
    with topo.client(timeout=30) as client:
        while time.monotonic() < deadline:
            start = out[-1]["index"] + 1 if out else 0
            try:
                with client.stream("GET", f"{path}/stream", params={"startIndex": start}) as response:
                    if response.status_code != 200:
                        reconnects.append(time.monotonic())
                        time.sleep(0.1)
                        continue
                    for line in response.iter_lines():
                        if line:
                            out.append(json.loads(line))
                            if out[-1]["type"] == WAITING:
                                return
            except (httpx.HTTPError, ValueError):
                reconnects.append(time.monotonic())
                time.sleep(0.05)


def dump(client, path: str) -> list[dict]:
    return [json.loads(line) for line in client.get(f"{path}/events").text.splitlines() if line]


def record(name: str, seconds: float) -> None:
    COSTS[name] = seconds
    print(f"\n{name}: {seconds:.1f} s unavailable")


def test_a_worker_host_killed_mid_turn_ends_the_turn_as_worker_lost_and_a_follow_up_works(topo, edge):
    created = edge.post("/streamer/v1/session", json={"message": "/sleep 60000\nnever said"})
    assert created.status_code == 201, created.text
    path = f"/streamer/v1/session/{created.json()['sessionId']}"
    read_until(edge, path, is_type("step.started"))
    [(claimed_by,)] = query(topo, "SELECT claimed_by FROM agent_sessions_turn WHERE session_id = %s AND status = 'running'",
                            created.json()["sessionId"])
    victim = topo.host_of_pid(int(claimed_by.rsplit(":", 1)[1]))
    assert victim in ("worker-a", "worker-b"), claimed_by

    killed_at = time.monotonic()
    topo.procs[victim].kill(signal.SIGKILL)
    events = read_until(edge, path, is_type(WAITING), timeout=120)
    lost_after = time.monotonic() - killed_at
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert len(failed) == 1 and failed[0]["data"]["code"] == "worker_lost", events[-3:]
    # The documented bound: the turn's lease lapses, and the next sweep of the other host ends it
    # (plus room for a machine busy with other work).
    assert lost_after < LEASE_SECONDS + SWEEP_SECONDS + 15, lost_after

    sent = edge.post(f"{path}/message", json={"message": "are you there?",
                                              "continuationToken": created.json()["continuationToken"]})
    assert sent.status_code == 202, sent.text
    more = read_until(edge, path, is_type(WAITING), start=events[-1]["index"] + 1)
    assert [e["type"] for e in more][-2:] == ["turn.completed", WAITING]
    record("worker host killed mid-turn (turn ended as worker_lost)", lost_after)
    record("worker host killed mid-turn (follow-up answered)", time.monotonic() - killed_at)
    topo.restart(victim)


def test_a_web_host_killed_under_50_streaming_clients_loses_and_repeats_nothing(topo, edge):
    paths = [create(edge, f"session {n}: " + "word " * 300) for n in range(10)]
    streams: list[list[dict]] = [[] for _ in range(50)]
    reconnects: list[list[float]] = [[] for _ in range(50)]
    threads = [threading.Thread(target=follow, args=(topo, paths[n % 10], streams[n], reconnects[n]), daemon=True)
               for n in range(50)]
    for thread in threads:
        thread.start()
    # Kill web-a while the turns stream: most clients have events, none has the end.
    deadline = time.monotonic() + 60
    while sum(1 for s in streams if len(s) > 3) < 25 and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_at = time.monotonic()
    topo.procs["web-a"].kill(signal.SIGKILL)
    unavailable = first_success(lambda: edge.get(paths[0]).raise_for_status(), killed_at)
    for thread in threads:
        thread.join(timeout=120)

    assert not any(thread.is_alive() for thread in threads)
    moved = [n for n in range(50) if reconnects[n]]
    assert moved, "no client was streaming from web-a"
    for n, events in enumerate(streams):
        stored = dump(edge, paths[n % 10])
        assert events and indexes_contiguous(events) and events[0]["index"] == 0, (n, [e["index"] for e in events])
        assert events[-1]["type"] == WAITING
        assert [e["type"] for e in events] == [e["type"] for e in stored[:len(events)]], n
    gaps = [max(r) - killed_at for r in reconnects if r]
    print(f"\n{len(moved)} of 50 clients reconnected to web-b; the last reconnect {max(gaps):.1f} s after the kill")
    record("web host killed under 50 streams (next request through nginx)", unavailable)
    topo.restart("web-a")


def test_a_redis_restart_loses_no_queued_turn_and_refuses_meanwhile_with_503(world, topo, edge):
    _, _, redis = world
    queued = [create(edge, f"/sleep 1500\nqueued {n}") for n in range(8)]
    redis.kill(signal.SIGKILL)
    killed_at = time.monotonic()
    during = []
    for n in range(2):
        try:
            response = edge.post("/streamer/v1/session", json={"message": f"during the outage {n}"})
        except httpx.HTTPError as exc:  # the request waited for the enqueue to be retried past our timeout
            pytest.fail(f"a request during the outage got no answer: {exc!r}")
        during.append(response)
        time.sleep(0.3)
    redis.start()
    unavailable = first_success(lambda: one_turn(edge, "after the restart"), killed_at)

    for n, response in enumerate(during):
        made = query(topo, "SELECT session_id FROM agent_sessions_event WHERE type = 'message.received' "
                           "AND data::text LIKE %s", f"%during the outage {n}%")
        if response.status_code == 201:  # accepted: it must run (its enqueue is retried, or left to the sweep)
            queued.append(f"/streamer/v1/session/{response.json()['sessionId']}")
        else:  # refused: nothing was made
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] in ("service_unavailable", "queue_unavailable"), response.text
            assert response.headers["retry-after"]
            assert made == [], made
    for path in queued:
        events = read_until(edge, path, is_type(WAITING), timeout=120)
        assert [e["type"] for e in events][-2:] == ["turn.completed", WAITING], path
    statuses = sorted({r.status_code for r in during})
    print(f"\nduring the outage: {statuses}")
    record("Redis restarted (next turn)", unavailable)


def test_a_postgres_restart_lets_new_turns_run_and_streams_resume(world, topo, edge):
    pg = world[1]
    created = edge.post("/streamer/v1/session", json={"message": "word " * 600})
    assert created.status_code == 201, created.text
    path = f"/streamer/v1/session/{created.json()['sessionId']}"
    events: list[dict] = []
    reconnects: list[float] = []
    reader = threading.Thread(target=follow, args=(topo, path, events, reconnects), daemon=True)
    reader.start()
    read_until(edge, path, is_type("message.appended"))

    pg.stop("fast")
    stopped_at = time.monotonic()
    time.sleep(2)
    pg.start()
    unavailable = first_success(lambda: one_turn(edge, "after the database came back"), stopped_at)
    reader.join(timeout=120)

    assert not reader.is_alive() and events, "the stream did not resume"
    assert indexes_contiguous(events) and events[0]["index"] == 0 and events[-1]["type"] == WAITING
    assert [e["type"] for e in events] == [e["type"] for e in dump(edge, path)[:len(events)]]
    sent = edge.post(f"{path}/message", json={"message": "still there?",
                                              "continuationToken": created.json()["continuationToken"]})
    assert sent.status_code == 202, sent.text
    more = read_until(edge, path, is_type(WAITING), start=events[-1]["index"] + 1)
    assert [e["type"] for e in more][-2:] == ["turn.completed", WAITING]
    print(f"\nthe stream reconnected {len(reconnects)} times; the turn ended "
          f"{[(e['type'], e['data'].get('code')) for e in events if e['type'] in ('turn.completed', 'turn.failed')]}")
    record("PostgreSQL restarted (next turn)", unavailable)
