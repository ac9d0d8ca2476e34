"""The ids of the rows clients see (a prefix and 24 hex digits), and the one way a token is stored: hashed."""
from __future__ import annotations

import hashlib
import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def new_session_id() -> str:
    return new_id("ses")


def new_turn_id() -> str:
    return new_id("turn")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
