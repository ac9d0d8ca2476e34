"""Deploying a folder as the agent's active release, and loading a release once per process."""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from django.conf import settings
from django.db import transaction

from agents.discovery.bundles import has_bundle, pack_checked, release_folder, store_bundle, unpack
from agents.discovery.folder import agent_dir, load_agent_folder
from agents.discovery.loaded import AgentFolderError, LoadedAgent, Problem
from agents.models import Agent as AgentRow
from agents.models import Deployment, snapshot_location
from agents.signals import deployment_activated
from agents.workspaces.runtimes import LocalRuntime


SCRATCH_KEPT = 5  # an agent's scratch copies kept besides those its sessions run on
CONSOLE = "console"  # the source kind of a release saved from data (agents.console), not from a folder


class KindConflict(AgentFolderError):
    """A slug is one kind's at a time: a folder deployed over a console agent (or a console save over a
    folder agent) is refused unless told to replace it."""


class AgentExists(AgentFolderError):
    """A release meant to be an agent's first (a console agent created) for a slug that has releases."""


class StaleRelease(AgentFolderError):
    """A change made on a release that is no longer the active one (another save came first)."""


@dataclass(frozen=True)
class Source:
    """Where a release came from: a folder, or a repository (URL without credentials, ref, commit, path)."""

    location: str
    kind: str = "folder"
    ref: str = ""
    commit: str = ""
    path: str = ""


@dataclass(frozen=True)
class Deployed:
    deployment: Deployment
    reused: bool  # the content matched an earlier release, which is now the active one


def deploy_agent_folder(root: Path | str, slug: str | None = None, **options: Any) -> Deployment:
    """Validate a folder and make it the agent's active release (`deploy_release`'s deployment)."""
    return deploy_release(root, slug, **options).deployment


def deploy_release(root: Path | str, slug: str | None = None, *, source: Source | None = None,
                   deployed_by: str = "", allowed_domains: Sequence[str] = (), replace: bool = False,
                   new_agent: bool = False, on_version: int | None = None) -> Deployed:
    """Validate a folder and make it the agent's active release.

    1. The folder is loaded and validated (AgentFolderError if it does not).
    2. If any earlier release of the agent has the same content, manifest and
       allowed domains, that release is activated again rather than numbered
       anew (given the files again if it was made before releases were stored).
    3. Otherwise the folder is packed (ReleaseTooLarge over the limit) and
       stored with the release, so that a worker on any host runs exactly what
       was validated whatever happens to the source later, and unpacked under
       this host's state root; it is recorded as the next version, which
       becomes the active one.
    4. What a reloading server recorded of the agent's folder failing to
       validate is cleared: this deploy validated (Agent.clear_folder_problems).
    """
    loaded = load_agent_folder(root, slug)
    manifest = loaded.manifest()
    domains = list(allowed_domains)
    if domains:
        refuse_unenforceable_domains(loaded)
    source = source or Source(str(loaded.root))
    agent, _ = AgentRow.objects.get_or_create(slug=loaded.slug)
    place = functools.partial(_check_place, loaded=loaded, source=source, replace=replace, new_agent=new_agent,
                              on_version=on_version)
    place(agent)
    # The manifest counts too: the default model can change with the environment; and the kind (a folder
    # replacing a console agent with the same files is a folder's release).
    same = [d for d in agent.deployments.releases().filter(content_hash=loaded.content_hash).order_by("-version")
            if d.manifest == manifest and list(d.allowed_domains) == domains
            and (d.source_kind == CONSOLE) == (source.kind == CONSOLE)]
    if same:
        earlier = same[0]
        if not has_bundle(earlier):  # made before releases were stored: the folder has the same content
            store_bundle(earlier, pack_checked(loaded.root))
        with transaction.atomic():
            place(AgentRow.objects.select_for_update().get(pk=agent.pk))  # again, under the agent's lock
            earlier.activate()  # changes nothing when it is the active release already
            deployment_activated.send(sender=Deployment, agent=agent, deployment=earlier, loaded=loaded)
        agent.clear_folder_problems()  # what a failed save said no longer holds: this deploy validated
        return Deployed(earlier, reused=True)

    bundle = _pack(loaded)  # outside the transaction: the write lock is not held while files are packed
    with transaction.atomic():
        agent = AgentRow.objects.select_for_update().get(pk=agent.pk)
        place(agent)  # again, under the agent's lock
        version = (agent.deployments.releases().order_by("-version").values_list("version", flat=True).first()
                   or 0) + 1
        deployment = _record(agent, loaded, bundle, version=version, source=source, deployed_by=deployed_by,
                             allowed_domains=domains)
        deployment.activate()
        deployment_activated.send(sender=Deployment, agent=agent, deployment=deployment, loaded=loaded)
    agent.clear_folder_problems()
    return Deployed(deployment, reused=False)


def _check_place(agent: AgentRow, *, loaded: LoadedAgent, source: Source, replace: bool, new_agent: bool,
                 on_version: int | None) -> None:
    """Refuse a release that would take another's place: an agent's first for a slug that has releases
    (`new_agent`), a change made on another release than the active one (`on_version`), or one of the
    other kind (console or folder) than the agent's, unless `replace`."""
    if new_agent and agent.deployments.releases().exists():
        raise AgentExists(loaded.root, [Problem("agent/", f"agent {loaded.slug!r} exists")])
    if on_version is not None:
        active = Deployment.objects.filter(pk=agent.active_deployment_id).values_list("version", flat=True).first()
        if active != on_version:
            raise StaleRelease(loaded.root, [Problem("agent/", (
                f"agent {loaded.slug!r} is at v{active} now, not v{on_version}: read it again and make the change "
                "on it"))])
    if not replace and (kind := agent_kind(agent)) and (kind == CONSOLE) != (source.kind == CONSOLE):
        made = "in the console" if kind == CONSOLE else "from a folder"
        raise KindConflict(loaded.root, [Problem("agent/", (
            f"agent {loaded.slug!r} was made {made}: replacing it with a "
            f"{'console agent' if source.kind == CONSOLE else 'folder'} takes --replace (replace=true), and its "
            "earlier releases stay in its history"))])


def agent_kind(agent: AgentRow) -> str:
    """What the agent's active release was made from: `console`, a `folder` or `repo`; "" if none is."""
    active = agent.active_deployment_id
    return Deployment.objects.filter(pk=active).values_list("source_kind", flat=True).first() or "" if active else ""


def scratch_release(root: Path | str) -> Deployment:
    """A folder as a release that is never activated: `run`, `info` and `call --dir` try it as it is now.

    The folder is loaded and validated like a deploy (AgentFolderError if it does
    not), and recorded as a scratch copy of its agent (`Deployment.scratch`: version
    0, not listed, not activatable), reused while its content and manifest are the
    same. The agent's row is made if it has none, without an active release, so
    other callers, the agent list and the agent's sessions see nothing new; the
    copy reads the agent's secrets, as its deployed releases do.
    """
    loaded = load_agent_folder(root)
    manifest = loaded.manifest()
    agent, _ = AgentRow.objects.get_or_create(slug=loaded.slug)
    for earlier in agent.deployments.filter(scratch=True, content_hash=loaded.content_hash):
        if earlier.manifest == manifest:
            earlier.agent = agent
            return earlier
    bundle = _pack(loaded)
    with transaction.atomic():
        copy = _record(agent, loaded, bundle, version=0, source=Source(str(loaded.root)), deployed_by="scratch",
                       scratch=True)
    Deployment.objects.prune_scratch(agent.pk, keep=SCRATCH_KEPT)  # an author trying edit after edit
    return copy


def _pack(loaded: LoadedAgent) -> bytes:
    """The folder packed (ReleaseTooLarge over the limit) and unpacked under this host's state root."""
    bundle = pack_checked(loaded.root)
    location = snapshot_location(loaded.slug, loaded.content_hash)
    unpack(bundle, Path(settings.STATE_ROOT) / location, loaded.content_hash, loaded.slug)
    return bundle


def _record(agent: AgentRow, loaded: LoadedAgent, bundle: bytes, *, version: int, source: Source,
            deployed_by: str, allowed_domains: Sequence[str] = (), scratch: bool = False) -> Deployment:
    """The release row with its files."""
    deployment = Deployment.objects.create(
        agent=agent,
        version=version,
        scratch=scratch,
        source=source.location,
        source_kind=source.kind,
        source_ref=source.ref,
        source_commit=source.commit,
        source_path=source.path,
        deployed_by=deployed_by,
        allowed_domains=list(allowed_domains),
        validation=[{"path": w.path, "message": w.message} for w in loaded.warnings],
        snapshot_path=snapshot_location(loaded.slug, loaded.content_hash),
        content_hash=loaded.content_hash,
        manifest=loaded.manifest(),
        status=Deployment.Status.VALIDATING,
    )
    store_bundle(deployment, bundle)
    return deployment


def refuse_unenforceable_domains(loaded: LoadedAgent) -> None:
    """Fail closed: the sandbox cannot hold a network to a list of domains.

    A shell with network, or a stdio MCP server with network (declared, or as
    `uvx` and `npx` always have it, or unsandboxed), could reach any host,
    whatever the release's allowed domains say.
    """
    problems = []
    if isinstance(loaded.runtime, LocalRuntime) and loaded.runtime.network:
        problems.append(Problem("agent/agent.py", "allowed domains cannot be enforced on the shell's network: "
                                "drop local_runtime(network=True) or deploy without --allow-domain"))
    for server in loaded.mcp:
        if server.command and (server.uses_network or not server.sandbox):
            problems.append(Problem("agent/mcp.json", f"allowed domains cannot be enforced on MCP server "
                                    f"{server.name!r}'s network: declare it sandboxed without network, or "
                                    "deploy without --allow-domain"))
    if problems:
        raise AgentFolderError(loaded.root, problems)


_cache: dict[tuple[int, str], LoadedAgent] = {}
_cache_lock = threading.Lock()


def load_deployment(deployment: Deployment) -> LoadedAgent:
    """The loaded agent of a release, imported once per process.

    Its files come from this host's state root, unpacked there from the database
    the first time (ReleaseUnavailable if they cannot be).
    """
    key = (deployment.pk, deployment.content_hash)  # a release never changes: no query on a hit
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            # The default model was resolved when the release was deployed: this host's environment has no say.
            loaded = load_agent_folder(release_folder(deployment), deployment.agent.slug,
                                       resolved_default=(deployment.manifest or {}).get("model") or None)
            loaded.allowed_domains = tuple(deployment.allowed_domains or ())
            _cache[key] = loaded
        return loaded


_releases: dict[tuple[int, str], Deployment] = {}


def release(pk: int, content_hash: str) -> Deployment:
    """A release row with its agent, read once per process: the fields a turn needs never change.

    Shared between threads and turns, so read-only; the agent's name or active
    release on it may be stale (its slug and id are not).
    """
    key = (pk, content_hash)
    found = _releases.get(key)
    if found is None:
        found = Deployment.objects.select_related("agent").get(pk=pk)
        if found.content_hash == content_hash:
            _releases[key] = found
    return found


def find_agent_folders(paths: list[Path]) -> list[Path]:
    """Each path is an agent folder (holding agent/) or a folder of them."""
    found: list[Path] = []
    for path in paths:
        path = path.resolve()
        if agent_dir(path).is_dir():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if agent_dir(p).is_dir()))
        else:
            raise AgentFolderError(path, [Problem(str(path), "not a folder: pass an agent folder or a folder of them")])
    return found
