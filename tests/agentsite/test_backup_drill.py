"""The restore drill `docs/backups-and-upgrades.md` asks a team to rehearse, run against real servers.

A server (PostgreSQL + Redis, or SQLite) with eight clients running turns, a call parked for approval,
a turn that streams for most of a minute and a schedule fired once, is backed up mid-load with `manage.py
backup`; the archive is restored into a fresh database and state root (for the move, a SQLite
archive into PostgreSQL) and a server is started on it. Then, through the API:
- every session that had finished before the backup reads back event for event;
- every turn the backup caught running ended as `worker_lost`, its log up to there as it was;
- every turn it caught queued runs on the restored server; no log has a gap, nothing stays running;
- the parked call is approved there and runs once;
- the schedule is as armed as it was, and fires no second time for its slot.
Rate limits and the running-turn cap are off: eight clients of one principal would hit them.
"""
from __future__ import annotations

import contextlib
import shutil
import threading
import time

import httpx
import pytest

from tests.agentsite.backup_support import manage_json, state_env
from tests.sessions.test_live_stream import assert_contiguous, dump
from tests.support import ROOT, postgres_database, read_stream_until, redis_database, run_server

AGENT = 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", params={"chunk_delay_ms": %d})\n'
SCHEDULE = '---\ncron: "0 3 * * *"\n---\nSay good night.\n'
MESSAGE = " ".join(f"w{i:03d}" for i in range(150))  # ~25 streamed chunks
CLIENTS = 8
UNLIMITED = {"AGENTSITE_RATE_SESSIONS": "off", "AGENTSITE_RATE_MESSAGES": "off", "AGENTSITE_MAX_RUNNING_TURNS": "off",
             "AGENTSITE_DEV": "1"}  # dev: the schedule is fired by hand before the backup


def agents_folder(parent):
    # quick: ~0.4 s a turn; slow: ~50 s, still running at the backup however loaded the machine is
    for slug, delay in (("quick", 15), ("slow", 2000)):
        (parent / slug / "agent").mkdir(parents=True)
        (parent / slug / "agent" / "agent.py").write_text(AGENT % delay)
        (parent / slug / "agent" / "instructions.md").write_text("Echo the user.\n")
    (parent / "quick" / "agent" / "tools").mkdir()
    tools = ROOT / "examples" / "support" / "agent" / "tools"
    shutil.copy(tools / "cancel_order.py", parent / "quick" / "agent" / "tools")
    (parent / "quick" / "agent" / "schedules").mkdir()
    (parent / "quick" / "agent" / "schedules" / "nightly.md").write_text(SCHEDULE)
    return parent


def start(client: httpx.Client, slug: str, message: str = MESSAGE) -> str:
    response = client.post(f"/{slug}/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"]


class Load:
    """CLIENTS threads, each starting a session and following it to its end, again and again until stopped."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.finished: dict[str, float] = {}  # session → when its client saw session.waiting
        self.started: list[str] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(CLIENTS)]

    def run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=60) as client:
            while not self.stop.is_set():
                try:
                    session_id = start(client, "quick")
                    self.started.append(session_id)
                    read_stream_until(client, f"/quick/v1/session/{session_id}/stream?startIndex=0",
                                      "session.waiting", timeout=60)
                    self.finished[session_id] = time.monotonic()
                except Exception as exc:  # noqa: BLE001  reported by the test, with the rest
                    self.errors.append(repr(exc))
                    return

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=90)


def schedule_state(client: httpx.Client) -> dict:
    (nightly,) = client.get("/quick/v1/info").json()["schedules"]
    return {k: nightly[k] for k in ("nextFireAt", "lastFiredAt", "fireCount")}


def wait_until_settled(client: httpx.Client, slug: str, session_id: str, timeout: float = 60) -> list[dict]:
    """The session's log once it is waiting again (a turn queued at the backup runs here first)."""
    deadline = time.monotonic() + timeout
    while client.get(f"/{slug}/v1/session/{session_id}").json()["status"] != "waiting":
        assert time.monotonic() < deadline, client.get(f"/{slug}/v1/session/{session_id}").text
        time.sleep(0.2)
    return dump(client, session_id, slug)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["postgres+redis", "sqlite", "sqlite into postgres"])
def test_a_backup_taken_under_load_restores_into_a_server_that_carries_on(case, tmp_path):
    agents = agents_folder(tmp_path / "agents")
    live_root, restored_root = tmp_path / "live", tmp_path / "restored"
    with contextlib.ExitStack() as stack:
        live_url = stack.enter_context(postgres_database(migrated=True)) if case == "postgres+redis" else None
        live_env = {**UNLIMITED, **({"DATABASE_URL": live_url, "REDIS_URL": stack.enter_context(redis_database())}
                                    if live_url else {})}
        with run_server(live_root, "--agents", str(agents), env=live_env) as server, \
                server.client(timeout=30) as client:
            fired = client.post("/quick/v1/dev/schedules/nightly")
            assert fired.status_code == 200, fired.text
            (scheduled,) = fired.json()["sessionIds"]
            read_stream_until(client, f"/quick/v1/session/{scheduled}/stream?startIndex=0", "session.waiting")
            armed = schedule_state(client)
            assert armed["fireCount"] == 1
            parked = start(client, "quick", '/call cancel_order {"order_id": "A102"}')
            approval = read_stream_until(client, f"/quick/v1/session/{parked}/stream?startIndex=0",
                                         "action.approval_requested")[-1]
            held = start(client, "slow")
            read_stream_until(client, f"/slow/v1/session/{held}/stream?startIndex=0", "message.appended", count=2)
            with Load(server.base_url) as load:
                while len(load.finished) < CLIENTS and not load.errors:
                    time.sleep(0.1)
                backed_up_at = time.monotonic()
                manifest = manage_json(state_env(live_root, live_url), "backup", "--out", str(tmp_path / "b.tar.gz"))
                time.sleep(1)  # the load goes on past the backup
            assert not load.errors, load.errors
            finished_before = [s for s, at in load.finished.items() if at < backed_up_at]
            live = {s: dump(client, s, "quick") for s in [*load.started, parked, scheduled]}
            live[held] = dump(client, held, "slow")
            stopped = client.post(f"/slow/v1/session/{held}/stop")  # so the live server stops without waiting
            assert stopped.status_code == 202, stopped.text
        assert manifest["counts"]["runningTurns"] >= 1

        restored_url = stack.enter_context(postgres_database()) if case != "sqlite" else None
        restore = ["--to", restored_url] if case == "sqlite into postgres" else []
        report = manage_json(state_env(restored_root, None if restore else restored_url),
                             "restore", str(tmp_path / "b.tar.gz"), *restore)
        assert report["lostTurnsEnded"] == manifest["counts"]["runningTurns"]
        restored_env = {**UNLIMITED, **({"DATABASE_URL": restored_url, "REDIS_URL": stack.enter_context(
            redis_database())} if restored_url else {})}
        with run_server(restored_root, "--agents", str(agents), env=restored_env) as server, \
                server.client(timeout=30) as client:
            for session_id in [*finished_before, scheduled]:
                assert dump(client, session_id, "quick") == live[session_id], session_id

            lost = 0
            for session_id in [*load.started, held]:
                slug = "slow" if session_id == held else "quick"
                if client.get(f"/{slug}/v1/session/{session_id}").status_code == 404:
                    assert session_id not in finished_before  # made after the backup
                    continue
                events = wait_until_settled(client, slug, session_id)
                assert_contiguous(events, session_id)
                failed = [e["index"] for e in events if e["type"] == "turn.failed"]
                if failed:  # running when the backup was taken: ended there, the log before it as it was
                    assert events[failed[0]]["data"]["code"] == "worker_lost"
                    assert [e["type"] for e in events[failed[0]:]] == ["turn.failed", "session.waiting"]
                    assert events[:failed[0]] == live[session_id][:failed[0]]
                    lost += 1
                else:
                    assert events[-2]["type"] == "turn.completed", [e["type"] for e in events]
            assert lost == report["lostTurnsEnded"]
            assert dump(client, held, "slow")[-2]["data"]["code"] == "worker_lost"

            call_id = approval["data"]["callId"]
            decided = client.post(f"/quick/v1/session/{parked}/approvals/{call_id}", json={"decision": "approve"})
            assert decided.status_code == 200, decided.text
            events = wait_until_settled(client, "quick", parked)
            assert_contiguous(events, parked)
            results = [e for e in events if e["type"] == "action.result" and e["data"]["callId"] == call_id]
            assert len(results) == 1 and results[0]["data"]["output"]["cancelled"] is True

            time.sleep(2)  # a few ticker passes: a slot fired before the backup must not fire again
            assert schedule_state(client) == armed
