"""`manage.py backup`: one archive of this server (database, workspaces, manifest); `--verify` checks one."""
from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentsite.backups.archive import BackupError
from agentsite.backups.take import take_backup
from agentsite.backups.verify import verify_archive


class Command(BaseCommand):
    help = ("Write one archive holding the database, the session workspaces and a manifest, while the server "
            "runs; or check an archive (--verify FILE). The secrets key is never in it.")

    def add_arguments(self, parser):
        parser.add_argument("--out", help="the archive's path (default: agentsite-backup-<UTC time>.tar.gz here)")
        parser.add_argument("--json", action="store_true", help="print the manifest (or the check) as JSON")
        parser.add_argument("--allow-missing-key", action="store_true",
                            help="back up secrets encrypted with the state root's own key, which no backup holds "
                                 "(recorded in the manifest)")
        parser.add_argument("--verify", metavar="FILE", help="check FILE's checksums and that it restores "
                                                             "(into a scratch database), instead of backing up")

    def handle(self, *args: Any, out: str | None, json: bool, allow_missing_key: bool, verify: str | None,
               **options: Any) -> None:
        try:
            if verify:
                report = verify_archive(Path(verify))
            else:
                stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
                target = Path(out or f"agentsite-backup-{stamp}.tar.gz")
                report = {"archive": str(target.resolve()), **take_backup(target, allow_missing_key)}
        except BackupError as e:
            raise CommandError(str(e)) from None
        if json:
            self.stdout.write(_json(report))
        elif verify:
            self._say_verified(report)
        else:
            self._say_written(report)

    def _say_verified(self, report: dict[str, Any]) -> None:
        c, restored = report["counts"], report["restored"]
        self.stdout.write(f"{report['archive']}: every part matches its checksum ({', '.join(report['parts'])}) and it "
                          f"restores into a scratch {report['vendor']} database: {c['sessions']} sessions, "
                          f"{c['events']} events, {c['releases']} releases; {restored['lostTurnsEnded']} running "
                          "turn(s) would end as worker_lost.")

    def _say_written(self, m: dict[str, Any]) -> None:
        c, t, key = m["counts"], m["timings"], m["secretsKey"]
        size = Path(m["archive"]).stat().st_size
        self.stdout.write(f"Backup written to {m['archive']} ({size / 1e6:.1f} MB in {t['totalSeconds']:.1f} s; the "
                          f"database copied in {t['database']['copySeconds']:.2f} s): {c['sessions']} sessions, "
                          f"{c['events']} events, {c['releases']} releases, {c['runningTurns']} turn(s) running.")
        if key["configured"]:
            self.stdout.write("The secrets key is not in it: it is AGENTSITE_SECRETS_KEYS. Keep a copy of that key "
                              "apart from the backups; without it no secret restored reads.")
            if key["stateRootKey"] and c["secrets"]:
                self.stdout.write(self.style.WARNING(
                    f"The state root's own key ({key['stateRootKey']}) exists too: run `manage.py secrets rotate` so "
                    "that no secret needs it."))
        elif key["stateRootKey"]:
            self.stdout.write(self.style.WARNING(
                f"The secrets key is not in it: it is {key['stateRootKey']}, which a restore elsewhere will not have."
                + (" This backup's secrets will not be readable (--allow-missing-key)." if key["allowMissingKey"]
                   else "") + " Configure AGENTSITE_SECRETS_KEYS and keep it apart from the backups."))


def _json(value: Any) -> str:
    return json.dumps(value, indent=2)
