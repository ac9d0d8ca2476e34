"""`ctx.host.kv`: a durable key-value store per agent, optionally scoped to one session.

Values are JSON. Every write bumps the row's version, and compare-and-set
is a read followed by an update conditional on the version it read, so two
processes racing on one key cannot both win, on SQLite or PostgreSQL. A
first write inserts, and the unique constraint on (scope, key) lets only
one of two racing inserts through.

Session-scoped keys are deleted with their session; agent-wide keys live as
long as the agent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from sessions.host.checks import HostError, canonical, check_key, check_prefix, check_text, check_value
from sessions.models import KVEntry, Session

Scope = Literal["agent", "session"]

# A lost race means another writer changed the key; a caller keeps losing only
# while others keep writing, so this bound is never reached in practice.
MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class Place:
    """Where a key lives: the agent's rows, or one session's."""

    agent_id: int
    session_id: str | None

    def rows(self) -> QuerySet:
        if self.session_id is None:
            return KVEntry.objects.filter(agent_id=self.agent_id, session=None)
        return KVEntry.objects.filter(session_id=self.session_id)

    def insert(self, key: str, value: Any) -> bool:
        """Insert the key; False if another writer inserted it first."""
        try:
            with transaction.atomic():
                KVEntry.objects.create(agent_id=self.agent_id, session_id=self.session_id, key=key, value=value)
        except IntegrityError:
            if self.session_id is not None and not Session.objects.filter(pk=self.session_id).exists():
                raise HostError(f"session {self.session_id!r} was deleted", "session_not_found") from None
            return False
        return True


def get_value(place: Place, key: str, default: Any = None) -> Any:
    found = place.rows().filter(key=check_key(key)).values_list("value", flat=True).first()
    return default if found is None else found


def set_value(place: Place, key: str, value: Any) -> None:
    key, value = check_key(key), check_value(value)
    for _ in range(MAX_ATTEMPTS):
        if place.rows().filter(key=key).update(value=value, version=F("version") + 1, updated_at=timezone.now()):
            return
        if place.insert(key, value):
            return
    raise HostError(f"key {key!r} kept changing under this write; try again", "conflict")


def delete_value(place: Place, key: str) -> bool:
    deleted, _ = place.rows().filter(key=check_key(key)).delete()
    return bool(deleted)


def list_keys(place: Place, prefix: str = "", limit: int = 1000) -> list[str]:
    prefix = check_prefix(prefix)
    # startswith narrows (on SQLite, LIKE ignores ASCII case); Python decides and orders by code point.
    keys = place.rows().filter(key__startswith=prefix).values_list("key", flat=True)
    return sorted(k for k in keys if k.startswith(prefix))[:max(limit, 0)]


def compare_and_set(place: Place, key: str, expected: Any, new: Any) -> bool:
    """Set `key` to `new` only if it holds `expected`; True if this call made the change.

    None stands for "no such key" on both sides: `expected=None` creates a
    key that does not exist yet, `new=None` deletes it.
    """
    key = check_key(key)
    new = None if new is None else check_value(new)
    wanted = None if expected is None else canonical(expected)
    for _ in range(MAX_ATTEMPTS):
        found = place.rows().filter(key=key).values_list("pk", "value", "version").first()
        if found is None:
            if wanted is not None:
                return False
            if new is None or place.insert(key, new):
                return True
            continue  # inserted by another writer meanwhile: compare with what it wrote
        pk, value, version = found
        if wanted is None or canonical(value) != wanted:
            return False
        if KVEntry.replace(pk, version, new) if new is not None else KVEntry.remove(pk, version):
            return True
    return False


@dataclass
class KV:
    """`ctx.host.kv`. Keys are agent-wide unless `scope="session"` (this session, or `session_id=`)."""

    agent_id: int | None
    session: Session | None = None

    def _place(self, scope: Scope, session_id: str | None) -> Place:
        if self.agent_id is None:
            raise HostError("no agent here: the key-value store belongs to an agent")
        if scope == "agent":
            if session_id is not None:
                raise HostError("session_id goes with scope='session'")
            return Place(self.agent_id, None)
        if scope != "session":
            raise HostError(f"scope must be 'agent' or 'session', not {scope!r}")
        if session_id is None:
            if self.session is None:
                raise HostError("no session here: pass session_id= with scope='session'")
            return Place(self.agent_id, self.session.pk)
        session_id = check_text(session_id, "session_id")
        if not Session.objects.filter(pk=session_id, agent_id=self.agent_id).exists():
            raise HostError(f"no session {session_id!r} on this agent", "session_not_found")
        return Place(self.agent_id, session_id)

    def get(self, key: str, default: Any = None, *, scope: Scope = "agent", session_id: str | None = None) -> Any:
        return get_value(self._place(scope, session_id), key, default)

    def set(self, key: str, value: Any, *, scope: Scope = "agent", session_id: str | None = None) -> None:
        set_value(self._place(scope, session_id), key, value)

    def delete(self, key: str, *, scope: Scope = "agent", session_id: str | None = None) -> bool:
        return delete_value(self._place(scope, session_id), key)

    def list(self, prefix: str = "", *, limit: int = 1000, scope: Scope = "agent",
             session_id: str | None = None) -> list[str]:
        """Keys starting with `prefix`, in code point order, at most `limit` of them."""
        return list_keys(self._place(scope, session_id), prefix, limit)

    def compare_and_set(self, key: str, expected: Any, new: Any, *, scope: Scope = "agent",
                        session_id: str | None = None) -> bool:
        return compare_and_set(self._place(scope, session_id), key, expected, new)
