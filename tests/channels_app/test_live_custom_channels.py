"""A custom channel on a real server (`manage.py serve`), embedded (SQLite) and
scaled out (PostgreSQL + Redis): deliveries racing with the same new
continuation key make one session, and the replies reach the channel's events
map through the workers (the webhook example's inbox channel); two members
naming the same thread each get their own."""
from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest
from django.contrib.auth.models import User

from sessions.models import PersonalToken
from tests.server_database import on_server_database
from tests.support import Server, backend_env, run_server

RACERS = 8

STARTER = """\
from pydantic import BaseModel
from agents.sdk import GET, Channel

LOG = {log!r}


class Empty(BaseModel):
    pass


def write(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


channel = Channel(routes=[GET("/ping", query=Empty, handler=lambda req: {{"pong": True}})],
                  on_start=lambda ctx: write("start " + ctx.channel_id), on_stop=lambda: write("stop"))
"""


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    (agents / "starter" / "agent" / "channels").mkdir(parents=True)
    (agents / "starter" / "agent" / "instructions.md").write_text("Echo.\n")
    log = agents / "lifecycle.log"
    (agents / "starter" / "agent" / "channels" / "pinger.py").write_text(STARTER.format(log=str(log)))
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, request.param, migrated=True)
        root = tmp_path_factory.mktemp(f"channels-{request.param.replace('+', '-')}")
        server = stack.enter_context(run_server(root, "--agents", str(agents), env=env))
        server.lifecycle_log = log
        server.env = env
        yield server


def test_on_start_runs_as_the_web_process_starts(server: Server):
    deadline = time.monotonic() + 20
    while not (server.lifecycle_log.exists() and "start pinger" in server.lifecycle_log.read_text()):
        assert time.monotonic() < deadline, "on_start never ran"
        time.sleep(0.1)
    with server.client() as client:
        assert client.get("/starter/v1/channels/pinger/ping").json() == {"pong": True}
    assert server.lifecycle_log.read_text().splitlines() == ["start pinger"]  # once per process


@pytest.mark.timeout(180)
def test_concurrent_deliveries_with_one_new_key_make_one_session_and_every_reply_comes_back(server: Server):
    url = f"{server.base_url}/webhook/v1/channels/inbox/messages"
    gate = __import__("threading").Barrier(RACERS)

    def deliver(i: int) -> httpx.Response:
        with httpx.Client(timeout=30) as client:
            gate.wait()
            return client.post(url, json={"text": f"message {i}", "thread": "race-1"})

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(deliver, range(RACERS)))

    assert [a.status_code for a in answers] == [200] * RACERS, [a.text for a in answers]
    sessions = {a.json()["sessionId"] for a in answers}
    assert len(sessions) == 1
    assert sum(a.json()["created"] for a in answers) == 1

    # Each message was a turn (coalesced behind the one running); each reply went through the events map.
    deadline = time.monotonic() + 90
    with server.client() as client:
        while True:
            thread = client.get("/webhook/v1/channels/inbox/threads/race-1").json()
            if len(thread["replies"]) >= RACERS or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert thread["sessionId"] in sessions
    assert sorted(thread["replies"]) == sorted(f"You said: message {i}" for i in range(RACERS))


def members_tokens(server: Server, db_blocker, *names: str) -> list[str]:
    """Members and a personal token each, made in the server's own database."""
    with on_server_database(server.state_root, db_blocker, server.env):
        return [PersonalToken.issue(User.objects.create_user(name), "live")[1] for name in names]


@pytest.mark.timeout(180)
def test_two_members_naming_the_same_thread_each_get_their_own(server: Server, django_db_blocker):
    ann, bo = ({"Authorization": f"Bearer {t}"} for t in members_tokens(server, django_db_blocker, "ann", "bo"))
    with server.client() as client:
        first = client.post("/webhook/v1/channels/inbox/messages", json={"text": "ann here", "thread": "same"},
                            headers=ann)
        second = client.post("/webhook/v1/channels/inbox/messages", json={"text": "bo here", "thread": "same"},
                             headers=bo)
        assert (first.status_code, second.status_code) == (200, 200), (first.text, second.text)
        assert first.json()["created"] and second.json()["created"]
        assert first.json()["sessionId"] != second.json()["sessionId"]

        deadline = time.monotonic() + 90
        while True:
            threads = [client.get("/webhook/v1/channels/inbox/threads/same", headers=h).json() for h in (ann, bo)]
            if all(t["replies"] for t in threads) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [t["replies"] for t in threads] == [["You said: ann here"], ["You said: bo here"]]
        assert client.get(f"/webhook/v1/session/{first.json()['sessionId']}", headers=bo).status_code == 403


def test_on_stop_runs_when_the_server_stops(tmp_path):
    agents = tmp_path / "agents"
    (agents / "starter" / "agent" / "channels").mkdir(parents=True)
    (agents / "starter" / "agent" / "instructions.md").write_text("Echo.\n")
    log = tmp_path / "lifecycle.log"
    (agents / "starter" / "agent" / "channels" / "pinger.py").write_text(STARTER.format(log=str(log)))
    with run_server(tmp_path / "state", "--agents", str(agents), "--no-examples") as server:
        deadline = time.monotonic() + 20
        while not (log.exists() and "start pinger" in log.read_text()):
            assert time.monotonic() < deadline, "on_start never ran"
            time.sleep(0.1)
        server.stop()
    assert log.read_text().splitlines() == ["start pinger", "stop"]


GUARDED = """\
from pydantic import BaseModel
from agents.sdk import GET, Channel, {imports}


class Empty(BaseModel):
    pass


channel = Channel(routes=[GET("/who", query=Empty, handler=lambda req: {{"who": req.auth.authenticator}})],
                  auth={auth})
"""


def guarded_agents(root) -> str:
    base = root / "guarded" / "agent"
    (base / "channels").mkdir(parents=True)
    (base / "instructions.md").write_text("Echo.\n")
    (base / "channels" / "plain.py").write_text(GUARDED.format(imports="local_dev_strict", auth="None"))
    (base / "channels" / "strict.py").write_text(GUARDED.format(imports="local_dev_strict",
                                                                auth="[local_dev_strict()]"))
    (base / "channels" / "token.py").write_text(GUARDED.format(imports="bearer_auth",
                                                               auth='[bearer_auth("channel-secret-1")]'))
    return str(root)


def test_serve_flags_swap_the_default_chain_never_an_authored_one(tmp_path):
    agents = guarded_agents(tmp_path / "agents")
    forwarded = {"X-Forwarded-For": "203.0.113.9"}  # a caller through a proxy: local_dev_strict refuses it
    # No turn runs: the servers need no workers.
    with run_server(tmp_path / "anon", "--agents", agents, "--no-examples", "--no-workers",
                    "--allow-anonymous") as server:
        with server.client() as client:
            assert client.get("/guarded/v1/channels/plain/who", headers=forwarded).json() == {"who": "anonymous"}
            assert client.get("/guarded/v1/channels/strict/who", headers=forwarded).status_code == 401
            assert client.get("/guarded/v1/channels/token/who").status_code == 401
    with run_server(tmp_path / "bearer", "--agents", agents, "--no-examples", "--no-workers",
                    "--bearer-token", "server-1") as server:
        with server.client() as client:
            server_token = {"Authorization": "Bearer server-1"}
            assert client.get("/guarded/v1/channels/plain/who", headers=server_token).json() == {"who": "bearer"}
            assert client.get("/guarded/v1/channels/plain/who").status_code == 401
            assert client.get("/guarded/v1/channels/strict/who").json() == {"who": "local"}
            assert client.get("/guarded/v1/channels/token/who", headers=server_token).status_code == 401
            assert client.get("/guarded/v1/channels/token/who",
                              headers={"Authorization": "Bearer channel-secret-1"}).json() == {"who": "bearer"}
