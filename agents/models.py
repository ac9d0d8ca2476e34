from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# The server's own top-level paths: an agent is served under /<slug>/, so it may not take one.
# "accounts" holds the login, logout and password pages.
RESERVED_SLUGS = frozenset({"v1", "playground", "admin", "api", "static", "healthz", "accounts", "metrics", "docs"})


def validate_slug(value: str) -> None:
    if not SLUG_PATTERN.match(value) or len(value) > 64:
        raise ValidationError(
            f"{value!r} is not a valid agent slug: use lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit (at most 64 characters)"
        )
    if value in RESERVED_SLUGS:
        raise ValidationError(f"{value!r} is reserved; pick another agent slug")


class AgentQuerySet(models.QuerySet):
    def current_version(self, slug: str) -> tuple | None:
        """(id, active deployment id, updated_at) of agent `slug`, None if there is none: a deploy,
        a rollback or an edit changes it, so a copy loaded earlier can be checked with one narrow read."""
        return self.filter(slug=slug).values_list("id", "active_deployment_id", "updated_at").first()


class Agent(models.Model):
    slug = models.CharField(max_length=64, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    active_deployment = models.ForeignKey(
        "Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def model_id(self) -> str:
        return self.active_deployment.manifest.get("model", "") if self.active_deployment else ""

    def previous_release(self) -> Deployment | None:
        """The release that was active before the active one: of the others, the one activated last.

        Each activation stamps `activated_at`, so the latest stamp but the current release's is the
        release it replaced (after a rollback, the release rolled back from)."""
        return (self.deployments.exclude(pk=self.active_deployment_id).exclude(activated_at=None)
                .order_by("-activated_at", "-version").first())


class Deployment(models.Model):
    class Status(models.TextChoices):
        VALIDATING = "validating"
        RUNNING = "running"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="deployments")
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=1000, help_text="The folder the release was loaded from, or the "
                              "repository URL (credentials removed) it was cloned from.")
    source_kind = models.CharField(max_length=16, default="folder", help_text="folder or repo.")
    source_ref = models.CharField(max_length=255, blank=True, help_text="The ref asked for (repo).")
    source_commit = models.CharField(max_length=64, blank=True, help_text="The commit deployed (repo).")
    source_path = models.CharField(max_length=1000, blank=True, help_text="The agent's folder inside the repository.")
    deployed_by = models.CharField(max_length=200, blank=True, help_text="Who deployed it (a user, or the command).")
    allowed_domains = models.JSONField(default=list, blank=True,
                                       help_text="The only domains the agent's outbound calls may reach; empty: "
                                                 "the server's own rules alone.")
    validation = models.JSONField(default=list, blank=True, help_text="What validation said (warnings).")
    snapshot_path = models.CharField(max_length=1000, blank=True, help_text="Immutable copy that workers load.")
    content_hash = models.CharField(max_length=64)
    manifest = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.VALIDATING)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "-version"]
        constraints = [models.UniqueConstraint(fields=["agent", "version"], name="deployment_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent.slug} v{self.version}"

    def origin(self) -> str:
        """Where the release came from, in one line: the folder, or URL@ref (commit) and the path inside."""
        if self.source_kind != "repo":
            return self.source
        text = self.source + (f"@{self.source_ref}" if self.source_ref else "")
        text += f" ({self.source_commit[:12]})" if self.source_commit else ""
        return text + (f" path {self.source_path}" if self.source_path else "")

    def activate(self) -> None:
        """Make this release the one new sessions start on (also how rollback works)."""
        with transaction.atomic():
            self.status = self.Status.RUNNING
            self.activated_at = timezone.now()
            self.save(update_fields=["status", "activated_at"])
            Agent.objects.filter(pk=self.agent_id).update(active_deployment=self, updated_at=timezone.now())
        # Keep a loaded agent in step, so `deploy_agent_folder(...).agent` is not stale.
        if Deployment.agent.is_cached(self):
            self.agent.active_deployment = self
