"""A fresh database for the benchmarks that run agentsite in their own process: SQLite in a
temporary state root, or a PostgreSQL database of their own, migrated; `drop` removes the latter."""
from __future__ import annotations

import os
import tempfile
import uuid

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


def setup(name: str, postgres: bool) -> str | None:
    """Set up Django on a fresh database for the bench `name`; the PostgreSQL database's name, if any."""
    os.environ["AGENTSITE_STATE_ROOT"] = tempfile.mkdtemp(prefix=f"{name}-bench-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    dbname = None
    if postgres:
        import psycopg

        dbname = f"bench_{name}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')
        os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{dbname}"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return dbname


def drop(dbname: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
