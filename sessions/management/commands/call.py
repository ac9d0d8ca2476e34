from __future__ import annotations

import getpass
import json

from django.core.management.base import BaseCommand, CommandError

from agents.management.database import migrate_if_needed
from agents.management.target import add_target_arguments, find_target
from sessions.principal import Principal
from sessions.turn.admission import AdmissionError
from sessions.direct.calls import call_tool
from sessions.models import Session, ToolCall


def operator() -> Principal:
    """Whoever runs the command, recorded as the approver of calls made with --approve."""
    try:
        name = getpass.getuser()
    except Exception:  # no login name in some containers
        name = "operator"
    return Principal(authenticator="cli", principal_id=name, principal_type="operator")


class Command(BaseCommand):
    help = ("Call one server tool of an agent deterministically (no model) and print its result as JSON; "
            "name a deployed agent, or an agent folder with --dir to try it without deploying it. "
            "A tool declared needs_approval=True is refused unless it allows direct calls or you pass --approve; "
            "with --session it is parked for a decision instead.")

    def add_arguments(self, parser):
        add_target_arguments(parser)
        parser.add_argument("tool")
        parser.add_argument("--input", default="{}", help="the tool input as a JSON object")
        parser.add_argument("--session", help="run under this session's lock, dryRun and asOf")
        parser.add_argument("--approve", action="store_true",
                            help="approve a needs_approval tool's call yourself and run it now")

    def handle(self, *args, slug, folder, tool, input, session, approve, **options):
        try:
            payload = json.loads(input)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--input is not JSON: {exc}") from None
        if folder and session:
            # A session runs the release it started on: the folder's tools would not be the ones called.
            raise CommandError("--session runs a tool of the session's own release: not with --dir (name the "
                               "agent's slug)")
        migrate_if_needed()
        target = find_target(slug, folder)
        agent, slug = target.agent, target.agent.slug
        bound = None
        if session:
            bound = Session.objects.select_related("agent", "deployment").filter(pk=session, agent=agent).first()
            if bound is None:
                raise CommandError(f"no session {session!r} on agent {slug!r}")
        try:
            result = call_tool(agent, tool, payload, session=bound, approved_by=operator() if approve else None,
                               deployment=target.deployment)
        except AdmissionError as exc:
            hint = "; or pass --approve to approve and run it yourself" if exc.code == "approval_required" else ""
            raise CommandError(f"{exc.code}: {exc.message}{hint}") from None
        self.stdout.write(json.dumps(result, indent=2))
        if result.get("status") == ToolCall.Status.AWAITING_APPROVAL:
            self.stderr.write(f"parked: {tool} awaits a decision on session {result['sessionId']} "
                              f"(POST /{slug}/v1/session/{result['sessionId']}/approvals/{result['callId']})")
