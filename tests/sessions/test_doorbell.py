"""Doorbells (sessions.eventlog.doorbell): a ring reaches a listener of its kind, wherever the
state root is, and never through a folder another user could have planted."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from agents import socketdir
from sessions.eventlog import doorbell


@pytest.fixture
def state_root(settings, tmp_path):
    def at(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        settings.STATE_ROOT = path
        return path
    return at


def rung(kind: str) -> bool:
    bell = doorbell.Bell(kind)
    try:
        assert bell.sock is not None, "the bell could not bind its socket"
        doorbell.ring(kind, b"hello")
        return bell.wait(2.0)
    finally:
        if bell.sock is not None:
            bell.sock.close()


def test_a_ring_wakes_a_listener_under_the_state_root(state_root, tmp_path):
    root = state_root(tmp_path / "s")

    assert socketdir.bell_dir() == root / "doorbells"
    assert rung("web")


def test_one_process_is_told_what_happened_and_a_dead_ones_socket_is_cleared(state_root, tmp_path):
    root = state_root(tmp_path / "s")
    bell = doorbell.Bell("keeper")
    try:
        assert doorbell.ring_one("keeper", os.getpid(), b"turn_1")
        assert doorbell.ring_one("keeper", os.getpid(), b"turn_2")
        assert bell.receive(2.0) == [b"turn_1", b"turn_2"]
        assert bell.receive(0.01) == []
    finally:
        bell.sock.close()
    assert not doorbell.ring_one("keeper", os.getpid(), b"turn_3")  # no longer listening
    # A socket left by a process that is gone: nobody is told, and the socket goes.
    gone = subprocess.Popen(["true"])
    gone.wait()
    left = root / "doorbells" / f"keeper-{gone.pid}.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(left))
    assert not doorbell.ring_one("keeper", gone.pid, b"turn_4")
    assert not left.exists()


def test_under_a_long_state_root_the_bells_live_in_a_private_temp_folder(state_root, tmp_path):
    root = state_root(tmp_path / ("long-" * 20) / "state")
    folder = socketdir.bell_dir()

    assert not str(folder).startswith(str(root)) and str(folder).startswith(tempfile.gettempdir())
    assert folder == socketdir.bell_dir_for(root), "every process of the root finds the same folder"
    try:
        assert rung("workers")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        for sock in folder.glob("*.sock"):
            sock.unlink()
        folder.rmdir()


@pytest.mark.skipif(os.getuid() != 0, reason="planting a folder as another user needs root")
def test_a_bell_folder_another_user_made_is_refused(state_root, tmp_path):
    root = state_root(tmp_path / ("long-" * 20) / "planted")
    folder = socketdir.bell_dir()
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)  # nobody's
    try:
        assert doorbell.Bell("web").sock is None, "a listener never binds in a folder it does not own"
        assert socketdir.bell_dir_for(root) == folder
    finally:
        folder.rmdir()
