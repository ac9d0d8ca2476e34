"""`ctx.host.files`: an agent's durable file store, by relative POSIX path.

A store, not a filesystem: paths are keys (folders exist only as prefixes),
and a file is written whole. `agents.workspaces.host_files.host_files_fs()` mounts it
as a filesystem a session's workspace can use; `Files` is the store that
mount is bound to.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions.host.checks import (
    FileChanged,
    HostError,
    check_path,
    check_prefix,
    content_bytes,
    sha256,
)
from sessions.models import HostFile

MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    sha256: str
    updated_at: datetime


def _info(row: HostFile) -> FileInfo:
    return FileInfo(path=row.path, size=row.size, sha256=row.sha256, updated_at=row.updated_at)


@dataclass
class Files:
    """`ctx.host.files`: read, write, delete and list the agent's stored files."""

    agent_id: int | None

    def _rows(self):
        if self.agent_id is None:
            raise HostError("no agent here: the file store belongs to an agent")
        return HostFile.objects.filter(agent_id=self.agent_id)

    def read_bytes(self, path: str) -> bytes:
        content = self._rows().filter(path=check_path(path)).values_list("content", flat=True).first()
        if content is None:
            raise FileNotFoundError(f"no file {path!r} in the agent's file store")
        return bytes(content)

    def read(self, path: str) -> str:
        """The file as UTF-8 text."""
        try:
            return self.read_bytes(path).decode("utf-8")
        except UnicodeDecodeError:
            raise HostError(f"file {path!r} is not UTF-8 text: use read_bytes()", "not_text") from None

    def stat(self, path: str) -> FileInfo | None:
        row = self._rows().filter(path=check_path(path)).first()
        return _info(row) if row else None

    def exists(self, path: str) -> bool:
        return self._rows().filter(path=check_path(path)).exists()

    def write(self, path: str, content: str | bytes, *, if_sha256: str | None = None) -> FileInfo:
        """Store `content` (text as UTF-8) at `path`, replacing what is there.

        With `if_sha256`, only if the file's current content has that SHA-256
        (as `stat()` or `FileInfo` gave it): otherwise `FileChanged`, and
        nothing is written. Two writers editing one file cannot then lose
        each other's change.
        """
        path = check_path(path)
        data = content_bytes(content, "AGENTSITE_HOST_FILE_MAX_BYTES", f"file {path!r}")
        fields = {"content": data, "size": len(data), "sha256": sha256(data), "updated_at": timezone.now()}
        rows = self._rows().filter(path=path)
        if if_sha256 is not None:
            if not rows.filter(sha256=if_sha256).update(**fields):
                raise FileChanged(f"file {path!r} changed (or was deleted) since it was read: read it again")
        else:
            for _ in range(MAX_ATTEMPTS):
                if rows.update(**fields):
                    break
                try:
                    with transaction.atomic():
                        HostFile.objects.create(agent_id=self.agent_id, path=path, **fields)
                    break
                except IntegrityError:
                    continue  # created by another writer meanwhile: replace it
            else:
                raise HostError(f"file {path!r} kept changing under this write; try again", "conflict")
        return FileInfo(path=path, size=fields["size"], sha256=fields["sha256"], updated_at=fields["updated_at"])

    def delete(self, path: str) -> bool:
        deleted, _ = self._rows().filter(path=check_path(path)).delete()
        return bool(deleted)

    def list(self, prefix: str = "") -> list[FileInfo]:
        """The files whose path starts with `prefix`, in code point order of their paths."""
        prefix = check_prefix(prefix)
        rows = self._rows().filter(path__startswith=prefix).only("path", "size", "sha256", "updated_at")
        # startswith narrows (on SQLite, LIKE ignores ASCII case); Python decides and orders.
        return sorted((_info(r) for r in rows if r.path.startswith(prefix)), key=lambda f: f.path)
