"""`manage.py restore FILE`: an archive of `manage.py backup` into an empty database and state root."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentsite.backups.archive import BackupError
from agentsite.backups.restore import restore_archive, use_target


class Command(BaseCommand):
    help = ("Restore an archive of `manage.py backup` into this server's database and state root, which must be "
            "empty (--force replaces them), then migrate forward and end the turns it caught running as lost.")

    def add_arguments(self, parser):
        parser.add_argument("file", help="the archive")
        parser.add_argument("--force", action="store_true",
                            help="replace the database's tables and the workspaces if there are any")
        parser.add_argument("--to", metavar="DATABASE_URL",
                            help="restore into this database instead of the configured one, of either vendor (a "
                                 "SQLite archive into PostgreSQL and back); a PostgreSQL archive going into SQLite "
                                 "is read from a scratch database on the configured PostgreSQL server")
        parser.add_argument("--json", action="store_true", help="print what was restored as JSON")

    def handle(self, *args: Any, file: str, force: bool, to: str | None, json: bool, **options: Any) -> None:
        try:
            scratch_server = use_target(to) if to else None
            report = restore_archive(Path(file).resolve(), force=force, scratch_server=scratch_server)
        except BackupError as e:
            raise CommandError(str(e)) from None
        if json:
            self.stdout.write(_json(report))
            return
        c = report["counts"]
        into = f" into {report['convertedTo']} (copied from {report['vendor']})" if report["convertedTo"] else ""
        self.stdout.write(f"Restored {report['archive']}{into} (taken {report['createdAt']}): {c['sessions']} sessions, "
                          f"{c['events']} events, {c['releases']} releases; {report['lostTurnsEnded']} turn(s) it "
                          f"caught running ended as worker_lost, {report['queuedTurnsRequeued']} queued turn(s) due "
                          "again at the server's first recovery sweep"
                          + ("; migrated forward." if report["migrated"] else "."))
        if c["secrets"] and not report["secretsKey"]["configured"]:
            self.stdout.write(self.style.WARNING(
                f"{c['secrets']} secret(s) were encrypted with the old state root's own key: they read only if that "
                "key file is put in this state root (secrets.key)."))


def _json(value: Any) -> str:
    return json.dumps(value, indent=2)
