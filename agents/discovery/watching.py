"""Reload on save: the agent folders a server serves, deployed again when their files change.

`serve --dev` (or `serve --reload`) runs `watch` in a process of its own.
A change, once its burst of writes is over (an editor's save is several),
makes the folder a new release through `deploy_release`, as `manage.py
deploy` would: new sessions start on it, sessions already started keep
theirs, and content equal to an earlier release activates that one again.
A folder that stops validating is not deployed: the last good release keeps
serving, and its problems are recorded on the agent (`/info`, the
playground) and logged until a save fixes them. A folder of agent folders is
looked through again on a change, so an agent added to it is deployed too.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from django.conf import settings
from django.db import close_old_connections
from watchfiles import DefaultFilter
from watchfiles import watch as changes

from agents.discovery.loaded import AgentFolderError, Problem
from agents.discovery.releases import Deployed, Source, deploy_release, find_agent_folders
from agents.models import Agent

log = logging.getLogger(__name__)

# A save is several writes (a temporary file, a rename, the editor's backup): changes closer than
# STEP_MS together are one, and one deploy follows DEBOUNCE_MS after the first at the latest.
STEP_MS = 50
DEBOUNCE_MS = 1600
DEPLOYED_BY = "reload"


@dataclass
class Outcome:
    """What one change of one folder did: a release (`deployed`) or the problems that kept it out."""
    root: Path
    slug: str
    deployed: Deployed | None = None
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Watched:
    """The folders given (agent folders or folders of them) and the agent each agent folder holds."""
    dirs: list[Path]
    slugs: dict[Path, str] = field(default_factory=dict)  # agent folder → the slug of its last good release

    def roots_of(self, changed: Iterable[str]) -> list[Path]:
        """The agent folders holding the changed paths, new ones in a folder of them included."""
        paths = [Path(p) for p in changed]
        if any(not any(p.is_relative_to(root) for root in self.slugs) for p in paths):
            try:
                for root in find_agent_folders(self.dirs):  # a new agent folder, or one renamed
                    self.slugs.setdefault(root, "")
            except AgentFolderError:  # a given folder was removed: what is left is still watched
                pass
        return sorted(root for root in self.slugs if any(p.is_relative_to(root) for p in paths))


def redeploy(root: Path, watched: Watched) -> Outcome:
    """Deploy `root` again; record (and clear) its problems on its agent."""
    started = time.monotonic()
    outcome = Outcome(root, watched.slugs.get(root, ""))
    try:
        outcome.deployed = deploy_release(root, source=Source(str(root)), deployed_by=DEPLOYED_BY)
    except AgentFolderError as exc:
        outcome.problems = exc.problems
    outcome.seconds = time.monotonic() - started
    if outcome.deployed is not None:
        agent = outcome.deployed.deployment.agent
        watched.slugs[root] = outcome.slug = agent.slug
        agent.clear_folder_problems()
    elif outcome.slug:
        agent = Agent.objects.filter(slug=outcome.slug).first()
        if agent is not None:
            agent.note_folder_problems([{"path": p.path, "message": p.message} for p in outcome.problems])
    return outcome


def report(outcome: Outcome) -> None:
    """The log line of one outcome (the server's log is where an author running serve looks)."""
    if outcome.deployed is not None:
        d = outcome.deployed.deployment
        again = " (the same files as before: activated again)" if outcome.deployed.reused else ""
        log.info("agent %s: v%d deployed from %s in %d ms%s", d.agent.slug, d.version, outcome.root,
                 outcome.seconds * 1000, again)
        return
    serving = Agent.objects.filter(slug=outcome.slug).values_list("active_deployment__version", flat=True).first()
    still = f"v{serving} still serves" if serving else "nothing deployed from it serves"
    log.warning("agent %s: %s does not validate; %s until it does:\n%s", outcome.slug or "(new)", outcome.root,
                still, "\n".join(f"  {p}" for p in outcome.problems))


def watch(watched: Watched, *, stop_event: Any = None) -> None:
    """Deploy each changed folder again, until `stop_event` is set (or the process is stopped)."""
    # The state root may sit inside a folder served (`serve --agents .`): its writes are not edits.
    ignored = DefaultFilter(ignore_paths=[str(Path(settings.STATE_ROOT).resolve())])
    for batch in changes(*watched.dirs, watch_filter=ignored, step=STEP_MS, debounce=DEBOUNCE_MS,
                         stop_event=stop_event, raise_interrupt=False):
        close_old_connections()  # a long idle connection may have been closed by the database
        for root in watched.roots_of(path for _, path in batch):
            try:
                report(redeploy(root, watched))
            except Exception:  # the database went away, a disk filled up: the next save tries again
                log.exception("agent folder %s: reload failed", root)
