"""An agent's stored secrets as the credentials its code reads (agents.secrets.lookup)."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from agents.models import Secret
from agents.secrets.keys import Undecryptable
from agents.secrets.lookup import Credentials, bind


class SecretUnreadable(Exception):
    """A stored secret cannot be decrypted with the configured keys."""


def unreadable(slug: str, name: str) -> SecretUnreadable:
    return SecretUnreadable(
        f"secret {name} of agent {slug!r} cannot be decrypted with AGENTSITE_SECRETS_KEYS: put back the key "
        "it was set with (in any position after the first), or set the secret again")


class StoredCredentials(Credentials):
    """The agent's rows, read on first use in one query and decrypted when read."""

    def __init__(self, slug: str):
        super().__init__(slug)
        self._rows: dict[str, str] | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, str]:
        with self._lock:
            if self._rows is None:
                self._rows = dict(Secret.objects.filter(agent__slug=self.slug).values_list("name", "ciphertext"))
            return self._rows

    def secret(self, name: str) -> str | None:
        token = self._load().get(name)
        if token is None:
            return None
        try:
            return Secret(ciphertext=token).reveal()
        except Undecryptable:
            raise unreadable(self.slug, name) from None


@contextmanager
def acting_for(slug: str) -> Iterator[Credentials]:
    """Run code for agent `slug`: credentials read inside are its secrets, then the environment."""
    with bind(StoredCredentials(slug)) as scope:
        yield scope


def rotate_secrets() -> tuple[int, int]:
    """Re-encrypt every secret not yet under the first key with it: (how many changed, how many there are).

    One unreadable secret stops the rotation with SecretUnreadable naming it; the
    ones before it stay rotated (each row is its own update), so running it again
    after putting the key back finishes the job.
    """
    changed = total = 0
    for row in Secret.objects.select_related("agent").order_by("agent__slug", "name").iterator():
        total += 1
        try:
            changed += row.reencrypt()
        except Undecryptable:
            raise unreadable(row.agent.slug, row.name) from None
    return changed, total
