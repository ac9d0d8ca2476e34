"""The admin for a team: branded as agentsite, with its people (users, groups) and
their personal tokens, and nowhere a token's hash. Listing and revoking tokens is
tested with the token itself (tests/sessions/test_personal_token.py)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from sessions.models import PersonalToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def laptop_token() -> tuple[PersonalToken, str]:
    carol = User.objects.create_user("carol", password="pw")
    carol.groups.add(Group.objects.create(name="support-team"))
    return PersonalToken.issue(carol, "laptop")


def test_the_admin_is_branded_as_agentsite(staff):
    index = staff.get("/admin/").content.decode()

    assert "<title>Agents, sessions and the team | agentsite admin</title>" in index
    assert "agentsite administration" in index
    assert "Django administration" not in index and "Django site admin" not in index


def test_the_index_links_users_groups_and_personal_tokens(staff):
    index = staff.get("/admin/").content.decode()

    for path in ("/admin/auth/user/", "/admin/auth/group/", "/admin/agent_sessions/personaltoken/"):
        assert f'href="{path}"' in index, path


def test_users_and_groups_are_listed_and_shown(staff, laptop_token):
    token, secret = laptop_token
    carol = token.user
    pages = [staff.get(path) for path in (
        "/admin/auth/user/", f"/admin/auth/user/{carol.pk}/change/",
        "/admin/auth/group/", f"/admin/auth/group/{carol.groups.get().pk}/change/",
    )]

    assert [page.status_code for page in pages] == [200] * 4
    assert b"carol" in pages[0].content and b"support-team" in pages[2].content
    for page in pages:
        assert token.token_hash.encode() not in page.content and secret.encode() not in page.content


def test_a_token_cannot_be_found_by_its_hash(staff, laptop_token):
    token, _ = laptop_token

    assert b"laptop" in staff.get("/admin/agent_sessions/personaltoken/", {"q": "carol"}).content
    assert b"laptop" not in staff.get("/admin/agent_sessions/personaltoken/", {"q": token.token_hash}).content


def test_a_person_without_staff_status_is_sent_to_the_admin_login(laptop_token):
    client = Client()
    client.force_login(laptop_token[0].user)

    response = client.get("/admin/auth/user/")

    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
