"""Login, logout and password change under /accounts/: Django's own auth views in the
playground's look. A person who is neither logged in nor a loopback caller is sent
to the login page and lands back where they were going."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from agents.models import RESERVED_SLUGS, validate_slug

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture
def remote(settings, support_agent) -> Client:
    """A browser on another machine, under the server's default chain (loopback admits nobody here)."""
    return Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="203.0.113.9", enforce_csrf_checks=True)


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password="first-secret-1")


def csrf(client: Client, path: str) -> str:
    assert client.get(path).status_code == 200
    return client.cookies["csrftoken"].value


def log_in(client: Client, password: str, next_: str = "/playground/"):
    token = csrf(client, f"/accounts/login/?next={next_}")
    return client.post("/accounts/login/", {"username": "carol", "password": password, "next": next_,
                                            "csrfmiddlewaretoken": token})


@transactional
def test_the_login_page_renders_in_the_playgrounds_look(remote):
    response = remote.get("/accounts/login/?next=/playground/support")

    assert response.status_code == 200
    page = response.content.decode()
    assert "playground/playground.css" in page and 'name="username"' in page and 'name="password"' in page
    assert 'name="next" value="/playground/support"' in page


@transactional
def test_a_wrong_password_is_refused(remote, carol):
    response = log_in(remote, "not-it")

    assert response.status_code == 200
    assert b"did not match" in response.content
    assert "_auth_user_id" not in remote.session


@transactional
def test_a_right_password_logs_in_and_goes_to_next(remote, carol):
    response = log_in(remote, "first-secret-1", next_="/playground/support")

    assert response.status_code == 302 and response["Location"] == "/playground/support"
    page = remote.get("/playground/support")
    assert page.status_code == 200
    assert b'<span id="who">carol</span>' in page.content
    assert b'action="/accounts/logout/"' in page.content


@transactional
def test_login_does_not_send_a_person_to_another_site(remote, carol):
    response = log_in(remote, "first-secret-1", next_="https://evil.example/")

    assert response.status_code == 302 and response["Location"] == "/playground/"


@transactional
def test_the_playground_sends_an_anonymous_remote_caller_to_log_in_and_back(remote, carol):
    response = remote.get("/playground/support?sessionId=ses_x")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/playground/support%3FsessionId%3Dses_x"

    assert log_in(remote, "first-secret-1", next_="/playground/")["Location"] == "/playground/"
    assert remote.get("/playground/").status_code == 200


@transactional
def test_logout_is_a_post_and_ends_the_login(remote, carol):
    log_in(remote, "first-secret-1")
    token = remote.cookies["csrftoken"].value

    assert remote.get("/accounts/logout/").status_code == 405
    assert remote.get("/playground/").status_code == 200

    response = remote.post("/accounts/logout/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 200 and b"Logged out" in response.content
    assert remote.get("/playground/").status_code == 302


@transactional
def test_password_change_takes_the_new_password_and_refuses_the_old(remote, carol):
    assert remote.get("/accounts/password/")["Location"] == "/accounts/login/?next=/accounts/password/"
    log_in(remote, "first-secret-1")
    token = csrf(remote, "/accounts/password/")

    response = remote.post("/accounts/password/", {
        "old_password": "first-secret-1", "new_password1": "second-secret-2", "new_password2": "second-secret-2",
        "csrfmiddlewaretoken": token,
    })

    assert response.status_code == 302 and response["Location"] == "/accounts/password/done/"
    assert remote.get("/playground/").status_code == 200, "the person stays logged in"
    again = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="203.0.113.9")
    assert log_in(again, "first-secret-1").status_code == 200
    assert log_in(again, "second-secret-2")["Location"] == "/playground/"


@transactional
def test_a_wrong_current_password_changes_nothing(remote, carol):
    log_in(remote, "first-secret-1")
    token = csrf(remote, "/accounts/password/")

    response = remote.post("/accounts/password/", {
        "old_password": "nope", "new_password1": "second-secret-2", "new_password2": "second-secret-2",
        "csrfmiddlewaretoken": token,
    })

    assert response.status_code == 200 and b"form-error" in response.content
    carol.refresh_from_db()
    assert carol.check_password("first-secret-1")


@transactional
def test_a_loopback_caller_uses_the_playground_without_a_login(local, support_agent):
    page = local.get("/playground/")

    assert page.status_code == 200
    assert b'id="login" href="/accounts/login/?next=/playground/"' in page.content


def test_accounts_is_a_reserved_slug():
    assert "accounts" in RESERVED_SLUGS
    with pytest.raises(ValidationError, match="reserved"):
        validate_slug("accounts")


def test_an_agent_folder_named_accounts_is_refused(tmp_path):
    from agents.discovery import AgentFolderError, deploy_agent_folder

    (tmp_path / "accounts" / "agent").mkdir(parents=True)
    (tmp_path / "accounts" / "agent" / "instructions.md").write_text("Hi.\n")

    with pytest.raises(AgentFolderError, match="reserved"):
        deploy_agent_folder(tmp_path / "accounts")
