"""Doorbells: instant cross-process wake-ups on one machine, for the embedded default.

Without Redis the channel layer lives in each process's memory, so a worker
cannot wake a web process's stream readers, and django-q2's ORM broker only
finds new tasks by polling. A doorbell is a Unix datagram socket under the
state root, one per listening process (`<kind>-<pid>.sock`); ringing sends a
datagram to every socket of a kind. A bell is only a hint, like the channel
layer's wake-ups: listeners still re-read the database, and fall back to
polling when a bell is lost or the sockets are unavailable.

The sockets' folder is `agents.socketdir`'s: under the state root, or a
private temp folder of its when that path is too long for AF_UNIX.
"""
from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
from pathlib import Path
from typing import Callable

from agents import socketdir
from agents.socketdir import MAX_PATH, bell_dir

log = logging.getLogger(__name__)


def _path(kind: str, pid: int | None = None) -> Path | None:
    path = bell_dir() / f"{kind}-{pid or os.getpid()}.sock"
    return path if len(str(path)) <= MAX_PATH else None


def ring(kind: str, payload: bytes = b"", patience: float = 0.0) -> None:
    """Wake every listener of `kind`; never raises.

    A listener's queue holds only a few datagrams (net.unix.max_dgram_qlen, often 10).
    A bell that only says "wake up" loses nothing when it is full: the listener is awake.
    One that says what happened (`patience` > 0) waits up to that long for room instead,
    so a burst of rings slows its sender down rather than dropping what they say.
    """
    try:
        paths = list(bell_dir().glob(f"{kind}-*.sock"))
    except OSError:
        return
    if not paths:
        return
    sender = socketdir.sender(patience)
    for path in paths:
        _send(sender, path, payload)  # one that is full (past the patience) is awake: readers poll what is lost


def ring_one(kind: str, pid: int, payload: bytes) -> bool:
    """Tell one process's listener of `kind`; whether it was there to be told (never raises)."""
    path = _path(kind, pid)
    return path is not None and _send(socketdir.sender(), path, payload)


def _send(sender: socket.socket, path: Path, payload: bytes) -> bool:
    try:
        sender.sendto(payload, str(path))
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        _unlink_stale(path)
    except (BlockingIOError, TimeoutError, OSError):
        pass
    return False


def _unlink_stale(path: Path) -> None:
    """A socket nobody listens on belongs to a dead process."""
    try:
        pid = int(path.stem.rsplit("-", 1)[1])
        os.kill(pid, 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
    except (ValueError, PermissionError, OSError):
        pass


def _bind(kind: str) -> socket.socket | None:
    path = _path(kind)
    if path is None:
        return None
    try:
        return socketdir.bind(path)
    except socketdir.ForeignFolder:
        log.warning("no %s doorbell: %s belongs to another user; falling back to polling", kind, path.parent)
    except OSError as exc:
        log.warning("no %s doorbell (%s); falling back to polling", kind, exc)
    return None


class Bell:
    """A blocking listener, for a sync loop such as the broker's dequeue."""

    def __init__(self, kind: str):
        self.kind = kind
        self.pid = os.getpid()
        self.sock = _bind(kind)

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or `timeout`; True if rung. Drains queued rings."""
        return bool(self.receive(timeout))

    def receive(self, timeout: float) -> list[bytes]:
        """What the rings since the last call said, waiting up to `timeout` for the first."""
        if self.sock is None:
            select.select([], [], [], timeout)
            return []
        ready, _, _ = select.select([self.sock], [], [], timeout)
        said = []
        while ready:
            try:
                said.append(self.sock.recv(256))
            except BlockingIOError:
                break
        return said


_async_bells: dict[str, int] = {}


async def listen(kind: str, on_ring: Callable[[bytes], None]) -> None:
    """Attach a listener to the running event loop, once per process and kind."""
    if _async_bells.get(kind) == os.getpid():
        return
    _async_bells[kind] = os.getpid()
    sock = _bind(kind)
    if sock is None:
        return

    class Protocol(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr) -> None:
            on_ring(data)

    await asyncio.get_running_loop().create_datagram_endpoint(Protocol, sock=sock)
