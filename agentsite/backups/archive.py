"""The backup archive: a gzip'd tar whose first member, `manifest.json`, names every other part's sha256.

Parts are whole files, each checked on its own, so a damaged archive names the damaged part:
`database.sqlite3` (a SQLite file) or `database.pgdump` (pg_dump's custom format), `workspaces.tar`
(the workspaces root) and `releases.tar` (release folders the database has no bundle of). The
manifest's `database.vendor` and `database.part` say how the database part is read, so a reader for
another vendor can be added without changing the format. The gzip stream's own CRC covers every byte,
headers and padding included.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import Any

FORMAT = 1
MANIFEST = "manifest.json"
CHUNK = 1024 * 1024
LARGE_FILE = 64 * 1024 * 1024


class BackupError(Exception):
    """A backup, verify or restore refused or failed; its message is one line that names the fix."""


class ArchiveDamaged(BackupError):
    """The archive is not what the backup wrote."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_archive(out: Path, manifest: dict[str, Any], parts: list[Path]) -> dict[str, Any]:
    """Write `parts` and the manifest (with their checksums added) to `out`, whole or not at all.

    gzip level 1: the database dominates and a fast level halves it as well as level 9 nearly does.
    """
    manifest = {**manifest, "format": FORMAT,
                "parts": {p.name: {"sha256": sha256_of(p), "bytes": p.stat().st_size} for p in parts}}
    text = json.dumps(manifest, indent=2, sort_keys=True).encode()
    partial = out.with_name(f".{out.name}.partial")
    try:
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mode = len(text), 0o600
            tar.addfile(info, io.BytesIO(text))
            for part in parts:
                tar.add(part, arcname=part.name, recursive=False)
        os.chmod(partial, 0o600)  # it holds every conversation
        _sync(partial)  # on disk before its name says it is whole (the parts it packs never are: scratch)
        os.replace(partial, out)
        _sync(out.parent)
    finally:
        partial.unlink(missing_ok=True)
    return manifest


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unpack_archive(path: Path, into: Path) -> dict[str, Any]:
    """Unpack the parts of the archive at `path` into `into`, each checked; its manifest.

    1. The manifest comes first; its format must be one this code reads.
    2. Each part is streamed to `into` while its sha256 is taken, then compared with the manifest's.
    3. The gzip stream is read to its end, so its CRC and length are checked too.
    """
    if not path.is_file():
        raise BackupError(f"{path}: no such file; give the path of an archive `manage.py backup` wrote")
    try:
        with gzip.open(path, "rb") as stream:
            manifest = _unpack_stream(stream, path, into)
            while stream.read(CHUNK):
                pass
    except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
        raise ArchiveDamaged(f"{path} is damaged ({_reason(e)}): it is not the file the backup wrote; "
                             "use another copy or take a new backup") from None
    return manifest


def _unpack_stream(stream, path: Path, into: Path) -> dict[str, Any]:
    manifest: dict[str, Any] | None = None
    seen: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            source = tar.extractfile(member)
            if source is None:
                raise ArchiveDamaged(f"{path}: {member.name} is not a file; this is not an archive of `manage.py backup`")
            if manifest is None:
                manifest = _read_manifest(member, source.read(), path)
                continue
            expected = manifest["parts"].get(member.name)
            if expected is None or "/" in member.name:
                raise ArchiveDamaged(f"{path}: {member.name} is not a part its manifest lists; the archive was changed")
            digest = hashlib.sha256()
            with open(into / member.name, "wb") as out:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != expected["sha256"]:
                raise ArchiveDamaged(f"{path}: part {member.name} does not match its checksum; the archive is "
                                     "damaged: use another copy or take a new backup")
            seen.add(member.name)
    if manifest is None:
        raise ArchiveDamaged(f"{path} holds nothing; this is not an archive of `manage.py backup`")
    if missing := sorted(set(manifest["parts"]) - seen):
        raise ArchiveDamaged(f"{path}: part {missing[0]} is missing; the archive was cut short: use another copy")
    return manifest


def _read_manifest(member: tarfile.TarInfo, data: bytes, path: Path) -> dict[str, Any]:
    if member.name != MANIFEST:
        raise ArchiveDamaged(f"{path} does not start with {MANIFEST}; this is not an archive of `manage.py backup`")
    try:
        manifest = json.loads(data)
    except ValueError:
        raise ArchiveDamaged(f"{path}: {MANIFEST} is not JSON; the archive is damaged: use another copy") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is in backup format {manifest.get('format')!r}, this agentsite reads {FORMAT}: "
                          "restore it with the agentsite version that wrote it")
    return manifest


def _reason(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def pack_folder(folder: Path, out: Path) -> Path:
    """`folder` as a plain tar at `out` (an empty one when `folder` does not exist): links stay links.

    The server may be writing there meanwhile: a file gone before it is read is left out, and a file is
    read whole before its header is written, so one that shrinks or grows meanwhile is stored as read.
    """
    with tarfile.open(out, "w") as tar:
        if not folder.is_dir():
            return out
        for top, dirs, files in os.walk(folder):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                path = Path(top) / name
                try:
                    _add_as_read(tar, path, str(path.relative_to(folder)))
                except FileNotFoundError:
                    continue
    return out


def _add_as_read(tar: tarfile.TarFile, path: Path, arcname: str) -> None:
    info = tar.gettarinfo(str(path), arcname)
    if info is None:  # a socket: nothing a restore could use
        return
    if not info.isreg():
        tar.addfile(info)
        return
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size > LARGE_FILE:  # streamed: a large file changing now fails the backup
            info.size = os.fstat(f.fileno()).st_size
            tar.addfile(info, f)
            return
        data = f.read()
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def pack_paths(root: Path, relatives: list[Path], out: Path) -> Path:
    """The folders `relatives` (relative to `root`) as one plain tar at `out`, named by their relative paths."""
    with tarfile.open(out, "w") as tar:
        for relative in relatives:
            tar.add(root / relative, arcname=str(relative))
    return out


def unpack_folder(tar_path: Path, folder: Path) -> None:
    """Unpack a tar `pack_folder` made into `folder`, owners and modes kept, nothing placed outside it."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "r") as tar:
        tar.extractall(folder, filter="tar")


def folder_is_empty(folder: Path) -> bool:
    return not folder.is_dir() or not any(folder.iterdir())


def empty_folder(folder: Path) -> None:
    """Remove what `folder` holds, keeping the folder (it may be a mount point)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
