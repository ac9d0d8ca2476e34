from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from sessions.turn.admission import AdmissionError
from sessions.handoff import perform, review
from sessions.management.commands.call import operator
from sessions.models import Session


class Command(BaseCommand):
    help = ("Hand a session over to another of its agent's models: print the review (what carries over, what is "
            "lost or transformed), then perform it, all or nothing. With --dry-run only the review is printed.")

    def add_arguments(self, parser):
        parser.add_argument("session", help="a session id (ses_...)")
        parser.add_argument("model", help="the model to move it to, provider:model (one of the agent's models)")
        parser.add_argument("--dry-run", action="store_true", help="print the review and change nothing")

    def handle(self, *args, session, model, dry_run, **options):
        migrate_if_needed()
        row = Session.objects.select_related("agent", "deployment").filter(pk=session).first()
        if row is None:
            raise CommandError(f"no session {session!r}")
        reviewed = review(row, model)
        self.stdout.write(json.dumps(reviewed, indent=2))
        if refusal := reviewed["refusal"]:
            raise CommandError(f"{refusal['code']}: {refusal['message']}")
        if dry_run:
            return
        try:
            done = perform(row, model, reviewed["reviewId"], by=operator())
        except AdmissionError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(f"handed {row.id} over from {done.from_model} to {done.to_model} ({done.id})")
