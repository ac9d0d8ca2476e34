"""Bad query parameters, unknown agents, sessions and routes, wrong methods: a 4xx in the one error shape."""
from __future__ import annotations

import base64

import pytest

from agents.discovery import deploy_agent_folder
from sessions.models import Session
from tests.channels_app.bad_input import (  # noqa: F401  (session is a fixture)
    MISSING, SESSION_ROUTES, b64, call, error_of, post_json, session,
)


# -- query parameters ---------------------------------------------------------------------------

NOT_ASCII_COUNTS = ["٣", "１", "+3", "3_0", " 3", "99999999999999999999"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", " ", *NOT_ASCII_COUNTS])
def test_a_bad_start_index_on_events_gets_400(local, session, value):
    error = error_of(local.get(f"/support/v1/session/{session.pk}/events", {"startIndex": value}), 400)

    assert error["code"] == "invalid_start_index"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["abc", "-1", "1.5", *NOT_ASCII_COUNTS])
def test_a_bad_start_index_on_the_stream_gets_400(local, session, value):
    error = error_of(local.get(f"/support/v1/session/{session.pk}/stream", {"startIndex": value}), 400)

    assert error["code"] == "invalid_start_index"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["soon", "+3", "3_0", "-2"])
def test_a_bad_last_event_id_on_the_sse_stream_gets_400(local, session, value):
    response = local.get(f"/support/v1/session/{session.pk}/stream",
                         HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID=value)

    assert error_of(response, 400)["code"] == "invalid_start_index"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("accept", ["text/event-stream", "application/x-ndjson"])
def test_a_bad_last_event_id_gets_400_even_beside_a_start_index(local, session, accept):
    # The document gives the header a pattern: a value outside it is refused even where it would not count.
    response = local.get(f"/support/v1/session/{session.pk}/stream", {"startIndex": "2"},
                         HTTP_ACCEPT=accept, HTTP_LAST_EVENT_ID="]RL4>W")

    error = error_of(response, 400)
    assert error["code"] == "invalid_start_index" and "Last-Event-ID" in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["0", "101", "-5", "ten", "2.5", "", "٣", "１０", "+5", "1_0"])
def test_a_bad_limit_on_the_sessions_list_gets_400(local, support_agent, value):
    error = error_of(local.get("/support/v1/sessions", {"limit": value}), 400)

    assert error["code"] == "invalid_limit"


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", [
    "garbage!!",
    b64("not json"),
    b64('{"created": "2026-01-01T00:00:00+00:00"}'),
    b64('["2026-01-01T00:00:00+00:00"]'),
    b64('["yesterday", "ses_x"]'),
    b64('[12, "ses_x"]'),
    b64("null"),
    b64('["2026-01-01T00:00:00+00:00", "\\ud800"]'),
    b64('["2026-01-01T00:00:00+00:00", "ses_\\u0000"]'),
    b64('["2026-01-01T00:00:00+00:00", ["ses_x"]]'),
    b64('["0001-01-01T00:00:00+14:00", "ses_x"]'),
    b64('["9999-12-31T23:59:59-14:00", "ses_x"]'),
    b64('["2026-01-01T00:00:00", "ses_x"]'),
    b64('["2026-01-01T00:00:00+00:00", 1e999]'),
    b64("[" * 100_000 + "]" * 100_000),
    base64.urlsafe_b64encode("\udcff".encode("utf-8", "surrogatepass")).decode(),
])
def test_a_cursor_this_server_did_not_issue_gets_400(local, support_agent, cursor):
    error = error_of(local.get("/support/v1/sessions", {"cursor": cursor}), 400)

    assert error["code"] == "invalid_cursor"


@pytest.mark.django_db
def test_the_next_cursor_still_pages_through_the_sessions(local, support_agent):
    ids = [post_json(local, "/support/v1/session", {"message": f"m{i}"}).json()["sessionId"] for i in range(3)]

    first = local.get("/support/v1/sessions", {"limit": 2}).json()
    second = local.get("/support/v1/sessions", {"limit": 2, "cursor": first["nextCursor"]}).json()

    assert [s["sessionId"] for s in first["sessions"] + second["sessions"]] == ids[::-1]
    assert second["nextCursor"] is None


# -- 404s --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,path", [
    ("post", "/nobody/v1/session"),
    ("get", "/nobody/v1/sessions"),
    ("get", "/nobody/v1/info"),
    ("get", "/nobody/v1/health"),
    *[(m, f"/nobody/v1/session/{MISSING}{s}") for m, s in SESSION_ROUTES],
])
def test_an_unknown_agent_gets_404(local, support_agent, method, path):
    error = error_of(call(local, method, path), 404)

    assert (error["code"], error["message"]) == ("agent_not_found", "no agent 'nobody' on this server")


@pytest.mark.django_db
@pytest.mark.parametrize("method,path", [
    ("post", "/nobody/v1/session"), ("get", "/nobody/v1/sessions"), ("get", "/nobody/v1/info"),
])
def test_an_unknown_agent_is_named_in_the_404(local, support_agent, method, path):
    error = error_of(call(local, method, path), 404)

    assert error["code"] == "agent_not_found"
    assert "nobody" in error["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", SESSION_ROUTES)
def test_an_unknown_session_id_gets_404(local, support_agent, method, suffix):
    error = error_of(call(local, method, f"/support/v1/session/{MISSING}{suffix}"), 404)

    assert error["code"] == "session_not_found"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method,suffix", SESSION_ROUTES)
def test_a_session_of_another_agent_gets_404(local, session, tmp_path, method, suffix):
    other = tmp_path / "other"
    (other / "agent").mkdir(parents=True)
    (other / "agent" / "instructions.md").write_text("You help too.")
    deploy_agent_folder(other)

    error = error_of(call(local, method, f"/other/v1/session/{session.pk}{suffix}"), 404)

    assert error["code"] == "session_not_found"
    assert Session.objects.filter(pk=session.pk).exists()


@pytest.mark.django_db
def test_a_continuation_token_of_another_agents_session_gets_404(local, session, tmp_path):
    other = tmp_path / "other"
    (other / "agent").mkdir(parents=True)
    (other / "agent" / "instructions.md").write_text("You help too.")
    deploy_agent_folder(other)
    token = post_json(local, "/other/v1/session", {"message": "hi"}).json()["continuationToken"]

    error = error_of(post_json(local, "/support/v1/session", {"message": "hi", "continuationToken": token}), 404)

    assert error["code"] == "session_not_found"


@pytest.mark.django_db
@pytest.mark.parametrize("path", [
    "/nope", "/support/v2/session", "/support/v1/sessionz", f"/support/v1/session/{MISSING}/frobnicate",
    "/support/v1/session/", "/support/v1/", "/v1/agents/", "/support",
])
def test_an_unknown_route_gets_404_in_the_error_shape(local, support_agent, path):
    error = error_of(local.get(path), 404)

    assert error["code"] == "not_found"
    assert path in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("method,path,allowed", [
    ("get", "/support/v1/session", "POST, OPTIONS"),
    ("put", "/support/v1/session", "POST, OPTIONS"),
    ("delete", "/support/v1/sessions", "GET, HEAD, OPTIONS"),
    ("get", f"/support/v1/session/{MISSING}/message", "POST, OPTIONS"),
    ("post", "/support/v1/info", "GET, HEAD, OPTIONS"),
    ("delete", "/v1/agents", "GET, POST, HEAD, OPTIONS"),
    ("get", "/v1/agents/support", "PUT, OPTIONS"),
])
def test_a_wrong_method_gets_405_naming_it_and_the_allowed_ones(local, support_agent, method, path, allowed):
    response = getattr(local, method)(path)
    error = error_of(response, 405)

    assert (error["code"], error["message"]) == ("method_not_allowed", f'Method "{method.upper()}" not allowed.')
    assert response["Allow"] == allowed
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_wrong_method_on_the_stream_gets_405_with_allow_get(local, session):
    response = local.post(f"/support/v1/session/{session.pk}/stream")
    error = error_of(response, 405)

    assert (error["code"], error["message"]) == ("method_not_allowed", "POST is not allowed here; use GET")
    assert response["Allow"] == "GET"
