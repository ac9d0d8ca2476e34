"""An admin login (Django session) is a principal, behind any chain: teams
behind a proxy use the playground from a browser that cannot send a bearer
token. Its unsafe requests must carry the CSRF token."""
import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def remote_browser(settings, support_agent):
    settings.AGENTSITE_AUTH = "bearer"
    settings.AGENTSITE_BEARER_TOKEN_HASHES = []
    return Client(HTTP_HOST="agents.example.com", REMOTE_ADDR="10.0.0.5", enforce_csrf_checks=True)


@pytest.mark.django_db(transaction=True)
def test_a_remote_browser_without_a_login_is_sent_to_log_in(remote_browser):
    response = remote_browser.get("/playground/support")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/playground/support"
    assert remote_browser.get("/v1/agents").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_logged_in_admin_uses_the_playground_and_api_as_itself(remote_browser, sync_turns):
    remote_browser.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    assert remote_browser.get("/playground/support").status_code == 200
    token = remote_browser.cookies["csrftoken"].value

    created = remote_browser.post("/support/v1/session", {"message": "hi"}, content_type="application/json",
                                  HTTP_X_CSRFTOKEN=token)

    assert created.status_code == 201
    detail = remote_browser.get(f"/support/v1/session/{created.json()['sessionId']}").json()
    assert detail["principal"] == {"authenticator": "django", "principalId": "ops", "principalType": "staff"}


@pytest.mark.django_db(transaction=True)
def test_a_session_login_without_the_csrf_token_cannot_post(remote_browser):
    remote_browser.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))

    response = remote_browser.post("/support/v1/session", {"message": "hi"}, content_type="application/json")

    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_an_inactive_user_is_not_a_principal(remote_browser):
    user = User.objects.create_user("gone", password="pw", is_active=True)
    remote_browser.force_login(user)
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert remote_browser.get("/v1/agents").status_code == 401
