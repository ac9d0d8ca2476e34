"""Reload on save: the agent folders a server serves, deployed again when their files change.

`serve --dev` (or `serve --reload`) runs `watch` in a process of its own.
A change, once its burst of writes is over (an editor's save is several),
makes the folder a new release through `deploy_release`, as `manage.py
deploy` would: new sessions start on it, sessions already started keep
theirs, and content equal to an earlier release activates that one again.
A folder that stops validating is not deployed: the last good release keeps
serving, and its problems are recorded on the agent (`/info`, the
playground) and logged until a save fixes them.

Only each agent folder's `agent/` is watched (a release is made of it alone),
never the rest of a folder served: a state root inside it (`serve --agents .`)
or a project's other files would cost a watch per folder. A folder of agent
folders is looked through every second, so an agent added to it is deployed
and watched too. Nothing that goes wrong in here stops the server: a save
that cannot be deployed is logged, and a watch that fails is started again.

Events alone can miss a save: one made while a watch is being set up again
(after an agent was added), or a file written into a directory so new that
no watch is on it yet. So each folder's files are also compared, by name,
size and time, with what they were when it was last deployed, every second
the folders are quiet; a folder whose files differ is deployed again.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from django.conf import settings
from django.db import close_old_connections
from watchfiles import Change, DefaultFilter
from watchfiles import watch as changes

from agents.discovery.loaded import AgentFolderError, Problem
from agents.discovery.folder import agent_dir
from agents.discovery.releases import Deployed, Source, deploy_release, find_agent_folders
from agents.models import Agent

log = logging.getLogger(__name__)

# A save is several writes (a temporary file, a rename, the editor's backup): changes closer than
# STEP_MS together are one, and one deploy follows DEBOUNCE_MS after the first at the latest.
STEP_MS = 50
DEBOUNCE_MS = 1600
LOOK_MS = 1000  # how often the folders are looked through for agents added, removed or replaced
RETRY_SECONDS = 2.0  # after the watch itself failed (the host's limit on watches, a folder unreadable)
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
    prints: dict[Path, frozenset | None] = field(default_factory=dict)  # its files when last deployed

    def remember(self, root: Path) -> None:
        """Note `root`'s files as they are now, before a deploy reads them (a write during it differs)."""
        self.prints[root] = fingerprint(root)

    def changed_unseen(self) -> list[Path]:
        """Agent folders whose files differ from when they were last deployed."""
        return sorted(root for root in self.slugs if root in self.prints and fingerprint(root) != self.prints[root])

    def roots_of(self, changed: Iterable[str]) -> list[Path]:
        """The agent folders holding the changed paths."""
        paths = [Path(p) for p in changed]
        return sorted(root for root in self.slugs if any(p.is_relative_to(root) for p in paths))

    def added(self) -> list[Path]:
        """Agent folders that appeared in a folder of them since last asked (now watched too)."""
        try:
            found = find_agent_folders(self.dirs)
        except (AgentFolderError, OSError):  # a given folder was removed, or is unreadable: the rest is watched
            found = [d for d in self.dirs if agent_dir(d).is_dir()]
        new = [root for root in found if root not in self.slugs]
        for root in new:
            self.slugs[root] = ""
        return new

    def watched_paths(self) -> dict[Path, int]:
        """Each agent folder's `agent/` that exists, with its inode: one replaced (a branch checked out)
        is a new folder to watch."""
        paths = {}
        for root in self.slugs:
            try:
                paths[agent_dir(root)] = agent_dir(root).stat().st_ino
            except OSError:  # removed: watched again if it comes back
                continue
        return paths


def ignored_filter() -> DefaultFilter:
    """What is not an edit: editors' and tools' own files, and the state root if it sits in a folder."""
    return DefaultFilter(ignore_paths=[str(Path(settings.STATE_ROOT).resolve())])


def fingerprint(root: Path) -> frozenset | None:
    """The name, size and modification time of each file in `root`'s `agent/` (None when it is gone)."""
    top = agent_dir(root)
    if not top.is_dir():
        return None
    keep = ignored_filter()
    seen = set()
    for here, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if keep(Change.added, os.path.join(here, d))]
        for name in files:
            path = os.path.join(here, name)
            if keep(Change.added, path):
                try:
                    st = os.stat(path)
                except OSError:  # removed while looked at: the next look sees it gone
                    continue
                seen.add((path, st.st_size, st.st_mtime_ns))
    return frozenset(seen)


def redeploy(root: Path, watched: Watched) -> Outcome:
    """Deploy `root` again, or record why not on its agent (a deploy clears what was recorded)."""
    started = time.monotonic()
    watched.remember(root)
    outcome = Outcome(root, watched.slugs.get(root, ""))
    try:
        outcome.deployed = deploy_release(root, source=Source(str(root)), deployed_by=DEPLOYED_BY)
    except AgentFolderError as exc:
        outcome.problems = exc.problems
    outcome.seconds = time.monotonic() - started
    if outcome.deployed is not None:  # deploy_release cleared the agent's problems
        watched.slugs[root] = outcome.slug = outcome.deployed.deployment.agent.slug
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
    while stop_event is None or not stop_event.is_set():
        try:
            _watch_until_the_folders_change(watched, stop_event)
        except Exception:
            log.exception("watching the agent folders failed; watching again in %g s", RETRY_SECONDS)
            time.sleep(RETRY_SECONDS)


def _watch_until_the_folders_change(watched: Watched, stop_event: Any) -> None:
    """One watch over the agent folders as they are now; it ends when one is added, removed or replaced."""
    paths = watched.watched_paths()
    if not paths:
        time.sleep(LOOK_MS / 1000)
        _deploy_each(watched.added(), watched)
        return
    for batch in changes(*paths, watch_filter=ignored_filter(), step=STEP_MS, debounce=DEBOUNCE_MS,
                         stop_event=stop_event, raise_interrupt=False, rust_timeout=LOOK_MS, yield_on_timeout=True):
        close_old_connections()  # a long idle connection may have been closed by the database
        _deploy_each(watched.roots_of(path for _, path in batch) if batch else watched.changed_unseen(), watched)
        added = watched.added()
        _deploy_each(added, watched)
        now = watched.watched_paths()
        if added or now != paths:
            # A folder replaced (or back) since: its files changed where this watch was not looking.
            _deploy_each([root for root in watched.slugs if agent_dir(root) in now and root not in added
                          and now[agent_dir(root)] != paths.get(agent_dir(root))], watched)
            return


def _deploy_each(roots: list[Path], watched: Watched) -> None:
    for root in roots:
        try:
            report(redeploy(root, watched))
        except (Exception, SystemExit):  # a tool's module that exits on import; the database gone: the next save tries again
            log.exception("agent folder %s: reload failed", root)
