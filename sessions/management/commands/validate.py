from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from agents.discovery import AgentFolderError, load_agent_folder
from sessions.mcp.check import check_server, report, stop_all


class Command(BaseCommand):
    help = ("Validate agent folders without deploying them; every problem names its file and the fix. "
            "--check-mcp also starts each MCP server they declare and lists its tools.")

    def add_arguments(self, parser):
        parser.add_argument("dirs", nargs="+", help="agent folders (each holding agent/)")
        parser.add_argument("--check-mcp", action="store_true",
                            help="start each declared MCP server (as a turn would, sandboxed) and list its tools; "
                                 "a server that fails fails the validation. ${VAR}s are read from the environment")

    def handle(self, *args, dirs, check_mcp=False, **options):
        failed = False
        try:
            for raw in dirs:
                failed |= not self.validate(Path(raw), check_mcp)
        finally:
            stop_all()
        if failed:
            raise CommandError("validation failed")

    def validate(self, root: Path, check_mcp: bool) -> bool:
        try:
            loaded = load_agent_folder(root)
        except AgentFolderError as exc:
            self.stderr.write(f"{root}: invalid")
            for problem in exc.problems:
                self.stderr.write(f"  {problem}")
            return False
        for warning in loaded.warnings:
            self.stdout.write(f"  warning: {warning}")
        tools = ", ".join(sorted(loaded.tools)) or "no tools"
        self.stdout.write(f"{root}: ok ({loaded.slug}, {loaded.model}, {tools})")
        ok = True
        for server in loaded.mcp if check_mcp else ():
            listed, error = check_server(server, loaded.root)
            (self.stderr if error else self.stdout).write(f"  {report(server, listed, error)}")
            ok = ok and not error
        return ok
