"""A release's files in the database, so that a process on any host can run it.

A deploy packs the release's `agent/` folder into a deterministic tar.gz (sorted
paths, zero times and owners: the same files give the same bytes) stored beside
the release (`ReleaseBundle`). A process that needs a release and does not find
its folder under its own state root unpacks the bundle there: into a temporary
folder, checked against the release's content hash, then renamed into place.
Processes racing to unpack the same release each rename their own copy; the
first wins and the others drop theirs, so none loads a half-written folder.
"""
from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import uuid
import zlib
from pathlib import Path

from django.conf import settings

from agents.discovery.folder import IGNORED_PARTS, agent_dir, content_hash
from agents.discovery.loaded import AgentFolderError, Problem
from agents.models import Deployment, ReleaseBundle


class ReleaseUnavailable(Exception):
    """A release's files are neither on this host nor (intact) in the database."""


class ReleaseTooLarge(AgentFolderError):
    """A deploy refused: the release's files are over AGENTSITE_RELEASE_MAX_BYTES once packed."""


def pack(root: Path) -> bytes:
    """The tar.gz of `root`'s agent/ folder (paths agent/…), the same bytes for the same files."""
    buffer = io.BytesIO()
    base = agent_dir(root)
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for folder, dirs, files in os.walk(base, followlinks=True):
            dirs[:] = sorted(d for d in dirs if d not in IGNORED_PARTS)
            here = Path(folder)
            tar.addfile(_entry(here.relative_to(root).as_posix(), tarfile.DIRTYPE, 0o755))
            for name in sorted(f for f in files if f not in IGNORED_PARTS):
                path = here / name
                if not path.is_file():
                    continue  # a dangling link, a socket: not part of a release
                data = path.read_bytes()
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                tar.addfile(_entry(path.relative_to(root).as_posix(), tarfile.REGTYPE, mode, len(data)),
                            io.BytesIO(data))
    return buffer.getvalue()


def _entry(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, 0
    return info


def pack_checked(root: Path) -> bytes:
    """`pack`, refused with ReleaseTooLarge over the configured limit."""
    data = pack(root)
    limit = settings.AGENTSITE_RELEASE_MAX_BYTES
    if len(data) > limit:
        raise ReleaseTooLarge(root, [Problem("agent/", f"the release is {len(data)} bytes once packed, over the "
                                             f"limit of {limit} bytes (AGENTSITE_RELEASE_MAX_BYTES): move large "
                                             "files out of the agent folder or raise the limit")])
    return data


def store_bundle(deployment: Deployment, data: bytes) -> None:
    ReleaseBundle.objects.update_or_create(deployment=deployment, defaults={"data": data, "size": len(data)})


def unpack(data: bytes, target: Path, expected_hash: str, name: str) -> Path:
    """Unpack a bundle to `target` (a folder holding agent/), atomically; the folder found there if it exists.

    `name` says which release this is in errors.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(tmp, filter="data")  # refuses absolute paths, links out and devices
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ReleaseUnavailable(f"release {name}: its stored files cannot be unpacked ({exc})") from None
        found = content_hash(tmp) if agent_dir(tmp).is_dir() else ""
        if found != expected_hash:
            raise ReleaseUnavailable(f"release {name}: its stored files do not match its content hash "
                                     f"({found[:12] or 'no agent/ folder'} instead of {expected_hash[:12]})")
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # not another process's copy arriving first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def release_folder(deployment: Deployment) -> Path:
    """The folder (holding agent/) a process loads `deployment` from, unpacked from the database if need be.

    1. This host's copy under its own state root.
    2. A release made before releases were stored: its snapshot (or source
       folder) where the deploying host put it, if that is this host.
    3. Otherwise the stored bundle, unpacked under this host's state root.
    """
    local = deployment.snapshot_dir()
    if agent_dir(local).is_dir():
        return local
    legacy = _legacy_folder(deployment)
    if legacy is not None:
        return legacy
    name = f"{deployment.agent.slug} v{deployment.version}"
    data = ReleaseBundle.objects.filter(deployment=deployment).values_list("data", flat=True).first()
    if data is None:
        where = f" and its snapshot {deployment.snapshot_path} is not on this host" if deployment.snapshot_path else ""
        raise ReleaseUnavailable(f"release {name}: its files are not stored in the database{where}; deploy the "
                                 "agent again from this host")
    return unpack(bytes(data), local, deployment.content_hash, name)


def has_bundle(deployment: Deployment) -> bool:
    return ReleaseBundle.objects.filter(deployment=deployment).exists()


def _legacy_folder(deployment: Deployment) -> Path | None:
    """A release made before releases were stored: its snapshot where the deploying host put it (or, with
    no snapshot, its source folder), if that is on this host."""
    path = Path(deployment.snapshot_path or deployment.source or "")
    if (deployment.snapshot_path or deployment.source) and path.is_absolute() and agent_dir(path).is_dir():
        return path
    return None
