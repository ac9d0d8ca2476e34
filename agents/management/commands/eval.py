"""`manage.py eval PROJECT_DIR`: run a project's eval cases against a server and report them.

Without `--url` an ephemeral server (a temporary state root, the project deployed alone) is
started for the run and stopped after it. Without a project, `--url URL --agent SLUG` runs the
agent's cases kept in that server's admin (agents.evals.stored), read over its REST API.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agents.evals.cases import MAX_CONCURRENCY, EvalConfig
from agents.evals.discovery import EvalFileError, discover_cases, load_config, select_cases
from agents.evals.reports import junit_xml, print_table, run_json
from agents.evals.runner import CaseResult, CasesUnavailable, fetch_cases, run_cases
from agents.evals.server import ephemeral_server
from agents.serving import NotServing

# Turn workers of an ephemeral server: one per concurrent case up to this many processes.
MAX_EPHEMERAL_WORKERS = 16


class Command(BaseCommand):
    help = ("Run an agent's eval cases (a project's evals/, or those kept in a server's admin); exits non-zero "
            "if any fails.")

    def add_arguments(self, parser):
        parser.add_argument("project", nargs="?", help="the project folder (holding agent/ and evals/); without it "
                                                         "(or with an id where it would be), --url and --agent run "
                                                         "the agent's cases kept in the admin")
        parser.add_argument("ids", nargs="*", help="case ids to run (an id selects the cases under it too)")
        parser.add_argument("--case", action="append", default=[], dest="case_ids",
                            help="a case id to run, as the ids after the project (repeatable)")
        parser.add_argument("--list", action="store_true", help="list the cases and their tags, run nothing")
        parser.add_argument("--json", action="store_true", help="print one JSON object with every case's result")
        parser.add_argument("--junit", metavar="PATH", help="also write a JUnit XML report to PATH")
        parser.add_argument("--tag", action="append", default=[], help="run the cases with this tag (repeatable)")
        parser.add_argument("--url", help="a running server to run against (default: an ephemeral one)")
        parser.add_argument("--token", default=os.environ.get("AGENTSITE_TOKEN"),
                            help="bearer token for --url (default: $AGENTSITE_TOKEN; none: the loopback principal)")
        parser.add_argument("--agent", help="the agent's slug (default: the project folder's name)")
        parser.add_argument("--concurrency", type=int, help="cases at once (default: evals/config.py's max_concurrency)")
        parser.add_argument("--workers", type=int, help="turn workers of the ephemeral server "
                                                        f"(default: the concurrency, at most {MAX_EPHEMERAL_WORKERS})")

    def handle(self, *args, project, ids, tag, case_ids, **options):
        ids = [*ids, *case_ids]
        url = options["url"].rstrip("/") if options["url"] else None
        if project is not None and url and options["agent"] and not Path(project).is_dir():
            project, ids = None, [project, *ids]  # `eval --url U --agent S refund`: an id of the stored cases
        if project is None:
            root, config, slug = None, EvalConfig(), options["agent"]
            if not url or not slug:
                raise CommandError("name a project folder, or pass --url URL and --agent SLUG to run the agent's "
                                   "cases kept in that server's admin")
            try:
                found = fetch_cases(url, slug, options["token"])
            except CasesUnavailable as error:
                raise CommandError(str(error)) from error
            if not found:
                raise CommandError(f"agent {slug!r} has no eval cases kept in the admin of {url}: add them there "
                                   f"(Eval cases) or with PUT /v1/agents/{slug}/eval-cases")
            cases = select_cases(found, ids, tag)
        else:
            root = Path(project)
            try:
                config = load_config(root)
                cases = select_cases(discover_cases(root), ids, tag)
            except EvalFileError as error:
                raise CommandError(str(error)) from error
            slug = options["agent"] or root.resolve().name.lower()
        if not cases:
            raise CommandError("no case matches " + " ".join([*ids, *(f"--tag {t}" for t in tag)]))
        if options["list"]:
            for case in cases:
                self.stdout.write(f"{case.id}" + (f"  [{', '.join(case.tags)}]" if case.tags else ""))
            return
        concurrency = options["concurrency"] or config.max_concurrency
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise CommandError(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
        try:
            if url:
                results = self.run(cases, url, slug, concurrency, options["token"])
            else:
                workers = options["workers"] or min(concurrency, len(cases), MAX_EPHEMERAL_WORKERS)
                with ephemeral_server(Path(settings.BASE_DIR) / "manage.py", root, workers) as url:
                    results = self.run(cases, url, slug, concurrency, None)
        except NotServing as error:
            raise CommandError(str(error)) from error
        duration = self.duration
        links = bool(options["url"])  # an ephemeral server's sessions are gone once it stops
        if options["junit"]:
            Path(options["junit"]).write_bytes(junit_xml(results, duration))
        if options["json"]:
            self.stdout.write(json.dumps(run_json(results, duration, links), indent=2))
        else:
            print_table(results, duration, self.stdout, links)
        if any(not r.passed for r in results):
            sys.exit(1)

    def run(self, cases, url: str, slug: str, concurrency: int, token: str | None) -> list[CaseResult]:
        """The cases on threads, with a progress bar on stderr when it is a terminal; `self.duration` is
        how long they took (a server's start and stop aside)."""
        started = time.monotonic()
        try:
            return self.run_with_progress(cases, url, slug, concurrency, token)
        finally:
            self.duration = time.monotonic() - started

    def run_with_progress(self, cases, url: str, slug: str, concurrency: int, token: str | None) -> list[CaseResult]:
        if not sys.stderr.isatty():
            return run_cases(cases, base_url=url, slug=slug, concurrency=concurrency, token=token)
        lock = threading.Lock()
        columns = (TextColumn("evals"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                   TimeElapsedColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("evals", total=len(cases), failed=0)
            failed = 0

            def done(result: CaseResult) -> None:
                nonlocal failed
                with lock:
                    failed += not result.passed
                    progress.update(task, advance=1, failed=failed)

            return run_cases(cases, base_url=url, slug=slug, concurrency=concurrency, token=token, on_done=done)
