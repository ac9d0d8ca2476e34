"""What the several-hosts tests share: reading streams by index, waiting, the database."""
from __future__ import annotations

import json
import time
from typing import Callable

import httpx
import psycopg

from bench.hostslib import Topology

WAITING = "session.waiting"


def read_until(client: httpx.Client, path: str, until: Callable[[dict], bool], start: int = 0,
               headers: dict[str, str] | None = None, timeout: float = 60) -> list[dict]:
    """An NDJSON stream from `start` until an event `until` takes."""
    events: list[dict] = []
    with client.stream("GET", f"{path}/stream", params={"startIndex": start}, headers=headers,
                       timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line:
                events.append(json.loads(line))
                if until(events[-1]):
                    return events
    raise AssertionError(f"the stream ended first: {[e['type'] for e in events]}")


def is_type(*types: str) -> Callable[[dict], bool]:
    return lambda event: event["type"] in types


def create(client: httpx.Client, message: str, slug: str = "streamer") -> str:
    created = client.post(f"/{slug}/v1/session", json={"message": message})
    assert created.status_code == 201, created.text
    return f"/{slug}/v1/session/{created.json()['sessionId']}"


def one_turn(client: httpx.Client, message: str = "hello") -> list[dict]:
    path = create(client, message)
    return read_until(client, path, is_type(WAITING))


def wait_for(condition: Callable[[], object], what: str, timeout: float = 90, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def query(topo: Topology, sql: str, *args) -> list[tuple]:
    with psycopg.connect(topo.database_url.replace("postgres://", "postgresql://")) as conn:
        return conn.execute(sql, args).fetchall()


def indexes_contiguous(events: list[dict]) -> bool:
    return [e["index"] for e in events] == list(range(events[0]["index"], events[0]["index"] + len(events)))
