"""Shared fixtures: principals alice and bob, an anonymous caller, the example
agent deployed, clients that speak as each principal, turns run by
django-q2's own code path in sync mode."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.core.cache import caches
from django.test import Client, TransactionTestCase

from agents.pricing import overrides
from channels_app.auth import Principal, allow_all, bearer_auth

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support"

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-9876543210"
ALICE = Principal(authenticator="bearer", principal_id="alice")
BOB = Principal(authenticator="bearer", principal_id="bob")


DB_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server"}


def _uses_test_database(item: pytest.Item) -> bool:
    """Whether pytest-django gives the test the test database (its own criteria, in pytest_django.plugin)."""
    cls = getattr(item, "cls", None)
    if cls is not None and issubclass(cls, TransactionTestCase):
        return True
    return item.get_closest_marker("django_db") is not None or bool(DB_FIXTURES & set(getattr(item, "fixturenames", ())))


@pytest.fixture(autouse=True)
def _no_lockout_carried_over(request, django_db_blocker):
    """Wrong passwords and tokens count toward a lockout (channels_app.lockout) in the limits cache,
    a table a transactional test's flush leaves alone: emptied after each test with the database,
    so the limits stay on for the suite and one test's failures never lock out the next's."""
    yield
    if _uses_test_database(request.node):
        with django_db_blocker.unblock():
            caches["limits"].clear()


@pytest.fixture(autouse=True)
def _no_prices_carried_over():
    """Operators' prices are kept per process for a while (agents.pricing.overrides); a test's
    rows are rolled back or flushed without the signal that drops them, so they are dropped here."""
    yield
    overrides.forget()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `slow` first, then tests without the test database, then the rest (a stable sort,
    after pytest-django's order, which it keeps among the tests with a database).

    The workers take whole files in this order (`--dist loadfile`, with `--no-loadscope-reorder` in
    pytest.ini: pytest-xdist would otherwise take the files with the most tests first, and the
    minutes-long files, which have few, last). Tests without a database are mostly the ones that run
    real servers and processes, the long ones; taken last they would run alone while the other workers
    sit idle. The many short files with a database fill the end of the run evenly.
    """
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, _uses_test_database(item)))


@pytest.fixture
def sync_turns(settings):
    """Run each enqueued turn right away, through django-q2's real async_task."""
    from django_q.conf import Conf

    previous = Conf.SYNC
    Conf.SYNC = True
    yield
    Conf.SYNC = previous


@pytest.fixture
def support_agent(db):
    from agents.discovery import deploy_agent_folder

    return deploy_agent_folder(EXAMPLE).agent


@pytest.fixture
def two_principals(settings):
    """The chain admits alice and bob by bearer token, and nobody else."""
    settings.AGENTSITE_AUTH_POLICIES = [bearer_auth({ALICE_TOKEN: "alice", BOB_TOKEN: "bob"})]


@pytest.fixture
def alice(two_principals) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {ALICE_TOKEN}", HTTP_HOST="127.0.0.1:8000")


@pytest.fixture
def bob(two_principals) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {BOB_TOKEN}", HTTP_HOST="127.0.0.1:8000")


@pytest.fixture
def local() -> Client:
    """A caller on loopback, under the default local_dev_strict() chain."""
    return Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")


@pytest.fixture
def anonymous(settings) -> Client:
    settings.AGENTSITE_AUTH_POLICIES = [allow_all()]
    return Client(HTTP_HOST="example.com", REMOTE_ADDR="203.0.113.9")

