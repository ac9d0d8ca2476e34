"""PersonalToken: a user's API credential, kept as its hash only.

A token reads `ast_<key>_<secret>`: the prefix tells the auth chain that a
presented bearer is meant as a personal token, and `<key>` finds its row
(`tok_<key>`) so the hash is compared with one row, not searched for. The
secret is shown once, when the token is issued.
"""
from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.contrib.auth.models import Group
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agents.models import Agent
from sessions.models.ids import hash_token
from sessions.principal import OPERATORS_GROUP

TOKEN_PREFIX = "ast_"
_SHAPE = re.compile(r"^ast_([0-9a-f]{12})_[A-Za-z0-9_-]{20,200}$")
# last_used_at is written at most this often per token: not one write per request.
TOUCH_EVERY = timedelta(minutes=1)


class TokenError(ValueError):
    """A token that cannot be issued as asked (an unknown agent, a bad expiry)."""


class PersonalTokenQuerySet(models.QuerySet):
    def of_user(self, user) -> PersonalTokenQuerySet:
        return self.filter(user=user)


class PersonalToken(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        EXPIRED = "expired"
        REVOKED = "revoked"

    id = models.CharField(primary_key=True, max_length=16, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, editable=False)
    # None: every agent; otherwise the slugs of the agents the token may reach.
    agents = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = PersonalTokenQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["user", "-created_at"], name="token_user_recent")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    @property
    def prefix(self) -> str:
        """What a user recognises the token by: the start of the secret, which is not secret."""
        return TOKEN_PREFIX + self.id.removeprefix("tok_")

    @classmethod
    def issue(cls, user, name: str, *, expires_days: int | None = None,
              agents: Sequence[str] | None = None) -> tuple[PersonalToken, str]:
        """A new token of `user` and its secret, which is not stored and cannot be shown again."""
        if expires_days is not None and not 1 <= expires_days <= 3650:
            raise TokenError("expiry must be from 1 to 3650 days")
        if agents is not None:
            agents = sorted(set(agents))
            if not agents:
                raise TokenError("list at least one agent, or leave the scope out for every agent")
            known = set(Agent.objects.filter(slug__in=agents).values_list("slug", flat=True))
            unknown = [slug for slug in agents if slug not in known]
            if unknown:
                raise TokenError(f"no agent named {', '.join(map(repr, unknown))} on this server")
        key = secrets.token_hex(6)
        secret = f"{TOKEN_PREFIX}{key}_{secrets.token_urlsafe(32)}"
        now = timezone.now()
        token = cls.objects.create(
            id=f"tok_{key}", user=user, name=name, token_hash=hash_token(secret), agents=agents, created_at=now,
            expires_at=now + timedelta(days=expires_days) if expires_days else None)
        return token, secret

    @classmethod
    def find(cls, presented: str) -> PersonalToken | None:
        """The token `presented` is (with its user), whatever its status; None if it is none."""
        match = _SHAPE.match(presented)
        if match is None:
            return None
        # Whether its user is in the operators group comes in the same query (`in_operators`): a
        # principal needs it on every request the token makes.
        operators = Group.objects.filter(user=OuterRef("user_id"), name=OPERATORS_GROUP)
        token = (cls.objects.select_related("user").annotate(in_operators=Exists(operators))
                 .filter(pk=f"tok_{match[1]}").first())
        if token is None or not secrets.compare_digest(token.token_hash, hash_token(presented)):
            return None
        return token

    def status(self, now: datetime | None = None) -> Status:
        if self.revoked_at is not None:
            return self.Status.REVOKED
        if self.expires_at is not None and self.expires_at <= (now or timezone.now()):
            return self.Status.EXPIRED
        return self.Status.ACTIVE

    def admits(self, slug: str) -> bool:
        """Whether the token may reach agent `slug`."""
        return self.agents is None or slug in self.agents

    def revoke(self) -> bool:
        """Revoke the token; False if it already was."""
        now = timezone.now()
        won = PersonalToken.objects.filter(pk=self.pk, revoked_at=None).update(revoked_at=now) == 1
        if won:
            self.revoked_at = now
        return won

    def touch(self, now: datetime | None = None) -> bool:
        """Note a use; False (and no write) when the last one noted is under TOUCH_EVERY old."""
        now = now or timezone.now()
        if self.last_used_at is not None and self.last_used_at >= now - TOUCH_EVERY:
            return False  # the row read says recent: no statement (on SQLite even a no-op UPDATE takes the write lock)
        stale = Q(last_used_at=None) | Q(last_used_at__lt=now - TOUCH_EVERY)
        won = PersonalToken.objects.filter(stale, pk=self.pk).update(last_used_at=now) == 1
        if won:
            self.last_used_at = now
        return won
