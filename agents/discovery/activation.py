"""Activating an existing release of an agent (`activate`, `rollback`, the REST route and the admin).

Deploying makes a release and activates it (`releases.deploy_agent_folder`); this
moves the agent between releases it already has. Sessions keep the release they
started on (`Session.deployment`); only new sessions take the one activated here.
"""
from __future__ import annotations

from django.db import transaction

from agents.discovery.loaded import AgentFolderError
from agents.discovery.releases import load_deployment
from agents.models import Agent, Deployment
from agents.signals import deployment_activated


class ReleaseError(Exception):
    """A request about releases that cannot be met; the message is one line that says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def find_agent(slug: str) -> Agent:
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    if agent is None:
        raise ReleaseError("agent_not_found", f"no agent {slug!r} on this server")
    return agent


def find_release(agent: Agent, version: int | str) -> Deployment:
    number = int(version) if str(version).isdigit() else None
    found = agent.deployments.releases().filter(version=number).first() if number is not None else None
    if found is None:
        known = ", ".join(f"v{v}" for v in agent.deployments.releases().order_by("version").values_list("version", flat=True))
        raise ReleaseError("deployment_not_found",
                           f"agent {agent.slug!r} has no release {version!r} (releases: {known or 'none'})")
    found.agent = agent
    return found


def rollback_target(agent: Agent, to: int | str | None = None) -> Deployment:
    """The release `rollback` activates: `to`, or the one active before the active one."""
    if to is not None:
        return find_release(agent, to)
    previous = agent.previous_release()
    if previous is None:
        raise ReleaseError("no_previous_release", f"agent {agent.slug!r} has no earlier active release to roll back "
                                                  "to; name one with --to VERSION")
    previous.agent = agent
    return previous


def activate_release(deployment: Deployment) -> Deployment:
    """Make an existing release the agent's active one, and tell the layers above (schedules follow it).

    1. Load the release's snapshot first, outside the transaction (it imports code): a
       release that no longer loads is refused, and the active one stays.
    2. Activate it (`Deployment.activate`, which also takes its name and description); the
       release already active is refused (two operators racing to activate the same one:
       one wins, the other hears it is active).
    3. Send `deployment_activated` in the same transaction, so a receiver that fails rolls
       the activation back.
    """
    try:
        loaded = load_deployment(deployment)
    except AgentFolderError as exc:
        problems = "; ".join(str(p) for p in exc.problems)
        raise ReleaseError("deployment_unloadable", f"{deployment} no longer loads: {problems}") from None
    with transaction.atomic():
        if not deployment.activate():
            raise ReleaseError("already_active",
                               f"{deployment} is already the active release of {deployment.agent.slug!r}")
        agent = Agent.objects.get(pk=deployment.agent_id)
        deployment.agent = agent
        deployment_activated.send(sender=Deployment, agent=agent, deployment=deployment, loaded=loaded)
    return deployment
