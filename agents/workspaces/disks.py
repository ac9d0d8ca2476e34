"""A local workspace on a filesystem of its own, so the kernel holds it to its disk limit.

When the server runs as root and the workspaces directory is on a local disk,
a new workspace whose commands run in the sandbox is an ext4 image,
`<workspaces>/.disks/<name>.ext4` (a sparse file of `disk_limit` bytes, so it
takes on the disk only what it holds), mounted through a loop device at the
workspace's directory (nosuid, nodev). A write past the limit fails with
ENOSPC whoever makes it and however many make it at once: parallel
`fallocate` or `dd` in a command, the server's file tools, files sent with a
message. The server reads it through the mount like any directory, and the
mount outlives the process (the next process finds it mounted; after a
reboot, the first use mounts it again). Deleting the workspace unmounts it and
removes the image.

Elsewhere (the server not root: no loop mounts without privilege; a network
filesystem, such as the volume several hosts share, where one image mounted on
two hosts would be corrupted; `AGENTSITE_WORKSPACE_DISKS=off`; or no
mkfs.ext4) the workspace is a plain directory and `shell` watches its size
instead (`agents.workspaces.shell`): a burst of parallel writes can pass the
limit between two looks.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)

IMAGES = ".disks"
# Filesystems on a disk of this host: an image on anything else (NFS, CIFS, FUSE, a cluster filesystem) may be
# mounted by another host too.
LOCAL_TYPES = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "tmpfs", "overlay"})
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
TIMEOUT = 60


class DiskError(Exception):
    """A workspace's image could not be made or mounted (the message says why)."""


def mode() -> str:
    return "off" if str(getattr(settings, "AGENTSITE_WORKSPACE_DISKS", "auto")).lower() in ("off", "0", "false", "no") \
        else "auto"


# Why this host cannot loop-mount at all (the first mount of the process refused: no privilege, no loop device):
# set once, and new workspaces then stay plain directories. A failure of one workspace's own (a seed larger than
# its limit, a full disk, a slow mount) fails that workspace only.
_broken = ""
_mounted = False  # a mount has worked in this process: later failures are the workspace's own
HOST_REFUSALS = ("permission denied", "operation not permitted", "failed to setup loop device",
                 "could not find any free loop device", "no such device", "only root can")
UNMOUNT_TRIES = 8  # a mount stacked on another leaves the one below: unmount until none is left


def available(workspaces: Path) -> str:
    """Why new workspaces under `workspaces` cannot have a filesystem of their own ("" when they can)."""
    if mode() == "off":
        return "AGENTSITE_WORKSPACE_DISKS=off"
    if os.geteuid() != 0:
        return "the server is not root (loop mounts need it)"
    return _broken or _available(str(workspaces))


@functools.cache
def _available(workspaces: str) -> str:
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (install e2fsprogs and mount)"
    if not os.path.exists("/dev/loop-control") and not os.path.exists("/dev/loop0"):
        return "no loop device (load the loop module)"
    kind = filesystem_type(workspaces)
    if kind not in LOCAL_TYPES:
        return f"{workspaces} is on {kind or 'an unknown filesystem'}, not a local disk"
    return ""


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding `path` (the longest mount point above it in /proc/self/mountinfo)."""
    real = os.path.realpath(path)
    found, kind = "", ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
        for line in info:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(found):
                found, kind = point, fields[fields.index("-") + 1]
    return kind


def image_of(root: Path) -> Path:
    return root.parent / IMAGES / f"{root.name}.ext4"


def holds(root: Path) -> bool:
    """Whether the workspace at `root` lives on an image of its own."""
    return image_of(root).is_file()


def ensure(root: Path) -> bool:
    """Whether the workspace at `root` lives on an image of its own, mounted now if it was not."""
    if not holds(root):
        return False
    if not os.path.ismount(root):
        mount(root)
    return True


def create(root: Path, content: Path, size: int) -> None:
    """The workspace's image, `size` bytes, holding a copy of the folder `content`, then mounted at `root`.

    Made beside its final name and linked into place, so it appears whole; if
    another process made one first, that one stays. DiskError says why it could
    not be made (logged too); only a host that cannot loop-mount at all turns
    images off for the rest of the process.
    """
    image = image_of(root)
    image.parent.mkdir(mode=0o700, exist_ok=True)
    staging = image.with_name(f".{image.name}.{secrets.token_hex(4)}")
    linked = False
    try:
        with open(staging, "xb") as handle:
            handle.truncate(size)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-L", "workspace", "-d", str(content),
             "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", str(staging))
        with contextlib.suppress(FileExistsError):  # else another process's image is the workspace
            os.link(staging, image)
            linked = True
        mount(root)
    except (DiskError, OSError) as exc:
        if _broken:
            log.warning("workspaces get no filesystem of their own on this host (%s): their disk limit is watched, "
                        "not enforced by the kernel", _broken)
        else:
            log.warning("the workspace %s gets no filesystem of its own (%s): its disk limit is watched, not "
                        "enforced by the kernel", root.name, exc)
        if linked and not os.path.ismount(root):
            image.unlink(missing_ok=True)
        raise DiskError(str(exc)) from None
    finally:
        staging.unlink(missing_ok=True)


def mount(root: Path) -> None:
    """Mount the workspace's image at `root` unless it is mounted already (one process at a time)."""
    global _broken, _mounted
    image = image_of(root)
    with open(image, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if os.path.ismount(root):
            return
        root.mkdir(exist_ok=True)
        try:
            _run("mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(root))
        except DiskError as exc:
            if not _mounted and any(words in str(exc).lower() for words in HOST_REFUSALS):
                _broken = str(exc)
            raise
        _mounted = True
        with contextlib.suppress(OSError):
            os.rmdir(root / "lost+found")  # mkfs leaves it: not the agent's file (fsck makes it again if needed)


def remove(root: Path) -> bool:
    """Unmount a workspace's image and delete it; False (logged) when `root` is still a mount point after.

    Each mount at `root` is unmounted, lazily when a command still running
    keeps it busy (the kernel lets it go when the command ends), until none is
    left: a mount stacked on the workspace's (or made twice) would otherwise
    leave the workspace's filesystem there, and deleting files at `root` would
    delete them inside it.
    """
    for _ in range(UNMOUNT_TRIES):
        if not os.path.ismount(root):
            break
        try:
            _run("umount", str(root))
        except DiskError:
            try:
                _run("umount", "--lazy", str(root))
            except DiskError as exc:
                log.error("could not unmount the workspace %s (%s): its image and mount stay", root, exc)
                return False
    if os.path.ismount(root):
        log.error("the workspace %s is still mounted after %d unmounts: its image and mount stay", root,
                  UNMOUNT_TRIES)
        return False
    image_of(root).unlink(missing_ok=True)
    return True


def _run(*argv: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise DiskError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise DiskError(f"{argv[0]}: {done.stderr.decode(errors='replace').strip() or done.returncode}")
