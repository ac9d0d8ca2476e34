"""The keys an agent's secrets are encrypted with.

`AGENTSITE_SECRETS_KEYS` is a comma-separated list of Fernet keys: the first
encrypts, every one decrypts, so a key is rotated by putting a new one first
and running `manage.py secrets rotate`. Production mode refuses to start
without it (agentsite.production). In development, with the setting empty,
a key is made once in the state root (`secrets.key`, mode 0600); it keeps
decrypting after the setting is given, so `secrets rotate` moves secrets
from it to the configured key.

cryptography (its Rust core, some megabytes in every process) is imported when a
value is first encrypted or decrypted, not as the settings load: a process that
reads no secret never loads it. A key is checked without it (`parse_keys`).
"""
from __future__ import annotations

import base64
import binascii
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from cryptography.fernet import Fernet, MultiFernet

KEY_FILE = "secrets.key"
KEY_HINT = ("make one with\n      python3 -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'")


class SecretsKeyError(ImproperlyConfigured):
    """AGENTSITE_SECRETS_KEYS holds something that is not a Fernet key."""


class Undecryptable(Exception):
    """No key in use decrypts the value (cryptography's InvalidToken)."""


def is_fernet_key(key: str) -> bool:
    """What `Fernet(key)` accepts: 32 bytes in url-safe base64."""
    try:
        return len(base64.urlsafe_b64decode(key)) == 32
    except (binascii.Error, ValueError):
        return False


def parse_keys(text: str) -> list[str]:
    """The keys of a comma-separated setting, checked; SecretsKeyError names the bad one by position."""
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for position, key in enumerate(keys, 1):
        if not is_fernet_key(key):
            raise SecretsKeyError(f"AGENTSITE_SECRETS_KEYS: key {position} is not a Fernet key (32 bytes, "
                                  f"url-safe base64): {KEY_HINT}")
    return keys


def development_key(root: Path) -> bytes:
    """The state root's own key, made on first use by whichever process gets there first.

    Written whole to a private file and then linked into place, so another
    process never reads a half-written key; a link that loses the race reads the winner's.
    """
    path = root / KEY_FILE
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=root, prefix=".secrets-key-")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(base64.urlsafe_b64encode(os.urandom(32)))  # as Fernet.generate_key() makes one
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(temporary)
    return path.read_bytes().strip()


@lru_cache(maxsize=4)
def _cipher(configured: tuple[str, ...], root: str) -> MultiFernet:
    from cryptography.fernet import Fernet, MultiFernet  # on first use: see the module's docstring

    keys = [Fernet(k) for k in configured]
    file_key = Path(root) / KEY_FILE
    if not keys or file_key.exists():
        keys.append(Fernet(development_key(Path(root))))
    return MultiFernet(keys)


def encrypting_key() -> Fernet:
    """The key new values are encrypted with: the first configured one, else the state root's own."""
    from cryptography.fernet import Fernet  # on first use: see the module's docstring

    configured = parse_keys(getattr(settings, "AGENTSITE_SECRETS_KEYS", ""))
    if configured:
        return Fernet(configured[0])
    return Fernet(development_key(Path(settings.STATE_ROOT)))


def cipher() -> MultiFernet:
    """The keys in use now: the configured ones (the first encrypts), then the state root's own, if any."""
    configured = tuple(parse_keys(getattr(settings, "AGENTSITE_SECRETS_KEYS", "")))
    return _cipher(configured, str(settings.STATE_ROOT))


def encrypt(value: str) -> str:
    """`value` encrypted with the first key."""
    return cipher().encrypt(value.encode()).decode()


def decrypt(token: str) -> str:
    """The value of `token`; Undecryptable when no key in use reads it."""
    from cryptography.fernet import InvalidToken  # on first use: see the module's docstring

    try:
        return cipher().decrypt(token.encode()).decode()
    except InvalidToken:
        raise Undecryptable() from None


def reencrypt(token: str) -> str | None:
    """`token` encrypted again with the first key, or None when it already is; Undecryptable when no key
    in use reads it."""
    from cryptography.fernet import InvalidToken  # on first use: see the module's docstring

    try:
        encrypting_key().decrypt(token.encode())
        return None
    except InvalidToken:
        pass
    try:
        return cipher().rotate(token.encode()).decode()
    except InvalidToken:
        raise Undecryptable() from None
