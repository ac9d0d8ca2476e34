from __future__ import annotations

import base64
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings

from agents.management.database import migrate_if_needed
from agents.management.target import add_target_arguments, find_target
from agents.models import Deployment
from sessions.principal import Principal
from sessions.turn.admission import AdmissionError, start_session
from sessions.eventlog.events import read_events
from sessions.eventlog.trajectory import build_trajectory, transcript

CLI = Principal(authenticator="cli", principal_id="cli", principal_type="user")


class Command(BaseCommand):
    help = ("Run one turn of an agent in this process and print its transcript (the trajectory as JSON with "
            "--json). Name a deployed agent, or an agent folder with --dir to try it without deploying it.")

    def add_arguments(self, parser):
        add_target_arguments(parser)
        parser.add_argument("--message", "-m", required=True)
        parser.add_argument("--mode", choices=["chat", "task"], default="chat")
        parser.add_argument("--dry-run", action="store_true", help="stub write tools")
        parser.add_argument("--model", default="", help="one of the agent's models (default: its first)")
        parser.add_argument("--as-of", dest="as_of", metavar="ISO-TIME",
                            help="the session's now, e.g. 2026-01-31T12:00:00Z: the instructions say it, "
                                 "tools read it as ctx.now() and time arguments may not pass it")
        parser.add_argument("--file", dest="files", action="append", default=[], metavar="PATH",
                            help="copy a file into the session's workspace (by its name) before the turn "
                                 "(repeatable)")
        parser.add_argument("--json", action="store_true", help="print the trajectory as JSON")

    def handle(self, *args, slug, folder, message, mode, dry_run, model, as_of, files, json: bool, **options):
        options: dict[str, Any] = {"dryRun": True} if dry_run else {}
        if as_of:
            options["asOf"] = instant(as_of)
        migrate_if_needed()
        target = find_target(slug, folder)
        sent = files_to_send(target.deployment, files)
        # The turn runs here rather than on a worker: `run` needs no cluster.
        with override_settings(AGENTSITE_INLINE_TURNS=True):
            try:
                admitted = start_session(target.agent, CLI, message, mode=mode, options=options,
                                         workspace_files=sent, model=model, deployment=target.deployment)
            except AdmissionError as exc:
                hint = " (--model)" if exc.code == "model_not_allowed" else ""
                raise CommandError(f"{exc.message}{hint}") from None
        trajectory = build_trajectory(read_events(admitted.session.id))
        self.stdout.write(dumps(trajectory) if json else transcript(trajectory))


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2)


def instant(raw: str) -> str:
    """--as-of as the session option asOf takes: an ISO-8601 instant with its time zone."""
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--as-of {raw!r} is not an ISO-8601 instant; e.g. 2026-01-31T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise CommandError(f"--as-of {raw!r} needs a time zone, e.g. 2026-01-31T12:00:00Z or +02:00")
    return parsed.isoformat()


def files_to_send(deployment: Deployment, paths: list[str]) -> list[dict[str, Any]]:
    """--file paths as the files a message sends (`workspaceFiles`): each under its own name, within
    the limits the HTTP API keeps, text as UTF-8 and anything else as base64."""
    if not paths:
        return []
    if (deployment.manifest.get("runtime") or {}).get("kind", "local") != "local":
        raise CommandError(f"agent {deployment.agent.slug!r} runs on virtual_runtime: --file cannot write into "
                           "its workspace (put the files in its filesystem)")
    if len(paths) > settings.AGENTSITE_WORKSPACE_FILES_MAX:
        raise CommandError(f"{len(paths)} files, more than {settings.AGENTSITE_WORKSPACE_FILES_MAX} "
                           "(AGENTSITE_WORKSPACE_FILES_MAX)")
    sent: dict[str, dict[str, Any]] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            raise CommandError(f"--file {raw}: no such file")
        if path.name in sent:
            raise CommandError(f"--file {raw}: a file named {path.name!r} is sent already (names must differ)")
        limit = settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES
        if (size := path.stat().st_size) > limit:  # asked before it is read: a large file is never loaded
            raise CommandError(f"--file {raw} is {size} bytes, more than {limit} (AGENTSITE_WORKSPACE_FILE_MAX_BYTES)")
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and "\x00" not in text:  # PostgreSQL's text cannot hold NUL: such files go as base64
            sent[path.name] = {"path": path.name, "content": text, "encoding": "utf-8"}
        else:
            sent[path.name] = {"path": path.name, "content": base64.b64encode(data).decode("ascii"),
                               "encoding": "base64"}
    return list(sent.values())
