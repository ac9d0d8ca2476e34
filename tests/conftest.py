"""Shared fixtures: principals alice and bob, an anonymous caller, the example
agent deployed, clients that speak as each principal, turns run by
django-q2's own code path in sync mode."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from channels_app.auth import Principal, allow_all, bearer_auth

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support"

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-9876543210"
ALICE = Principal(authenticator="bearer", principal_id="alice")
BOB = Principal(authenticator="bearer", principal_id="bob")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked `slow` first (a stable sort, after pytest-django's order).

    The workers take whole files in this order (`--dist loadfile`), and pytest-django
    puts tests without a database, the live servers among them, last: a minutes-long
    file taken last would run alone while the other workers sit idle.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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

