"""The task door (agents.taskdoor): a turn handed to an idle worker by datagram, past the broker, and the
broker again whenever the door is shut or every worker is busy. Real sockets, real queues, a real serve."""
from __future__ import annotations

import logging
import multiprocessing
import re
import threading
import time

import pytest

from agents import taskdoor
from sessions.plumbing import taskqueue
from tests.sessions.test_live_stream import is_type, read_ndjson
from tests.support import run_server


@pytest.fixture
def door_root(settings, tmp_path, monkeypatch):
    settings.STATE_ROOT = tmp_path
    monkeypatch.setattr(taskdoor, "_door", None)
    yield tmp_path
    if taskdoor.opened() is not None:
        taskdoor.opened().sock.close()


def waiting_worker(door) -> tuple[threading.Thread, list]:
    """A worker's read of its tasks, on a thread, once it waits (counted idle)."""
    got: list = []
    tasks = multiprocessing.Queue()
    thread = threading.Thread(target=lambda: got.append(taskdoor.DoorQueue(tasks, door).get()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while taskdoor._idle_workers(door.path.with_name(taskdoor.IDLE)) < 1:
        assert time.monotonic() < deadline, "the worker never waited"
        time.sleep(0.01)
    return thread, got


def test_a_knock_goes_to_a_waiting_worker_and_only_when_one_waits(door_root, settings):
    assert not taskdoor.knock("turn_1"), "nobody holds the door yet"
    door = taskdoor.open_door()
    assert door is not None and (door_root / "doorbells" / "task-door.sock").exists()
    assert not taskdoor.knock("turn_1"), "no worker waits (all busy): the broker takes it"

    thread, got = waiting_worker(door)
    assert taskdoor.knock("turn_1")
    thread.join(10)
    [task] = got
    assert (task["func"], task["args"], task["name"], task[taskdoor.AT_THE_DOOR]) == \
        (settings.AGENTSITE_DOOR_TASK, ("turn_1",), "turn_1", True)
    assert taskdoor._idle_workers(door.path.with_name(taskdoor.IDLE)) == 0, "it is busy now"
    assert not taskdoor.knock("x" * (taskdoor.MAX_ARGUMENT + 1)), "no argument past the size a turn id needs"


def test_a_full_door_refuses_and_a_shut_one_hands_what_it_holds_to_the_broker(door_root):
    door = taskdoor.open_door()
    door.add_idle(1)  # a worker killed while it waited: counted, never reading
    taken = 0
    while taskdoor.knock(f"turn_{taken}"):
        taken += 1
        assert taken < 10_000, "the door's queue never filled"
    assert taken >= 1, "the kernel queues a few before it says the door is full"
    door.shut()
    assert not (door_root / "doorbells" / "task-door.sock").exists()
    assert not taskdoor.knock("turn_late"), "a shut door takes no more"
    handed: list[str] = []
    assert door.drain(handed.append) == taken
    assert handed == [f"turn_{n}" for n in range(taken)]


def test_a_door_another_cluster_opened_since_is_left_to_it(door_root):
    first = taskdoor.open_door()
    second = taskdoor.open_door()
    first.shut()
    assert (door_root / "doorbells" / "task-door.sock").exists(), "the newer cluster's door stays"
    thread, got = waiting_worker(second)
    assert taskdoor.knock("turn_1")
    thread.join(10)
    assert got[0]["args"] == ("turn_1",)
    first.sock.close()


def test_the_task_queue_comes_first_so_a_stop_ends_the_worker(door_root):
    door = taskdoor.open_door()
    door.add_idle(1)
    assert taskdoor.knock("turn_1")
    door.add_idle(-1)
    tasks = multiprocessing.Queue()
    queue = taskdoor.DoorQueue(tasks, door)
    tasks.put("STOP")
    assert tasks._reader.poll(5), "the queue's feeder thread wrote it"
    assert queue.get() == "STOP"
    assert queue.get()["args"] == ("turn_1",)
    tasks.put({"func": "elsewhere", "args": ()})
    assert tasks._reader.poll(5)
    assert queue.get() == {"func": "elsewhere", "args": ()}


def test_door_tasks_have_no_result_for_the_monitor_and_a_failure_is_logged(caplog):
    results = multiprocessing.Queue()
    door_results = taskdoor.DoorResults(results)
    door_results.put({"func": "f", "name": "turn_ok", "success": True, "result": None, taskdoor.AT_THE_DOOR: True})
    with caplog.at_level(logging.ERROR, logger="agents.taskdoor"):
        door_results.put({"func": "f", "name": "turn_bad", "success": False, "result": "boom : Traceback",
                          taskdoor.AT_THE_DOOR: True})
    door_results.put({"func": "f", "name": "queued", "success": True})
    assert results.get(timeout=5)["name"] == "queued"
    assert results.empty()
    assert "Failed 'f' (turn_bad) - boom" in caplog.text


def test_the_door_is_shut_when_turned_off_or_when_django_q2_runs_tasks_inline(door_root, settings, sync_turns,
                                                                              monkeypatch, db):
    door = taskdoor.open_door()
    door.add_idle(1)
    knocked = []
    monkeypatch.setattr(taskdoor, "knock", lambda argument: knocked.append(argument) or True)
    ran = []
    monkeypatch.setattr("sessions.turn.engine.run_turn", ran.append)
    taskqueue.enqueue(settings.AGENTSITE_DOOR_TASK, "turn_inline", task_name="turn_inline")
    assert (knocked, ran) == ([], ["turn_inline"]), "under django-q2's sync mode the turn runs here"
    door.sock.close()
    settings.AGENTSITE_TASK_DOOR = False
    assert taskdoor.open_door() is None


def served_turns(server, n: int) -> list[str]:
    """The turn ids of `n` sessions started one after another, each read to its end."""
    turn_ids = []
    with server.client() as client:
        for i in range(n):
            created = client.post("/support/v1/session", json={"message": f"hello {i}"})
            assert created.status_code == 201, created.text
            events = read_ndjson(client, f"/support/v1/session/{created.json()['sessionId']}/stream",
                                 until=is_type("session.waiting"))
            turn_ids.append(next(e for e in events if e["type"] == "turn.completed")["turnId"])
    return turn_ids


@pytest.mark.timeout(180)
@pytest.mark.parametrize("door", ["1", "0"])
def test_serves_turns_at_the_door_or_through_the_broker(tmp_path, door):
    with run_server(tmp_path / "state", env={"AGENTSITE_LOG_LEVEL": "INFO", "AGENTSITE_TASK_DOOR": door}) as server:
        turn_ids = served_turns(server, 3)
    output = server.output()  # once stopped: the monitor has logged all it was sent
    for turn_id in turn_ids:
        # A worker ran it either way; the monitor heard of it only when the broker carried it.
        assert re.search(rf"processing {turn_id} 'sessions\.turn\.engine\.run_turn'", output), output
        acknowledged = f"Processed 'sessions.turn.engine.run_turn' ({turn_id})" in output
        assert acknowledged == (door == "0"), output
