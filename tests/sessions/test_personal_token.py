"""`manage.py createtoken`, and personal tokens in the admin: listed and
revoked there, never shown by their hash."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from agents.models import Agent
from sessions.models import PersonalToken, hash_token


@pytest.fixture
def alice(db) -> User:
    Agent.objects.create(slug="support")
    return User.objects.create_user("alice", password="pw")


def createtoken(*args: str) -> str:
    out = StringIO()
    call_command("createtoken", *args, stdout=out)
    return out.getvalue()


def test_createtoken_prints_the_token_alone_on_its_last_line(alice):
    output = createtoken("alice", "--name", "ci", "--expires-days", "7", "--agents", "support")

    secret = output.splitlines()[-1]
    token = PersonalToken.objects.get()
    assert secret.startswith(token.prefix + "_") and token.token_hash == hash_token(secret)
    assert (token.user, token.name, token.agents) == (alice, "ci", ["support"])
    assert token.expires_at is not None and secret not in output.splitlines()[0]


def test_createtoken_without_scope_or_expiry_reaches_every_agent_forever(alice):
    createtoken("alice", "--name", "cli")

    token = PersonalToken.objects.get()
    assert token.agents is None and token.expires_at is None and token.status() == "active"


@pytest.mark.parametrize("args,says", [
    (("bob", "--name", "x"), "no user 'bob'"),
    (("alice", "--name", "x", "--agents", "support,nope"), "no agent named 'nope'"),
    (("alice", "--name", "x", "--expires-days", "0"), "expiry"),
    (("alice", "--name", " "), "blank"),
])
def test_createtoken_refuses_clearly(alice, args, says):
    with pytest.raises(CommandError, match=says):
        createtoken(*args)
    assert not PersonalToken.objects.exists()


def test_the_admin_lists_and_revokes_tokens_without_their_hash(alice):
    token, secret = PersonalToken.issue(alice, "laptop")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))

    listed = admin.get("/admin/agent_sessions/personaltoken/")
    detail = admin.get(f"/admin/agent_sessions/personaltoken/{quote(token.pk)}/change/")  # as the admin links it

    assert listed.status_code == detail.status_code == 200
    assert b"laptop" in listed.content and token.prefix.encode() in listed.content
    for page in (listed, detail):
        assert token.token_hash.encode() not in page.content and secret.encode() not in page.content
    admin.post("/admin/agent_sessions/personaltoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.status() == "revoked"
