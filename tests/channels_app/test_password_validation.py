"""Weak passwords are refused, with a message saying why, wherever a person sets one:
the password page under /accounts/, `createsuperuser` and `changepassword`."""
from __future__ import annotations

from typing import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from tests.channels_app.test_accounts import carol, csrf, log_in, remote  # noqa: F401 (fixtures)

transactional = pytest.mark.django_db(transaction=True)
STRONG = "second-secret-2"


class Terminal:
    """A standard input that says it is a terminal: the commands ask only then."""

    def isatty(self) -> bool:
        return True


def typed(monkeypatch, passwords: list[str], answers: list[str] = ()) -> Iterator[str]:
    """What a person types at the commands' password and yes/no prompts, in order."""
    typed_passwords, typed_answers = iter(passwords), iter(answers)
    monkeypatch.setattr("getpass.getpass", lambda prompt="Password: ", stream=None: next(typed_passwords))
    monkeypatch.setattr("builtins.input", lambda prompt="": next(typed_answers))
    return typed_passwords


def change_password(client: Client, new: str):
    token = csrf(client, "/accounts/password/")
    return client.post("/accounts/password/", {"old_password": "first-secret-1", "new_password1": new,
                                               "new_password2": new, "csrfmiddlewaretoken": token})


@pytest.mark.parametrize("weak,says", [
    ("abc12", b"This password is too short. It must contain at least 8 characters."),
    ("password", b"This password is too common."),
    ("80459137", b"This password is entirely numeric."),
    ("carol123", b"The password is too similar to the username."),
])
@transactional
def test_the_password_page_refuses_a_weak_password_and_says_why(remote, carol, weak, says):
    log_in(remote, "first-secret-1")

    response = change_password(remote, weak)

    assert response.status_code == 200
    assert b'class="form-error"' in response.content and says in response.content
    carol.refresh_from_db()
    assert carol.check_password("first-secret-1")


@transactional
def test_the_password_page_takes_a_strong_password(remote, carol):
    log_in(remote, "first-secret-1")

    assert change_password(remote, STRONG)["Location"] == "/accounts/password/done/"
    carol.refresh_from_db()
    assert carol.check_password(STRONG)


@pytest.mark.django_db
def test_createsuperuser_says_why_a_weak_password_is_refused_and_asks_again(monkeypatch, capsys):
    # The weak one twice, "no" to creating the user anyway, then a strong one twice.
    left = typed(monkeypatch, ["password", "password", STRONG, STRONG], answers=["n"])

    call_command("createsuperuser", username="dana", email="dana@example.com", interactive=True,
                 stdin=Terminal())

    assert "This password is too common." in capsys.readouterr().err
    assert next(left, None) is None
    dana = User.objects.get(username="dana")
    assert dana.is_superuser and dana.check_password(STRONG)


@pytest.mark.django_db
def test_changepassword_refuses_weak_passwords_and_changes_nothing(monkeypatch, carol, capsys):
    typed(monkeypatch, ["12345678"] * 6)

    with pytest.raises(CommandError, match="after 3 attempts"):
        call_command("changepassword", "carol")

    assert "This password is too common." in capsys.readouterr().err
    carol.refresh_from_db()
    assert carol.check_password("first-secret-1")
