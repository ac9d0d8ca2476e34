"""The folder of a state root's Unix sockets (the doorbells and the task door), and the datagram
sockets bound there and sent from.

Every process of one state root finds its sockets in the same folder,
`<state root>/doorbells`. A socket's path must fit AF_UNIX's limit: under a
state root whose path is too long for that, the folder is a private one of
the temp directory named after the state root instead.
"""
from __future__ import annotations

import hashlib
import os
import socket
import stat
import tempfile
from pathlib import Path

from django.conf import settings

MAX_PATH = 100  # AF_UNIX paths are limited to about 108 bytes
LONGEST_NAME = len("/workers-4194304.sock")  # the longest socket name: a kind and the largest pid


def bell_dir() -> Path:
    return bell_dir_for(Path(settings.STATE_ROOT))


def bell_dir_for(state_root: Path) -> Path:
    """`<state root>/doorbells`, or a private temp folder of that root's when that path is too long."""
    home = state_root / "doorbells"
    if len(str(home)) + LONGEST_NAME <= MAX_PATH:
        return home
    digest = hashlib.sha256(str(state_root.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"agentsite-bells-{digest}"


def private_dir(path: Path) -> bool:
    """Create `path` for this user only; refuse one another user made (a shared temp directory)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = path.lstat()
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid()


class ForeignFolder(OSError):
    """The sockets' folder belongs to another user (a shared temp directory): nothing is bound in it."""


def bind(path: Path) -> socket.socket:
    """A non-blocking datagram socket bound at `path` (a stale socket there is replaced); raises OSError,
    ForeignFolder when the folder is another user's."""
    if not private_dir(path.parent):
        raise ForeignFolder(f"{path.parent} belongs to another user")
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


_senders: dict[bool, socket.socket] = {}
_sender_pid = 0


def sender(patience: float = 0.0) -> socket.socket:
    """This process's socket to send datagrams from: one that waits up to `patience` seconds for room in
    a full receiver, or one that never waits. A forked child makes its own."""
    global _sender_pid
    if _sender_pid != os.getpid():
        _senders.clear()
        _sender_pid = os.getpid()
    found = _senders.get(patience > 0)
    if found is None:
        found = _senders[patience > 0] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if patience > 0:
            found.settimeout(patience)
        else:
            found.setblocking(False)
    return found
