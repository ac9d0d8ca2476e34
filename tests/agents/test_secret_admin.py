"""Secrets in the admin: an operator (a member of the operators group, staff or not) sets one through
a password field that is never filled back, sees names, setters and times, and unsets it;
no page shows a value or its ciphertext."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from agents.models import Agent, Secret
from agents.secrets.lookup import credential
from agents.secrets.store import acting_for

CHANGELIST = "/admin/agents/secret/"
MARKER = "MARKER-admin-91f0d2c7ab"


@pytest.fixture
def agent(db) -> Agent:
    return Agent.objects.create(slug="helper", name="Helper")


def login(username: str, *, operators: bool = False, permissions: tuple[str, ...] = (), staff: bool = True) -> Client:
    """A staff user (unless told otherwise), by password as a person would."""
    user = User.objects.create_user(username, password="pw-not-used-elsewhere", is_staff=staff)
    if operators:
        user.groups.add(Group.objects.get_or_create(name="operators")[0])
    user.user_permissions.add(*Permission.objects.filter(codename__in=permissions))
    client = Client()
    assert client.login(username=username, password="pw-not-used-elsewhere")
    return client


@pytest.fixture
def olga(db) -> Client:
    # Viewing agents is the model's own permission; the secrets need none but the group.
    return login("olga", operators=True, permissions=("view_agent", "view_deployment"))


def pages(client: Client, secret: Secret, agent: Agent) -> list[bytes]:
    found = [client.get(path) for path in (
        CHANGELIST, f"{CHANGELIST}{secret.pk}/change/", f"{CHANGELIST}{secret.pk}/delete/",
        f"{CHANGELIST}{secret.pk}/history/", "/admin/agents/agent/", f"/admin/agents/agent/{agent.pk}/change/",
        "/admin/")]
    assert [page.status_code for page in found] == [200] * len(found)
    return [page.content for page in found]


def test_an_operator_sets_a_secret_in_a_field_never_filled_back(olga, agent):
    form = olga.get(f"{CHANGELIST}add/")
    assert form.status_code == 200 and b'type="password"' in form.content

    done = olga.post(f"{CHANGELIST}add/", {"agent": agent.pk, "name": "API_TOKEN", "value": MARKER}, follow=True)

    assert done.status_code == 200
    secret = Secret.objects.get()
    assert (secret.name, secret.set_by) == ("API_TOKEN", "olga")
    with acting_for("helper"):
        assert credential("API_TOKEN") == MARKER
    listed, change, *rest = pages(olga, secret, agent)
    assert b"API_TOKEN" in listed and b"olga" in listed
    assert b"API_TOKEN" in rest[-2]  # the agent's page lists its secrets by name
    assert b'type="password"' in change and b'name="value"' in change
    for page in (done.content, listed, change, *rest):
        assert MARKER.encode() not in page
        assert secret.ciphertext.encode() not in page
        assert b"ciphertext" not in page.lower()


def test_changing_with_a_value_replaces_it_and_without_keeps_it(olga, agent):
    secret = Secret.objects.get(pk=_set(agent, "old-value").pk)

    olga.post(f"{CHANGELIST}{secret.pk}/change/", {"value": ""}, follow=True)
    assert Secret.objects.get().reveal() == "old-value"

    olga.post(f"{CHANGELIST}{secret.pk}/change/", {"value": "new-value"}, follow=True)
    changed = Secret.objects.get()
    assert changed.reveal() == "new-value" and changed.set_by == "olga" and changed.set_at > secret.set_at


def test_an_operator_unsets_a_secret(olga, agent):
    secret = _set(agent, "v")

    olga.post(f"{CHANGELIST}{secret.pk}/delete/", {"post": "yes"}, follow=True)

    assert not Secret.objects.exists()


@pytest.mark.parametrize("data, error", [
    ({"name": "1BAD", "value": "v"}, "is not a secret name"),
    ({"name": "NO_VALUE", "value": ""}, "A new secret needs a value."),
    ({"name": "NUL", "value": "a\x00b"}, "Null characters are not allowed"),
    ({"name": "BLANK", "value": "   "}, "a secret&#x27;s value is blank (only whitespace)"),
])
def test_a_bad_name_or_value_is_refused_on_the_form(olga, agent, data, error):
    answer = olga.post(f"{CHANGELIST}add/", {"agent": agent.pk, **data})

    assert answer.status_code == 200 and error in answer.content.decode()
    assert not Secret.objects.exists()


def test_staff_outside_the_operators_group_without_permissions_cannot_reach_secrets(db, agent):
    secret = _set(agent, MARKER)
    vera = login("vera")

    for path in (CHANGELIST, f"{CHANGELIST}add/", f"{CHANGELIST}{secret.pk}/change/"):
        assert vera.get(path).status_code == 403, path
    assert vera.post(f"{CHANGELIST}{secret.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Secret.objects.exists()


def test_a_user_who_is_not_staff_is_sent_to_the_login_page(db, agent):
    member = Client()
    member.force_login(User.objects.create_user("mia", password="pw"))
    assert member.get(CHANGELIST).status_code == 302


def _set(agent: Agent, value: str) -> Secret:
    Secret.put(agent, "API_TOKEN", value, by="cli:root")
    return Secret.objects.get(agent=agent, name="API_TOKEN")


def admin_login(username: str) -> tuple[Client, object]:
    """Log in through the admin's own login page, as a person does after the secrets docs send them there."""
    client = Client()
    answer = client.post("/admin/login/?next=/admin/", {"username": username, "password": "pw-not-used-elsewhere",
                                                       "next": "/admin/"})
    return client, answer


def test_an_operators_group_member_who_is_not_staff_logs_in_to_the_admin_and_sets_a_secret(db, agent):
    login("otto", operators=True, staff=False)
    otto, answer = admin_login("otto")
    assert answer.status_code == 302 and answer.headers["Location"] == "/admin/"

    index = otto.get("/admin/")
    assert index.status_code == 200
    assert b"/admin/agents/secret/" in index.content and b"/admin/dashboard/" in index.content
    assert b"/admin/auth/user/" not in index.content, "the group grants secrets, not the people"
    assert otto.get("/admin/auth/user/").status_code == 403

    done = otto.post(f"{CHANGELIST}add/", {"agent": agent.pk, "name": "API_TOKEN", "value": MARKER}, follow=True)

    assert done.status_code == 200
    assert Secret.objects.get().set_by == "otto"
    with acting_for("helper"):
        assert credential("API_TOKEN") == MARKER


def test_a_member_outside_the_operators_group_is_kept_out_of_the_admin(db, agent):
    login("mia", staff=False)
    mia, answer = admin_login("mia")

    assert answer.status_code == 200 and b"errornote" in answer.content
    assert mia.get("/admin/").status_code == 302
    mia.login(username="mia", password="pw-not-used-elsewhere")  # a session from the team's login page
    for path in ("/admin/", f"{CHANGELIST}add/"):
        assert mia.get(path).status_code == 302, path
    assert mia.post(f"{CHANGELIST}add/", {"agent": agent.pk, "name": "X", "value": "v"}).status_code == 302
    assert not Secret.objects.exists()
