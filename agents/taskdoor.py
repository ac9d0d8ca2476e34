"""The task door: one task handed to the qcluster's workers by datagram, past the broker.

Through the broker a task goes web → broker (a row, or a Redis list) →
the cluster's pusher → a multiprocessing queue → a worker, whose result
goes back through another queue to the monitor, which acknowledges it in
the broker: three processes and three broker writes for one task. For the
one task that is most of the traffic and needs none of that, running a
turn, whose row is its own queue entry (the worker claims it there with a
conditional update, and the recovery sweep enqueues again any turn left
queued), the cluster also has a door: a Unix datagram socket
(`<sockets folder>/task-door.sock`) that `manage.py qcluster` binds before
it forks. Every worker it forks holds it and waits on it beside the task
queue; the kernel hands each datagram to one of them, and an idle worker is
the one waiting. The datagram is the task's one argument (a turn id); the
function is the setting `AGENTSITE_DOOR_TASK`, never the sender's choice.

`knock` never blocks and never raises: False when nobody holds the door
(no cluster on this machine, or it stopped), or when the queue of knocks is
full (net.unix.max_dgram_qlen, often 10) because every worker is busy; the
sender then enqueues through the broker as before. A task taken at the door
runs inside django-q2's worker loop like any other (its timer, timeout and
recycling count it); only its result is not sent to the monitor, which
would have nothing to acknowledge, and a failure is logged here instead.
"""
from __future__ import annotations

import logging
import os
import queue
import select
import socket
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.socketdir import MAX_PATH, bell_dir, private_dir

log = logging.getLogger(__name__)

NAME = "task-door.sock"
AT_THE_DOOR = "at_the_door"  # marks a task taken at the door, for the results' queue
MAX_ARGUMENT = 200  # bytes: a turn id is far shorter

_door: socket.socket | None = None  # the bound socket, in the cluster and every process it forks
_sender: socket.socket | None = None
_sender_pid = 0


def enabled() -> bool:
    return settings.AGENTSITE_TASK_DOOR


def _path() -> Path | None:
    path = bell_dir() / NAME
    return path if len(str(path)) <= MAX_PATH else None


def open_door() -> socket.socket | None:
    """Bind the door (in `manage.py qcluster`, before it forks); None when it cannot be."""
    global _door
    path = _path()
    if not enabled() or path is None:
        return None
    try:
        if not private_dir(path.parent):
            log.warning("no task door: %s belongs to another user; every task goes through the broker", path.parent)
            return None
        path.unlink(missing_ok=True)  # another cluster's, on the same state root: the newest takes knocks
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        sock.setblocking(False)
    except OSError as exc:
        log.warning("no task door (%s); every task goes through the broker", exc)
        return None
    _door = sock
    return sock


def opened() -> socket.socket | None:
    return _door


def knock(argument: str) -> bool:
    """Hand `AGENTSITE_DOOR_TASK(argument)` to an idle worker of this machine's cluster; whether one took it."""
    global _sender, _sender_pid
    data = argument.encode()
    if not enabled() or len(data) > MAX_ARGUMENT or (path := _path()) is None:
        return False
    if _sender_pid != os.getpid() or _sender is None:
        _sender, _sender_pid = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM), os.getpid()
        _sender.setblocking(False)
    try:
        _sender.sendto(data, str(path))
        return True
    except OSError:  # nobody holds it (refused, gone), or its queue is full (every worker busy)
        return False


class DoorQueue:
    """What a worker reads its tasks from: the cluster's task queue, and the door."""

    def __init__(self, tasks: Any, door: socket.socket):
        self.tasks, self.door = tasks, door
        self.func = settings.AGENTSITE_DOOR_TASK

    def get(self) -> Any:
        # The queue first when both are ready: it is also where the sentinel's STOP comes.
        reader = self.tasks._reader  # the pipe a multiprocessing queue is read from
        while True:
            ready, _, _ = select.select([reader, self.door], [], [])
            if reader in ready:
                try:
                    return self.tasks.get(block=False)
                except queue.Empty:  # another worker took it
                    pass
            if self.door in ready:
                try:
                    data = self.door.recv(MAX_ARGUMENT + 1)
                except BlockingIOError:  # another worker took it
                    continue
                argument = data.decode(errors="replace")
                return {"id": uuid.uuid4().hex, "name": argument, "func": self.func, "args": (argument,),
                        "kwargs": {}, AT_THE_DOOR: True}


class DoorResults:
    """The worker's results queue: a task taken at the door has no broker entry to acknowledge."""

    def __init__(self, results: Any):
        self.results = results

    def put(self, task: dict[str, Any]) -> None:
        if not task.get(AT_THE_DOOR):
            self.results.put(task)
        elif not task["success"]:
            log.error("Failed '%s' (%s) - %s", task["func"], task["name"], task["result"])
