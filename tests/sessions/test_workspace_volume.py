"""A session's local workspace follows it to another host, on the one volume all hosts mount, or is refused.

In process: the marks and the refusal of a local turn. With real processes on
PostgreSQL + Redis: a session's files written on host h1 are read by its next
turn on host h2 after h1 died (each with its own state root, one shared
workspaces directory), and a host whose workspaces directory is its own is
refused at start.
"""
from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from django.utils import timezone

from sessions.eventlog.events import read_events
from sessions.models import Host
from sessions.workspaces.volume import MARKS, VolumeNotShared, check
from tests.sessions.test_hosts import kill_tree
from tests.support import backend_env, run_server

AGENT = "from agents.sdk import Agent, local_runtime\nagent = Agent(runtime=local_runtime(shell=False))\n"


def files_agent(root: Path) -> Path:
    agents = root / "agents"
    (agents / "files" / "agent").mkdir(parents=True)
    (agents / "files" / "agent" / "instructions.md").write_text("You keep files.\n")
    (agents / "files" / "agent" / "agent.py").write_text(AGENT)
    return agents


def live_host(host_id: str, *, started_ago: float = 3600, left: float = 10) -> Host:
    now = timezone.now()
    return Host.objects.create(host_id=host_id, kind=Host.Kind.WORKER, processes={}, last_seen=now,
                               started_at=now - timedelta(seconds=started_ago),
                               lease_until=now + timedelta(seconds=left))


@pytest.mark.django_db
def test_alone_the_volume_is_shared_and_the_host_leaves_its_mark(tmp_path, settings):
    settings.AGENTSITE_HOST_ID = "h1"
    check(tmp_path)
    assert (tmp_path / MARKS / "h1").read_text() == "h1\n"


@pytest.mark.django_db
def test_a_live_host_without_its_mark_means_the_volume_is_not_shared(tmp_path, settings):
    settings.AGENTSITE_HOST_ID = "h2"
    live_host("h1")
    live_host("h3", left=-1)  # lapsed: lost, its mark not needed
    with pytest.raises(VolumeNotShared) as refused:
        check(tmp_path)
    message = str(refused.value)
    assert "AGENTSITE_WORKSPACES_ROOT" in message and str(tmp_path) in message and "h1" in message
    assert "h3" not in message

    (tmp_path / MARKS / "h1").write_text("h1\n")  # h1 mounts the same directory
    check(tmp_path)


@pytest.mark.django_db(transaction=True)
def test_a_local_turn_is_refused_rather_than_given_a_fresh_workspace(tmp_path, settings, alice, sync_turns):
    from agents.discovery import deploy_agent_folder

    settings.AGENTSITE_HOST_ID = "h2"
    settings.AGENTSITE_WORKSPACES_ROOT = tmp_path / "workspaces"
    deploy_agent_folder(files_agent(tmp_path) / "files")
    live_host("h1")

    response = alice.post("/files/v1/session", {"message": '/call write {"path": "a.txt", "content": "x"}'},
                          content_type="application/json")

    assert response.status_code == 201, response.content
    events = read_events(response.json()["sessionId"], 0)
    failed = [e for e in events if e["type"] == "turn.failed"]
    assert failed and failed[-1]["data"]["code"] == "workspace_error", [e["type"] for e in events]
    assert "not shared with host(s) h1" in failed[-1]["data"]["error"]
    assert not list((tmp_path / "workspaces").glob(response.json()["sessionId"]))


# --- real processes: two hosts on PostgreSQL + Redis -------------------------------------


def host_env(env: dict[str, str], host: str, workspaces: Path) -> dict[str, str]:
    return {**env, "AGENTSITE_HOST_ID": host, "AGENTSITE_HOST_LEASE_SECONDS": "3",
            "AGENTSITE_WORKSPACES_ROOT": str(workspaces)}


def until_waiting(client: httpx.Client, session_id: str, start: int) -> list[dict]:
    """The events from `start` to the turn's end, read from the stream."""
    events = []
    with client.stream("GET", f"/files/v1/session/{session_id}/stream", params={"startIndex": start}) as stream:
        for line in stream.iter_lines():
            if line:
                events.append(json.loads(line))
                if events[-1]["type"] in ("session.waiting", "session.failed", "session.completed"):
                    return events
    return events


def test_a_sessions_files_are_there_for_its_next_turn_on_another_host(tmp_path):
    agents = files_agent(tmp_path)
    shared = tmp_path / "shared-workspaces"
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, "postgres+redis", migrated=True)
        h1 = stack.enter_context(run_server(tmp_path / "h1", "--agents", str(agents), "--no-examples",
                                            env=host_env(env, "h1", shared)))
        with h1.client(timeout=30) as client:
            created = client.post("/files/v1/session",
                                  json={"message": '/call write {"path": "notes.txt", "content": "kept on h1"}'})
            assert created.status_code == 201, created.text
            session_id, token = created.json()["sessionId"], created.json()["continuationToken"]
            first = until_waiting(client, session_id, 0)
            assert first[-1]["type"] == "session.waiting", first
        kill_tree(h1.process.pid)  # the host is gone; only the shared volume kept its files
        h1.process.wait(timeout=10)

        h2 = stack.enter_context(run_server(tmp_path / "h2", "--agents", str(agents), "--no-examples",
                                            env=host_env(env, "h2", shared)))
        with h2.client(timeout=30) as client:
            start = len(first)
            followed = client.post(f"/files/v1/session/{session_id}/message",
                                   json={"message": '/call read {"path": "notes.txt"}', "continuationToken": token})
            assert followed.status_code in (200, 202), followed.text
            second = until_waiting(client, session_id, start)

        with psycopg.connect(env["DATABASE_URL"]) as db:
            leased = set(db.execute("SELECT host_id, kind FROM agent_sessions_host").fetchall())

    assert {("h1", "web"), ("h2", "web")} <= leased, "web processes hold their host's lease too"
    results = [e for e in second if e["type"] == "action.result"]
    assert results and "kept on h1" in json.dumps(results[0]["data"]), second
    assert second[-1]["type"] == "session.waiting"
    assert {p.name for p in (shared / MARKS).iterdir()} == {"h1", "h2"}


@pytest.fixture(scope="module")
def live_h1(tmp_path_factory):
    """Host h1 serving with a workspaces directory of its own; the refused hosts only read its lease."""
    root = tmp_path_factory.mktemp("h1")
    agents = files_agent(root)
    with contextlib.ExitStack() as stack:
        env = backend_env(stack, "postgres+redis", migrated=True)
        stack.enter_context(run_server(root / "h1", "--agents", str(agents), "--no-examples",
                                       env=host_env(env, "h1", root / "h1-workspaces")))
        yield env, agents


@pytest.mark.parametrize("server", ["daphne", "uvicorn"])
def test_a_host_whose_workspaces_directory_is_its_own_is_refused_at_start(tmp_path, server, live_h1):
    # uvicorn imports the application on its event loop, daphne before starting its own.
    env, agents = live_h1
    with pytest.raises(RuntimeError) as refused:
        with run_server(tmp_path / "h2", "--agents", str(agents), "--no-examples", "--server", server,
                        env=host_env(env, "h2", tmp_path / "h2-workspaces")):
            pass
    assert f"AGENTSITE_WORKSPACES_ROOT ({tmp_path / 'h2-workspaces'}) is not shared with host(s) h1" \
        in str(refused.value)
