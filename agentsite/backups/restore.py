"""Restoring an archive into an empty database and state root, then bringing it to where this code is.

A backup taken while turns ran holds them as `running`. No worker will ever renew their leases, so the
restore ends each at once as the recovery sweep ends a lost worker's turn (`fail_lost_turn`: the calls it
started reported interrupted, `turn.failed` with `worker_lost`), rather than leaving them to lapse.
Queued turns' tasks were in the old server's queue (Redis, or its database's), so each is made due
another task at the restored server's first recovery sweep (`Turn.tasks_lost`); a task that did come
along finds its turn claimed by then and does nothing.
Everything else needs nothing: the snapshot is one transaction's view, so an event log is contiguous, a
parked approval is still parked, and a schedule's slot claimed before the backup is claimed in it
(`Schedule.claim` moves `next_fire_at` and `last_fired_at` in one update).
"""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from agents.management.database import migrate_if_needed
from agentsite.backups import convert, facts, postgres, sqlite
from agentsite.backups.archive import BackupError, empty_folder, folder_is_empty, unpack_archive, unpack_folder
from agentsite.backups.take import RELEASES, WORKSPACES, vendor
from agentsite.databases import database_config
from sessions.models import BackupRun, Turn
from sessions.turn.recovery import fail_lost_turn


def unknown_migrations(applied: dict[str, list[str]]) -> list[str]:
    """Migrations the archive's database has that this code does not know (it was made by a newer agentsite)."""
    known = set(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    return [f"{app}.{name}" for app, names in applied.items() for name in names if (app, name) not in known]


def use_target(url: str) -> dict[str, Any] | None:
    """Make the database at `url` this process's default (`restore --to`); the one configured before, when it
    is PostgreSQL (a PostgreSQL archive is read from a scratch database made there)."""
    shown = _without_password(url)
    before = settings.DATABASES[DEFAULT_DB_ALIAS]
    try:
        target = database_config(url, Path(settings.STATE_ROOT))
    except (ValueError, KeyError) as e:
        raise BackupError(f"--to {shown} is not a database URL ({e}): give postgres://USER@HOST/NAME or "
                          "sqlite:////PATH/db.sqlite3") from None
    target["OPTIONS"].pop("pool", None)  # one connection is enough, and an unreachable server fails at once
    connections.close_all()
    with contextlib.suppress(AttributeError):
        del connections[DEFAULT_DB_ALIAS]
    both = {DEFAULT_DB_ALIAS: target}
    connections.settings[DEFAULT_DB_ALIAS] = connections.configure_settings(both)[DEFAULT_DB_ALIAS]
    try:
        connections[DEFAULT_DB_ALIAS].ensure_connection()
    except DatabaseError as e:
        raise BackupError(f"cannot reach the database {shown} ({str(e).strip().splitlines()[0]}): check --to") from None
    return before if before["ENGINE"] == "agentsite.postgresql" else None


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)).geturl()


def target_problems() -> list[str]:
    """What is already in the target: a database with tables, a workspaces root with files."""
    found = []
    if vendor() == "sqlite":
        if not sqlite.is_empty(Path(settings.DATABASES["default"]["NAME"])):
            found.append(f"the database {settings.DATABASES['default']['NAME']} has tables")
    elif not postgres.is_empty():
        found.append(f"the database {settings.DATABASES['default']['NAME']} has tables")
    if not folder_is_empty(Path(settings.AGENTSITE_WORKSPACES_ROOT)):
        found.append(f"the workspaces root {settings.AGENTSITE_WORKSPACES_ROOT} holds files")
    return found


def clear_database() -> None:
    """Empty this server's database (`restore --force`, or the copy of another vendor's archive)."""
    if vendor() == "sqlite":
        sqlite.remove(Path(settings.DATABASES["default"]["NAME"]))
    elif not postgres.is_empty():
        postgres.clear()


def _postgres_server() -> dict[str, Any] | None:
    return settings.DATABASES["default"] if vendor() == "postgresql" else None


def end_running_turns() -> int:
    """End every turn the backup caught running as a lost worker's; how many were ended."""
    running = Turn.objects.filter(status=Turn.Status.RUNNING).only(
        "id", "session_id", "trigger", "claimed_by", "lease_until", "message", "created_at", "started_at")
    return sum(fail_lost_turn(turn) for turn in running)


def restore_archive(path: Path, force: bool = False, scratch_server: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore the archive at `path` into this server's database and state root; what was restored.

    1. Unpack and check every part (nothing is touched before the whole archive checks out).
    2. Refuse migrations this code does not know, a target that is not empty (unless `force`: then it
       is emptied).
    3. The database (put back whole; or of the other vendor, copied table by table through a scratch
       database, made on `scratch_server` for a PostgreSQL archive when this one is SQLite), the
       workspaces, the release folders no bundle holds.
    4. Migrations forward; running turns ended as lost; the event logs checked.
    """
    root = Path(settings.STATE_ROOT)
    converted = None
    workspaces = Path(settings.AGENTSITE_WORKSPACES_ROOT)
    with tempfile.TemporaryDirectory(dir=root, prefix=".restore-") as scratch:
        parts = Path(scratch)
        manifest = unpack_archive(path, parts)
        held = manifest["database"]["vendor"]
        if unknown := unknown_migrations(manifest["database"]["migrations"]):
            raise BackupError(f"{path} was made by a newer agentsite (migration {unknown[0]} is unknown here): "
                              "restore it with that version or a later one")
        if (problems := target_problems()) and not force:
            raise BackupError(f"the target is not empty ({problems[0]}): restore into an empty database and state "
                              "root, or pass --force to replace what is there")
        server = scratch_server or _postgres_server()
        if held == "postgresql" and server is None:
            raise BackupError(convert.NO_SERVER)
        connections.close_all()
        part = parts / manifest["database"]["part"]
        if held != vendor():
            clear_database()
            converted = convert.copy_database(part, held, server)
        elif held == "sqlite":
            sqlite.put_back(part, Path(settings.DATABASES["default"]["NAME"]))
        else:
            clear_database()
            postgres.put_back(part)
        empty_folder(workspaces)
        unpack_folder(parts / WORKSPACES, workspaces)
        unpack_folder(parts / RELEASES, root)
    migrated = migrate_if_needed() or bool(converted and converted["migrated"])
    with connection.cursor() as cursor:
        counts = facts.counts(cursor)  # as the archive held them
    ended = end_running_turns()
    requeued = Turn.tasks_lost(timezone.now())
    BackupRun.end_restored()  # the scheduled backup that took this archive, caught while it ran
    with connection.cursor() as cursor:
        broken = facts.broken_event_logs(cursor)
    if broken:
        raise BackupError(f"session {broken[0]}'s event log has a gap after the restore; the archive is not "
                          "consistent: restore an older backup")
    return {"archive": str(path), "createdAt": manifest["createdAt"], "vendor": held, "migrated": migrated,
            "lostTurnsEnded": ended, "queuedTurnsRequeued": requeued, "counts": counts, "backedUp": manifest["counts"],
            "secretsKey": manifest["secretsKey"], "convertedTo": vendor() if converted else None,
            "copy": converted}
