"""Every written-out statement (sessions.sql) leaves the rows, and returns what, its ORM twin does.

A child process per database (a SQLite file as the server uses, and a
throwaway PostgreSQL database on the server's settings: pool, server-side
binding, prepared statements) runs each case of tests/sessions/sql_twin_cases.py
twice from the same base rows, once through the statement and once through
the ORM expression registered beside it, and reports the rows of the tables
as stored afterwards.
"""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from typing import Any

import pytest

import sessions.sql
from tests.sessions.sql_twin_cases import CASES
from tests.sessions.test_concurrent_appends import database, run
from tests.support import ROOT

CHILD = "import django\ndjango.setup()\nfrom tests.sessions.sql_twin_cases import main\nmain()\n"
VENDORS = {"sqlite": "sqlite", "postgresql": "postgres"}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    ran: dict[str, dict[str, Any]] = {}

    def of(vendor: str) -> dict[str, Any]:
        if vendor not in ran:
            # Each database starts as a copy of a migrated one: the child's `migrate` has nothing to do.
            with database(VENDORS[vendor], tmp_path_factory.mktemp(vendor), migrated=True) as (env, _):
                ran[vendor] = json.loads(run(CHILD, env, str(ROOT / "examples" / "support"), timeout=180))
        return ran[vendor]
    return of


@pytest.mark.parametrize("vendor", list(VENDORS))
@pytest.mark.parametrize("case", [c.id for c in CASES])
def test_written_out_statement_matches_its_orm_twin(case, vendor, outcomes):
    out = outcomes(vendor)
    got = out["cases"][case]
    if got is None:
        pytest.skip(f"{case} is not used on {vendor}")
    written, orm = got["written"], got["orm"]
    assert written["result"] == orm["result"], "returns differ"
    for table, rows in orm["rows"].items():
        assert written["rows"][table] == rows, f"rows of {table} differ"
    expected_change = next(c.changes for c in CASES if c.id == case)
    assert (orm["rows"] != out["base"]) is expected_change, "the case does not exercise what it says"


def test_every_written_out_statement_has_a_twin_and_a_case():
    for module in pkgutil.iter_modules(sessions.sql.__path__):
        importlib.import_module(f"sessions.sql.{module.name}")
    assert set(sessions.sql.STATEMENTS) == {c.statement for c in CASES}


def test_statements_are_written_out_only_in_sessions_sql():
    """Every function of sessions.sql that runs SQL is registered with a twin; no other module runs SQL
    (sessions.eventlog.pgnotify and sessions.plumbing.pglocks aside: `pg_notify`, `LISTEN` and advisory locks write no row
    and have no ORM form; and agentsite.backups, which works on whole databases below the ORM: a snapshot
    read through its own connection, a dump restored, the sequences reset after a copy)."""
    for module in pkgutil.iter_modules(sessions.sql.__path__):
        loaded = importlib.import_module(f"sessions.sql.{module.name}")
        registered = {twin.written for twin in sessions.sql.STATEMENTS.values()}
        for name, function in inspect.getmembers(loaded, inspect.isfunction):
            if function.__module__ == loaded.__name__ and _runs_sql(function):
                assert function in registered or _is_twin(function), f"{loaded.__name__}.{name} has no ORM twin"
    elsewhere = [str(path.relative_to(ROOT)) for app in ("agents", "sessions", "channels_app", "agentsite")
                 for path in (ROOT / app).rglob("*.py")
                 if "sessions/sql/" not in path.as_posix() and "agentsite/backups/" not in path.as_posix()
                 and path.name not in ("pgnotify.py", "pglocks.py")
                 and any(mark in path.read_text() for mark in (".cursor()", ".raw(", "executemany("))]
    assert elsewhere == []


def _runs_sql(function) -> bool:
    source = inspect.getsource(function)
    return any(mark in source for mark in (".execute(", "executemany(", ".raw("))


def _is_twin(function) -> bool:
    return any(twin.orm is function for twin in sessions.sql.STATEMENTS.values())
