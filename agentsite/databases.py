"""The database settings a DATABASE_URL names: `settings.DATABASES` and `restore --to` read URLs the same way.

No URL is the state root's SQLite file. Environment variables tune the PostgreSQL pool and its prepared
statements; they are read when a URL is turned into settings.
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url


def database_config(url: str | None, state_root: Path) -> dict:
    """Django's settings of the database at `url` (None: `state_root`/db.sqlite3)."""
    if url:
        # Under ASGI every request runs in a thread of its own, so persistent
        # per-thread connections pile up (and exhaust PostgreSQL's limit):
        # connections come from a pool instead, which also saves a connect per request.
        config = dj_database_url.parse(url, conn_max_age=0)
        if config["ENGINE"] == "django.db.backends.postgresql":
            config.setdefault("OPTIONS", {})["pool"] = {
                "min_size": int(os.environ.get("AGENTSITE_DB_POOL_MIN", "2")),
                "max_size": int(os.environ.get("AGENTSITE_DB_POOL_MAX", "20")),
                "timeout": 30,
            }
            # The pool tests each connection before handing it out, so a request or a
            # turn never gets one that died (a database restart, a killed backend).
            config["ENGINE"] = "agentsite.postgresql"
            if os.environ.get("AGENTSITE_DB_PREPARED", "1") != "0":
                # Parameters bound by the server, and a statement run five times on a
                # connection prepared there: the hot statements of a turn skip parsing
                # and planning (PostgreSQL's CPU per turn about 5 -> 3 ms). "0" for a
                # transaction-mode pooler that cannot keep prepared statements.
                config["OPTIONS"].update(server_side_binding=True, prepare_threshold=5)
    else:
        config = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(state_root / "db.sqlite3")}
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if config["NAME"] != ":memory:":  # a relative path names the file in the folder these settings load in
            config["NAME"] = str(Path(config["NAME"]).resolve())
        # IMMEDIATE: every atomic() takes the write lock up front, so concurrent
        # writers queue on the busy timeout instead of failing with "locked".
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # Kept open: a stream's reads run in its request's thread and would
        # otherwise reconnect on every poll. A connection ends with its thread.
        config["CONN_MAX_AGE"] = 600
        test_name = os.environ.get("AGENTSITE_TEST_DB")
        if test_name:
            config["TEST"] = {"NAME": test_name}
    return config
