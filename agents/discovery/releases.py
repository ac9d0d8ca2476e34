"""Deploying a folder as the agent's active release, and loading a release once per process."""
from __future__ import annotations

import shutil
import threading
from pathlib import Path

from django.conf import settings
from django.db import transaction

from agents.discovery.folder import agent_dir, load_agent_folder
from agents.discovery.loaded import AgentFolderError, LoadedAgent, Problem
from agents.models import Agent as AgentRow
from agents.models import Deployment
from agents.signals import deployment_activated


def deploy_agent_folder(root: Path | str, slug: str | None = None) -> Deployment:
    """Validate a folder and make it the agent's active release.

    A folder whose content hash matches the active deployment records nothing
    new. Each new release is copied under the state root so that workers run
    exactly what was validated, whatever happens to the source folder later.
    """
    loaded = load_agent_folder(root, slug)
    manifest = loaded.manifest()
    agent, _ = AgentRow.objects.get_or_create(slug=loaded.slug)
    active = agent.active_deployment
    # The manifest counts too: the default model can change with the environment.
    if active and active.content_hash == loaded.content_hash and active.manifest == manifest and Path(active.snapshot_path).is_dir():
        deployment_activated.send(sender=Deployment, agent=agent, deployment=active, loaded=loaded)
        return active

    snapshot = Path(settings.STATE_ROOT) / "deployments" / loaded.slug / loaded.content_hash[:16]
    if not snapshot.is_dir():
        tmp = snapshot.with_name(snapshot.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(agent_dir(loaded.root), tmp / "agent", ignore=shutil.ignore_patterns("__pycache__"))
        tmp.rename(snapshot)

    with transaction.atomic():
        agent = AgentRow.objects.select_for_update().get(pk=agent.pk)
        version = (agent.deployments.order_by("-version").values_list("version", flat=True).first() or 0) + 1
        deployment = Deployment.objects.create(
            agent=agent,
            version=version,
            source=str(loaded.root),
            snapshot_path=str(snapshot),
            content_hash=loaded.content_hash,
            manifest=manifest,
            status=Deployment.Status.VALIDATING,
        )
        AgentRow.objects.filter(pk=agent.pk).update(name=manifest["name"], description=manifest["description"])
        deployment.activate()
        deployment_activated.send(sender=Deployment, agent=agent, deployment=deployment, loaded=loaded)
    return deployment


_cache: dict[tuple[int, str], LoadedAgent] = {}
_cache_lock = threading.Lock()


def load_deployment(deployment: Deployment) -> LoadedAgent:
    """The loaded agent of a release, imported once per process."""
    key = (deployment.pk, deployment.content_hash)  # a release never changes: no query on a hit
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            path = deployment.snapshot_path or deployment.source
            loaded = load_agent_folder(path, deployment.agent.slug)
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
