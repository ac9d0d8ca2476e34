"""The sandbox against a hostile command that races the server and bursts past its limits.

Real bubblewrap, with the server's view as root (CI runs as root): a command
that keeps swapping folders for links to a root-owned host folder while the
server hands the workspace over to the sandbox's uid; parallel `fallocate`
bursts against the workspace's disk limit; and what the command finds inside
(a writable private /tmp, no capability in its bounding set, no user namespace
of its own).
"""
from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agents.workspaces import disks, sandbox
from agents.workspaces.filesystems import ShellArgs, WorkspaceError
from agents.workspaces.runtimes import LocalRuntime
from agents.workspaces.shell import LocalShellFS
from tests.support import unmount_under

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


@pytest.fixture
def own_disk(tmp_path, settings):
    """A 16 MiB workspace on a filesystem of its own, as a session's is made when the server is root."""
    settings.AGENTSITE_WORKSPACE_DISKS = "auto"
    if reason := disks.available(tmp_path):
        pytest.skip(f"no filesystem of its own for a workspace here: {reason}")
    content = tmp_path / "content"
    content.mkdir()
    (content / "AGENTS.md").write_text("Work here.\n")
    root = tmp_path / "workspaces" / "s1"
    root.parent.mkdir()
    disks.create(root, content, 16 * MiB)
    try:
        yield root
    finally:
        disks.remove(root)
        unmount_under(tmp_path)


def held(root: Path) -> int:
    """Bytes of disk the files under `root` hold (allocated blocks: fallocate allocates without writing)."""
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if p.is_file() and not p.is_symlink())


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


def nest(root: Path, levels: int) -> Path:
    """A folder `levels` deep under `root` (made by descriptor: no path grows long)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return root.joinpath(*["d"] * levels)


def test_a_tree_deeper_than_the_walk_is_refused_not_hidden_from_the_size_count(tmp_path):
    # Deeper than the walk ever went: a file down there was never counted toward the limit.
    bottom = nest(tmp_path, max(sandbox.WALK_DEPTH, 256) + 2)
    with open(bottom / "hidden", "wb") as handle:
        handle.write(os.urandom(2 * MiB))
    with pytest.raises(WorkspaceError, match=f"nested more than {sandbox.WALK_DEPTH} levels deep"):
        shell_fs(tmp_path, disk=1 * MiB).shell(ShellArgs(command="echo ran"))


def test_the_walk_holds_a_bounded_number_of_descriptors(tmp_path):
    nest(tmp_path, 300)
    before = len(os.listdir("/proc/self/fd"))
    most = 0
    with pytest.raises(sandbox.TooDeep):
        for _ in sandbox._entries(tmp_path):
            most = max(most, len(os.listdir("/proc/self/fd")) - before)
    assert most <= sandbox.WALK_DEPTH + 2, most  # + the listing's own
    assert len(os.listdir("/proc/self/fd")) == before  # all closed again


def test_a_command_that_nests_folders_too_deep_is_stopped(tmp_path):
    result = shell_fs(tmp_path).shell(ShellArgs(
        command=f"mkdir -p $(seq -s / {sandbox.WALK_DEPTH + 5}); echo made; sleep 20", timeout_seconds=60))
    assert result["exitCode"] == -9 and "nested more than" in result.get("limitExceeded", ""), result


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


def test_parallel_fallocate_bursts_stay_within_the_disk_limit(own_disk):
    fs = shell_fs(own_disk, disk=16 * MiB)
    assert (own_disk / "AGENTS.md").read_text() == "Work here.\n" and os.path.ismount(own_disk)
    result = fs.shell(ShellArgs(command="for i in $(seq 100); do fallocate -l 15M p$i & done; wait; "
                                        "for i in 1 2 3 4 5 6; do head -c 15728640 /dev/zero > q$i & done; wait; "
                                        "echo done"))
    assert "done" in result["stdout"], result
    assert "No space left on device" in result["stderr"], result
    assert held(own_disk) <= 16 * MiB, held(own_disk)
    # The server's own file tools hit the same wall, and the workspace works again once files go.
    again = fs.shell(ShellArgs(command="rm -f p* q*; fallocate -l 8M big && echo room"))
    assert again["stdout"] == "room\n", again
    assert held(own_disk) <= 16 * MiB


def test_a_workspace_on_its_own_filesystem_is_mounted_again_after_an_unmount(own_disk):
    fs = shell_fs(own_disk, disk=16 * MiB)
    assert fs.shell(ShellArgs(command="echo kept > note"))["exitCode"] == 0
    unmount_under(own_disk.parent)  # as after a reboot: the image is there, nothing is mounted
    assert not os.path.ismount(own_disk) and not (own_disk / "note").exists()
    result = fs.shell(ShellArgs(command="cat note; fallocate -l 20M big"))
    assert result["stdout"] == "kept\n" and os.path.ismount(own_disk), result
    assert held(own_disk) <= 16 * MiB


def test_one_workspace_that_cannot_have_its_own_disk_leaves_the_next_one_its_own(own_disk, caplog, monkeypatch):
    monkeypatch.setattr(disks, "_broken", "")  # whatever this test does, the next ones start clean
    too_big = own_disk.parent.parent / "too-big"
    too_big.mkdir()
    (too_big / "data").write_bytes(os.urandom(20 * MiB))
    with caplog.at_level(logging.WARNING, logger=disks.__name__), pytest.raises(disks.DiskError):
        disks.create(own_disk.parent / "s2", too_big, 16 * MiB)
    assert "the workspace s2 gets no filesystem of its own" in caplog.text, caplog.text
    assert not disks.image_of(own_disk.parent / "s2").exists()

    assert disks.available(own_disk.parent) == ""  # the host still can: the next workspace gets its own
    disks.create(own_disk.parent / "s3", own_disk.parent.parent / "content", 16 * MiB)
    assert os.path.ismount(own_disk.parent / "s3")


def test_removing_a_workspace_unmounts_every_mount_stacked_on_it(own_disk):
    (own_disk / "kept").write_text("on the image\n")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "stacked", str(own_disk)], check=True)
    busy = open(own_disk / "open", "w")  # a command still running: a plain unmount is refused
    try:
        assert disks.remove(own_disk) is True
    finally:
        busy.close()
    assert not os.path.ismount(own_disk) and not disks.image_of(own_disk).exists()
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        assert str(own_disk) not in info.read()
