"""Saving an agent defined by data: every save is a release, made as a folder deploy makes one.

The spec is written as a folder in a scratch directory and deployed from there
(`deploy_release`, source kind `console`): validated by the same rules (a problem names the
spec's field, from the file it was found in), deduplicated by content hash, numbered, activated,
and listed, diffed, rolled back and pinned per session like any release. Who saved it is the
release's `deployed_by`.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agents.console.folder import SPEC_FILE, read, spec_of, write
from agents.console.spec import AgentSpec, SpecError
from agents.discovery.bundles import release_folder
from agents.discovery.folder import content_hash
from agents.discovery.loaded import AgentFolderError, Problem
from agents.discovery.releases import (
    CONSOLE, AgentExists, Deployed, KindConflict, Source, StaleRelease, deploy_release, load_deployment,
)
from agents.models import Agent, Deployment

# What agent.py's problems begin with, for each field of the spec they are about.
DECLARED = (("builtins", "builtins"), ("budget", "budget"), ("peers", "peers"), ("params", "params"),
            ("max_steps", "maxSteps"), ("retention_days", "retentionDays"), ("tools", "workspaceTools"),
            ("fallback", "fallback"), ("model", "models"), ("runtime", "sandboxNetwork"), ("name", "name"),
            ("description", "description"), ("reminders_tool", "remindersTool"))
# Where a problem found in the written folder is in the spec.
FIELDS = (("agent/console.json", ""), ("agent/instructions.md", "instructions"), ("agent/agent.py", ""),
          ("agent/mcp.json", "mcpServers"), ("agent/skills/", "skills"), ("agent/subagents/", "subagents"),
          ("agent/schedules/", "schedules"), ("agent/ab/", "experiments"), ("agent/channels/slack.py", "slack"),
          ("agent/channels/", "webhooks"), ("agent/tools/", "toolsFrom"))


@dataclass(frozen=True)
class Saved:
    deployed: Deployed
    spec: AgentSpec


def save(slug: str, spec: AgentSpec, *, saved_by: str, replace: bool = False, new_agent: bool = False,
         on_version: int | None = None) -> Saved:
    """Make `spec` agent `slug`'s active release. SpecError (each problem naming its field) if it does not
    validate; KindConflict if the slug is a folder agent's and `replace` is not given; AgentExists for
    `new_agent` (a create) when the slug has releases; StaleRelease when `on_version` (the release the
    change was made on) is no longer the active one. The last two are checked under the agent's lock.

    The release keeps the domains its agent's active release was held to (`deploy --allow-domain`): an
    edit in the console does not lift an operator's limit on where the agent may connect.
    """
    tool_files = shared_tool_files(spec)
    active = Agent.objects.filter(slug=slug).values_list("active_deployment__allowed_domains", flat=True).first()
    with tempfile.TemporaryDirectory(prefix="agentsite-console-") as scratch:
        try:
            root = write(spec, Path(scratch) / slug, tool_files)
        except OSError as exc:  # a path this filesystem refuses, which the spec's checks let through
            raise SpecError([Problem("skills", f"a file cannot be written: {exc.strerror}: {exc.filename}")]) from None
        try:
            deployed = deploy_release(root, slug, source=Source(CONSOLE, CONSOLE), deployed_by=saved_by,
                                      replace=replace, new_agent=new_agent, allowed_domains=list(active or []),
                                      on_version=on_version)
        except (KindConflict, AgentExists, StaleRelease):
            raise
        except AgentFolderError as exc:
            raise SpecError([Problem(_field(p.path, p.message, root, spec), p.message) for p in exc.problems]) from None
    return Saved(deployed, spec)


def shared_tool_files(spec: AgentSpec) -> dict[str, str]:
    """The files of the tools the spec takes from other agents (`toolsFrom`), as their active releases hold
    them; SpecError naming `toolsFrom.<slug>` for an agent that is not there or does not share the tool."""
    files: dict[str, str] = {}
    problems: list[Problem] = []
    for slug, names in sorted(spec.tools_from.items()):
        owner = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
        release = owner.active_deployment if owner else None
        if release is None:
            problems.append(Problem(f"toolsFrom.{slug}", f"no agent {slug!r} on this server"))
            continue
        shared = release.manifest.get("sharedTools", [])
        for name in names:
            if name not in shared:
                problems.append(Problem(f"toolsFrom.{slug}", (
                    f"agent {slug!r} does not share {name!r} (it shares {', '.join(shared) or 'none'}): its "
                    f"folder allows it with Agent(share_tools=[{name!r}])")))
            elif name in files:
                problems.append(Problem(f"toolsFrom.{slug}", f"{name!r} is taken from two agents: take it once"))
            else:
                files[name] = (release_folder(release) / "agent" / "tools" / f"{name}.py").read_text(encoding="utf-8")
    if problems:
        raise SpecError(problems)
    return files


def _field(path: str, message: str, root: Path, spec: AgentSpec) -> str:
    """The spec's field a problem found in the written folder is about."""
    relative = path[len(str(root)) + 1:] if path.startswith(str(root)) else path
    if relative == "agent/agent.py":
        named = re.match(r"model '([^']*)'", message)
        if named and named.group(1) in spec.fallback and named.group(1) not in spec.models:
            return "fallback"
        return next((field for word, field in DECLARED if message.startswith(word)), "")
    for prefix, field in FIELDS:
        if relative.startswith(prefix):
            rest = relative[len(prefix):].split("/")[0].split(".")[0] if prefix.endswith("/") else ""
            return f"{field}[{rest}]" if rest else field
    return relative


def definition(deployment: Deployment) -> AgentSpec | None:
    """The spec a release was saved from; None for a folder's release."""
    if deployment.source_kind != CONSOLE:
        return None
    return spec_of(release_folder(deployment))


def as_spec(deployment: Deployment) -> AgentSpec:
    """A release as a spec: a console agent's own, or a folder agent's (converted, SpecError naming each of
    its files that data cannot hold). A folder exported from the console and deployed as it was gives
    back its spec: written again, it is the folder's content hash (so no file was edited by hand)."""
    if (spec := definition(deployment)) is not None:
        return spec
    root = release_folder(deployment)
    if (spec := spec_of(root)) is not None:
        tools = {name: (root / "agent" / "tools" / f"{name}.py") for names in spec.tools_from.values() for name in names}
        kept = {name: path.read_text(encoding="utf-8") for name, path in tools.items() if path.is_file()}
        with tempfile.TemporaryDirectory(prefix="agentsite-console-") as scratch:
            if content_hash(write(spec, Path(scratch) / "agent", kept)) == deployment.content_hash:
                return spec
    loaded = load_deployment(deployment)  # the subagents' parameters, which the manifest does not list
    return read(root, deployment.manifest, {sub.id: dict(sub.params) for sub in loaded.subagents.values()})


def export(agent: Agent, target: Path) -> Path:
    """Write agent `agent`'s active release's folder at `target` (its `agent/`, file for file): deployed
    from there it is the same content hash."""
    deployment = agent.active_deployment
    if deployment is None:
        raise LookupError(f"agent {agent.slug!r} has no active release to export")
    base = target / "agent"
    if base.exists():
        raise FileExistsError(f"{base} exists: export into a new or empty folder")
    shutil.copytree(release_folder(deployment) / "agent", base, ignore=shutil.ignore_patterns("__pycache__"))
    return target


__all__ = ["SPEC_FILE", "Saved", "as_spec", "definition", "export", "save"]
