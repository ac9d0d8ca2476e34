"""Bodies of the release routes (`/v1/agents/<slug>/deployments…`).

Built from Deployment rows already loaded; the manifest summary is read from the
release's stored manifest, so listing or showing a release imports no agent code.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from agents.models import Deployment
from channels_app.replies.base import Page, Reply


class Release(Reply):
    """One release of an agent: where it came from, who deployed it, and whether new sessions start on it."""

    version: int
    content_hash: str
    status: str
    active: bool
    # The folder it was loaded from, or the repository URL (credentials removed) it was cloned from.
    source: str
    source_kind: str
    source_ref: str
    source_commit: str
    source_path: str
    deployed_by: str
    allowed_domains: list[str]
    created_at: datetime | None
    activated_at: datetime | None

    @classmethod
    def of(cls, d: Deployment, active_id: int | None) -> Release:
        return cls(
            version=d.version,
            content_hash=d.content_hash,
            status=d.status,
            active=d.pk == active_id,
            source=d.source,
            source_kind=d.source_kind,
            source_ref=d.source_ref,
            source_commit=d.source_commit,
            source_path=d.source_path,
            deployed_by=d.deployed_by,
            allowed_domains=list(d.allowed_domains or []),
            created_at=d.created_at,
            activated_at=d.activated_at,
        )


class ReleaseList(Page):
    """One page of an agent's releases, newest first; `nextCursor` only when another page follows."""

    deployments: list[Release]
    next_cursor: str | None = None


class ScheduleSummary(Reply):
    id: str
    cron: str


class ManifestSummary(Reply):
    """What a release declares, by name (the full descriptions are in `GET /<slug>/v1/info` once active)."""

    name: str
    description: str
    model: str
    instructions: str
    tools: list[str]
    skills: list[str]
    subagents: list[str]
    channels: list[str]
    schedules: list[ScheduleSummary]
    mcp: list[str]
    runtime: str | None

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> ManifestSummary:
        runtime = manifest.get("runtime") or {}
        return cls(
            name=manifest.get("name", ""),
            description=manifest.get("description", ""),
            model=manifest.get("model", ""),
            instructions=manifest.get("instructions", ""),
            tools=[t["name"] for t in manifest.get("tools", [])],
            skills=[s["name"] for s in manifest.get("skills", [])],
            subagents=[a["id"] for a in manifest.get("subagents", [])],
            channels=[c["id"] for c in manifest.get("channels", [])],
            schedules=[ScheduleSummary(id=s["id"], cron=s.get("cron") or "") for s in manifest.get("schedules", [])],
            mcp=[str(m.get("name", "")) for m in manifest.get("mcp", [])],
            runtime=runtime.get("kind"),
        )


class ReleaseDetail(Release):
    """A release with what validation said and a summary of what it declares."""

    validation: list[str]
    manifest: ManifestSummary

    @classmethod
    def of(cls, d: Deployment, active_id: int | None) -> ReleaseDetail:
        return cls(
            **Release.of(d, active_id).model_dump(),
            validation=[str(v) for v in d.validation or []],
            manifest=ManifestSummary.of(d.manifest or {}),
        )
