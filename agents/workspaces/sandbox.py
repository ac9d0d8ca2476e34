"""The sandbox every process an agent starts runs in: `shell`, agent tool scripts, stdio MCP servers.

Built on bubblewrap (Debian's `bwrap`), started through `prlimit` for the
resource limits. When the server runs as root, the command is dropped inside
to an unprivileged uid of its workspace's own (root is exempt from the
process-count limit, and owns the host's files); otherwise it keeps the
server's uid in a user namespace of its own. Inside:

- new PID, IPC, UTS, cgroup and mount namespaces, no capabilities (the
  bounding set empty too), no_new_privs and no user namespace of its own:
  the process sees its own processes only, and `/proc` is
  theirs (bubblewrap's own environment, the one its PID 1 holds, is the
  allowlisted environment too: it is started with nothing else);
- a root of its own: the system's binaries and libraries read-only (`/usr`
  and the few `/etc` files programs need), a private `/dev` and a private,
  writable `/tmp` and `/dev/shm` (memory, SCRATCH_BYTES each),
  the paths a run is given (the session's workspace read-write, the Python
  and the tool files it runs read-only), nothing of the state root, the
  project, other workspaces or any home directory;
- no network unless the agent asks for it (`local_runtime(network=True)`);
- limits on processes, address space, CPU time and the size of one file.

`AGENTSITE_SANDBOX=off` runs commands as the server's own user instead, for a
single-user machine; with it on (the default) and no working sandbox, `shell`
is not offered at all (fail closed).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import stat
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from django.conf import settings

try:
    import pyseccomp
except (ImportError, OSError, RuntimeError):  # no libseccomp: as root the sandbox cannot start (status says why)
    pyseccomp = None

log = logging.getLogger(__name__)

NOBODY = 65534  # the uid of a run with no place of its own (the probe), when the server is root
# When the server is root, each workspace (or MCP server folder) runs as a uid of its own in this range,
# far above any account's: the process limit counts per uid, so one place's fork bomb cannot starve another.
UID_BASE = 1_000_000
UID_SPAN = 1_000_000
SYSTEM_LINKS = ("bin", "lib", "lib64", "sbin")  # /bin -> usr/bin on a merged-/usr system
ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group",
             "nsswitch.conf", "os-release", "debian_version", "mime.types", "magic", "inputrc")
NETWORK_ETC_FILES = ("resolv.conf", "hosts", "host.conf", "gai.conf", "protocols", "services", "ssl",
                     "ca-certificates", "ca-certificates.conf")
MiB = 1024 * 1024
SCRATCH_BYTES = 64 * MiB  # each of /tmp and /dev/shm inside (memory-backed, bounded on their own)
WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Levels of folders below a workspace's root that the server walks (each holds a descriptor while the walk is
# inside it; `shell` runs up to 8 calls at once): a deeper tree is refused, never walked past.
WALK_DEPTH = 64
CLONE_NEWUSER = 0x10000000
SECCOMP_FD = 9  # the descriptor bubblewrap reads the seccomp filter from, as root


class TooDeep(Exception):
    """A workspace holds folders nested deeper than WALK_DEPTH: it is not walked, so it is not run in."""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use. `disk` bounds the whole workspace, not one file."""

    processes: int = 128
    memory: int = 4096 * MiB   # address space of each process
    cpu_seconds: int = 600     # CPU time of each process; the wall-clock limit is the runtime's own
    disk: int = 1024 * MiB

    def describe(self) -> dict[str, Any]:
        return {"processes": self.processes, "memoryBytes": self.memory, "cpuSeconds": self.cpu_seconds,
                "diskBytes": self.disk}


@dataclass(frozen=True)
class Mounts:
    """What one run sees beside the system: host paths bound at the same place inside."""

    writable: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    # (host path, the path it is seen at inside), read-only: an installation reached through a symlink
    # is seen where its programs name it (agents.workspaces.installs).
    aliases: tuple[tuple[str, str], ...] = ()
    network: bool = False
    limits: Limits = field(default_factory=Limits)
    file_limit: int | None = None  # bytes one file may reach (default: limits.disk)
    user: tuple[int, int] = (NOBODY, NOBODY)  # uid and gid when the server is root (runs_as)


@dataclass(frozen=True)
class Status:
    """Whether this host sandboxes agent processes (`/info` shows it as runtime.sandbox)."""

    mode: str          # "on" or "off" (AGENTSITE_SANDBOX)
    active: bool       # processes run in the sandbox
    reason: str = ""   # why not, when on but not active

    @property
    def offers_shell(self) -> bool:
        """Fail closed: with the sandbox on, a host that cannot build it runs no agent processes."""
        return self.active or self.mode == "off"

    def describe(self, *, network: bool, limits: dict[str, Any]) -> dict[str, Any]:
        """For /info (runtime.sandbox): a local runtime's network and limits, as this host applies them."""
        described: dict[str, Any] = {"active": self.active, "mode": self.mode}
        if self.active:
            described.update(network=network, limits=limits)
        elif self.mode == "off":
            described["network"] = True  # the host's own: nothing is cut off
        if self.reason:
            described["reason"] = self.reason
        return described


def mode() -> str:
    return "off" if str(getattr(settings, "AGENTSITE_SANDBOX", "on")).lower() in ("off", "0", "false", "no") else "on"


def status() -> Status:
    """This host's sandbox, probed once per process and mode."""
    return _probe(mode())


@functools.cache
def _probe(current: str) -> Status:
    if current == "off":
        return Status(mode="off", active=False)
    missing = [tool for tool in tools_needed() if shutil.which(tool) is None]
    if missing:
        reason = f"{', '.join(missing)} not found: install Debian's bubblewrap and util-linux"
    elif os.geteuid() == 0 and pyseccomp is None:
        reason = "libseccomp not found (it refuses nested user namespaces when the server is root): install libseccomp2"
    else:
        try:
            done = subprocess.run(command(["/bin/true"], cwd="/", mounts=Mounts()), env=base_environment(),
                                  capture_output=True, timeout=20, check=False)
            reason = "" if done.returncode == 0 else (done.stderr.decode(errors="replace").strip()
                                                      or f"exit status {done.returncode}")
        except (OSError, subprocess.SubprocessError) as exc:
            reason = str(exc)
    if reason:
        log.error("the workspace sandbox cannot start (%s): shell, agent tool scripts and sandboxed MCP servers "
                  "are not offered; set AGENTSITE_SANDBOX=off only on a single-user machine", reason)
        return Status(mode="on", active=False, reason=f"the sandbox cannot start: {reason}")
    return Status(mode="on", active=True)


def host_allows(offered: frozenset[str]) -> frozenset[str]:
    """A local workspace's tools as this host may offer them: no `shell` where it cannot be sandboxed."""
    return offered if "shell" not in offered or status().offers_shell else offered - {"shell"}


def tools_needed() -> tuple[str, ...]:
    return ("bwrap", "prlimit", "setpriv") if os.geteuid() == 0 else ("bwrap", "prlimit")


def base_environment() -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def runs_as(place: Path | str) -> tuple[int, int]:
    """The host uid and gid of sandboxed processes working in `place`: the server's own, or, when
    it is root, one of the sandbox's range chosen by the place (the same every time)."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    uid = UID_BASE + zlib.crc32(str(place).encode()) % UID_SPAN
    return uid, uid


def command(argv: list[str], *, cwd: str, mounts: Mounts) -> list[str]:
    """`argv` wrapped to run sandboxed in `cwd`. Start it with the environment it should see
    (bubblewrap passes its own on, and shows it as PID 1's) and `close_fds`.

    As root, bubblewrap builds the sandbox with root's right to mount any path,
    and `setpriv` inside drops the command to the place's uid with no
    capabilities, an empty bounding set and no_new_privs (setuid programs under
    /usr stay powerless); a seccomp filter refuses it user namespaces (`unshare`
    and `clone` with CLONE_NEWUSER fail with EPERM, `clone3` with ENOSYS so libc
    falls back to `clone`): in one it would hold every capability again. The
    filter is read from SECCOMP_FD, which a small `sh` opens first. As another
    user, bubblewrap adds a user namespace of its own (`--disable-userns`: no
    nested one), and the command keeps that uid.

    `/tmp` and `/dev/shm` are private, writable (1777) and memory-backed,
    SCRATCH_BYTES each.
    """
    limits = mounts.limits
    wrapper = ["prlimit", f"--nproc={limits.processes}", f"--as={limits.memory}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={mounts.file_limit or limits.disk}", "--core=0", "--"]
    jail = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try"]
    if not mounts.network:
        jail += ["--unshare-net"]
    as_root = os.geteuid() == 0
    if as_root:
        # setpriv needs CAP_SETPCAP to empty the bounding set; it drops all three with the uid.
        jail += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
                 "--seccomp", str(SECCOMP_FD)]
        wrapper = ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', _seccomp_filter(os.getpid()), *wrapper]
    else:
        jail += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
    jail += ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            jail += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            jail += ["--ro-bind", str(path), str(path)]
    # Made 0700 by bubblewrap as root otherwise: the dropped uid could read none of the files below.
    jail += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_FILES + (NETWORK_ETC_FILES if mounts.network else ()):
        if os.path.lexists(f"/etc/{name}"):
            jail += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    jail += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):
        jail += ["--perms", "1777", "--size", str(SCRATCH_BYTES), "--tmpfs", scratch]
    readable = [path for path in mounts.readable if not path.startswith("/usr/")]
    for parent in _parents([*readable, *mounts.writable, *(target for _, target in mounts.aliases)]):
        jail += ["--perms", "0755", "--dir", parent]  # made 0700 otherwise when bubblewrap runs as root
    for path in readable:
        jail += ["--ro-bind", path, path]
    for source, target in mounts.aliases:
        jail += ["--ro-bind", source, target]
    for path in mounts.writable:
        jail += ["--bind", path, path]
    # The root itself is a memory-backed tmpfs: nothing may be written to it once built.
    jail += ["--remount-ro", "/"]
    if as_root:
        # bubblewrap's root holds no capability to enter nobody's directories: nobody changes into it.
        uid, gid = mounts.user
        jail += ["--", "setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--", "env", f"--chdir={cwd}", "--"]
    else:
        jail += ["--chdir", cwd, "--"]
    return wrapper + jail + list(argv)


@functools.cache  # per process: a forked worker reads its own descriptor
def _seccomp_filter(pid: int) -> str:
    """A path to the compiled filter of a sandbox run as root (see `command`): a memory file of this process."""
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    new_user = pyseccomp.Arg(0, pyseccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "unshare", new_user)
    rules.add_rule(pyseccomp.ERRNO(errno.EPERM), "clone", new_user)
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are out of a filter's reach
    fd = os.memfd_create("agentsite-sandbox-seccomp")
    with os.fdopen(os.dup(fd), "wb") as handle:
        rules.export_bpf(handle)
    return f"/proc/{pid}/fd/{fd}"


def _parents(paths: list[str]) -> list[str]:
    """The directories above `paths`, each once, outermost first."""
    found: dict[str, None] = {}
    for path in paths:
        for parent in reversed(Path(path).parents[:-1]):
            found.setdefault(str(parent))
    return sorted(found, key=lambda p: p.count("/"))


@functools.cache  # the same for the life of the process; resolved once, not on every workspace opened
def python_paths() -> tuple[str, ...]:
    """What the server's Python needs to run inside: its environment and the installation under it."""
    return tuple(dict.fromkeys(str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)))


def hand_over(root: Path) -> int:
    """Make a workspace the sandbox's to write, and return the bytes it holds.

    When the server is root the sandbox runs as the workspace's own uid, so
    entries the server wrote (the materialized workspace, file tool writes,
    sent files) change owner. The sandbox may be running meanwhile (calls of one
    step run in parallel), swapping folders for links to host folders: the walk
    (`_entries`) never follows a link, and each entry changes owner by name in a
    directory held open (fchownat with AT_SYMLINK_NOFOLLOW), so a link swapped in
    changes owner itself, never what it points to. A file with more than one
    link is left alone: its other name may be outside the workspace. A tree
    deeper than WALK_DEPTH raises TooDeep (some of it has changed owner by then).
    """
    uid, gid = runs_as(root)
    total = 0
    for dir_fd, name, info in _entries(root):
        total += info.st_blocks * 512
        if info.st_uid != uid and (stat.S_ISDIR(info.st_mode) or info.st_nlink == 1):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    fd = os.open(root, WALK_FLAGS)
    try:
        if os.fstat(fd).st_uid != uid:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)
    return total


def disk_used(root: Path) -> int:
    """Bytes of disk a workspace holds (allocated blocks, so sparse files count what they use).
    TooDeep when a folder is nested deeper than WALK_DEPTH."""
    return sum(info.st_blocks * 512 for _, _, info in _entries(root))


def _entries(top: Path) -> Iterator[tuple[int, str, os.stat_result]]:
    """Every entry under `top`: the descriptor of its directory, its name and its own status (lstat).

    Each directory is opened from its parent's descriptor with O_NOFOLLOW, so a
    folder swapped for a link after it was listed is skipped, never followed; the
    descriptors of the directories being walked stay open meanwhile, so a name
    swapped above cannot redirect the walk. That is WALK_DEPTH descriptors at most:
    a folder below that level raises TooDeep (neither skipped, which would hide
    its files from the size count, nor walked, which would hold a descriptor per
    level of a tree the sandbox can nest as deep as it likes). Entries removed
    meanwhile are skipped.
    """
    try:
        fd = os.open(top, WALK_FLAGS)
    except OSError:
        return
    stack = [(fd, iter(_names(fd)))]
    try:
        while stack:
            fd, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            yield fd, name, info
            if stat.S_ISDIR(info.st_mode):
                if len(stack) > WALK_DEPTH:
                    raise TooDeep(f"the workspace has folders nested more than {WALK_DEPTH} levels deep "
                                  f"(under {name!r}): flatten or delete them before running commands")
                try:
                    child = os.open(name, WALK_FLAGS, dir_fd=fd)
                except OSError:  # gone, or no longer a directory (ELOOP: a link swapped in)
                    continue
                stack.append((child, iter(_names(child))))
    finally:
        for fd, _ in stack:
            os.close(fd)


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []
