"""System checks of the database against this code, run by `manage.py check`, `serve` and `migrate`.

A database migrated by a newer agentsite has tables this code does not know, and Django's
`migrate` silently ignores applied migrations missing from its graph: the older code would
then run on it and fail in odd places. `check_database_not_ahead` refuses it up front, naming
the migrations. It costs one query, and says nothing when the database is unreachable or new.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder


def project_app_labels() -> list[str]:
    """The labels of agentsite's own apps (those in its folder): their migrations are the ones it ships."""
    base = Path(settings.BASE_DIR).resolve()
    return sorted(c.label for c in apps.get_app_configs() if Path(c.path).resolve().is_relative_to(base))


def unknown_migrations(alias: str = DEFAULT_DB_ALIAS) -> list[str]:
    """"app.name" of each migration of agentsite's apps the database has applied and this code lacks.

    Empty when the database cannot be read: unreachable, not made yet, or without the migrations table
    (a new database, which `migrate` will make). A migration a squashed one of this code replaces is known.
    """
    connection = connections[alias]
    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite" and name != ":memory:" and not Path(name).exists():
        return []  # not made yet: connecting would create the file
    try:
        # Inside a transaction a failed query would abort it: a savepoint keeps the failure to this query.
        with transaction.atomic(using=alias) if connection.in_atomic_block else nullcontext():
            applied = list(MigrationRecorder.Migration.objects.using(alias)
                           .filter(app__in=project_app_labels()).values_list("app", "name"))
    except DatabaseError:
        return []
    loader = MigrationLoader(None, ignore_no_migrations=True)  # from disk: no query
    known = set(loader.disk_migrations)
    known.update(replaced for migration in loader.disk_migrations.values() for replaced in migration.replaces)
    return sorted(f"{app}.{migration}" for app, migration in applied if (app, migration) not in known)


@checks.register(checks.Tags.database)
def check_database_not_ahead(app_configs, databases=None, **kwargs) -> list[checks.CheckMessage]:
    """Every database asked about (`check --database`), or the default one: `manage.py check` and `serve` ask none."""
    errors = []
    for alias in databases if databases is not None else [DEFAULT_DB_ALIAS]:
        unknown = unknown_migrations(alias)
        if unknown:
            name = connections[alias].settings_dict["NAME"]
            errors.append(checks.Error(
                f"the database {name} has migrations this code does not know ({', '.join(unknown)}): it was "
                "migrated by a newer agentsite; run that version, or restore a backup made before the upgrade",
                id="agentsite.E002"))
    return errors
