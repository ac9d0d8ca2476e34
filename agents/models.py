from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connections, models, transaction
from django.utils import timezone

from agents.evalcases import StoredEvalCase  # noqa: F401  the app's model, in a module of its own
from agents.pricing.model import ModelPrice  # noqa: F401  the app's model, kept with its package
from agents.secrets import keys

SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# The server's own top-level paths: an agent is served under /<slug>/, so it may not take one.
# "accounts" holds the login, logout and password pages.
RESERVED_SLUGS = frozenset({"v1", "playground", "admin", "api", "static", "healthz", "accounts", "metrics", "docs",
                            "mcp"})


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

    def if_migrated(self) -> AgentQuerySet:
        """These agents, or none while their table does not exist: `check --deploy` builds the API
        document, which names the agents, on a database that may not be migrated yet."""
        if self.model._meta.db_table not in connections[self.db].introspection.table_names():
            return self.none()
        return self

    def deployed(self) -> AgentQuerySet:
        """The agents with an active release, loaded with it (none before the tables exist)."""
        return self.if_migrated().exclude(active_deployment=None).select_related("active_deployment")


class Agent(models.Model):
    slug = models.CharField(max_length=64, unique=True, validators=[validate_slug])
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    active_deployment = models.ForeignKey(
        "Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Why the folder a reloading server watches does not validate now (its last good release still
    # serves): [{"path", "message"}, ...], empty when it does.
    folder_problems = models.JSONField(default=list, blank=True)
    folder_problems_since = models.DateTimeField(null=True, blank=True)
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

    def note_folder_problems(self, problems: list[dict[str, str]]) -> bool:
        """Record why the watched folder fails to validate; whether it validated until now.

        The time kept is the first failure's, until a fix clears it (`clear_folder_problems`). Both
        stamp `updated_at`, so copies of the row kept by processes are read again (current_version).
        """
        rows, now = Agent.objects.filter(pk=self.pk), timezone.now()
        first = rows.filter(folder_problems_since=None).update(folder_problems=problems, folder_problems_since=now,
                                                               updated_at=now)
        if not first:
            rows.update(folder_problems=problems, updated_at=now)
        self.refresh_from_db(fields=["folder_problems", "folder_problems_since"])
        return bool(first)

    def clear_folder_problems(self) -> bool:
        """The watched folder validates again; whether it had problems recorded."""
        changed = Agent.objects.filter(pk=self.pk).exclude(folder_problems_since=None).update(
            folder_problems=[], folder_problems_since=None, updated_at=timezone.now())
        self.folder_problems, self.folder_problems_since = [], None
        return bool(changed)

    def previous_release(self) -> Deployment | None:
        """The release that was active before the active one: of the others, the one activated last.

        Each activation stamps `activated_at`, so the latest stamp but the current release's is the
        release it replaced (after a rollback, the release rolled back from)."""
        return (self.deployments.exclude(pk=self.active_deployment_id).exclude(activated_at=None)
                .order_by("-activated_at", "-version").first())


class DeploymentQuerySet(models.QuerySet):
    def releases(self) -> DeploymentQuerySet:
        """The releases an operator lists and activates: not the scratch copies `run --dir` makes."""
        return self.filter(scratch=False)

    def prune_scratch(self, agent_id: int, keep: int) -> int:
        """Forget the agent's scratch copies but the newest `keep`, and those a session runs on (its
        release is kept for its whole life); how many went. Their unpacked files stay: a folder is
        named by its content, which a release may share."""
        copies = self.filter(agent_id=agent_id, scratch=True).order_by("-created_at", "-pk")
        kept = list(copies.values_list("pk", flat=True)[:keep])
        gone, _ = copies.exclude(pk__in=kept).filter(sessions__isnull=True).delete()
        return gone


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
    snapshot_path = models.CharField(max_length=1000, blank=True, help_text="Where a process finds the immutable copy "
                                     "it loads, relative to its own state root (absolute: a release made before "
                                     "releases were stored in the database, on the host that made it).")
    content_hash = models.CharField(max_length=64)
    manifest = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.VALIDATING)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    scratch = models.BooleanField(default=False, help_text="A folder loaded by `run`, `info` or `call --dir`: "
                                  "version 0, never activated, not listed among the releases.")

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["agent", "-version"]
        # Scratch copies all take version 0: they must not use up the numbers of real releases.
        constraints = [models.UniqueConstraint(fields=["agent", "version"], condition=models.Q(scratch=False),
                                               name="deployment_version_unique")]

    def __str__(self) -> str:
        return f"{self.agent.slug} scratch copy" if self.scratch else f"{self.agent.slug} v{self.version}"

    def origin(self) -> str:
        """Where the release came from, in one line: the folder, or URL@ref (commit) and the path inside."""
        if self.source_kind != "repo":
            return self.source
        text = self.source + (f"@{self.source_ref}" if self.source_ref else "")
        text += f" ({self.source_commit[:12]})" if self.source_commit else ""
        return text + (f" path {self.source_path}" if self.source_path else "")

    @property
    def models(self) -> list[str]:
        """The models a session of this release may be bound to, as resolved when it was deployed; the first is the default."""
        manifest = self.manifest or {}
        return list(manifest.get("models") or ([manifest["model"]] if manifest.get("model") else []))

    def snapshot_dir(self) -> Path:
        """Where this process keeps the release's files: under its own state root, whichever host deployed it."""
        if self.snapshot_path and not Path(self.snapshot_path).is_absolute():
            return Path(settings.STATE_ROOT) / self.snapshot_path
        return Path(settings.STATE_ROOT) / snapshot_location(self.agent.slug, self.content_hash)

    def activate(self) -> bool:
        """Make this release the one new sessions start on (deploy, activate, rollback, the REST route and
        the admin all come here); whether it changed anything.

        One conditional update of the agent's row moves its pointer and takes the release's name and
        description: of two activations of the same release, the second changes no row and hears False
        (already active), and the release keeps the stamp of the activation that won. A scratch copy
        is never activated (False).
        """
        if self.scratch:  # a folder tried from the command line never becomes what others reach
            return False
        manifest = self.manifest or {}
        with transaction.atomic():
            won = (Agent.objects.filter(pk=self.agent_id).exclude(active_deployment=self)
                   .update(active_deployment=self, name=manifest.get("name", models.F("name")),
                           description=manifest.get("description", models.F("description")),
                           updated_at=timezone.now()))
            if won:
                self.status = self.Status.RUNNING
                self.activated_at = timezone.now()
                self.save(update_fields=["status", "activated_at"])
        # Keep a loaded agent in step, so `deploy_agent_folder(...).agent` is not stale.
        if won and Deployment.agent.is_cached(self):
            agent = self.agent
            agent.active_deployment = self
            agent.name = manifest.get("name", agent.name)
            agent.description = manifest.get("description", agent.description)
        return bool(won)


def snapshot_location(slug: str, content_hash: str) -> str:
    """A release's folder, relative to a state root: one per content, so a release is unpacked once per host."""
    return f"deployments/{slug}/{content_hash[:16]}"


class ReleaseBundle(models.Model):
    """A release's files as a deterministic tar.gz, so that a process on any host can unpack and run it.

    A table of its own, so that reading a release (which every turn does) never reads its files.
    """

    deployment = models.OneToOneField(Deployment, on_delete=models.CASCADE, primary_key=True, related_name="bundle")
    data = models.BinaryField()
    size = models.PositiveIntegerField(help_text="Bytes of the tar.gz.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.deployment_id}: {self.size} bytes"


SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SECRET_MAX_BYTES = 64 * 1024


def secret_name_problem(name: object) -> str | None:
    """Why `name` cannot name a secret, with the fix; None when it can."""
    if not isinstance(name, str) or not SECRET_NAME.match(name):
        return (f"{name!r} is not a secret name: use letters, digits and '_', not starting with a digit "
                "(at most 128 characters), as for an environment variable")
    return None


def secret_value_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "a secret's value is a non-empty string (to remove a secret, unset it)"
    if not value.strip():
        # Whoever reads a credential takes a blank one for unset (agents.secrets.lookup): it would set nothing.
        return "a secret's value is blank (only whitespace): give the value itself, or unset the secret"
    if len(value.encode()) > SECRET_MAX_BYTES:
        return f"a secret's value is at most {SECRET_MAX_BYTES // 1024} KB"
    if "\x00" in value:
        return "a secret's value may not contain NUL"
    return None


class Secret(models.Model):
    """One credential of an agent, encrypted at rest (agents.secrets.keys); its value is never shown.

    Whoever reads a credential by name asks the agent's secrets first, then the
    environment (agents.secrets.lookup).
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=128)
    ciphertext = models.TextField(help_text="Fernet token; the value never leaves encrypted but to its reader.")
    set_by = models.CharField(max_length=200, blank=True, help_text="Who set it (a user, or the command).")
    set_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True, help_text="When the credential stops working "
                                      "(an OAuth access token); empty: it does not say.")
    refreshing_until = models.DateTimeField(null=True, blank=True, help_text="A process is refreshing it (an "
                                            "OAuth access token) until then; empty: nobody is.")

    class Meta:
        ordering = ["agent", "name"]
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="secret_name_unique")]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.name}"

    @classmethod
    def put(cls, agent: Agent, name: str, value: str, *, by: str = "", expires_at=None) -> bool:
        """Set `name` to `value` (encrypted with the first key); True when it was new."""
        token = keys.encrypt(value)
        _, created = cls.objects.update_or_create(
            agent=agent, name=name,
            defaults={"ciphertext": token, "set_by": by[:200], "set_at": timezone.now(), "expires_at": expires_at})
        return created

    @classmethod
    def remove(cls, agent: Agent, name: str) -> bool:
        """Unset `name`; whether it was set."""
        return cls.objects.filter(agent=agent, name=name).delete()[0] > 0

    @classmethod
    def claim_refresh(cls, agent: Agent, name: str, seconds: float):
        """Lease the refresh of `name` for `seconds` unless another lease is running; the lease, or None.

        The refresher then calls its token endpoint outside any transaction
        and ends the lease with `finish_refresh` or `release_refresh`; a
        refresher that died leaves a lease that simply runs out.
        """
        now = timezone.now()
        until = now + timedelta(seconds=seconds)
        won = cls.objects.filter(agent=agent, name=name).filter(
            models.Q(refreshing_until__isnull=True) | models.Q(refreshing_until__lte=now)).update(refreshing_until=until)
        return until if won else None

    @classmethod
    def finish_refresh(cls, agent: Agent, name: str, lease, value: str, *, by: str = "", expires_at=None) -> bool:
        """Set `name` to its refreshed `value` and end the refresh, if `lease` still holds it; whether it did."""
        token = keys.encrypt(value)
        return cls.objects.filter(agent=agent, name=name, refreshing_until=lease).update(
            ciphertext=token, set_by=by[:200], set_at=timezone.now(), expires_at=expires_at, refreshing_until=None) > 0

    @classmethod
    def release_refresh(cls, agent: Agent, name: str, lease) -> bool:
        """End a refresh that brought nothing, if `lease` still holds it."""
        return cls.objects.filter(agent=agent, name=name, refreshing_until=lease).update(refreshing_until=None) > 0

    def reveal(self) -> str:
        """The value: for the code that uses the credential, never for a view."""
        return keys.decrypt(self.ciphertext)

    def reencrypt(self) -> bool:
        """Encrypt the value again with the first key unless it already is; whether the row changed.

        Raises keys.Undecryptable when no configured key reads it.
        """
        token = keys.reencrypt(self.ciphertext)
        if token is None:
            return False
        return Secret.objects.filter(pk=self.pk, ciphertext=self.ciphertext).update(ciphertext=token) > 0


class OAuthFlow(models.Model):
    """An authorization an operator started from the playground, waiting for the browser to come back.

    The callback may land on any web process, so what the code exchange needs
    lives here: the PKCE verifier and the client registration (it may hold a
    client secret) encrypted, the state the callback must echo, the redirect
    URI and the token endpoint. A flow is used once and for ten minutes at most.
    """

    LIFETIME_SECONDS = 600

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="oauth_flows")
    server = models.CharField(max_length=64, help_text="The MCP server's name in the agent's declaration.")
    state = models.CharField(max_length=128, unique=True)
    verifier_ciphertext = models.TextField()
    registration_ciphertext = models.TextField(help_text="The client registration (JSON), encrypted.")
    redirect_uri = models.URLField(max_length=500)
    token_endpoint = models.URLField(max_length=500)
    endpoint = models.JSONField(default=dict, help_text="The server URL, resource and scope the tokens are for.")
    started_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent.slug}: {self.server} ({'used' if self.used_at else 'pending'})"

    @classmethod
    def begin(cls, agent: Agent, server: str, *, state: str, verifier: str, registration: str, redirect_uri: str,
              token_endpoint: str, endpoint: dict, by: str = "") -> OAuthFlow:
        now = timezone.now()
        cls.objects.filter(expires_at__lt=now).delete()  # abandoned flows go as new ones start
        return cls.objects.create(
            agent=agent, server=server, state=state, verifier_ciphertext=keys.encrypt(verifier),
            registration_ciphertext=keys.encrypt(registration), redirect_uri=redirect_uri,
            token_endpoint=token_endpoint, endpoint=endpoint, started_by=by[:200], created_at=now,
            expires_at=now + timedelta(seconds=cls.LIFETIME_SECONDS))

    @classmethod
    def claim(cls, agent: Agent, state: str) -> OAuthFlow | None:
        """The flow `state` names, if it is unused and unexpired; claiming it uses it up (a replayed callback gets None)."""
        now = timezone.now()
        if not cls.objects.filter(agent=agent, state=state, used_at=None, expires_at__gt=now).update(used_at=now):
            return None
        return cls.objects.get(agent=agent, state=state)

    def verifier(self) -> str:
        return keys.decrypt(self.verifier_ciphertext)

    def registration(self) -> str:
        return keys.decrypt(self.registration_ciphertext)

