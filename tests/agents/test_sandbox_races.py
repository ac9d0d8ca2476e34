"""The sandbox against a hostile command that races the server and bursts past its limits.

Real bubblewrap, with the server's view as root (CI runs as root): a command
that keeps swapping folders for links to a root-owned host folder while the
server hands the workspace over to the sandbox's uid; parallel `fallocate`
bursts against the workspace's disk limit; and what the command finds inside
(a writable private /tmp, no capability in its bounding set, no user namespace
of its own).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agents.workspaces import sandbox
from agents.workspaces.filesystems import ShellArgs
from agents.workspaces.runtimes import LocalRuntime
from agents.workspaces.shell import LocalShellFS

MiB = 1024 * 1024

pytestmark = pytest.mark.skipif(not sandbox.status().active, reason="the sandbox cannot start on this host")

SWAPPER = """\
import os, sys, time
pairs, seconds = int(sys.argv[1]), float(sys.argv[2])
target = sys.argv[3]
for i in range(pairs):
    os.makedirs(f"d{i}/inner", exist_ok=True)
    for n in range(3):
        open(f"d{i}/f{n}", "w").close()
        open(f"d{i}/inner/f{n}", "w").close()
    os.symlink(target, f"l{i}")
open("ready", "w").close()
end = time.monotonic() + seconds
while time.monotonic() < end:
    for i in range(pairs):
        os.rename(f"d{i}", f"t{i}")
        os.rename(f"l{i}", f"d{i}")
        os.rename(f"d{i}", f"l{i}")
        os.rename(f"t{i}", f"d{i}")
"""


def shell_fs(root: Path, disk: int = 1024 * MiB) -> LocalShellFS:
    mounts = sandbox.Mounts(readable=sandbox.python_paths(), limits=LocalRuntime(disk_limit=disk).limits())
    return LocalShellFS(root, mounts=mounts, timeout=60)


def ownership(folder: Path) -> set[tuple[str, int, int]]:
    return {(str(p), p.lstat().st_uid, p.lstat().st_gid) for p in [folder, *folder.rglob("*")]}


def test_handing_the_workspace_over_never_follows_a_folder_swapped_for_a_link(tmp_path):
    host = tmp_path / "host"  # root's, outside the workspace
    (host / "sub").mkdir(parents=True)
    for name in ("a", "b", "sub/c"):
        (host / name).write_text("root's\n")
    before = ownership(host)
    assert {uid for _, uid, _ in before} == {0}
    root = tmp_path / "ws"
    root.mkdir()
    (root / "swapper.py").write_text(SWAPPER)
    fs = shell_fs(root)
    results = []
    racer = threading.Thread(target=lambda: results.append(
        fs.shell(ShellArgs(command=f"python3 swapper.py 40 4 {host}", timeout_seconds=60))))
    racer.start()
    try:
        deadline = time.monotonic() + 30
        while not (root / "ready").exists():
            assert time.monotonic() < deadline and racer.is_alive(), results
            time.sleep(0.01)
        rounds = 0
        while racer.is_alive():
            sandbox.hand_over(root)  # what every `shell` call of the step does before it starts
            rounds += 1
    finally:
        racer.join()
    assert results and results[0]["exitCode"] == 0, results
    assert rounds > 20, rounds
    assert ownership(host) == before


def test_a_command_has_a_private_writable_tmp_and_dev_shm(tmp_path):
    fs = shell_fs(tmp_path)
    result = fs.shell(ShellArgs(command="f=$(mktemp) && echo hi > $f && cat $f && mktemp -d && "
                                        "g=$(mktemp -p /dev/shm) && echo shm > $g && cat $g"))
    assert result["exitCode"] == 0, result
    assert result["stdout"].splitlines()[0] == "hi" and result["stdout"].splitlines()[-1] == "shm", result
    again = fs.shell(ShellArgs(command="find /tmp /dev/shm -name 'tmp.*' | wc -l"))
    assert again["stdout"].strip() == "0", again  # each call's own: nothing of the last one is left
    assert not list(tmp_path.iterdir())  # and none of it is in the workspace


def test_a_command_holds_no_capability_not_even_in_its_bounding_set(tmp_path):
    result = shell_fs(tmp_path).shell(ShellArgs(command="grep ^Cap /proc/self/status"))
    caps = dict(line.split(":\t") for line in result["stdout"].splitlines())
    assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, result
    assert all(int(value, 16) == 0 for value in caps.values()), caps


def test_a_command_cannot_make_a_user_namespace_of_its_own(tmp_path):
    probe = "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); " \
            "print(libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))"
    result = shell_fs(tmp_path).shell(ShellArgs(
        command=f"unshare --user --map-root-user id; echo unshare=$?; python3 -c '{probe}'"))
    assert "uid=0" not in result["stdout"], result
    assert "unshare=1" in result["stdout"], result
    assert result["stdout"].splitlines()[-1].startswith("-1 "), result
