"""Taking a backup: the database's snapshot, the state root's files, the manifest, one archive.

The secrets key is never in the archive. Secrets encrypted only with the state root's development key
would be unreadable after a restore into a new place, so a backup with secrets and no key configured
outside the state root (AGENTSITE_SECRETS_KEYS) is refused unless the caller accepts it
(`allow_missing_key`), which the manifest records.
"""
from __future__ import annotations

import datetime
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from agents.models import Deployment, ReleaseBundle
from agents.secrets.keys import KEY_FILE, parse_keys
from agentsite.backups import postgres, sqlite
from agentsite.backups.archive import BackupError, pack_folder, pack_paths, write_archive

WORKSPACES = "workspaces.tar"
RELEASES = "releases.tar"


def vendor() -> str:
    return connection.vendor  # "sqlite" or "postgresql"


def database_part() -> str:
    return "database.sqlite3" if vendor() == "sqlite" else "database.pgdump"


def key_location() -> dict[str, Any]:
    """Where the key that reads the secrets is: configured (outside the state root) or the state root's own file."""
    configured = bool(parse_keys(getattr(settings, "AGENTSITE_SECRETS_KEYS", "")))
    own = Path(settings.STATE_ROOT) / KEY_FILE
    return {"configured": configured, "stateRootKey": str(own) if own.exists() else None}


def key_refusal(secrets: int, key: dict[str, Any]) -> str | None:
    """Why a backup holding `secrets` secrets cannot be called complete, or None."""
    if secrets and not key["configured"]:
        return (f"{secrets} secret(s) are encrypted with the state root's own key ({key['stateRootKey']}), which no "
                "backup holds: configure AGENTSITE_SECRETS_KEYS and run `manage.py secrets rotate`, keeping the key "
                "apart from the backups, or pass --allow-missing-key to back up without a readable key")
    return None


def legacy_release_folders() -> list[Path]:
    """Folders under the state root of releases the database holds no bundle of (made before bundles were)."""
    bundled = ReleaseBundle.objects.values_list("deployment_id", flat=True)
    root = Path(settings.STATE_ROOT)
    found = []
    for deployment in Deployment.objects.exclude(pk__in=bundled).exclude(snapshot_path="").select_related("agent"):
        if not Path(deployment.snapshot_path).is_absolute() and deployment.snapshot_dir().is_dir():
            found.append(deployment.snapshot_dir().relative_to(root))
    return found


def take_backup(out: Path, allow_missing_key: bool = False, pages: int | None = None) -> dict[str, Any]:
    """Write a backup of this server to `out`; its manifest, with the timings.

    1. The database's snapshot (SQLite's online backup, or pg_dump), into a scratch folder beside `out`.
    2. Its facts decide the key check before anything is archived.
    3. The workspaces root and the release folders no bundle holds, as tars.
    4. The archive, written whole and then moved into place.
    """
    started = time.monotonic()
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    key = key_location()
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".backup-") as scratch:
        folder = Path(scratch)
        database = folder / database_part()
        if vendor() == "sqlite":
            described = sqlite.snapshot(Path(settings.DATABASES["default"]["NAME"]), database, pages)
        else:
            described = postgres.dump(database)
        refusal = key_refusal(described["counts"]["secrets"], key)
        if refusal and not allow_missing_key:
            raise BackupError(refusal)
        files_started = time.monotonic()
        workspaces = pack_folder(Path(settings.AGENTSITE_WORKSPACES_ROOT), folder / WORKSPACES)
        legacy = legacy_release_folders()
        releases = folder / RELEASES
        pack_paths(Path(settings.STATE_ROOT), legacy, releases)
        manifest = {
            "agentsiteVersion": settings.SPECTACULAR_SETTINGS["VERSION"],
            "createdAt": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "database": {"vendor": vendor(), "part": database.name, "migrations": described.pop("migrations")},
            "counts": described.pop("counts"),
            "releaseFolders": [str(p) for p in legacy],
            "secretsKey": {**key, "allowMissingKey": bool(refusal and allow_missing_key), "inArchive": False},
        }
        archive_started = time.monotonic()
        manifest = write_archive(out, manifest, [database, workspaces, releases])
    manifest["timings"] = {"database": described, "filesSeconds": round(archive_started - files_started, 3),
                           "archiveSeconds": round(time.monotonic() - archive_started, 3),
                           "totalSeconds": round(time.monotonic() - started, 3)}
    return manifest
