from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from sessions.admission import AdmissionError
from sessions.direct import call_tool
from sessions.models import Session


class Command(BaseCommand):
    help = "Call one server tool of an agent deterministically (no model) and print its result as JSON."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("tool")
        parser.add_argument("--input", default="{}", help="the tool input as a JSON object")
        parser.add_argument("--session", help="run under this session's lock, dryRun and asOf")

    def handle(self, *args, slug, tool, input, session, **options):
        agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
        if agent is None:
            raise CommandError(f"no agent {slug!r}; deploy it first (`manage.py deploy DIR`)")
        try:
            payload = json.loads(input)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--input is not JSON: {exc}") from None
        bound = None
        if session:
            bound = Session.objects.select_related("agent", "deployment").filter(pk=session, agent=agent).first()
            if bound is None:
                raise CommandError(f"no session {session!r} on agent {slug!r}")
        try:
            result = call_tool(agent, tool, payload, session=bound)
        except AdmissionError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        self.stdout.write(json.dumps(result, indent=2))
