"""Which agent a command acts on: a deployed agent by slug, or an agent folder by `--dir`.

A folder is validated and recorded as a scratch copy (`scratch_release`): version 0,
never activated, so trying a folder from the command line changes nothing other
callers, the agent list or the agent's active release see.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.core.management.base import CommandError

from agents.discovery import AgentFolderError, ReleaseTooLarge, scratch_release
from agents.models import Agent, Deployment


@dataclass(frozen=True)
class Target:
    agent: Agent
    deployment: Deployment


def add_target_arguments(parser) -> None:
    parser.add_argument("slug", nargs="?", help="a deployed agent (or pass --dir)")
    parser.add_argument("--dir", dest="folder", metavar="PATH",
                        help="an agent folder, used as it is now without deploying it")


def find_target(slug: str | None, folder: str | None) -> Target:
    """The agent and release to act on (CommandError naming the fix otherwise)."""
    if bool(slug) == bool(folder):
        raise CommandError("pass an agent's slug or --dir PATH (one of the two)")
    if folder:
        try:
            deployment = scratch_release(Path(folder))
        except AgentFolderError as exc:
            raise CommandError(folder_error(exc)) from None
        except ReleaseTooLarge as exc:
            raise CommandError(str(exc)) from None
        return Target(deployment.agent, deployment)
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    fix = "deploy it with `manage.py deploy DIR`, or try a folder with --dir PATH"
    if agent is None:
        raise CommandError(f"no agent {slug!r}; {fix}")
    if agent.active_deployment is None:
        raise CommandError(f"agent {slug!r} has no active deployment; {fix}")
    return Target(agent, agent.active_deployment)


def folder_error(exc: AgentFolderError) -> str:
    """One line for one problem (a missing folder says only that), else a line per problem."""
    if len(exc.problems) == 1:
        [problem] = exc.problems
        return str(problem) if problem.path == str(exc.root) else f"{exc.root}: invalid: {problem}"
    return f"{exc.root}: invalid\n" + "\n".join(f"  {p}" for p in exc.problems)
