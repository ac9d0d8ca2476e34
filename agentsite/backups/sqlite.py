"""A SQLite database copied out of a running server, and put back.

The copy is SQLite's online backup API (`sqlite3.Connection.backup`). The server's database is in
WAL mode (agentsite.settings), where the backup's read transaction is a snapshot that writers never
wait for: the whole copy is one step, so it cannot be restarted by a write that lands between steps
(in small steps, every write from another connection starts the copy over, and a busy server's
backup never ends). A database in a rollback journal instead is copied in steps of STEP_PAGES with a
pause between them, so a writer waits at most one step. bench/backup.py measures both.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from agentsite.backups import facts
from agentsite.backups.archive import BackupError

STEP_PAGES = 256
STEP_PAUSE = 0.005


def snapshot(source: Path, target: Path, pages: int | None = None) -> dict[str, Any]:
    """Copy the live database at `source` to a new file `target`; the manifest's facts read from the copy.

    `pages` overrides the step size (-1: one step), for measuring.
    """
    if not source.is_file():
        raise BackupError(f"{source}: no database here; point AGENTSITE_STATE_ROOT (or DATABASE_URL) at the "
                          "server's database")
    started = time.monotonic()
    steps = 0

    def progress(status, remaining, total):
        nonlocal steps
        steps += 1

    with contextlib.closing(sqlite3.connect(source, timeout=20)) as live, \
            contextlib.closing(sqlite3.connect(target)) as copy:
        mode = live.execute("PRAGMA journal_mode").fetchone()[0].lower()
        if pages is None:
            pages = -1 if mode == "wal" else STEP_PAGES
        live.backup(copy, pages=pages, sleep=STEP_PAUSE, progress=progress)
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file in the archive
        described = _describe(copy)
    return {**described, "journalMode": mode, "pages": pages, "steps": steps,
            "copySeconds": round(time.monotonic() - started, 3)}


def _describe(db: sqlite3.Connection) -> dict[str, Any]:
    cursor = db.cursor()
    try:
        return facts.describe(cursor)
    except sqlite3.OperationalError as e:
        raise BackupError(f"the database has no agentsite tables ({e}); nothing to back up: run the server "
                          "(or `manage.py migrate`) first") from None


def check_copy(path: Path) -> list[str]:
    """What SQLite's integrity check finds wrong in the file at `path` (nothing: [])."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = [r[0] for r in db.execute("PRAGMA integrity_check").fetchall()]
    return [] if rows == ["ok"] else rows


def is_empty(path: Path) -> bool:
    """No database file, or one without a table."""
    if not path.exists() or path.stat().st_size == 0:
        return True
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0


def put_back(part: Path, target: Path) -> None:
    """Make the copy at `part` the database at `target` (connections to it closed first), replacing any.

    Moved into place from the same folder, so a restore cut short leaves either no database or the whole one.
    """
    placed = target.with_name(f".{target.name}.restoring")
    with open(part, "rb") as src, open(placed, "wb") as dst:
        while chunk := src.read(1024 * 1024):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    for extra in ("-wal", "-shm"):
        Path(f"{target}{extra}").unlink(missing_ok=True)
    os.replace(placed, target)


def remove(path: Path) -> None:
    """Remove the database at `path` with its WAL files (connections to it closed first)."""
    for name in ("", "-wal", "-shm"):
        Path(f"{path}{name}").unlink(missing_ok=True)
