"""`backup --verify`: an archive is intact and restores.

Every part's checksum, the database part read whole (SQLite's integrity check, or pg_restore reading
every table's data), then a real `manage.py restore` in a child process into a scratch state root: a
scratch SQLite file, or for a PostgreSQL archive a scratch database on the configured server, dropped
afterwards. The child has no Redis: what the restore enqueues stays in the scratch database.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

from agentsite.backups import postgres, sqlite
from agentsite.backups.archive import ArchiveDamaged, BackupError, unpack_archive
from agentsite.backups.take import vendor

COMPARED = ("sessions", "events", "releases", "turns", "secrets")


def verify_archive(path: Path) -> dict[str, Any]:
    """Check the archive at `path`; what was checked. BackupError (ArchiveDamaged) says what is wrong."""
    path = path.resolve()
    with tempfile.TemporaryDirectory(prefix="agentsite-verify-") as scratch:
        parts = Path(scratch) / "parts"
        parts.mkdir()
        manifest = unpack_archive(path, parts)
        database = manifest["database"]
        part = parts / database["part"]
        if database["vendor"] == "postgresql" and vendor() != "postgresql":
            raise BackupError(f"{path} holds a PostgreSQL database, which is verified by restoring it into a scratch "
                              "database on a PostgreSQL server: run --verify with DATABASE_URL naming one where "
                              "this user may create a database")
        if database["vendor"] == "sqlite":
            if problems := sqlite.check_copy(part):
                raise ArchiveDamaged(f"{path}: part {part.name} fails SQLite's integrity check ({problems[0]})")
        else:
            postgres.check_dump(part)
        part.unlink()
        restored = _restore_in_child(path, Path(scratch) / "state", database["vendor"])
    differ = [k for k in COMPARED if restored["counts"][k] != manifest["counts"][k]]
    if differ:
        raise BackupError(f"{path}: the restored database has {restored['counts'][differ[0]]} {differ[0]}, the "
                          f"manifest says {manifest['counts'][differ[0]]}; the archive is not consistent")
    return {"archive": str(path), "parts": sorted(manifest["parts"]), "vendor": database["vendor"],
            "counts": manifest["counts"], "restored": restored}


def _restore_in_child(path: Path, state_root: Path, vendor: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_TEST_DB")}
    env.update(AGENTSITE_STATE_ROOT=str(state_root), AGENTSITE_WORKSPACES_ROOT=str(state_root / "workspaces"),
               DJANGO_SETTINGS_MODULE="agentsite.settings")
    if vendor == "sqlite":
        return _child(path, env)
    url, tool_env = postgres.libpq_target()
    with postgres.scratch_database("agentsite_verify", f"to restore {path} into") as name:
        scratch_url = url.rsplit("/", 1)[0] + "/" + name
        env["DATABASE_URL"] = scratch_url.replace("postgresql://", "postgres://", 1)
        if "PGPASSWORD" in tool_env:
            env["PGPASSWORD"] = tool_env["PGPASSWORD"]
        return _child(path, env)


def _child(path: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "restore", str(path), "--json"],
                          cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BackupError(f"{path} does not restore into a scratch database: {detail}")
    return json.loads(done.stdout)
