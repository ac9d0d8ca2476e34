"""Commands that touch the database bring a fresh state root up to date first, as `serve` does."""
from __future__ import annotations

from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def migrate_if_needed(database: str = DEFAULT_DB_ALIAS) -> bool:
    """Apply pending migrations (and the cache tables `serve` makes); whether there were any.

    A state root that `serve` never started has no tables: the commands that
    read or write the database migrate it themselves rather than fail.
    `database`: another connection alias (`restore` migrates an archive's database apart).
    """
    connection = connections[database]
    executor = MigrationExecutor(connection)
    if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
        return False
    call_command("migrate", database=database, interactive=False, verbosity=0)
    call_command("createcachetable", database=database, verbosity=0)
    return True
