"""This test process on a running server's database for a block: the rows a test sets up there, or a command
line it runs there (tests/command_line.py), with no `manage.py shell` or command process to start (about
1.3 s of CPU each). The server is still another process: what it reads there, another process wrote.
"""
from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Iterator

import dj_database_url
from django.db import connections
from django.db.utils import load_backend
from django.test import override_settings


@contextlib.contextmanager
def on_server_database(state_root: Path, db_blocker, env: dict[str, str] | None = None) -> Iterator[None]:
    """The default database is the server's (its state root's SQLite file, or the DATABASE_URL in its `env`),
    and the settings that follow the state root (the secrets' development key, the workspaces, the
    deployments' files) and its AGENTSITE_SECRETS_KEYS are the server's, until the block ends.

    `db_blocker` is pytest-django's `django_db_blocker`: these tests have no test database of their own.
    The test database's connection, if this process has one, is set aside, not closed. Django's connections
    are per thread: only this thread's code in the block reaches the server's database, and this process's
    cache and channel layer stay its own (the rows written here need neither).
    """
    env = env or {}
    config = copy.deepcopy(connections["default"].settings_dict)
    if env.get("DATABASE_URL"):
        parsed = dj_database_url.parse(env["DATABASE_URL"])
        config.update(parsed, OPTIONS=parsed.get("OPTIONS", {}))  # none of the test database's (SQLite's)
    else:
        config["NAME"] = str(Path(state_root) / "db.sqlite3")
    wrapper = load_backend(config["ENGINE"]).DatabaseWrapper(config, "default")
    previous = connections["default"]
    connections["default"] = wrapper
    state_root = Path(state_root).resolve()
    try:
        with db_blocker.unblock(), override_settings(
                STATE_ROOT=state_root, AGENTSITE_WORKSPACES_ROOT=state_root / "workspaces",
                AGENTSITE_SECRETS_KEYS=env.get("AGENTSITE_SECRETS_KEYS", "")):
            yield
    finally:
        wrapper.close()
        connections["default"] = previous
