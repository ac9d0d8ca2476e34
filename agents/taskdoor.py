"""The task door: one task handed to an idle worker of the qcluster by datagram, past the broker.

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
queue, and the kernel hands each datagram to one of the waiting workers.
The datagram is the task's one argument (a turn id); the function is the
setting `AGENTSITE_DOOR_TASK`, never the sender's choice.

Beside the socket, `task-door.idle` counts the workers waiting right now
(each adds itself as it starts to wait and takes itself off as it stops).
`knock` hands a task over only when that count is above zero, so a turn
does not queue behind this machine's busy workers while another machine's
would take it through the broker. The count is a hint: two knocks at once
may find the same idle worker (the second waits for it, at most one task),
and a worker killed while waiting leaves it one too high until the cluster
starts again (knocks then queue as they would in the broker). `knock` never
blocks and never raises; False sends the task through the broker.

A task taken at the door runs inside django-q2's worker loop like any
other (its timer, timeout and recycling count it); only its result is not
sent to the monitor, which would have nothing to acknowledge, and a failure
is logged here instead. A stopping cluster shuts the door first (no new
knocks), and hands what is still in it to the broker once its workers are gone.
"""
from __future__ import annotations

import fcntl
import logging
import os
import queue
import select
import socket
import struct
import uuid
from pathlib import Path
from typing import Any, Callable

from django.conf import settings

from agents.socketdir import MAX_PATH, ForeignFolder, bell_dir, bind, sender

log = logging.getLogger(__name__)

NAME, IDLE = "task-door.sock", "task-door.idle"
AT_THE_DOOR = "at_the_door"  # marks a task taken at the door, for the results' queue
MAX_ARGUMENT = 200  # bytes: a turn id is far shorter
COUNT = struct.Struct("q")


class Door:
    """The bound socket and its idle count, as the cluster opened them (its processes inherit both)."""

    def __init__(self, sock: socket.socket, path: Path, idle_fd: int):
        self.sock, self.path, self.idle_fd = sock, path, idle_fd
        self.inode = os.stat(path).st_ino

    def add_idle(self, n: int) -> None:
        fcntl.lockf(self.idle_fd, fcntl.LOCK_EX)
        try:
            (count,) = COUNT.unpack(os.pread(self.idle_fd, COUNT.size, 0) or COUNT.pack(0))
            os.pwrite(self.idle_fd, COUNT.pack(max(count + n, 0)), 0)
        finally:
            fcntl.lockf(self.idle_fd, fcntl.LOCK_UN)

    def shut(self) -> None:
        """No more knocks: the count goes to zero, and the socket's name goes unless another cluster's took it."""
        os.pwrite(self.idle_fd, COUNT.pack(0), 0)
        try:
            if os.stat(self.path).st_ino == self.inode:
                self.path.unlink()
        except OSError:
            pass

    def drain(self, send: Callable[[str], None]) -> int:
        """Hand each task still waiting in the socket to `send` (the broker); how many there were."""
        handed = 0
        while True:
            try:
                data = self.sock.recv(MAX_ARGUMENT + 1)
            except OSError:  # empty (BlockingIOError) or closed
                return handed
            send(data.decode(errors="replace"))
            handed += 1


_door: Door | None = None  # in the cluster and every process it forks


def enabled() -> bool:
    return settings.AGENTSITE_TASK_DOOR


def _path(name: str) -> Path | None:
    path = bell_dir() / name
    return path if len(str(path)) <= MAX_PATH else None


def open_door() -> Door | None:
    """Bind the door and start its idle count (in `manage.py qcluster`, before it forks); None when it cannot be.
    A door another cluster of this state root opened before is left to it: knocks come to the newest."""
    global _door
    path, idle = _path(NAME), _path(IDLE)
    if not enabled() or path is None or idle is None:
        return None
    try:
        sock = bind(path)
    except ForeignFolder:
        log.warning("no task door: %s belongs to another user; every task goes through the broker", path.parent)
        return None
    except OSError as exc:
        log.warning("no task door (%s); every task goes through the broker", exc)
        return None
    try:
        idle.unlink(missing_ok=True)  # a count of its own, not an earlier cluster's
        idle_fd = os.open(idle, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.pwrite(idle_fd, COUNT.pack(0), 0)
    except OSError as exc:
        sock.close()
        log.warning("no task door (%s); every task goes through the broker", exc)
        return None
    _door = Door(sock, path, idle_fd)
    return _door


def opened() -> Door | None:
    return _door


def _idle_workers(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        data = os.pread(fd, COUNT.size, 0)
    finally:
        os.close(fd)
    return COUNT.unpack(data)[0] if len(data) == COUNT.size else 0


def knock(argument: str) -> bool:
    """Hand `AGENTSITE_DOOR_TASK(argument)` to an idle worker of this machine's cluster; whether it went."""
    data = argument.encode()
    if not enabled() or len(data) > MAX_ARGUMENT or (path := _path(NAME)) is None or (idle := _path(IDLE)) is None:
        return False
    if _idle_workers(idle) <= 0:
        return False
    try:
        sender().sendto(data, str(path))
        return True
    except OSError:  # nobody holds it (refused, gone), or its queue is full
        return False


class DoorQueue:
    """What a worker reads its tasks from: the cluster's task queue, and the door."""

    def __init__(self, tasks: Any, door: Door):
        self.tasks, self.door = tasks, door
        self.func = settings.AGENTSITE_DOOR_TASK

    def get(self) -> Any:
        # The queue first when both are ready: it is also where the sentinel's STOP comes.
        reader = self.tasks._reader  # the pipe a multiprocessing queue is read from
        while True:
            self.door.add_idle(1)
            try:
                ready, _, _ = select.select([reader, self.door.sock], [], [])
            finally:
                self.door.add_idle(-1)
            if reader in ready:
                try:
                    return self.tasks.get(block=False)
                except queue.Empty:  # another worker took it
                    pass
            if self.door.sock in ready:
                try:
                    data = self.door.sock.recv(MAX_ARGUMENT + 1)
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
