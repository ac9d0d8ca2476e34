from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from sessions.evals.capture import case_file_text
from sessions.models import Session


class Command(BaseCommand):
    help = "Write an eval case file from a stored session (its first message, files and tool calls)."

    def add_arguments(self, parser):
        parser.add_argument("session", help="a session id (ses_...)")
        parser.add_argument("--out", help="the file to write, e.g. evals/refund_eval.py (default: print it)")

    def handle(self, *args, session, out, **options):
        migrate_if_needed()
        row = Session.objects.select_related("agent").filter(pk=session).first()
        if row is None:
            raise CommandError(f"no session {session!r}")
        text = case_file_text(row)
        if not out:
            self.stdout.write(text, ending="")
            return
        path = Path(out)
        if not path.name.endswith("_eval.py"):
            raise CommandError(f"{out}: an eval file's name ends in _eval.py, or `manage.py eval` does not find it")
        if path.exists():
            raise CommandError(f"{out} exists: choose another name (a captured case never overwrites one)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self.stdout.write(f"wrote {path}")
