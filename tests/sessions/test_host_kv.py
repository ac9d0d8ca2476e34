"""`ctx.host.kv`: a durable JSON key-value store per agent, optionally per session.

Values are read back from the table by another host object (as the next
turn in another worker would), and compare-and-set is raced by real threads
on the test database and by real processes on a SQLite file and on
PostgreSQL: exactly one racer wins each change, so counters add up.
"""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from agents.discovery import deploy_agent_folder
from sessions.host import Host, HostError
from sessions.models import KVEntry, Session
from tests.sessions.test_concurrent_appends import database
from tests.sessions.test_schedules import write_agent
from tests.support import ROOT

transactional = pytest.mark.django_db(transaction=True)


def new_session(agent, principal: str = "alice") -> Session:
    return Session.objects.create(agent=agent, deployment=agent.active_deployment, principal_id=principal,
                                  authenticator="bearer")


def host(session: Session | None = None, agent=None) -> Host:
    """A fresh host, as each tool call, reminder or schedule handler gets one."""
    return Host(session=session, agent=agent if agent is not None else session.agent)


# -- values and scopes ------------------------------------------------------------------

@pytest.mark.django_db
def test_values_come_back_as_the_json_that_was_stored(support_agent):
    kv = host(new_session(support_agent)).kv
    values = {"dict": {"a": [1, 2.5, None, True], "b": "ü"}, "list": ["x", {"y": 1}], "text": "plain",
              "number": 42, "flag": False, "tuple": (1, 2)}
    for key, value in values.items():
        kv.set(key, value)

    again = host(new_session(support_agent)).kv
    assert {key: again.get(key) for key in values} == {**values, "tuple": [1, 2]}
    assert again.get("missing") is None
    assert again.get("missing", "fallback") == "fallback"

    again.set("text", "replaced")
    assert kv.get("text") == "replaced"
    assert KVEntry.objects.get(key="text").version == 2
    assert kv.delete("text") is True
    assert kv.delete("text") is False
    assert kv.get("text") is None


@pytest.mark.django_db
def test_agent_keys_are_shared_and_session_keys_stay_with_their_session(support_agent, tmp_path):
    one, two = new_session(support_agent), new_session(support_agent, "bob")
    host(one).kv.set("plan", "agent-wide")
    host(one).kv.set("draft", "one's", scope="session")
    host(two).kv.set("draft", "two's", scope="session")

    assert host(two).kv.get("plan") == "agent-wide"
    assert host(one).kv.get("draft", scope="session") == "one's"
    assert host(two).kv.get("draft", scope="session") == "two's"
    assert host(one).kv.get("draft") is None, "a session key is not an agent key"
    # A schedule handler has the agent and no session: it reaches a session by id.
    scheduled = host(agent=support_agent)
    assert scheduled.kv.get("plan") == "agent-wide"
    assert scheduled.kv.get("draft", scope="session", session_id=two.id) == "two's"
    with pytest.raises(HostError, match="no session here"):
        scheduled.kv.get("draft", scope="session")

    other = deploy_agent_folder(write_agent(tmp_path / "other", {})).agent
    assert host(new_session(other)).kv.get("plan") is None, "each agent has its own store"
    with pytest.raises(HostError, match="no session"):
        host(agent=other).kv.get("draft", scope="session", session_id=one.id)


@pytest.mark.django_db
def test_list_gives_keys_by_prefix_in_code_point_order(support_agent):
    kv = host(agent=support_agent).kv
    for key in ("orders/b", "orders/a", "orders/B", "Orders/c", "order", "orders/é", "refunds/1"):
        kv.set(key, 1)
    kv.set("orders/s", 1, scope="session", session_id=new_session(support_agent).id)

    assert kv.list("orders/") == ["orders/B", "orders/a", "orders/b", "orders/é"], "case counts, on SQLite too"
    assert kv.list("orders/", limit=2) == ["orders/B", "orders/a"]
    assert kv.list() == sorted(["orders/b", "orders/a", "orders/B", "Orders/c", "order", "orders/é", "refunds/1"])
    assert kv.list("orders_") == [] and kv.list("%") == [], "LIKE wildcards are plain characters"


@pytest.mark.django_db
def test_compare_and_set_changes_a_key_only_from_the_expected_value(support_agent):
    kv = host(agent=support_agent).kv

    assert kv.compare_and_set("lock", None, {"owner": "a", "n": 1}) is True, "None: only if absent"
    assert kv.compare_and_set("lock", None, {"owner": "b"}) is False
    assert kv.compare_and_set("lock", {"owner": "b"}, {"owner": "c"}) is False
    assert kv.compare_and_set("lock", {"n": 1, "owner": "a"}, {"owner": "a", "n": 2}) is True, "key order is not compared"
    assert kv.get("lock") == {"owner": "a", "n": 2}
    assert kv.compare_and_set("lock", {"owner": "a", "n": 1}, None) is False
    assert kv.compare_and_set("lock", {"owner": "a", "n": 2}, None) is True, "new None: delete"
    assert kv.get("lock") is None
    assert kv.compare_and_set("lock", 1, 2) is False, "nothing to compare with"
    assert kv.compare_and_set("lock", None, None) is True, "absent stays absent"
    assert not KVEntry.objects.filter(key="lock").exists()


@transactional
def test_a_session_key_of_a_deleted_session_is_refused(support_agent):
    session = new_session(support_agent)
    kv = host(session).kv
    Session.objects.filter(pk=session.pk).delete()

    with pytest.raises(HostError, match="was deleted"):
        kv.set("draft", "x", scope="session")
    with pytest.raises(HostError, match="was deleted"):
        kv.compare_and_set("draft", None, "x", scope="session")
    assert not KVEntry.objects.exists()


@pytest.mark.parametrize("call, says", [
    (lambda kv: kv.set("", 1), "must not be empty"),
    (lambda kv: kv.set("k" * 513, 1), "at most 512 bytes"),
    (lambda kv: kv.set("é" * 257, 1), "at most 512 bytes"),
    (lambda kv: kv.set("a\x00b", 1), "NUL"),
    (lambda kv: kv.set("\ud800", 1), "lone surrogate"),
    (lambda kv: kv.set(7, 1), "must be a string"),
    (lambda kv: kv.set("k", None), "delete the key instead"),
    (lambda kv: kv.set("k", {1, 2}), "must be JSON"),
    (lambda kv: kv.set("k", float("nan")), "must be JSON"),
    (lambda kv: kv.set("k", {"a": ["ok", "n\x00l"]}), "a[1] holds a NUL"),
    (lambda kv: kv.set("k", "x" * 200), "at most 100 bytes"),
    (lambda kv: kv.compare_and_set("k", None, "x" * 200), "at most 100 bytes"),
    (lambda kv: kv.get("k", scope="everywhere"), "scope must be"),
    (lambda kv: kv.get("k", session_id="ses_x"), "goes with scope='session'"),
    (lambda kv: kv.get("k", scope="session", session_id="ses_\x00"), "NUL"),
    (lambda kv: kv.list("a\x00"), "NUL"),
])
@pytest.mark.django_db
def test_bad_keys_and_values_are_refused_saying_why(support_agent, settings, call, says):
    settings.AGENTSITE_KV_MAX_VALUE_BYTES = 100
    with pytest.raises(HostError, match=says.replace("[", r"\[").replace("]", r"\]")):
        call(host(agent=support_agent).kv)
    assert not KVEntry.objects.exists()


# -- racing ----------------------------------------------------------------------------

def increment(kv, key: str) -> int:
    """Add one with compare-and-set, retrying on a lost race; returns the races lost."""
    lost = 0
    while True:
        current = kv.get(key)
        if kv.compare_and_set(key, current, (current or 0) + 1):
            return lost
        lost += 1


@transactional
def test_racing_threads_never_lose_an_increment_and_one_takes_the_token(support_agent):
    threads, rounds = 6, 25
    start = threading.Barrier(threads)
    lost: list[int] = []
    took: list[bool] = []
    host(agent=support_agent).kv.set("token", {"free": True})

    def work() -> None:
        try:
            kv = host(agent=support_agent).kv
            start.wait()
            lost.append(sum(increment(kv, "counter") for _ in range(rounds)))
            start.wait()
            took.append(kv.compare_and_set("token", {"free": True}, None))
        finally:
            connection.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)

    assert len(lost) == threads
    assert host(agent=support_agent).kv.get("counter") == threads * rounds
    assert KVEntry.objects.get(key="counter").version == threads * rounds
    assert sorted(took) == [False] * (threads - 1) + [True], "one racer deleted the token"
    assert not KVEntry.objects.filter(key="token").exists()


SETUP = """
import django
django.setup()
from django.core.management import call_command
from agents.discovery import deploy_agent_folder

call_command("migrate", verbosity=0)
print(deploy_agent_folder(sys.argv[1]).agent_id)
"""

RACER = """
import os, time
import django
django.setup()
from django.db import connection
from agents.models import Agent
from sessions.host import Host

agent_id, me, rounds, gate = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
kv = Host(session=None, agent=Agent.objects.get(pk=agent_id)).kv
connection.ensure_connection()
print("ready", flush=True)
while not os.path.exists(gate):
    time.sleep(0.002)
leader = kv.compare_and_set("leader", None, me)
lost = 0
for _ in range(rounds):
    while True:
        current = kv.get("counter")
        if kv.compare_and_set("counter", current, (current or 0) + 1):
            break
        lost += 1
print("done", leader, lost, flush=True)
"""



def python(code: str) -> list[str]:
    return [sys.executable, "-c", "import sys\n" + code]


def run(code: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(python(code) + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def stored(env: dict[str, str], agent_id: str) -> dict[str, tuple[Any, int]]:
    """The agent's agent-wide keys as {key: (value, version)}, read straight from the table."""
    sql = f'SELECT "key", value, version FROM {KVEntry._meta.db_table} WHERE agent_id = %s AND session_id IS NULL'
    if env.get("DATABASE_URL"):
        with psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://")) as db:
            return {key: (value, version) for key, value, version in db.execute(sql, [int(agent_id)])}  # jsonb: decoded
    with contextlib.closing(sqlite3.connect(Path(env["AGENTSITE_STATE_ROOT"]) / "db.sqlite3")) as db:
        rows = db.execute(sql.replace("%s", "?"), [int(agent_id)]).fetchall()
    return {key: (json.loads(value), version) for key, value, version in rows}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_racing_processes_never_lose_an_increment_and_elect_one_leader(kind, tmp_path: Path):
    racers, rounds = 4, 40
    # A copy of a migrated database: SETUP's migrate has nothing to do.
    with database(kind, tmp_path / "state", migrated=True) as (env, _):
        agent_id = run(SETUP, env, str(ROOT / "examples" / "support"))
        gate = tmp_path / "go"
        processes = [subprocess.Popen(python(RACER) + [agent_id, f"racer-{n}", str(rounds), str(gate)], cwd=ROOT,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for n in range(racers)]
        outcomes = []
        with contextlib.ExitStack() as cleanup:
            for p in processes:
                cleanup.callback(lambda p=p: p.poll() is None and (p.kill(), p.wait()))
            for p in processes:
                assert p.stdout.readline().strip() == "ready", p.stderr.read()
            gate.touch()
            for p in processes:
                out, err = p.communicate(timeout=90)
                assert p.returncode == 0, err
                outcomes.append(out.split())
        keys = stored(env, agent_id)

    (counter, version), (leader, _) = keys["counter"], keys["leader"]
    assert counter == racers * rounds, "every increment counted once"
    assert version == racers * rounds
    winners = [name for (_, won, _), name in zip(outcomes, (f"racer-{n}" for n in range(racers))) if won == "True"]
    assert winners == [leader], "exactly one racer created the key"
