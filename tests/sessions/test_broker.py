"""The ORM task queue (sessions.plumbing.broker.DoorbellORM) on SQLite and on PostgreSQL without Redis.

Its statements are written out, so these check what django-q2's stock ORM
broker guarantees: a task is handed to one dequeuer until its lock expires,
other clusters' tasks are left alone, an acknowledged task is gone, and
dequeuers in several processes racing over one queue take each task once.
The rows are read back through django-q2's own model.
"""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.sessions.test_concurrent_appends import database, python, run
from tests.support import ROOT

BROKER = """
import django
django.setup()
from django.core.management import call_command
from django_q.models import OrmQ
from sessions.plumbing.broker import DoorbellORM
import datetime, json

mode = sys.argv[1]
if mode != "drain":  # the drainers start after a fill migrated
    call_command("migrate", verbosity=0)
if mode == "semantics":
    mine, theirs = DoorbellORM(list_key="agentsite"), DoorbellORM(list_key="elsewhere")
    a, b = mine.enqueue("task a"), mine.enqueue("task b")
    other = theirs.enqueue("their task")
    out = {"ids": [a, b, other]}
    out["first"] = mine.dequeue() + mine.dequeue()  # one task a dequeue (django-q2's bulk of 1)
    out["again"] = mine.dequeue()
    out["sizes"] = [mine.queue_size(), mine.lock_size()]
    mine.acknowledge(a)
    out["left"] = sorted(OrmQ.objects.values_list("payload", flat=True))
    OrmQ.objects.filter(pk=b).update(lock=django.utils.timezone.now() - datetime.timedelta(seconds=1))
    out["expired"] = mine.dequeue()
    mine.fail(b)
    out["theirs"] = theirs.dequeue()
    print(json.dumps(out))
elif mode == "fill":
    broker = DoorbellORM(list_key="agentsite")
    print(json.dumps([broker.enqueue(f"task {i}") for i in range(int(sys.argv[2]))]))
else:  # drain: once the gate opens, dequeue until the queue is empty, acknowledging each task taken
    import os, time
    from django.db import connection
    broker, taken = DoorbellORM(list_key="agentsite"), []
    connection.ensure_connection()
    print("ready", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.002)
    while True:
        tasks = broker.dequeue()
        if not tasks:
            break
        for pk, payload in tasks:
            taken.append(pk)
            broker.acknowledge(pk)
    print(json.dumps(taken))
"""

TASKS, DRAINERS = 150, 3


@pytest.fixture(params=["sqlite", "postgres"])
def env(request, tmp_path):
    with database(request.param, tmp_path / "state", migrated=True) as (env, _):
        yield {**env, "AGENTSITE_Q_POLL": "0.05"}


def test_a_task_goes_to_one_dequeuer_until_its_lock_expires(env):
    out = json.loads(run(BROKER, env, "semantics"))
    a, b, other = out["ids"]

    assert len({a, b, other}) == 3
    assert out["first"] == [[a, "task a"], [b, "task b"]]
    assert out["again"] is None, "claimed tasks are locked: an empty dequeue waits on the doorbell and returns None"
    assert out["sizes"] == [0, 2]
    assert out["left"] == ["task b", "their task"], "acknowledging deletes the task"
    assert out["expired"] == [[b, "task b"]], "a task whose lock expired is handed out again"
    assert out["theirs"] == [[other, "their task"]], "another cluster's task is left to it"


def test_dequeuers_in_several_processes_take_each_task_once(env, tmp_path):
    ids = json.loads(run(BROKER, env, "fill", str(TASKS)))
    gate = tmp_path / "go"
    drainers = [subprocess.Popen(python(BROKER) + ["drain", str(gate)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(DRAINERS)]
    try:
        for d in drainers:
            assert d.stdout.readline().strip() == "ready", d.stderr.read()
        gate.touch()  # released together once all are connected
        taken = []
        for d in drainers:
            out, err = d.communicate(timeout=90)
            assert d.returncode == 0, err
            taken += json.loads(out)
    finally:
        for d in drainers:
            if d.poll() is None:
                d.kill()
                d.wait()

    assert sorted(taken) == sorted(ids), "every task taken exactly once"
    assert json.loads(run(BROKER, env, "fill", "0")) == []
